"""Python calls the tool adds per training step, counted by cProfile, and the bytecode
instructions its own code runs per step: counts, not times, so they do not move with a noisy
neighbour.

Run: ``.venv/bin/python benchmarks/calls_per_step.py`` (``--json`` for one line of JSON;
``--save PATH`` prints the table and also writes the JSON to PATH, which ``make bench`` hands to
``hot_path.py`` for its "calls added" column).

Two columns of added calls: the hot path alone (``--memory-interval 3600``: no memory sample
falls inside the counted runs, and a loop's rows are written by count, `rows_written_by_count`),
which `tests/test_calls_per_step.py` holds at or under
`TARGET`, and with the default memory samples (every 50 ms of run, so their share of a step
grows with the step's time: cProfile's own slowdown makes steps several times longer here
than in a plain run, so that column overstates them).

Each workload is a cell run in a real IPython shell, plainly and under ``%%tfprofile -q`` (the
magic's full path: loop instrumentation, every probe, the recorder, the diagnosis after), at
``SHORT`` and ``LONG`` steps (the eager loop, whose steps make ten thousand calls each under
cProfile, at the lengths `LENGTHS` gives it: 128 and 384 read 9.0 where 200 and 600 read 8.8,
and take 21 s instead of 34 s). cProfile counts every call, builtins included, but for the GC
probe's callbacks, whose number follows other threads' allocations (`_gc_callback_calls`). The
slope ``(calls(LONG) - calls(SHORT)) / (LONG - SHORT)`` cancels what a run costs once (start-up,
report); the profiled slope minus the plain slope is what the tool adds per step.

The instructions (``--instructions``, or `instructions_per_step`): every bytecode instruction
executed in a frame of the package's own code (its wrappers, probes and recorder; what they
call in TensorFlow or Keras is the workload's) on the main thread, counted with
``sys.settrace``'s opcode events at two shorter lengths (`INSTRUCTION_LENGTHS`), profiled
only (the tool runs no bytecode in a plain run). Between real steps, each instruction of the
hot path costs tens of nanoseconds (the step's own work has pushed the tool's code and data out
of the CPU's caches; README, Overhead), so this count, unlike the call count, follows the time
the tool adds.

Workloads: a custom loop calling a ``@tf.function`` train step, ``model.fit`` on a
``tf.data`` pipeline, ``model.train_on_batch`` in a loop, and an eager loop (GradientTape and
``optimizer.apply_gradients``, no ``tf.function``).
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import json
import os
import pstats
import sys
from collections.abc import Iterator
from typing import Any

import tfdiag_magic
from tfdiag_magic import recorder

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHORT, LONG = 200, 600
# Shorter runs for a workload whose steps are slow under cProfile; not shorter than 128 and 384:
# a run's sporadic calls (the garbage collector's callbacks, a few per hundred steps) then
# weigh more per step (64 and 192 read 17.4 for the eager loop).
LENGTHS = {"eager loop": (128, 384)}
# The instructions, the tool's own code only, are counted at shorter lengths, every workload:
# a run's fixed cost weighs a little more per step (at 64 and 192, 437.9, 459.3, 496.9 and
# 361.9 where the calls' lengths read 433.8, 455.4, 492.6 and 357.8), in a third of the time
# (the eager loop's count took 8.5 s instead of 15.7 s).
INSTRUCTION_LENGTHS = (64, 192)
TARGET = 12  # calls the tool may add per step (issue 18)
# Bytecode instructions the tool's own code may run per step, per workload: what this script
# printed for the code they guard, plus a tenth (`tests/test_calls_per_step.py`).
# Measured on the commit that made the fused rows a branch of `Recorder.add_step`: 433.8,
# 457.3, 492.8 and 338.7 (566.2, 538.1, 579.2 and 415.0 before those changes); the eager loop
# 357.8 since the model-call probe (`probes.model_calls`) checks each eager model call and the
# loop's rows are written by count while counting (`rows_written_by_count`): 357.8 quiet and
# 357.8 beside two CPU hogs, where the time-based writes had read 372.7 and 408.5.
INSTRUCTIONS_MOST = {
    "tf.function loop": 472,
    "model.fit": 498,
    "train_on_batch": 537,
    "eager loop": 393,
}
HOT_PATH = "--memory-interval 3600"  # no time-based memory sample inside the counted runs


@contextlib.contextmanager
def rows_written_by_count() -> Iterator[None]:
    """A loop's iterations written in batches of `recorder.LOOP_PAIRS` alone, not also every
    `recorder.LOOP_FLUSH_S` (the live view's lag): under the count's tracing an eager step
    runs tens of times slower than plainly, so the time-based writes, one per 0.25 s, came
    once per few steps, and more often the busier the machine (the eager loop's writes read
    15.9 instructions per step quiet and 47.6 beside two CPU hogs). At a real step's speed
    they come once per hundreds of steps; by count alone, the measure is the same on any
    machine."""
    saved = recorder.LOOP_FLUSH_S
    recorder.LOOP_FLUSH_S = 3600.0
    try:
        yield
    finally:
        recorder.LOOP_FLUSH_S = saved


SETUP = """
import numpy as np
import tensorflow as tf
import keras
tf.random.set_seed(0)
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
optimizer = keras.optimizers.SGD(0.01)
loss_fn = keras.losses.MeanSquaredError()
xt, yt = tf.constant(x), tf.constant(y)

@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

def eager_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""

WORKLOADS = {
    "tf.function loop": "for i in range({n}):\n    train_step(xt, yt)\n",
    "model.fit": (
        "ds = tf.data.Dataset.from_tensors((x, y)).repeat({n})\n"
        "history = model.fit(ds, epochs=1, verbose=0)\n"
    ),
    "train_on_batch": "for i in range({n}):\n    model.train_on_batch(x, y)\n",
    "eager loop": "for i in range({n}):\n    eager_step(xt, yt)\n",
}


def calls(shell, cell: str) -> int:
    """Calls the main thread makes while `cell` runs (cProfile's count, builtins included),
    less the GC probe's. Garbage left by earlier code is collected first: its finalizers
    (a Keras model's, a traced function's) would otherwise run in whichever counted run a
    collection fell in. Measured with 3,000 objects with a finalizer left before each count,
    the tf.function loop's plain slope read 967.985 calls per step instead of 967.0; and once
    in the suite, the eager loop's plain slope read low enough that the tool's share read
    14.4 calls per step where it reads about 9.5."""
    gc.collect()
    profiler = cProfile.Profile()
    profiler.enable()
    outcome = shell.run_cell(cell)
    profiler.disable()
    if not outcome.success:
        raise RuntimeError(f"the cell failed: {outcome.error_in_exec or outcome.error_before_exec}")
    stats = pstats.Stats(profiler)
    return stats.total_calls - _gc_callback_calls(stats)


def _gc_callback_calls(stats: pstats.Stats) -> int:
    """Calls of the GC probe's callback and the calls it made: a collection runs on whichever
    thread's allocation started it, so their number follows the other threads' allocations
    (the samplers', more of them the longer a run takes on a busy machine), not the steps."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    callbacks = [
        func
        for func in table
        if func[2] == "on_gc" and func[0].endswith(os.path.join("probes", "gc_pauses.py"))
    ]
    total = 0
    for func in callbacks:
        total += table[func][1]  # its own calls
    for _func, (_cc, _nc, _tt, _ct, callers) in table.items():
        for caller in callbacks:
            if caller in callers:
                total += callers[caller][0]  # the calls it made to this function
    return total


def per_step(
    shell,
    body: str,
    lengths: tuple[int, int],
    profiled: bool,
    options: str = "",
    repeats: int = 2,
) -> float:
    """The calls per step of `body`, the fewest of `repeats` measures: what recurs on every
    step is in each of them, while work that depends on time or on other threads only adds
    calls. Measured once beside a CPU hog and a full test suite, `train_on_batch` read 13.5
    added calls per step, where it reads 11.1 alone; the GC probe's callbacks, which another
    thread's allocations can start on this one, are no longer counted (`_gc_callback_calls`)."""
    head = f"%%tfprofile -q {options}\n" if profiled else ""
    return _fewest_per_step(calls, shell, head + body, lengths, repeats)


def _fewest_per_step(
    count: Any, shell: Any, cell: str, lengths: tuple[int, int], repeats: int
) -> float:
    """The fewest of `repeats` slopes of `count(shell, cell)` between the run lengths
    `lengths` (`cell` takes the steps as ``{n}``), after a warm-up run (tracing, first-call
    costs)."""
    few, many = lengths
    shell.run_cell(cell.format(n=few))
    slopes = []
    for _ in range(repeats):
        short = count(shell, cell.format(n=few))
        long = count(shell, cell.format(n=many))
        slopes.append((long - short) / (many - few))
    return min(slopes)


def instructions(shell, cell: str) -> int:
    """Bytecode instructions executed in the package's own frames on this thread while
    `cell` runs (see the module's docstring)."""
    package = os.path.join(os.path.dirname(os.path.abspath(tfdiag_magic.__file__)), "")
    count = [0]

    def opcodes(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            count[0] += 1
        return opcodes

    def calls(frame: Any, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(package):
            return None  # not the tool's: no events for this frame
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return opcodes

    gc.collect()  # earlier code's garbage, collected before the count (see `calls`)
    sys.settrace(calls)
    try:
        outcome = shell.run_cell(cell)
    finally:
        sys.settrace(None)
    if not outcome.success:
        raise RuntimeError(f"the cell failed: {outcome.error_in_exec or outcome.error_before_exec}")
    return count[0]


def instructions_per_step(shell, name: str, repeats: int = 2) -> float:
    """The tool's own bytecode instructions per step of the workload `name` (the hot path
    alone: no memory sample inside the counted runs), the fewest of `repeats` slopes."""
    cell = f"%%tfprofile -q {HOT_PATH}\n" + WORKLOADS[name]
    with rows_written_by_count():
        return _fewest_per_step(instructions, shell, cell, INSTRUCTION_LENGTHS, repeats)


def shell_with_workloads():
    """An IPython shell with the extension loaded (live view off) and `SETUP` run."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tfdiag_magic")
    shell.run_line_magic("config", "TFProfile.live = False")
    if not shell.run_cell(SETUP).success:
        raise SystemExit("set-up failed")
    return shell


def _lengths(name: str) -> tuple[int, int]:
    """The two run lengths (steps) the workload `name` is counted at."""
    return LENGTHS.get(name, (SHORT, LONG))


def measure(shell, name: str) -> dict[str, float]:
    """Calls per step of the workload `name`: plain, profiled (hot path alone), and added."""
    body, lengths = WORKLOADS[name], _lengths(name)
    # A plain run's count is the same every time (three measures of each workload at both
    # lengths were equal to the call): one measure. The profiled runs have threads and
    # time-based work beside them, and keep the fewest of two.
    plain = per_step(shell, body, lengths, profiled=False, repeats=1)
    with rows_written_by_count():
        profiled = per_step(shell, body, lengths, profiled=True, options=HOT_PATH)
    return {"plain": plain, "profiled": profiled, "added": profiled - plain}


def main() -> None:
    shell = shell_with_workloads()
    rows = {}
    for name, body in WORKLOADS.items():
        rows[name] = measure(shell, name)
        sampled = per_step(shell, body, _lengths(name), profiled=True)
        rows[name]["added_with_samples"] = sampled - rows[name]["plain"]
        rows[name]["instructions"] = instructions_per_step(shell, name)
    if "--json" in sys.argv:
        print(json.dumps(rows))
        return
    if "--save" in sys.argv:
        with open(sys.argv[sys.argv.index("--save") + 1], "w") as f:
            json.dump(rows, f)
    other = "; ".join(f"{name}: {few} and {many}" for name, (few, many) in LENGTHS.items())
    print(
        "calls per step (cProfile, builtins included; slope between"
        f" {SHORT} and {LONG} steps; {other})"
    )
    print(
        f"{'workload':<20} {'plain':>9} {'profiled':>9} {'added':>7} {'+ samples':>10}"
        f" {'tool bytecodes':>15}"
    )
    for name, row in rows.items():
        print(
            f"{name:<20} {row['plain']:>9.1f} {row['profiled']:>9.1f} {row['added']:>7.1f}"
            f" {row['added_with_samples']:>10.1f} {row['instructions']:>15.1f}"
        )
    worst = max(row["added"] for row in rows.values())
    print(f"most added on the hot path: {worst:.1f} calls per step (target <= {TARGET})")


if __name__ == "__main__":
    main()
