"""What an epoch of a small table's `fit` costs with NumPy arrays and with tf.data datasets built
once (the keras-epoch-setup finding's fix), plainly, without the tool.

Run: ``.venv/bin/python benchmarks/epoch_setup.py [-e EPOCHS] [-r ROUNDS]``

The shape of TensorFlow's tabular regression tutorial: 314 rows of 9 features, a 64-64-1 model,
`validation_split=0.2` (8 training and 2 validation batches an epoch). Each round fits a fresh
model both ways (after one warm-up epoch each, so tracing is left out) and prints the
milliseconds per epoch; then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf


def regressor() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((9,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.001), loss="mean_absolute_error")
    return model


def per_epoch(fit_once, epochs: int) -> float:
    """Milliseconds per epoch of `fit_once(epochs)`, after a warm-up epoch."""
    fit_once(1)
    start = time.perf_counter()
    fit_once(epochs)
    return (time.perf_counter() - start) / epochs * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-e", "--epochs", type=int, default=40)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(314, 9)).astype("float32")
    y = (x @ rng.normal(size=(9, 1))).astype("float32")
    split = math.ceil(len(x) * 0.8)  # Keras' validation_split takes the last 20 %
    train = tf.data.Dataset.from_tensor_slices((x[:split], y[:split])).shuffle(split).batch(32)
    val = tf.data.Dataset.from_tensor_slices((x[split:], y[split:])).batch(32)
    arrays, datasets = [], []
    for round_ in range(args.rounds):
        model = regressor()
        a = per_epoch(
            lambda n, m=model: m.fit(x, y, validation_split=0.2, epochs=n, verbose=0),
            args.epochs,
        )
        model = regressor()
        b = per_epoch(
            lambda n, m=model: m.fit(train, validation_data=val, epochs=n, verbose=0),
            args.epochs,
        )
        arrays.append(a)
        datasets.append(b)
        print(f"round {round_ + 1}: NumPy arrays {a:.1f} ms/epoch, tf.data built once {b:.1f}")
    a, b = statistics.median(arrays), statistics.median(datasets)
    print(f"median: NumPy arrays {a:.1f} ms/epoch, tf.data built once {b:.1f}: {a / b:.2f}x")


if __name__ == "__main__":
    main()
