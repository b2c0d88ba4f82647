"""The host-side cost of the hot-path probes alone, in microseconds, without a training step.

Run: ``.venv/bin/python benchmarks/probe_costs.py``

- a call of a trivial ``tf.function`` with and without the tf.function probe (the probe's
  wrapper, the step row and the loss bookkeeping), on one CPU, alternating, medians;
- an iteration of an empty ``for`` loop of the cell, plain and instrumented (the loop row).

These are the costs a profiled step adds; `overhead.py` measures them inside real steps.
"""

from __future__ import annotations

import os
import statistics
import sys
from time import perf_counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from pinning import pin_every_thread

from tfdiag_magic import active
from tfdiag_magic.code_runner import prepare, run
from tfdiag_magic.probes.loops import LoopProbe
from tfdiag_magic.probes.tf_functions import TFFunctionProbe
from tfdiag_magic.recorder import Recorder
from tfdiag_magic.tf_runtime import read_losses

CALLS = 2000
ITERATIONS = 200_000


def probed(probe, body):
    rec = Recorder()  # memory_interval as in a run: pending losses are read every 50 ms
    rec.read_losses = read_losses  # one stack and one copy per read, as in a session
    active.claim(rec)
    probe.install(rec)
    try:
        return body()
    finally:
        probe.remove()
        active.release(rec)


def function_call_cost() -> tuple[float, float]:
    variable = tf.Variable(1.0)

    @tf.function
    def step(x):
        variable.assign_add(x)
        return tf.reduce_sum(x * 2.0)

    x = tf.constant(1.0)
    step(x)

    def calls() -> list[float]:
        times, last = [], perf_counter()
        for _ in range(CALLS):
            step(x)
            now = perf_counter()
            times.append(now - last)
            last = now
        return times

    plain: list[float] = []
    profiled: list[float] = []
    for i in range(20):
        if i % 2:
            plain += calls()
            profiled += probed(TFFunctionProbe(), calls)
        else:
            profiled += probed(TFFunctionProbe(), calls)
            plain += calls()
    return statistics.median(plain) * 1e6, statistics.median(profiled) * 1e6


def loop_iteration_cost() -> tuple[float, float]:
    source = "t = pc()\nfor i in range(N):\n    pass\nelapsed = pc() - t\n"
    namespace = {"pc": perf_counter, "N": ITERATIONS}

    def once(instrument: bool) -> float:
        prepared = prepare(source, "<loop>", instrument=instrument)
        if instrument:
            probed(LoopProbe(prepared.hooks), lambda: run(prepared, namespace))
        else:
            run(prepared, namespace)
        return namespace["elapsed"] / ITERATIONS * 1e6

    plain = statistics.median(once(False) for _ in range(5))
    instrumented = statistics.median(once(True) for _ in range(5))
    return plain, instrumented


def main() -> int:
    cpus = os.sched_getaffinity(0)
    pin_every_thread({max(cpus)})  # as overhead.py: threads that move between CPUs are noise
    try:
        plain, profiled = function_call_cost()
    finally:
        pin_every_thread(cpus)
    print(
        f"tf.function call   plain {plain:8.2f} us   probed {profiled:8.2f} us   "
        f"cost {profiled - plain:6.2f} us per call"
    )
    plain, instrumented = loop_iteration_cost()
    print(
        f"loop iteration     plain {plain:8.3f} us   instrumented {instrumented:8.3f} us   "
        f"cost {instrumented - plain:6.2f} us per iteration"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
