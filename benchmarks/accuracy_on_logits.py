"""How far the accuracy Keras shows for a logits model thresholded at 0.5 is from the model's
(`metric-on-logits`).

Run: ``.venv/bin/python benchmarks/accuracy_on_logits.py``

A binary classifier of 20 features (2,000 rows, labels from a noisy linear rule, a fifth held
out for validation, five epochs) ending in a linear `Dense(1)`, trained with
`BinaryCrossentropy(from_logits=True)` and compiled with ``metrics=["accuracy"]``, as
TensorFlow's word-embeddings tutorial compiles its model. It prints the accuracy `fit` showed
for each epoch, then the trained model's predictions on all rows counted right at a logit of
0.5 (what Keras' `BinaryAccuracy` counts) and at 0 (the model's decision boundary).
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 20)).astype("float32")
    w = rng.normal(size=(20,))
    y = ((x @ w + rng.normal(size=2000) * 2) > 0).astype("float32")
    model = keras.Sequential(
        [keras.Input((20,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(
        "adam", loss=keras.losses.BinaryCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    history = model.fit(x, y, epochs=5, verbose=0, validation_split=0.2)
    logits = model.predict(x, verbose=0)[:, 0]
    shown = ", ".join(f"{value:.3f}" for value in history.history["accuracy"])
    print(f"accuracy fit showed, by epoch: {shown}")
    for threshold in (0.5, 0.0):
        right = float(np.mean((logits > threshold) == (y > 0.5)))
        print(f"predictions counted at a logit of {threshold}: {right:.3f} right")


if __name__ == "__main__":
    main()
