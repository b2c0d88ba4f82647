"""How the time of a Keras training step depends on the batch size, on this machine.

The small-batch finding rests on this: when a step takes about as long at batch 1 as at batch
32, the step's fixed cost (dispatch, the optimizer update, callbacks), not the work per sample,
sets the speed. Prints the median step time and samples/s per batch size, and their ratios to
batch 1.

    .venv/bin/python benchmarks/small_batch.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

BATCHES = (1, 8, 32, 256)
STEPS = 300


class StepTimes(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []
        self._start = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self._start)


def measure(batch: int) -> float:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch * STEPS, 32)).astype("float32")
    y = rng.normal(size=(batch * STEPS, 1)).astype("float32")
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    times = StepTimes()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[times])
    return float(np.median(times.times[10:]))


def main() -> None:
    results = {batch: measure(batch) for batch in BATCHES}
    base = results[BATCHES[0]]
    header = ("batch", "median step", "samples/s", "step vs b=1", "samples/s vs b=1")
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, (6, 12, 11, 12, 17), strict=True)))
    for batch, step in results.items():
        print(
            f"{batch:>6} {step * 1e3:>9.3f} ms {batch / step:>11,.0f} {step / base:>11.2f}x"
            f" {(batch / step) / (1 / base):>16.1f}x"
        )


if __name__ == "__main__":
    main()
