"""Overhead of profiling on a ~1 ms CPU training step: plain vs profiled, side by side.

Run: ``.venv/bin/python benchmarks/overhead.py`` (or ``make bench``).

Two workloads, each a loop of STEPS training steps timed from inside the code (so session
start-up and report building, paid once per run, are not counted as per-step cost):

- ``tf.function loop``: a custom loop over pre-made batches calling a @tf.function train step,
  profiled exactly as ``%%tfprofile`` runs a cell (loop instrumented, every probe installed);
- ``model.fit``: one epoch of Keras fit over a tf.data pipeline.

Plain and profiled runs alternate in one process after warm-up; the script prints the median
time per step of each and their ratio (profiled / plain). The target is a ratio <= 1.03.
"""

from __future__ import annotations

import os
import statistics
import sys
from time import perf_counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras  # noqa: E402
from tfdiag_magic.code_runner import prepare, run  # noqa: E402
from tfdiag_magic.session import Session  # noqa: E402

STEPS = 400
ROUNDS = int(os.environ.get("ROUNDS", "15"))
BATCH, FEATURES, HIDDEN = 64, 64, 256

CUSTOM_LOOP = """
t_start = perf_counter()
for xb, yb in batches:
    train_step(xb, yb)
elapsed = perf_counter() - t_start
"""

FIT = """
t_start = perf_counter()
model.fit(dataset, epochs=1, verbose=0)
elapsed = perf_counter() - t_start
"""


def build_namespace() -> dict:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH * STEPS, FEATURES)).astype("float32")
    y = rng.normal(size=(BATCH * STEPS, 1)).astype("float32")
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(HIDDEN, activation="relu"),
        keras.layers.Dense(HIDDEN, activation="relu"),
        keras.layers.Dense(1),
    ])
    model.compile(optimizer="adam", loss="mse")
    optimizer = keras.optimizers.Adam()
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    batches = [
        (tf.constant(x[i * BATCH : (i + 1) * BATCH]), tf.constant(y[i * BATCH : (i + 1) * BATCH]))
        for i in range(STEPS)
    ]
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).cache()
    return {
        "model": model,
        "train_step": train_step,
        "batches": batches,
        "dataset": dataset,
        "perf_counter": perf_counter,
        "__builtins__": __builtins__,
    }


def timed(source: str, namespace: dict, profiled: bool) -> float:
    prepared = prepare(source, "<benchmark>", instrument=profiled)
    if profiled:
        with Session(source=source, loops=prepared.loops, namespace=namespace) as result:
            run(prepared, namespace)
        assert result.record is not None and result.record.phase_counts().get("train") == STEPS
    else:
        run(prepared, namespace)
    return namespace["elapsed"] / STEPS


def compare(name: str, source: str, namespace: dict) -> float:
    for profiled in (False, True, False, True):  # warm-up: tracing, caches, allocator
        timed(source, namespace, profiled)
    plain, profiled = [], []
    for _ in range(ROUNDS):
        plain.append(timed(source, namespace, False))
        profiled.append(timed(source, namespace, True))
    p, q = statistics.median(plain), statistics.median(profiled)
    ratio = q / p
    print(
        f"{name:<18} plain {p * 1e3:7.3f} ms/step   profiled {q * 1e3:7.3f} ms/step   "
        f"ratio {ratio:.3f}",
        flush=True,
    )
    return ratio


def main() -> int:
    namespace = build_namespace()
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPUs; "
        f"{STEPS} steps per run, {ROUNDS} alternating rounds, medians",
        flush=True,
    )
    ratios = [
        compare("tf.function loop", CUSTOM_LOOP, namespace),
        compare("model.fit", FIT, namespace),
    ]
    worst = max(ratios)
    print(f"worst ratio {worst:.3f} (target <= 1.03): {'ok' if worst <= 1.03 else 'OVER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
