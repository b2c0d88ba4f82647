"""What the tool's per-step Python costs between real training steps, against its cost in a
tight loop: the same code runs several times slower once a TensorFlow call has run in between.

Run: ``.venv/bin/python benchmarks/step_cost_in_situ.py`` (``ROUNDS=N``, default 21).

A ``@tf.function`` train step of a small Keras model is called through four wrappers, each
round in turn (every thread on one CPU, the garbage collector off as ``timeit`` leaves it):

- ``plain``: `Function.__call__` itself;
- ``clocks``: a Python wrapper that reads ``perf_counter`` before and after the call (the
  physical floor of timing a step from Python);
- ``clocks + row``: the same, then `Recorder.add_step` with the step's row (no loss);
- ``tool``: the tool's own hot-path wrapper (`TFFunctionProbe._call_wrapper`), which also
  keeps the step's loss tensor to read it later in a batch.

It prints the microseconds each adds to a call (median over rounds of each round's difference
to ``plain``), and `Recorder.add_step`'s own time measured two ways: in a tight loop, and
around each call of the ``clocks + row`` wrapper (``perf_counter_ns`` on both sides of it).
"""

from __future__ import annotations

import os
import statistics
import timeit
from time import perf_counter, perf_counter_ns

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf
from pinning import pin_every_thread
from tensorflow.python.eager.polymorphic_function import polymorphic_function

from tfdiag_magic import active
from tfdiag_magic.probes.tf_functions import TFFunctionProbe
from tfdiag_magic.record import Kind, Phase
from tfdiag_magic.recorder import Recorder
from tfdiag_magic.tf_runtime import read_losses

ROUNDS = int(os.environ.get("ROUNDS", "21"))
CALLS = 2000  # calls per arm and round
NAN = float("nan")


def main() -> None:
    pin_every_thread({max(os.sched_getaffinity(0))})  # as hot_path.py; threads inherit it
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    x, y = tf.ones((2, 4)), tf.ones((2, 1))
    step(x, y)  # traced before any arm runs
    original = polymorphic_function.Function.__call__
    rows = Recorder()
    spent = [0, 0]  # add_step's nanoseconds and calls, around the real calls

    def clocks(function, *args):
        start = perf_counter()
        result = original(function, *args)
        end = perf_counter()
        del start, end
        return result

    def clocks_and_row(function, *args):
        start = perf_counter()
        result = original(function, *args)
        end = perf_counter()
        before = perf_counter_ns()
        rows.add_step(Phase.TRAIN, Kind.TF_FUNCTION, start, end, NAN, -1, False, None, 1, None)
        spent[0] += perf_counter_ns() - before
        spent[1] += 1
        return result

    recorder = Recorder()
    recorder.read_losses = read_losses  # as a session sets it: one stack and copy per read
    active.claim(recorder)
    try:
        arms = {
            "plain": original,
            "clocks": clocks,
            "clocks + row": clocks_and_row,
            "tool": TFFunctionProbe._call_wrapper(recorder, original),
        }
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(ROUNDS):
            for name, call in arms.items():
                seconds = timeit.timeit(lambda call=call: call(step, x, y), number=CALLS)
                times[name].append(seconds / CALLS * 1e6)
    finally:
        active.release(recorder)
    tight = Recorder()
    seconds = min(
        timeit.repeat(
            lambda: tight.add_step(Phase.TRAIN, Kind.TF_FUNCTION, 1.0, 1.001, NAN, -1, False),
            number=20_000,
            repeat=5,
        )
    )
    plain = times["plain"]
    print(f"tf.function train step, plain call: {statistics.median(plain):.1f} µs")
    print(f"{ROUNDS} rounds of {CALLS} calls per arm; µs added per call, median [min, max]:")
    for name in ("clocks", "clocks + row", "tool"):
        added = [t - p for t, p in zip(times[name], plain, strict=True)]
        print(
            f"  {name:13s} +{statistics.median(added):5.1f} [{min(added):+.1f}, {max(added):+.1f}]"
        )
    in_situ = spent[0] / spent[1] / 1e3
    in_loop = seconds / 20_000 * 1e6
    print(
        f"Recorder.add_step: {in_loop:.2f} µs in a tight loop, {in_situ:.2f} µs between real "
        f"calls ({in_situ / in_loop:.1f}x)"
    )


if __name__ == "__main__":
    main()
