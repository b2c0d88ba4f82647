"""What the exports cost on the largest step table a run keeps at full resolution: the seconds
`to_chrome_trace` and `to_tensorboard` take and the size of what they write, and, for the
scalars' graph loop, what one eager `tf.summary.write` a scalar would cost instead.

Run: ``.venv/bin/python benchmarks/export_cost.py`` (``ROWS=N`` for another table size; the
default is the recorder's FULL_ROWS, past which a long run's table is thinned to a sample).
The rows are training steps fed through the real recorder, each with an input wait and a loss.
Numbers are printed, never asserted: they depend on the machine and its neighbours.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from time import perf_counter

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfdiag_magic.record import Kind, Phase
from tfdiag_magic.recorder import FULL_ROWS, Recorder
from tfdiag_magic.result import ProfileResult

ROWS = int(os.environ.get("ROWS", FULL_ROWS))
EAGER_SCALARS = 2000


def training_record(rows: int) -> ProfileResult:
    """`rows` training steps of 1 ms, 0.25 ms of input wait before each, through the recorder."""
    recorder = Recorder()
    start0 = recorder.t0
    for i in range(rows):
        start = start0 + i / 800
        recorder.add_step(
            Phase.TRAIN, Kind.MARKER, start, start + 1 / 1024, 1 / 4096, 0, False, 1.0
        )
    return ProfileResult("export_cost", recorder.finish())


def eager_scalar_seconds(folder: Path) -> float:
    """Seconds of one eager `tf.summary.write` of a scalar, over EAGER_SCALARS of them."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(folder))
    began = perf_counter()
    with writer.as_default():
        for step in range(EAGER_SCALARS):
            tf.summary.write("eager", tf.constant(0.5), step=step)
    writer.close()
    return (perf_counter() - began) / EAGER_SCALARS


def main() -> None:
    import tensorflow  # noqa: F401 (imported before the timing, as in a run that trained)

    result = training_record(ROWS)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        began = perf_counter()
        trace = result.to_chrome_trace(out / "run.trace.json")
        trace_s = perf_counter() - began
        began = perf_counter()
        logdir = result.to_tensorboard(out / "tb")
        tensorboard_s = perf_counter() - began
        event_bytes = sum(path.stat().st_size for path in logdir.iterdir())
        scalars = 3 * ROWS  # step time, input wait and loss per row, and a memory sample or two
        eager = eager_scalar_seconds(out / "eager")
        print(f"{ROWS:,} training rows")
        print(f"to_chrome_trace: {trace_s:.2f} s, {trace.stat().st_size / 1e6:.1f} MB")
        print(f"to_tensorboard:  {tensorboard_s:.2f} s, {event_bytes / 1e6:.1f} MB")
        print(
            f"per scalar: {tensorboard_s / scalars * 1e6:.0f} µs in the graph loop (its tracing"
            f" included), {eager * 1e6:.0f} µs eager"
        )


if __name__ == "__main__":
    main()
