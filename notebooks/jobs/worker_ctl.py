"""A worker of a MultiWorkerMirroredStrategy job: the custom training loop of TensorFlow's
multi-worker guide (`distribute_datasets_from_function`, `strategy.run` inside a tf.function
given the iterator, `strategy.reduce`). ``SLOW_INPUT_S`` slows this worker's input pipeline by
that many seconds per batch (a Python function in its map); ``CACHE_INPUT=1`` caches the
mapped batches of this worker's shard after their first pass; ``STEPS`` sets the steps."""

import os
import time

import numpy as np
import tensorflow as tf

SLOW_INPUT_S = float(os.environ.get("SLOW_INPUT_S", "0"))
STEPS = int(os.environ.get("STEPS", "200"))
CACHE_INPUT = os.environ.get("CACHE_INPUT") == "1"
BATCH = 64

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
features = rng.normal(size=(4096, 32)).astype("float32")
labels = (features[:, :4].sum(axis=1) > 0).astype("int64")


def slow_down(x, y):
    time.sleep(SLOW_INPUT_S)
    return x, y


def dataset_fn(context):
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
    dataset = dataset.batch(BATCH, drop_remainder=True)
    if SLOW_INPUT_S:
        dataset = dataset.map(
            lambda x, y: tf.numpy_function(slow_down, [x, y], [tf.float32, tf.int64])
        ).map(lambda x, y: (tf.ensure_shape(x, [BATCH, 32]), tf.ensure_shape(y, [BATCH])))
    if CACHE_INPUT:
        dataset = dataset.cache()
    return dataset.repeat()


with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input((32,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(2),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(0.01)

distributed = strategy.distribute_datasets_from_function(dataset_fn)


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = tf.keras.losses.sparse_categorical_crossentropy(
                y, logits, from_logits=True
            )
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH * 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    per_replica = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


iterator = iter(distributed)
for _step in range(STEPS):
    loss = train_step(iterator)
print(f"worker done: loss {float(loss):.4f}")
