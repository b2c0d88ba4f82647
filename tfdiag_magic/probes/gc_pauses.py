"""GC probe: the length of every Python garbage-collection pause during the run."""

from __future__ import annotations

import contextlib
import gc
from array import array
from time import perf_counter
from typing import Any

import numpy as np

from ..recorder import Recorder


class GCProbe:
    name = "gc"

    def __init__(self) -> None:
        self._callback: Any = None
        self.time = array("d")
        self.duration = array("d")
        self.generation = array("B")
        self.collected = array("q")

    def install(self, recorder: Recorder) -> None:
        t0 = recorder.t0
        started = [0.0]
        time, duration = self.time, self.duration
        generation, collected = self.generation, self.collected

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started[0] = perf_counter()
            else:
                now = perf_counter()
                time.append(started[0] - t0)
                duration.append(now - started[0])
                generation.append(int(info.get("generation", 0)))
                collected.append(int(info.get("collected", 0)))

        self._callback = on_gc
        gc.callbacks.append(on_gc)

    def remove(self) -> None:
        if self._callback is not None:
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self._callback)
            self._callback = None

    def table(self) -> dict[str, np.ndarray]:
        return {
            "time": np.array(self.time, dtype=np.float64),
            "duration": np.array(self.duration, dtype=np.float64),
            "generation": np.array(self.generation, dtype=np.uint8),
            "collected": np.array(self.collected, dtype=np.int64),
        }
