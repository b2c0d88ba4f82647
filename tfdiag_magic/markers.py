"""The explicit step marker: ``with step():`` records one step of anything the cell does.

Outside a profiling run the marker does nothing, so code that uses it runs unchanged without
the profiler. Markers nest: only the outermost one is a step.
"""

from __future__ import annotations

import threading
from time import perf_counter
from types import TracebackType
from typing import Any

from . import active
from .record import PHASES, Kind, Phase


class step:  # noqa: N801 - used as a lowercase context manager, like contextlib's helpers
    """Mark a block as one step of the profiled run.

    ``phase`` is one of "train", "eval", "predict", "loop", "function"; "train" steps count as
    training steps in the report. ``loss`` may be set on the marker inside the block
    (``with step() as s: ...; s.loss = value``) to record the step's loss.
    """

    __slots__ = ("_rec", "_start", "_wait", "loss", "phase")

    def __init__(self, phase: str = "train") -> None:
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}; got {phase!r}")
        self.phase = phase
        self.loss: Any = None
        self._rec = None

    def __enter__(self) -> step:
        rec = active.recorder()
        if rec is None or rec.step_depth or threading.get_ident() != rec.thread_id:
            return self
        self._rec = rec
        self._wait = rec.take_wait()
        rec.step_depth += 1
        self._start = perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        rec = self._rec
        if rec is None:
            return
        self._rec = None
        end = perf_counter()
        rec.step_depth -= 1
        phase = Phase.of(self.phase)
        if exc is not None:
            rec.note_failure(exc, phase)
            return
        # The value is read later with the other losses (NaN if it is not a scalar). Whether
        # a marked block ran eagerly is not known, so it is not claimed (eager=False). A
        # "train" step is a training step: `add_step` marks it as one.
        rec.add_step(phase, Kind.MARKER, self._start, end, self._wait, -1, False, self.loss)
