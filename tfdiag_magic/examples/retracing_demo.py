"""A small custom training loop with a real, common problem: its tf.function retraces every step.

The step number is passed to the tf.function as a Python int (for a learning-rate warm-up).
A Python scalar is part of the function's signature, so every new value builds a new graph:
each step pays for tracing, and the steps never get faster. Passing ``tf.constant(step)``
(or reading ``optimizer.iterations`` inside) traces once.
"""

import keras
import numpy as np
import tensorflow as tf

BATCH, FEATURES, STEPS = 64, 32, 80

rng = np.random.default_rng(0)
features = rng.normal(size=(BATCH * STEPS, FEATURES)).astype("float32")
labels = (features @ rng.normal(size=(FEATURES, 1))).astype("float32")

model = keras.Sequential(
    [keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
)
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y, step):
    warmup = min(1.0, (step + 1) / 20)  # a Python number: a new trace for every step
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True)) * warmup
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=False))
    return loss


for step in range(STEPS):
    x = features[step * BATCH : (step + 1) * BATCH]
    y = labels[step * BATCH : (step + 1) * BATCH]
    loss = train_step(x, y, step)

print(f"final loss: {float(loss):.4f}")
