"""Image classification: image files, cache().shuffle().prefetch(), two models fitted in turn.

Modelled on: https://github.com/tensorflow/docs/blob/master/site/en/tutorials/images/classification.ipynb
(tensorflow/docs, Apache-2.0; the source's authors: The TensorFlow Authors). Written for
tfdiag_magic's test corpus after that tutorial's training code, not a copy of its text: the
same pipeline (image_dataset_from_directory with a training/validation split, seed 123,
batch 32; train_ds.cache().shuffle(1000).prefetch(AUTOTUNE), val_ds.cache().prefetch), the
same first Sequential convnet (Rescaling, three Conv2D/MaxPooling2D, Dense 128) fitted with
validation data, then the data-augmentation model (RandomFlip, RandomRotation, RandomZoom,
Dropout 0.2) fitted the same way, and a prediction on one image with softmax scores.
Changed: synthetic JPEG images (5 classes of 20, from a fixed seed) written to a temporary
flower_photos-like folder instead of the download; images of 90x90 instead of 180x180; 3
epochs for each model instead of 10 and 15; the image to predict is one of the synthetic
files instead of a downloaded sunflower; the plots and the TensorFlow Lite part are left out
(they train nothing); seeds fixed; a last line that prints the optimizers' iteration counts
and checksums.
"""

import json
import pathlib
import tempfile

import numpy as np
import PIL
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers
from tensorflow.keras.models import Sequential

tf.keras.utils.set_random_seed(1337)
rng = np.random.default_rng(1337)

# In the working folder: the test's own temporary one, removed after the run.
data_root = tempfile.mkdtemp(prefix="corpus-flowers-", dir=pathlib.Path.cwd())
data_dir = pathlib.Path(data_root) / "flower_photos"
for name in ("daisy", "dandelion", "roses", "sunflowers", "tulips"):
    (data_dir / name).mkdir(parents=True)
    for i in range(20):
        pixels = rng.integers(0, 256, size=(120, 120, 3), dtype=np.uint8)
        PIL.Image.fromarray(pixels).save(data_dir / name / f"{i}.jpg")

image_count = len(list(data_dir.glob("*/*.jpg")))
print(image_count)

batch_size = 32
img_height = 90
img_width = 90

train_ds = tf.keras.utils.image_dataset_from_directory(
    data_dir,
    validation_split=0.2,
    subset="training",
    seed=123,
    image_size=(img_height, img_width),
    batch_size=batch_size,
)
val_ds = tf.keras.utils.image_dataset_from_directory(
    data_dir,
    validation_split=0.2,
    subset="validation",
    seed=123,
    image_size=(img_height, img_width),
    batch_size=batch_size,
)
class_names = train_ds.class_names
print(class_names)

for image_batch, labels_batch in train_ds:
    print(image_batch.shape)
    print(labels_batch.shape)
    break

AUTOTUNE = tf.data.AUTOTUNE
train_ds = train_ds.cache().shuffle(1000).prefetch(buffer_size=AUTOTUNE)
val_ds = val_ds.cache().prefetch(buffer_size=AUTOTUNE)

normalization_layer = layers.Rescaling(1.0 / 255)
normalized_ds = train_ds.map(lambda x, y: (normalization_layer(x), y))
image_batch, labels_batch = next(iter(normalized_ds))
first_image = image_batch[0]
print(np.min(first_image), np.max(first_image))

num_classes = len(class_names)
model = Sequential(
    [
        layers.Rescaling(1.0 / 255, input_shape=(img_height, img_width, 3)),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dense(num_classes),
    ]
)
model.compile(
    optimizer="adam",
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.summary()

epochs = 3
history = model.fit(train_ds, validation_data=val_ds, epochs=epochs)
first_model = model

data_augmentation = keras.Sequential(
    [
        layers.RandomFlip("horizontal", input_shape=(img_height, img_width, 3)),
        layers.RandomRotation(0.1),
        layers.RandomZoom(0.1),
    ]
)
model = Sequential(
    [
        data_augmentation,
        layers.Rescaling(1.0 / 255),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Dropout(0.2),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dense(num_classes, name="outputs"),
    ]
)
model.compile(
    optimizer="adam",
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.summary()

epochs = 3
history = model.fit(train_ds, validation_data=val_ds, epochs=epochs)

sunflower_path = data_dir / "sunflowers" / "0.jpg"
img = tf.keras.utils.load_img(sunflower_path, target_size=(img_height, img_width))
img_array = tf.keras.utils.img_to_array(img)
img_array = tf.expand_dims(img_array, 0)
predictions = model.predict(img_array)
score = tf.nn.softmax(predictions[0])
print(
    f"This image most likely belongs to {class_names[np.argmax(score)]} "
    f"with a {100 * np.max(score):.2f} percent confidence."
)

print(
    "CORPUS_RESULT "
    + json.dumps(
        {
            "steps": {
                "first_model": int(first_model.optimizer.iterations),
                "augmented": int(model.optimizer.iterations),
            },
            "values": {
                "first_model": sum(float(np.sum(w)) for w in first_model.get_weights()),
                "augmented": sum(float(np.sum(w)) for w in model.get_weights()),
                "val_loss": float(history.history["val_loss"][-1]),
                "score": [float(v) for v in score],
            },
        }
    )
)
