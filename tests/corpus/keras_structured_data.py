# ruff: noqa: RUF005, B007  (the example's own style)
"""Structured data classification from scratch: a DataFrame, per-row lookups in a tf.data map.

Modelled on: https://github.com/keras-team/keras-io/blob/master/examples/structured_data/structured_data_classification_from_scratch.py
(keras-io, Apache-2.0; the source's author: fchollet; made backend-agnostic by Humbulani Ndou).
Written for tfdiag_magic's test corpus after that example's training code, not a copy of its
text: the same dataset metadata (numeric features, categorical vocabularies from the
DataFrame), the same pipeline (from_tensor_slices of the DataFrame, a map that one-hot encodes
every categorical feature of every row with StringLookup / IntegerLookup layers, shuffle over
the whole frame, batch 32, no cache), Normalization layers adapted per numeric feature, the
dict-input model with its Classifier layer, compile, fit with validation data, and predict on
one sample.
Changed: a synthetic DataFrame from a fixed seed with the heart-disease CSV's 303 rows, columns
and dtypes instead of the download; KERAS_BACKEND is "tensorflow" (the example names torch,
or tensorflow); 5 epochs instead of 50; the plot_model line is left out (it needs pydot and
graphviz, and trains nothing); seeds fixed; a last line that prints the optimizer's iteration
count and checksums.
"""

import json
import os

os.environ["KERAS_BACKEND"] = "tensorflow"

import keras
import numpy as np
import pandas as pd
from keras import layers

keras.utils.set_random_seed(1337)
rng = np.random.default_rng(1337)

rows = 303
dataframe = pd.DataFrame(
    {
        "age": rng.integers(29, 78, rows),
        "sex": rng.integers(0, 2, rows),
        "cp": rng.integers(0, 5, rows),
        "trestbps": rng.integers(94, 201, rows),
        "chol": rng.integers(126, 565, rows),
        "fbs": rng.integers(0, 2, rows),
        "restecg": rng.integers(0, 3, rows),
        "thalach": rng.integers(71, 203, rows),
        "exang": rng.integers(0, 2, rows),
        "oldpeak": np.round(rng.uniform(0.0, 6.2, rows), 1),
        "slope": rng.integers(1, 4, rows),
        "ca": rng.integers(0, 4, rows),
        "thal": rng.choice(["fixed", "normal", "reversible", "1", "2"], rows),
        "target": rng.integers(0, 2, rows),
    }
)

val_dataframe = dataframe.sample(frac=0.2, random_state=1337)
train_dataframe = dataframe.drop(val_dataframe.index)
print(f"Using {len(train_dataframe)} samples for training and {len(val_dataframe)} for validation")

COLUMN_NAMES = [
    "age",
    "sex",
    "cp",
    "trestbps",
    "chol",
    "fbs",
    "restecg",
    "thalach",
    "exang",
    "oldpeak",
    "slope",
    "ca",
    "thal",
    "target",
]
TARGET_FEATURE_NAME = "target"
NUMERIC_FEATURE_NAMES = ["age", "trestbps", "thalach", "oldpeak", "slope", "chol"]
CATEGORICAL_FEATURES_WITH_VOCABULARY = {
    feature_name: sorted(
        [
            value if dataframe[feature_name].dtype == "int64" else str(value)
            for value in list(dataframe[feature_name].unique())
        ]
    )
    for feature_name in COLUMN_NAMES
    if feature_name not in list(NUMERIC_FEATURE_NAMES + [TARGET_FEATURE_NAME])
}
FEATURE_NAMES = NUMERIC_FEATURE_NAMES + list(CATEGORICAL_FEATURES_WITH_VOCABULARY.keys())

import tensorflow as tf  # noqa: E402  (imported here, where the example needs tf.data)


def encode_categorical(features, target):
    for feature_name in features:
        if feature_name in CATEGORICAL_FEATURES_WITH_VOCABULARY:
            lookup_class = (
                layers.StringLookup
                if features[feature_name].dtype == "string"
                else layers.IntegerLookup
            )
            vocabulary = CATEGORICAL_FEATURES_WITH_VOCABULARY[feature_name]
            index = lookup_class(
                vocabulary=vocabulary,
                mask_token=None,
                num_oov_indices=0,
                output_mode="binary",
            )
            features[feature_name] = index(features[feature_name])
    return dict(features), target


def encode_numerical_feature(feature, name, dataset):
    normalizer = layers.Normalization()
    feature_ds = dataset.map(lambda x, y: x[name])
    feature_ds = feature_ds.map(lambda x: tf.expand_dims(x, -1))
    normalizer.adapt(feature_ds)
    return normalizer(feature)


def dataframe_to_dataset(dataframe):
    dataframe = dataframe.copy()
    labels = dataframe.pop("target")
    ds = tf.data.Dataset.from_tensor_slices((dict(dataframe), labels)).map(encode_categorical)
    ds = ds.shuffle(buffer_size=len(dataframe))
    return ds


train_ds = dataframe_to_dataset(train_dataframe)
val_ds = dataframe_to_dataset(val_dataframe)

for x, y in train_ds.take(1):
    print("Input:", x)
    print("Target:", y)

train_ds = train_ds.batch(32)
val_ds = val_ds.batch(32)


def create_model_inputs():
    inputs = {}

    def create_input_helper(feature_name):
        num_categories = len(CATEGORICAL_FEATURES_WITH_VOCABULARY[feature_name])
        inputs[feature_name] = layers.Input(
            name=feature_name, shape=(num_categories,), dtype="int64"
        )
        return inputs

    for feature_name in FEATURE_NAMES:
        if feature_name in CATEGORICAL_FEATURES_WITH_VOCABULARY:
            create_input_helper(feature_name)
        else:
            feature_input = layers.Input(name=feature_name, shape=(1,), dtype="float32")
            inputs[feature_name] = encode_numerical_feature(feature_input, feature_name, train_ds)
    return inputs


class Classifier(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense_1 = layers.Dense(32, activation="relu")
        self.dropout = layers.Dropout(0.5)
        self.dense_2 = layers.Dense(1, activation="sigmoid")

    def call(self, inputs):
        all_features = layers.concatenate(list(inputs.values()))
        x = self.dense_1(all_features)
        x = self.dropout(x)
        return self.dense_2(x)

    def build(self, input_shape):
        self.built = True


def create_model():
    all_inputs = create_model_inputs()
    output = Classifier()(all_inputs)
    return keras.Model(all_inputs, output)


model = create_model()
model.compile("adam", "binary_crossentropy", metrics=["accuracy"])

history = model.fit(train_ds, epochs=5, validation_data=val_ds)

sample = {
    "age": 60,
    "sex": 1,
    "cp": 1,
    "trestbps": 145,
    "chol": 233,
    "fbs": 1,
    "restecg": 2,
    "thalach": 150,
    "exang": 0,
    "oldpeak": 2.3,
    "slope": 3,
    "ca": 0,
    "thal": "fixed",
}


def get_cat_encoding(cat, cat_value):
    encoding = [0] * len(cat)
    if cat_value in cat:
        encoding[cat.index(cat_value)] = 1
    return encoding


for name, value in sample.items():
    if name in CATEGORICAL_FEATURES_WITH_VOCABULARY:
        sample.update(
            {name: get_cat_encoding(CATEGORICAL_FEATURES_WITH_VOCABULARY[name], sample[name])}
        )
input_dict = {name: tf.convert_to_tensor([value]) for name, value in sample.items()}
predictions = model.predict(input_dict)
print(
    f"This particular patient had a {100 * predictions[0][0]:.1f} "
    "percent probability of having a heart disease, as evaluated by our model."
)

print(
    "CORPUS_RESULT "
    + json.dumps(
        {
            "steps": {"fit": int(model.optimizer.iterations)},
            "values": {
                "weights": sum(float(np.sum(w)) for w in model.get_weights()),
                "loss": float(history.history["loss"][-1]),
                "prediction": float(predictions[0][0]),
            },
        }
    )
)
