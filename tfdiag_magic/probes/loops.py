"""Loop probe: the runtime that the instrumented loops of the cell call (see `instrument`).

`iterate()` wraps the loop's iterator: each `next()` closes the previous iteration and times
the wait for the next item, which becomes the iteration's data wait and the data wait of the
first step inside it. The runtime is bound to a name among the builtins only for the run.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterable, Iterator
from time import perf_counter
from typing import Any

import numpy as np

from ..instrument import RUNTIME_NAME
from ..record import Record
from ..recorder import OpenLoop, Recorder
from .dataset_structure import note_dataset

NAN = math.nan
_MISSING = object()


class LoopIterator:
    """Iterator wrapper that records each iteration of one loop.

    A step's worth of work: two clock reads around the user's iterator, and one call into the
    recorder (`Recorder.next_item`), which ends the previous iteration and begins this one.
    """

    __slots__ = ("_next", "_rec", "_state")

    def __init__(self, iterator: Iterator[Any], rec: Recorder, state: OpenLoop) -> None:
        self._next = iterator.__next__  # bound once: `next(iterator)` is a call more per item
        self._rec = rec
        self._state = state

    def __iter__(self) -> LoopIterator:
        return self

    def __next__(self) -> Any:
        __tracebackhide__ = True
        before = perf_counter()
        try:
            item = self._next()
        except BaseException:
            # Exhausted (or raising): the iteration that was open ends when the next item was
            # asked for, as it would had one come.
            state = self._state
            if state.open:
                self._rec.next_item(state, before, None)
            raise
        self._rec.next_item(self._state, before, perf_counter())
        return item


class LoopRuntime:
    """The object the instrumented cell calls as ``_tfdiag_loops_``."""

    def __init__(self, rec: Recorder) -> None:
        self._rec = rec

    def iterate(self, iterable: Iterable[Any], loop_id: int) -> Iterator[Any]:
        __tracebackhide__ = True
        note_dataset(self._rec, iterable, "loop", loop_id)  # a tf.data pipeline's make-up
        iterator = iter(iterable)
        return LoopIterator(iterator, self._rec, self._rec.begin_loop(loop_id))

    def tick(self, loop_id: int) -> None:
        now = perf_counter()
        rec = self._rec
        rec.next_item(rec.loop_state(loop_id), now, now)

    def host(self, value: Any) -> Any:
        """A conversion call of the cell's loop is given `value` (see `instrument_conversions`):
        a NumPy array's bytes go to the next step, made outside any step or Keras call."""
        if isinstance(value, np.ndarray):
            rec = self._rec
            if not rec.step_depth and not rec.driver_depth and rec.here.main:
                rec.pending_host_bytes += value.nbytes
        return value

    def end(self, loop_id: int) -> None:
        self._rec.end_loop(loop_id)


class LoopProbe:
    """Binds the loop runtime among the builtins the cell's namespace uses, and unbinds it after.

    Builtins, not the namespace itself: the instrumented code still finds the name (a global
    lookup falls through to builtins), while the cell's ``globals()``, ``dir()`` and
    ``vars()`` hold exactly what they would hold without the tool.
    """

    name = "loops"

    def __init__(self, namespace: dict[str, Any]) -> None:
        self._builtins = _builtins_of(namespace)
        self._saved: Any = _MISSING

    def install(self, recorder: Recorder) -> None:
        self._saved = self._builtins.get(RUNTIME_NAME, _MISSING)
        self._builtins[RUNTIME_NAME] = LoopRuntime(recorder)

    def remove(self) -> None:
        if self._saved is _MISSING:
            self._builtins.pop(RUNTIME_NAME, None)
        else:
            self._builtins[RUNTIME_NAME] = self._saved

    def finish(self, record: Record) -> None:
        """Nothing left to add: the iterations are the recorder's loop rows and totals."""


def _builtins_of(namespace: dict[str, Any]) -> dict[str, Any]:
    """The builtins dict that code run with `namespace` as its globals looks names up in."""
    found = namespace.get("__builtins__", builtins)
    return found if isinstance(found, dict) else vars(found)
