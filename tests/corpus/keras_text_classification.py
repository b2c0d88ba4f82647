"""Text classification from scratch: text files, TextVectorization, cache, prefetch, a convnet.

Modelled on: https://github.com/keras-team/keras-io/blob/master/examples/nlp/text_classification_from_scratch.py
(keras-io, Apache-2.0; the source's authors: Mark Omernick, Francois Chollet). Written for
tfdiag_magic's test corpus after that example's training code, not a copy of its text: the
same input pipeline (text_dataset_from_directory with a training/validation split, a custom
standardization, TextVectorization adapted on the training text, the vectorizing map,
cache() and prefetch(buffer_size=10)), the same Embedding + Conv1D model, compile, fit with
validation data, evaluate, and the end-to-end model on raw strings.
Changed: synthetic reviews (random words from a fixed vocabulary, from a fixed seed, with HTML
line breaks and punctuation) written to a temporary aclImdb-like folder instead of the IMDB
download; 160 training and 64 test reviews instead of 25 000 each; 2 epochs instead of 3;
seeds fixed; a last line that prints the optimizer's iteration count and checksums.
"""

import json
import os
import re
import string
import tempfile

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras
import numpy as np
import tensorflow as tf
from keras import layers

keras.utils.set_random_seed(1337)
rng = np.random.default_rng(1337)

# In the working folder: the test's own temporary one, removed after the run.
data_root = tempfile.mkdtemp(prefix="corpus-imdb-", dir=os.getcwd())
words = [f"word{i}" for i in range(3000)] + ["great", "awful", "movie", "film", "plot"]
for split, count in (("train", 160), ("test", 64)):
    for label in ("neg", "pos"):
        folder = os.path.join(data_root, "aclImdb", split, label)
        os.makedirs(folder)
        for i in range(count // 2):
            review = " ".join(rng.choice(words, size=int(rng.integers(50, 300))))
            with open(os.path.join(folder, f"{i}_7.txt"), "w") as f:
                f.write(review.replace(" plot ", " plot.<br /><br />") + "!")
os.chdir(data_root)

batch_size = 32
raw_train_ds = keras.utils.text_dataset_from_directory(
    "aclImdb/train",
    batch_size=batch_size,
    validation_split=0.2,
    subset="training",
    seed=1337,
)
raw_val_ds = keras.utils.text_dataset_from_directory(
    "aclImdb/train",
    batch_size=batch_size,
    validation_split=0.2,
    subset="validation",
    seed=1337,
)
raw_test_ds = keras.utils.text_dataset_from_directory("aclImdb/test", batch_size=batch_size)

print(f"Number of batches in raw_train_ds: {raw_train_ds.cardinality()}")
print(f"Number of batches in raw_val_ds: {raw_val_ds.cardinality()}")
print(f"Number of batches in raw_test_ds: {raw_test_ds.cardinality()}")


def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")


max_features = 20000
embedding_dim = 128
sequence_length = 500

vectorize_layer = keras.layers.TextVectorization(
    standardize=custom_standardization,
    max_tokens=max_features,
    output_mode="int",
    output_sequence_length=sequence_length,
)
text_ds = raw_train_ds.map(lambda x, y: x)
vectorize_layer.adapt(text_ds)


def vectorize_text(text, label):
    text = tf.expand_dims(text, -1)
    return vectorize_layer(text), label


train_ds = raw_train_ds.map(vectorize_text)
val_ds = raw_val_ds.map(vectorize_text)
test_ds = raw_test_ds.map(vectorize_text)

train_ds = train_ds.cache().prefetch(buffer_size=10)
val_ds = val_ds.cache().prefetch(buffer_size=10)
test_ds = test_ds.cache().prefetch(buffer_size=10)

inputs = keras.Input(shape=(None,), dtype="int64")
x = layers.Embedding(max_features, embedding_dim)(inputs)
x = layers.Dropout(0.5)(x)
x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.GlobalMaxPooling1D()(x)
x = layers.Dense(128, activation="relu")(x)
x = layers.Dropout(0.5)(x)
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)
model = keras.Model(inputs, predictions)
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

epochs = 2
model.fit(train_ds, validation_data=val_ds, epochs=epochs)
evaluated = model.evaluate(test_ds)

inputs = keras.Input(shape=(1,), dtype="string")
indices = vectorize_layer(inputs)
outputs = model(indices)
end_to_end_model = keras.Model(inputs, outputs)
end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
end_to_end = end_to_end_model.evaluate(raw_test_ds)

print(
    "CORPUS_RESULT "
    + json.dumps(
        {
            "steps": {"fit": int(model.optimizer.iterations)},
            "values": {
                "weights": sum(float(np.sum(w)) for w in model.get_weights()),
                "evaluated": [float(v) for v in evaluated],
                "end_to_end": [float(v) for v in end_to_end],
            },
        }
    )
)
