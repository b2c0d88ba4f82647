"""The ops window (``--ops``): TensorFlow's own profiler over a few steady steps.

A background thread watches the recorder's row count (one attribute read every few
milliseconds, nothing on the hot path): once `warmup_rows` rows are recorded it starts
``tf.profiler.experimental.start`` into a temporary folder, and stops it after `window_rows`
more rows, or `window_seconds` with at least one row, or `max_seconds` in any case.
TensorFlow's start and stop take its own module lock (`profiler_v2._profiler_lock`), so they are
safe from this thread. `remove()` stops the thread, stops the profiler if it still runs (the
run ended inside the window: an error, an interrupt, a short run), reads the trace file and
removes the folder. A profiler already running (the user's own, or a profiler server) is never
touched: the window is skipped with a note.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
import threading
import time
from time import perf_counter
from typing import Any

from ..record import OpsCapture, Record
from ..recorder import Recorder
from .worker import worker_identity

WARMUP_ROWS = 5  # rows (steps, loop iterations) recorded before the window opens
WINDOW_ROWS = 20
WINDOW_SECONDS = 1.5
MAX_SECONDS = 10.0  # a window with no row ending in it stops here all the same
POLL = 0.005  # seconds between two reads of the row count
JOIN_TIMEOUT = 30.0  # the thread may be writing a large trace when the run ends
# A cell that drives TensorFlow's profiler itself: the window would make its start fail.
USER_PROFILER_WORDS = ("tf.profiler", "profile_batch", "profiler.experimental", "trace_on(")


def clock_pair(t0: float) -> tuple[int, float]:
    """(wall-clock ns, seconds since `t0` by perf_counter) read together: the tightest of
    three readings, so the two clocks map onto each other to a microsecond or so."""
    best: tuple[float, int, float] | None = None
    for _ in range(3):
        before = perf_counter()
        wall = time.time_ns()
        after = perf_counter()
        if best is None or after - before < best[0]:
            best = (after - before, wall, (before + after) / 2 - t0)
    return (best[1], best[2]) if best is not None else (time.time_ns(), perf_counter() - t0)


class OpsWindowProbe:
    name = "ops window"

    def __init__(
        self,
        source: str | None = None,
        warmup_rows: int = WARMUP_ROWS,
        window_rows: int = WINDOW_ROWS,
        window_seconds: float = WINDOW_SECONDS,
    ) -> None:
        self.source = source or ""
        self.warmup_rows = warmup_rows
        self.window_rows = window_rows
        self.window_seconds = window_seconds
        self.capture = OpsCapture(status="skipped", note="the run ended before the window began")
        self._rec: Recorder | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the profiler's start and stop, from either thread
        self._running = False  # our profiler session is running
        self._logdir: str | None = None
        self._profiler: Any = None  # TensorFlow's profiler_v2 module, imported on install

    def install(self, recorder: Recorder) -> None:
        self._rec = recorder
        worker = worker_identity(os.environ)
        if worker is not None and worker["workers"] > 1:
            # Measured: stopping the profiler while a worker's steps ran collectives with the
            # others crashed the worker (SIGSEGV, or glibc's "munmap_chunk(): invalid pointer"
            # inside TensorFlow's profiler stop) in 4 of 25 two-worker runs here; never without.
            self.capture.note = (
                f"the ops window stays off in a worker of a {worker['workers']}-worker job:"
                " TensorFlow's profiler crashed workers there when stopped during a collective"
            )
            return
        if any(word in self.source for word in USER_PROFILER_WORDS):
            self.capture.note = (
                "the code uses TensorFlow's profiler itself; the ops window stays off so that "
                "its profiler can start"
            )
            return
        # Imported here, on the run's thread: never an import racing the cell's from the watcher.
        from tensorflow.python.profiler import profiler_v2

        self._profiler = profiler_v2
        self._logdir = tempfile.mkdtemp(prefix="tfdiag-ops-")
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="tfdiag-ops-window", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        rec = self._rec
        if rec is None:
            return
        while rec.count < self.warmup_rows:
            if self._stop.wait(POLL):
                return
        if not self._start_profiler(rec):
            return
        first, began = rec.count, perf_counter()
        while True:
            if self._stop.wait(POLL):
                self.capture.note = "the run ended inside the window"
                break
            rows, elapsed = rec.count - first, perf_counter() - began
            if rows >= self.window_rows or elapsed >= MAX_SECONDS:
                break
            if elapsed >= self.window_seconds and rows >= 1:
                break
        self._stop_profiler(rec)

    def _start_profiler(self, rec: Recorder) -> bool:
        profiler_v2 = self._profiler
        with self._lock:
            if self._stop.is_set():
                return False
            if profiler_v2._profiler is not None:
                self.capture.note = "TensorFlow's profiler was already running; not touched"
                return False
            options = profiler_v2.ProfilerOptions(
                host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
            )
            before = perf_counter()
            anchor_ns, anchor_s = clock_pair(rec.t0)
            try:
                profiler_v2.start(self._logdir, options)
            except Exception as error:  # another profiler (a server), or none in this build
                self.capture.note = f"TensorFlow's profiler did not start: {error}"
                if profiler_v2._profiler is not None:  # kept by a start the C++ side refused
                    _clear_failed_start(profiler_v2)
                return False
            self._running = True
            after = perf_counter()
            self.capture = OpsCapture(
                status="captured",
                start=after - rec.t0,  # tracing is on from here at the latest
                anchor_ns=anchor_ns,
                anchor_s=anchor_s,
                start_cost=after - before,
            )
            return True

    def _stop_profiler(self, rec: Recorder) -> None:
        profiler_v2 = self._profiler
        with self._lock:
            if not self._running:
                return
            self._running = False
            before = perf_counter()
            self.capture.stop = before - rec.t0
            try:
                profiler_v2.stop()
            except Exception as error:  # the user's code stopped it, or the export failed
                self.capture.status = "skipped"
                self.capture.note = f"TensorFlow's profiler did not stop cleanly: {error}"
            self.capture.stop_cost = perf_counter() - before

    def remove(self) -> None:
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout=JOIN_TIMEOUT)
            if thread.is_alive():  # still writing the trace: leave it the folder
                self.capture.status = "skipped"
                self.capture.note = f"the trace was not written within {JOIN_TIMEOUT:g} s"
                return
        rec = self._rec
        if self._running and rec is not None:  # the run ended inside the window
            self.capture.note = "the run ended inside the window"
            self._stop_profiler(rec)
        self._rec = None
        logdir, self._logdir = self._logdir, None
        if logdir is None:
            return
        try:
            if self.capture.status == "captured":
                self._read_trace(logdir)
        finally:
            shutil.rmtree(logdir, ignore_errors=True)

    def _read_trace(self, logdir: str) -> None:
        files = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        if not files:
            self.capture.status = "skipped"
            self.capture.note = "TensorFlow's profiler wrote no trace"
            return
        with open(files[0], "rb") as file:
            self.capture.xspace = file.read()
        self.capture.trace_bytes = len(self.capture.xspace)

    def finish(self, record: Record) -> None:
        """The capture (`Record.ops_window`); the session reads its trace into a summary."""
        record.ops_window = self.capture


def _clear_failed_start(profiler_v2: object) -> None:
    """TensorFlow's `start` keeps its session object when the C++ side refuses to start (a
    profiler server is running): clear it, so that the user's own `start` is not refused.
    (A user's `start` on another thread in the microseconds between the check before ours and
    this would be cleared too; a cell that names the profiler never gets here.)"""
    with contextlib.suppress(Exception):
        profiler_v2.stop(save=False)  # type: ignore[attr-defined]
