"""A worker of a MultiWorkerMirroredStrategy job that trains with Keras 3's `model.fit`."""

import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
features = rng.normal(size=(512, 8)).astype("float32")
labels = (features[:, 0] > 0).astype("int32")
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile(
        optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
model.fit(tf.data.Dataset.from_tensor_slices((features, labels)).batch(32), epochs=1, verbose=0)
print("fit done")
