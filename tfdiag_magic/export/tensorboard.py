"""A run's per-step series as TensorBoard scalars (``tfdiag/step_time_s``, ``tfdiag/loss``...),
written to an event file of their own in a log folder, beside the user's own runs; and, where
the ops window was captured (``--ops``), its profiler trace where TensorBoard's profile plugin
finds it (``plugins/profile/<run>/<host>.xplane.pb``).

The scalars are written with core TensorFlow's `tf.summary.write` and the scalars plugin's
metadata, as `tf.summary.scalar` writes them, so the `tensorboard` package is needed only to
look at them. The writer is made and closed inside the call; the user's default writer, step
and recording state are left as they were.
"""

from __future__ import annotations

import gzip
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..files import report_path
from ..record import Record

MIB = 1024.0 * 1024.0
SCALARS_PLUGIN = "scalars"  # TensorBoard's plugin name for scalars (its metadata's version 0)

# A series: its tag, its steps (int64) and its values (float32).
Series = tuple[str, np.ndarray, np.ndarray]


def step_series(record: Record) -> list[Series]:
    """The training rows' step time, input wait (where observed) and loss (where the step
    reported one, NaN and Inf as computed), each at the row's index among all rows recorded
    (`Record.step_index`: the table of a long run holds a sample of them)."""
    steps = record.steps
    count = record.step_count
    index = record.step_index if record.step_index is not None else np.arange(count)
    train = record.phase_mask("train")
    waited = train & np.isfinite(steps["data_wait"])
    reported = train & ~steps["no_loss"]
    return [
        ("tfdiag/step_time_s", index[train], steps["duration"][train]),
        ("tfdiag/data_wait_s", index[waited], steps["data_wait"][waited]),
        ("tfdiag/loss", index[reported], steps["loss"][reported]),
    ]


def memory_series(record: Record) -> list[Series]:
    """The process's RSS (MiB) per memory sample, at the number of step rows that had started
    when it was taken (the step series' axis), or at the sample's index where the record has
    no such column."""
    memory = record.memory
    rss = memory.get("rss")
    if rss is None:
        return []
    at = memory.get("step", np.arange(rss.size))
    read = rss >= 0  # -1: not read
    return [("tfdiag/host_rss_mib", at[read], rss[read] / MIB)]


def write_tensorboard(logdir: str | os.PathLike[str], record: Record) -> Path:
    """Write the record's series as scalars to an event file in `logdir` (``~`` expanded,
    folders made); returns the folder. Raises OSError where it cannot be written."""
    from ..tf_runtime import import_tensorflow

    tf = import_tensorflow()
    from tensorflow.core.framework import summary_pb2

    folder = report_path(logdir)
    folder.mkdir(parents=True, exist_ok=True)  # an OSError that names the path, where it fails
    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = SCALARS_PLUGIN
    series = [s for s in (*step_series(record), *memory_series(record)) if s[1].size]
    try:
        writer = tf.summary.create_file_writer(str(folder))
        try:
            # as_default and record_if put the user's writer and recording state back on exit.
            with writer.as_default(), tf.summary.record_if(True):
                write = _series_writer(tf, metadata.SerializeToString())
                for tag, at, values in series:
                    write(tf.constant(tag), at.astype(np.int64), values.astype(np.float32))
            writer.flush()
        finally:
            writer.close()
    except tf.errors.OpError as exc:
        raise OSError(f"TensorFlow could not write to {folder}: {exc.message}") from exc
    write_profile_trace(folder, record)
    return folder


def write_profile_trace(logdir: Path, record: Record) -> Path | None:
    """Write the ops window's trace (kept compressed in the record) as
    ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, the layout TensorFlow's profiler
    writes and TensorBoard's profile plugin (XProf) reads; the run is named after the time the
    run began, as the profiler names its own. Returns the file, or None without a trace."""
    capture = record.ops_window
    if capture is None or not capture.trace_gz:
        return None
    try:
        started = datetime.fromisoformat(record.started_at)
    except ValueError:  # a record made without a start time
        started = datetime.now()
    run = started.strftime("%Y_%m_%d_%H_%M_%S")
    folder = logdir / "plugins" / "profile" / run
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{socket.gethostname() or 'localhost'}.xplane.pb"
    path.write_bytes(gzip.decompress(capture.trace_gz))
    return path


def _series_writer(tf: Any, metadata: bytes) -> Any:
    """A function that writes one series, a scalar per step, to the default writer.

    A graph loop: a scalar costs a tenth or less of an eager `tf.summary.write` call's time
    (benchmarks/export_cost.py).
    Made anew for each writer, since a traced function keeps the writer it was traced with.
    """
    signature = [
        tf.TensorSpec([], tf.string),
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([None], tf.float32),
    ]

    @tf.function(input_signature=signature, autograph=False)
    def write(tag: Any, steps: Any, values: Any) -> None:
        def body(i: Any) -> tuple[Any]:
            tf.summary.write(tag, values[i], step=steps[i], metadata=metadata)
            return (i + 1,)

        tf.while_loop(lambda i: i < tf.shape(steps)[0], body, (tf.constant(0),))

    return write
