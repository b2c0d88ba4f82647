"""GC probe: the length of every Python garbage-collection pause during the run.

Each pause is kept as an event (its time, for the step it fell in) up to MAX_GC_EVENTS; past
that, pauses are counted and summed per generation, so the totals stay exact in a run of any
length while the table stays bounded. A pause of `LINE_PAUSE_S` or more also keeps the line of
the profiled code that was running when it began (`Recorder.user_line`: the allocation that
set the collection off is the code's, a walk of a few dozen frames, for long pauses only), so
that the diagnosis can say where collections cost the time (a line that makes thousands of
Python objects) rather than only how much.
"""

from __future__ import annotations

import contextlib
import gc
import linecache
from array import array
from time import perf_counter
from typing import Any

import numpy as np

from ..record import Record
from ..recorder import LINE_TEXT, Recorder

MAX_GC_EVENTS = 100_000  # 29 bytes each: 2.9 MB at most
MAX_LINES = 100  # lines whose text is kept for the pauses
LINE_PAUSE_S = 0.005  # a pause this long keeps the line of the code that was running


class GCProbe:
    name = "gc"

    def __init__(self) -> None:
        self._callback: Any = None
        self.time = array("d")
        self.duration = array("d")
        self.generation = array("B")
        self.collected = array("q")
        self.line = array("i")  # the profiled code's line at a long pause; -1: none, or short
        self._code_file: str | None = None
        # A long run can collect millions of times: past `max_events` pauses are only counted.
        self.max_events = MAX_GC_EVENTS
        self.dropped_count = [0, 0, 0]
        self.dropped_seconds = [0.0, 0.0, 0.0]
        self.dropped_longest = 0.0

    def install(self, recorder: Recorder) -> None:
        t0 = recorder.t0
        started = [0.0]
        time, duration = self.time, self.duration
        generation, collected, line = self.generation, self.collected, self.line
        user_line = recorder.user_line
        self._code_file = recorder.code_file
        dropped_count, dropped_seconds = self.dropped_count, self.dropped_seconds
        limit = self.max_events

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started[0] = perf_counter()
                return
            now = perf_counter()
            level = int(info.get("generation", 0))
            if len(time) < limit:
                time.append(started[0] - t0)
                duration.append(now - started[0])
                generation.append(level)
                collected.append(int(info.get("collected", 0)))
                line.append(user_line() if now - started[0] >= LINE_PAUSE_S else -1)
            else:  # past the limit: exact totals per generation, no event of its own
                dropped_count[level] += 1
                dropped_seconds[level] += now - started[0]
                if now - started[0] > self.dropped_longest:
                    self.dropped_longest = now - started[0]

        self._callback = on_gc
        gc.callbacks.append(on_gc)

    def remove(self) -> None:
        if self._callback is not None:
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self._callback)
            self._callback = None

    def finish(self, record: Record) -> None:
        """The pauses, as the record's GC table (`Record.gc`), and the text of the lines
        long pauses point at (`Record.lines`)."""
        record.gc = self.table()
        if self._code_file is not None:
            for number in sorted({n for n in self.line if n > 0})[:MAX_LINES]:
                if number not in record.lines:
                    text = linecache.getline(self._code_file, number).strip()
                    if text:
                        record.lines[number] = text[:LINE_TEXT]

    def table(self) -> dict[str, np.ndarray]:
        return {
            "time": np.array(self.time, dtype=np.float64),
            "duration": np.array(self.duration, dtype=np.float64),
            "generation": np.array(self.generation, dtype=np.uint8),
            "collected": np.array(self.collected, dtype=np.int64),
            # the profiled code's line when a long pause began (-1: none, or a short pause)
            "line": np.array(self.line, dtype=np.int32),
            # Pauses past MAX_GC_EVENTS, per generation (0, 1, 2), and the longest of them.
            "dropped_count": np.array(self.dropped_count, dtype=np.int64),
            "dropped_seconds": np.array(self.dropped_seconds, dtype=np.float64),
            "dropped_longest": np.array([self.dropped_longest], dtype=np.float64),
        }
