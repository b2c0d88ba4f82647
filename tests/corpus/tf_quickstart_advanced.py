# ruff: noqa: B905  (the tutorial's own style)
"""TensorFlow 2 quickstart for experts: a subclassed model and a @tf.function training loop.

Modelled on: https://github.com/tensorflow/docs/blob/master/site/en/tutorials/quickstart/advanced.ipynb
(tensorflow/docs, Apache-2.0; the source's authors: The TensorFlow Authors). Written for
tfdiag_magic's test corpus after that tutorial's training code, not a copy of its text: the
same data preparation (scale to [0, 1], add the channel axis, shuffle and batch 32), the same
subclassed model built in __init__, loss, Adam optimizer, Mean / SparseCategoricalAccuracy
metrics, @tf.function train and test steps and the epoch loop that resets the metrics.
Changed: synthetic uint8 digits from a fixed seed instead of MNIST (same shapes and dtypes);
640 training and 160 test samples instead of 60 000 and 10 000; 3 epochs instead of 5; seeds
fixed; a last line that prints the optimizer's iteration count and checksums.
"""

import json

import numpy as np
import tensorflow as tf
from tensorflow.keras import Model
from tensorflow.keras.layers import Conv2D, Dense, Flatten

tf.keras.utils.set_random_seed(1337)
rng = np.random.default_rng(1337)

x_train = rng.integers(0, 256, size=(640, 28, 28), dtype=np.uint8)
y_train = rng.integers(0, 10, size=(640,), dtype=np.uint8)
x_test = rng.integers(0, 256, size=(160, 28, 28), dtype=np.uint8)
y_test = rng.integers(0, 10, size=(160,), dtype=np.uint8)
x_train, x_test = x_train / 255.0, x_test / 255.0

x_train = x_train[..., tf.newaxis].astype("float32")
x_test = x_test[..., tf.newaxis].astype("float32")

train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(10000).batch(32)
test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(32)


class MyModel(Model):
    def __init__(self):
        super().__init__()
        self.conv1 = Conv2D(32, 3, activation="relu")
        self.flatten = Flatten()
        self.d1 = Dense(128, activation="relu")
        self.d2 = Dense(10)

    def call(self, x):
        x = self.conv1(x)
        x = self.flatten(x)
        x = self.d1(x)
        return self.d2(x)


model = MyModel()

loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.Adam()

train_loss = tf.keras.metrics.Mean(name="train_loss")
train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
test_loss = tf.keras.metrics.Mean(name="test_loss")
test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)
    train_accuracy(labels, predictions)


@tf.function
def test_step(images, labels):
    predictions = model(images, training=False)
    t_loss = loss_object(labels, predictions)
    test_loss(t_loss)
    test_accuracy(labels, predictions)


EPOCHS = 3

for epoch in range(EPOCHS):
    train_loss.reset_state()
    train_accuracy.reset_state()
    test_loss.reset_state()
    test_accuracy.reset_state()

    for images, labels in train_ds:
        train_step(images, labels)

    for test_images, test_labels in test_ds:
        test_step(test_images, test_labels)

    print(
        f"Epoch {epoch + 1}, "
        f"Loss: {train_loss.result():0.2f}, "
        f"Accuracy: {train_accuracy.result() * 100:0.2f}, "
        f"Test Loss: {test_loss.result():0.2f}, "
        f"Test Accuracy: {test_accuracy.result() * 100:0.2f}"
    )

print(
    "CORPUS_RESULT "
    + json.dumps(
        {
            "steps": {"loop": int(optimizer.iterations)},
            "values": {
                "weights": sum(float(np.sum(w)) for w in model.get_weights()),
                "train_loss": float(train_loss.result()),
                "test_loss": float(test_loss.result()),
            },
        }
    )
)
