"""GC probe: the length of every Python garbage-collection pause during the run.

Each pause is kept as an event (its time, for the step it fell in) up to MAX_GC_EVENTS; past
that, pauses are counted and summed per generation, so the totals stay exact in a run of any
length while the table stays bounded.
"""

from __future__ import annotations

import contextlib
import gc
from array import array
from time import perf_counter
from typing import Any

import numpy as np

from ..record import Record
from ..recorder import Recorder

MAX_GC_EVENTS = 100_000  # 25 bytes each: 2.5 MB at most


class GCProbe:
    name = "gc"

    def __init__(self) -> None:
        self._callback: Any = None
        self.time = array("d")
        self.duration = array("d")
        self.generation = array("B")
        self.collected = array("q")
        # A long run can collect millions of times: past `max_events` pauses are only counted.
        self.max_events = MAX_GC_EVENTS
        self.dropped_count = [0, 0, 0]
        self.dropped_seconds = [0.0, 0.0, 0.0]
        self.dropped_longest = 0.0

    def install(self, recorder: Recorder) -> None:
        t0 = recorder.t0
        started = [0.0]
        time, duration = self.time, self.duration
        generation, collected = self.generation, self.collected
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
        """The pauses, as the record's GC table (`Record.gc`)."""
        record.gc = self.table()

    def table(self) -> dict[str, np.ndarray]:
        return {
            "time": np.array(self.time, dtype=np.float64),
            "duration": np.array(self.duration, dtype=np.float64),
            "generation": np.array(self.generation, dtype=np.uint8),
            "collected": np.array(self.collected, dtype=np.int64),
            # Pauses past MAX_GC_EVENTS, per generation (0, 1, 2), and the longest of them.
            "dropped_count": np.array(self.dropped_count, dtype=np.int64),
            "dropped_seconds": np.array(self.dropped_seconds, dtype=np.float64),
            "dropped_longest": np.array([self.dropped_longest], dtype=np.float64),
        }
