"""Simple MNIST convnet: a Sequential convnet trained with fit on NumPy arrays.

Modelled on: https://github.com/keras-team/keras-io/blob/master/examples/vision/mnist_convnet.py
(keras-io, Apache-2.0; the source's author: fchollet). Written for tfdiag_magic's test corpus
after that example's training code, not a copy of its text: the same data preparation
(scale to [0, 1], add the channel axis, one-hot labels), the same Sequential convnet, compile,
fit with validation_split=0.1 and evaluate.
Changed: synthetic uint8 digits from a fixed seed instead of MNIST (same shapes and dtypes);
1280 training and 256 test samples instead of 60 000 and 10 000; 3 epochs instead of 15;
seeds fixed; a last line that prints the optimizer's iteration count and checksums.
"""

import json

import keras
import numpy as np
from keras import layers

keras.utils.set_random_seed(1337)
rng = np.random.default_rng(1337)

num_classes = 10
input_shape = (28, 28, 1)

x_train = rng.integers(0, 256, size=(1280, 28, 28), dtype=np.uint8)
y_train = rng.integers(0, 10, size=(1280,), dtype=np.uint8)
x_test = rng.integers(0, 256, size=(256, 28, 28), dtype=np.uint8)
y_test = rng.integers(0, 10, size=(256,), dtype=np.uint8)

x_train = x_train.astype("float32") / 255
x_test = x_test.astype("float32") / 255
x_train = np.expand_dims(x_train, -1)
x_test = np.expand_dims(x_test, -1)
print("x_train shape:", x_train.shape)
print(x_train.shape[0], "train samples")
print(x_test.shape[0], "test samples")

y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)
model.summary()

batch_size = 128
epochs = 3
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1)

score = model.evaluate(x_test, y_test, verbose=0)
print("Test loss:", score[0])
print("Test accuracy:", score[1])

print(
    "CORPUS_RESULT "
    + json.dumps(
        {
            "steps": {"fit": int(model.optimizer.iterations)},
            "values": {
                "weights": sum(float(np.sum(w)) for w in model.get_weights()),
                "score": [float(v) for v in score],
            },
        }
    )
)
