"""The cost of the ops window (``--ops``): one training run profiled with and without it.

Run: ``.venv/bin/python benchmarks/ops_window.py`` (``ROUNDS=N`` sets the pairs, default 9).

The workload is a custom loop of 120 steps calling a @tf.function train step of a small MLP
(batch 512, two Dense(512) layers: about 15-30 ms a step on the 2-CPU machine, so the window's
20 steps are ~0.5-1 s of tracing). Each round profiles it once with ``profile()`` and once with
``profile(ops=True)``, in an order drawn at random (seeded), and times the block from inside;
the ratio with/without is taken per round; the median over rounds is printed, and the ratio of
the fastest runs (a busy neighbour slows some runs and leaves the fastest near their cost).
Then the window's own numbers from the last run: its steps, its length, the profiler's start
and stop, the trace's size, the time to read it after the run, the window's steps over the
later steps (what tracing costs each traced step), and the cost added up from them: start +
stop + the window's steps' extra time, an upper bound (the stop runs on the probe's thread).
"""

from __future__ import annotations

import os
import random
import statistics
from time import perf_counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import tfdiag_magic

STEPS = 120
ROUNDS = int(os.environ.get("ROUNDS", "9"))


def workload() -> tuple[object, object]:
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(512, 256)).astype("float32")
    y = x[:, :1].copy()
    model = keras.Sequential(
        [
            keras.Input((256,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    batch = (tf.constant(x), tf.constant(y))
    train_step(*batch)  # traced before any timed run
    return train_step, batch


def timed_run(train_step: object, batch: object, ops: bool) -> tuple[float, object]:
    with tfdiag_magic.profile(ops=ops) as result:
        began = perf_counter()
        for _ in range(STEPS):
            float(train_step(*batch))  # type: ignore[operator]
        seconds = perf_counter() - began
    return seconds, result


def main() -> None:
    train_step, batch = workload()
    order = random.Random(0)
    ratios, plain_times, ops_times = [], [], []
    last = None
    for _ in range(ROUNDS):
        arms = [False, True]
        order.shuffle(arms)
        times = {}
        for ops in arms:
            times[ops], result = timed_run(train_step, batch, ops)
            if ops:
                last = result
        plain_times.append(times[False])
        ops_times.append(times[True])
        ratios.append(times[True] / times[False])
    print(f"{STEPS} steps a run, {ROUNDS} rounds")
    print(
        f"without the window: median {statistics.median(plain_times):.3f} s; with it: "
        f"median {statistics.median(ops_times):.3f} s"
    )
    print(
        f"with/without, median of the rounds' ratios: {statistics.median(ratios):.3f} "
        f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)}); fastest runs: "
        f"{min(ops_times) / min(plain_times):.3f}"
    )
    ops = last.report()["ops"] if last is not None else None
    if ops and "window" in ops:
        window, cost = ops["window"], ops["cost"]
        slowdown = cost.get("step_slowdown")
        print(
            f"window: {window['steps']} steps, {window['end'] - window['start']:.3f} s traced; "
            f"profiler start {cost['start_s'] * 1e3:.1f} ms, stop {cost['stop_s'] * 1e3:.1f} ms; "
            f"trace {cost['trace_bytes'] / 1024:.0f} KiB, read in {cost['parse_s'] * 1e3:.0f} ms "
            "after the run; window steps / later steps (medians): "
            + (f"{slowdown:.2f}" if slowdown else "n/a")
        )
        extra = cost["start_s"] + cost["stop_s"]
        if slowdown:
            extra += window["step_time"] * (1 - 1 / slowdown)
        plain = statistics.median(plain_times)
        print(
            f"added up: {extra * 1e3:.1f} ms per run, {100 * extra / plain:.1f}% of this "
            f"{plain:.2f} s run (and the {cost['parse_s'] * 1e3:.0f} ms read after it)"
        )


if __name__ == "__main__":
    main()
