"""A keras.utils.PyDataset that loads and resizes each image of a batch in Python, given to fit.

Modelled on: the example in the docstring of keras.utils.PyDataset,
https://github.com/keras-team/keras/blob/master/keras/src/trainers/data_adapters/py_dataset_adapter.py
(Keras, Apache-2.0; the source's authors: the Keras team). Written for tfdiag_magic's test
corpus after that example, not a copy of its text: the same PyDataset (image paths and labels,
__len__ rounding up, __getitem__ slicing the paths of batch idx and building the batch image
by image with imread and resize to 200x200), given to fit with the default workers.
Changed: the docstring has no model and no data; the images are synthetic 128x128 RGB PNG files
written from a fixed seed to a temporary folder (photos larger than CIFAR's 32x32: decoding them
is part of making a batch); imread and resize are small stand-ins with
Pillow for scikit-image's (same outputs: a uint8 array, then floats in [0, 1] at the new size);
the model is a small convnet written for this program (Rescaling is not needed: resize already
gives [0, 1]); 192 images, 3 epochs; seeds fixed; a last line that prints the optimizer's
iteration count and checksums.
"""

import json
import math
import os
import tempfile

import keras
import numpy as np
from PIL import Image

keras.utils.set_random_seed(1337)
rng = np.random.default_rng(1337)


def imread(file_name):
    return np.asarray(Image.open(file_name))


def resize(image, output_shape):
    resized = Image.fromarray(image).resize(output_shape[::-1], Image.BILINEAR)
    return np.asarray(resized, dtype="float64") / 255.0


# In the working folder: the test's own temporary one, removed after the run.
image_dir = tempfile.mkdtemp(prefix="corpus-pydataset-", dir=os.getcwd())
x_set = []
for i in range(192):
    path = os.path.join(image_dir, f"{i}.png")
    Image.fromarray(rng.integers(0, 256, size=(128, 128, 3), dtype=np.uint8)).save(path)
    x_set.append(path)
y_set = rng.integers(0, 10, size=(192,))


class CIFAR10PyDataset(keras.utils.PyDataset):
    def __init__(self, x_set, y_set, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y = x_set, y_set
        self.batch_size = batch_size

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, idx):
        low = idx * self.batch_size
        high = min(low + self.batch_size, len(self.x))
        batch_x = self.x[low:high]
        batch_y = self.y[low:high]
        return np.array([resize(imread(file_name), (200, 200)) for file_name in batch_x]), np.array(
            batch_y
        )


model = keras.Sequential(
    [
        keras.Input(shape=(200, 200, 3)),
        keras.layers.Conv2D(8, 3, strides=4, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer="adam",
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
history = model.fit(CIFAR10PyDataset(x_set, y_set, batch_size=32), epochs=3)

print(
    "CORPUS_RESULT "
    + json.dumps(
        {
            "steps": {"fit": int(model.optimizer.iterations)},
            "values": {
                "weights": sum(float(np.sum(w)) for w in model.get_weights()),
                "loss": float(history.history["loss"][-1]),
            },
        }
    )
)
