"""The tool's own memory for the per-step table: during and after a 10-million-step run, and
per step on the real path; and for Keras calls, after a million of them.

Run: ``.venv/bin/python benchmarks/resources.py``; ``STEPS=N`` sets the long run's steps
(default 10,000,000), ``REAL_STEPS=N`` the real profiled loop's (default 200,000).
``benchmarks/resources.py --keras-calls`` runs section 3 alone, ``--reruns`` section 4 alone.

1. A long run driven through `Recorder`'s public step API the way the probes drive it: each
   step of a custom loop is a tf.function row (its loss a device value, read later in a batch)
   and the loop iteration around it a loop row, so 10 M steps append 20 M rows. A real
   end-to-end 10 M-step TensorFlow loop would take hours here. Each long run has a fresh
   process of its own, and what is measured is, said which:
   - RSS deltas over the process's size before the run (`/proc/self/statm`): the largest of
     samples taken every 100 k steps, after `finish()` with the Record alive, and the peak
     (`ru_maxrss`) over the run and `finish()` together;
   - the rows buffer the recorder holds (`rows_held` x 112 bytes, largest sampled);
   - the finished Record's `nbytes()`.
   The same is measured for 1 M steps with the limit set above the run's rows: the unbounded
   table the recorder kept before (same buffer, same `finish()` conversion).
2. A real profiled loop of tiny tf.function steps through tfdiag_magic's session (the cell's
   loop instrumented, every probe installed, as ``%%tfprofile`` runs it): rows, bytes per row
   held while it runs and in the Record.
3. Keras calls (a reinforcement-learning loop calls `predict` once per environment step):
   - a real profiled loop of ``model.predict(x, verbose=0)`` calls (``REAL_CALLS``, default
     1,000; one takes 20-70 ms here, so a real 1 M-call loop would take hours): bytes per call
     in the Record's call tables (`KerasCall` objects and their fields, counted once each);
   - 1,000,000 (``CALLS``) predict-like calls driven, in a fresh process, through the Keras
     probe's own bookkeeping (a step mark, the batch's step row, `KerasProbe.add_call` with a
     stand-in model: no Keras): RSS delta, the call tables' bytes, kept calls and groups; beside
     the same run with every call kept (as before), at 200,000 calls, extrapolated.
4. A profiled cell run 50 times (``RERUNS``) in one IPython shell, its dashboard built after
   each run as a Jupyter kernel displays it (a cell whose finding has a rewrite, so each run is
   also kept as ``_tfprofile_<N>``): results alive, widgets alive, and RSS after runs 1, 10,
   25 and 50.

Numbers are printed, never asserted: they depend on the machine and its neighbours.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
from time import perf_counter
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfdiag_magic.recorder import (
    FULL_ROWS,
    KERAS_CALLS_KEPT,
    KIND,
    PHASE,
    TAIL_ROWS,
    WIDTH,
    Recorder,
)

STEPS = int(os.environ.get("STEPS", 10_000_000))
CALLS = int(os.environ.get("CALLS", 1_000_000))
REAL_CALLS = int(os.environ.get("REAL_CALLS", 1_000))
REAL_STEPS = int(os.environ.get("REAL_STEPS", 200_000))
SAMPLE_EVERY = 100_000
MB = 1e6
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """Resident bytes of this process now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


class DeviceLoss:
    """Stands for a loss tensor: not a Python float, read with float() in a later batch."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value


def long_run(steps: int, full_rows: int | None = None) -> dict[str, float]:
    """`steps` steps of a custom loop through the recorder; its memory during and after."""
    base_rss = rss()
    rec = Recorder(full_rows=full_rows)
    rec.memory_interval = math.inf  # no readers are set: the memory samples are not measured
    train, function = PHASE["train"], KIND["tf_function"]
    loop, loop_kind = PHASE["loop"], KIND["loop"]
    add = rec.add_step
    t = rec.t0
    held = during_rss = 0
    began = perf_counter()
    for i in range(steps):
        add(train, function, t + 0.0001, t + 0.0009, math.nan, -1, False, DeviceLoss(1.0), 1, 0)
        add(loop, loop_kind, t, t + 0.001, 0.00005, -1, False, None, 1, 0)
        t += 0.001
        if i % SAMPLE_EVERY == 0:
            held = max(held, rec.rows_held)
            during_rss = max(during_rss, rss() - base_rss)
    seconds = perf_counter() - began
    held = max(held, rec.rows_held)
    during_rss = max(during_rss, rss() - base_rss)
    record = rec.finish()
    counts = record.phase_counts()
    assert counts == {"train": steps, "loop": steps}, counts  # the run itself, not a timing
    return {
        "steps": steps,
        "rows": 2 * steps,
        "us_per_step": seconds / steps * 1e6,
        "held_rows": held,
        "held_bytes": held * WIDTH * 8,
        "during_rss": during_rss,
        "after_rss": rss() - base_rss,
        "peak_rss": peak_rss() - base_rss,
        "nbytes": record.nbytes(),
        "table_rows": record.step_count,
        "stride": record.dropped.stride if record.dropped is not None else 1,
    }


def long_run_apart(steps: int, full_rows: int | None = None) -> dict[str, float]:
    """`long_run` in a fresh interpreter, so that RSS and its peak are this run's alone."""
    command = [sys.executable, __file__, "--long", str(steps), str(full_rows or 0)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def report_long(label: str, r: dict[str, float]) -> None:
    rows = r["rows"]
    print(f"\n{label}: {r['steps']:,} steps, {rows:,} rows ({r['us_per_step']:.2f} us/step)")
    print(f"  rows buffer held (rows_held x 112 B, max):   {r['held_bytes'] / MB:8.1f} MB")
    print(f"  RSS delta during the run (max of samples):   {r['during_rss'] / MB:8.1f} MB")
    print(f"  peak RSS delta, run and finish() (maxrss):   {r['peak_rss'] / MB:8.1f} MB")
    print(f"  RSS delta after finish(), Record alive:      {r['after_rss'] / MB:8.1f} MB")
    print(
        f"  Record.nbytes():                             {r['nbytes'] / MB:8.1f} MB"
        f"  ({r['table_rows']:,} rows in the table, one in {r['stride']} past {FULL_ROWS:,})"
    )
    print(
        f"  bytes per recorded row: buffer {r['held_bytes'] / rows:.2f}, "
        f"peak RSS {r['peak_rss'] / rows:.2f}, Record {r['nbytes'] / rows:.2f}"
    )


def profiled_run(source: str, namespace: dict[str, Any], listener: Any = None) -> tuple[Any, float]:
    """`source` run as ``%%tfprofile`` runs a cell (loops instrumented, every probe in);
    returns its Record and the seconds the code ran."""
    from tfdiag_magic.code_runner import prepare, run
    from tfdiag_magic.session import Session

    prepared = prepare(source, "<resources>", instrument=True)
    session = Session(
        source=source, loops=prepared.loops, namespace=namespace, loop_hooks=prepared.hooks
    )
    result = session.start()
    if listener is not None:
        session.add_listener(listener)
    began = perf_counter()
    try:
        run(prepared, namespace)
    finally:
        session.stop()
    return result.record, perf_counter() - began


def real_run(steps: int) -> None:
    """A profiled loop of tiny tf.function steps, run as %%tfprofile runs a cell."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    source = (
        "v = tf.Variable(0.0)\n"
        "@tf.function\n"
        "def step(x):\n"
        "    v.assign_add(x)\n"
        "    return v\n"
        "one = tf.constant(1.0)\n"
        "for i in range(STEPS):\n"
        "    step(one)\n"
    )
    namespace = {"tf": tf, "STEPS": steps, "__builtins__": __builtins__}
    held: list[int] = []
    record, seconds = profiled_run(source, namespace, lambda rec: held.append(rec.rows_held))
    rows = record.steps_recorded
    print(
        f"\nreal profiled loop: {steps:,} tf.function steps, {rows:,} rows "
        f"({seconds / steps * 1e6:.0f} us/step), counts {record.phase_counts()}"
    )
    most = max(held) if held else 0
    print(
        f"  rows buffer while running (max sampled): {most * WIDTH * 8 / MB:6.1f} MB, "
        f"{WIDTH * 8} bytes per row held"
    )
    print(
        f"  Record.nbytes(): {record.nbytes() / MB:6.1f} MB, "
        f"{record.nbytes() / rows:.1f} bytes per row ({record.step_count:,} rows in the table)"
    )


def call_table_bytes(record: Any) -> int:
    """Bytes of the Record's Keras call tables: each call or group object and each of its
    field values, every object counted once (model names and small ints are shared)."""
    seen: set[int] = set()
    total = 0
    for item in [*record.keras_calls, *record.keras_call_groups]:
        for value in (item, *(getattr(item, name) for name in item.__slots__)):
            if id(value) not in seen:
                seen.add(id(value))
                total += sys.getsizeof(value)
    total += sys.getsizeof(record.keras_calls) + sys.getsizeof(record.keras_call_groups)
    return total


class StandInModel:
    """What the probe reads of a model after a `predict`: its name (layers only for fit)."""

    name = "policy"


def keras_calls_run(calls: int, kept: int | None = None) -> dict[str, float]:
    """`calls` predict-like calls through the Keras probe's bookkeeping, each with its batch's
    step row; `kept`: calls kept one by one (None: the recorder's limit)."""
    import numpy as np

    from tfdiag_magic.probes.keras_calls import KerasProbe

    add_call = KerasProbe().add_call  # its imports (NumPy, TensorFlow) before the baseline
    model, x = StandInModel(), np.ones((4, 3), np.float32)
    base_rss, base_peak = rss(), peak_rss()
    rec = Recorder()
    rec.memory_interval = math.inf  # no readers are set: the memory samples are not measured
    if kept is not None:
        rec.keras_calls_kept = kept
    predict, keras_kind = PHASE["predict"], KIND["keras"]
    during_rss = 0
    began = perf_counter()
    for i in range(calls):
        start = perf_counter()
        mark = rec.step_mark()
        rec.add_step(predict, keras_kind, start, start + 0.0002, math.nan, -1, False, None, 1)
        add_call(rec, "predict", model, start, mark, x)
        if i % SAMPLE_EVERY == 0:
            during_rss = max(during_rss, rss() - base_rss)
    seconds = perf_counter() - began
    during_rss = max(during_rss, rss() - base_rss)
    record = rec.finish()
    assert record.keras_calls_made == calls  # the run itself, not a timing
    return {
        "calls": calls,
        "us_per_call": seconds / calls * 1e6,
        "during_rss": during_rss,
        "peak_rss": peak_rss() - base_peak,
        "call_bytes": call_table_bytes(record),
        "kept": len(record.keras_calls),
        "groups": len(record.keras_call_groups),
        "nbytes": record.nbytes(),
    }


def keras_calls_apart(calls: int, kept: int | None = None) -> dict[str, float]:
    """`keras_calls_run` in a fresh interpreter, so that RSS and its peak are this run's."""
    command = [sys.executable, __file__, "--calls", str(calls), str(kept or 0)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def report_calls(label: str, r: dict[str, float]) -> None:
    print(f"\n{label}: {r['calls']:,} calls ({r['us_per_call']:.1f} us/call of bookkeeping)")
    print(
        f"  call tables in the Record: {r['call_bytes'] / MB:8.1f} MB"
        f"  ({r['kept']:,} calls kept, {r['groups']} groups)"
    )
    print(f"  step table (Record.nbytes()): {r['nbytes'] / MB:6.1f} MB")
    print(f"  RSS delta during the run (max of samples): {r['during_rss'] / MB:8.1f} MB")
    print(f"  peak RSS rise over the peak before the run:  {r['peak_rss'] / MB:8.1f} MB")


def real_predict_loop(calls: int) -> None:
    """A profiled loop of `model.predict` calls, run as %%tfprofile runs a cell."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    source = "for i in range(CALLS):\n    out = model.predict(x, verbose=0)\n"
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    namespace = {
        "model": model,
        "x": np.ones((4, 3), np.float32),
        "CALLS": calls,
        "__builtins__": __builtins__,
    }
    record, seconds = profiled_run(source, namespace)
    table = call_table_bytes(record)
    print(
        f"\nreal profiled predict loop: {calls:,} calls ({seconds / calls * 1e3:.0f} ms/call), "
        f"{record.keras_calls_made:,} calls recorded, {len(record.keras_calls):,} kept"
    )
    print(
        f"  call tables in the Record: {table / 1e3:.1f} kB, {table / calls:.0f} bytes per call; "
        f"step rows {record.steps_recorded:,} ({record.nbytes() / calls:.0f} bytes per call)"
    )


def main() -> int:
    if sys.argv[1:2] == ["--long"]:
        print(json.dumps(long_run(int(sys.argv[2]), int(sys.argv[3]) or None)))
        return 0
    if sys.argv[1:2] == ["--calls"]:
        print(json.dumps(keras_calls_run(int(sys.argv[2]), int(sys.argv[3]) or None)))
        return 0
    if sys.argv[1:2] == ["--keras-calls"]:  # section 3 alone
        keras_calls_section()
        return 0
    if sys.argv[1:2] == ["--reruns"]:  # section 4 alone
        reruns_section(RERUNS)
        return 0
    limit_mb = (FULL_ROWS + TAIL_ROWS) * WIDTH * 8 / MB
    print(
        f"limits: {FULL_ROWS:,} rows at full resolution, then at most {TAIL_ROWS:,} more "
        f"before a thinning ({limit_mb:.1f} MB of float64 rows)"
    )
    unbounded_steps = min(STEPS, 1_000_000)
    old = long_run_apart(unbounded_steps, full_rows=4 * unbounded_steps)
    report_long("unbounded table (limit above the run's rows, as before)", old)
    new = long_run_apart(STEPS)
    report_long("bounded table", new)
    scale = new["rows"] / old["rows"]
    print(
        f"\nunbounded at {new['rows']:,} rows, extrapolated linearly from {old['rows']:,} "
        f"(x{scale:.0f}): buffer {old['held_bytes'] * scale / MB:,.0f} MB, "
        f"peak RSS {old['peak_rss'] * scale / MB:,.0f} MB, "
        f"Record {old['nbytes'] * scale / MB:,.0f} MB"
    )
    print(
        "bounded / unbounded (extrapolated): "
        f"buffer {new['held_bytes'] / (old['held_bytes'] * scale):.4f}, "
        f"peak RSS {new['peak_rss'] / (old['peak_rss'] * scale):.4f}, "
        f"Record {new['nbytes'] / (old['nbytes'] * scale):.4f}"
    )
    if REAL_STEPS:
        real_run(REAL_STEPS)
    keras_calls_section()
    reruns_section(RERUNS)
    return 0


RERUNS = int(os.environ.get("RERUNS", "50"))
RERUN_CELL = """\
import numpy as np, keras
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
preds = []
for i in range(0, len(x), 8):
    preds.append(model.predict(x[i:i + 8], verbose=0))
"""


def reruns_section(runs: int) -> None:
    """The same profiled cell run `runs` times in one shell, displayed as a kernel would."""
    import gc

    from IPython.core.interactiveshell import InteractiveShell
    from ipywidgets.widgets.widget import _instances

    from tfdiag_magic.magics import TFProfileMagics
    from tfdiag_magic.result import ProfileResult
    from tfdiag_magic.views.dashboard import dashboard_bundle, open_dashboards

    print(f"\nA profiled cell run {runs} times in one shell, its dashboard built after each run")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tfdiag_magic")
    start = rss()
    for run in range(1, runs + 1):
        shell.run_cell("%%tfprofile -q\n" + RERUN_CELL, store_history=True)
        dashboard_bundle(TFProfileMagics.last_result)  # what the kernel's display builds
        if run in (1, 10, 25, runs):
            gc.collect()
            alive = sum(isinstance(o, ProfileResult) for o in gc.get_objects())
            automatic = [k for k in shell.user_ns if k.startswith("_tfprofile_")]
            print(
                f"  after run {run:3d}: RSS +{(rss() - start) / MB:6.1f} MB, results alive "
                f"{alive}, automatic results kept {len(automatic)}, dashboards open "
                f"{open_dashboards()}, widgets alive {len(_instances)}"
            )


def keras_calls_section() -> None:
    print(
        f"\nKeras calls: the first {KERAS_CALLS_KEPT:,} kept one by one, later ones summed per "
        "API, model build, data kind and loop"
    )
    if REAL_CALLS:
        real_predict_loop(REAL_CALLS)
    unbounded_calls = min(CALLS, 200_000)
    old = keras_calls_apart(unbounded_calls, kept=unbounded_calls)
    report_calls("driven, every call kept (as before)", old)
    new = keras_calls_apart(CALLS)
    report_calls("driven, bounded", new)
    scale = new["calls"] / old["calls"]
    print(
        f"\nevery call kept, at {new['calls']:,} calls (x{scale:.0f} linearly): call tables "
        f"{old['call_bytes'] * scale / MB:,.0f} MB, peak RSS {old['peak_rss'] * scale / MB:,.0f}"
        f" MB; bounded: {new['call_bytes'] / MB:,.1f} MB, {new['peak_rss'] / MB:,.0f} MB"
    )


if __name__ == "__main__":
    sys.exit(main())
