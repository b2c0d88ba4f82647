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

from ..instrument import RUNTIME_NAME
from ..record import Record
from ..recorder import OpenLoop, Recorder
from .dataset_structure import note_dataset

NAN = math.nan
_MISSING = object()


class LoopIterator:
    """Iterator wrapper that records each iteration of one loop."""

    __slots__ = ("_iterator", "_rec", "_state")

    def __init__(self, iterator: Iterator[Any], rec: Recorder, state: OpenLoop) -> None:
        self._iterator = iterator
        self._rec = rec
        self._state = state

    def __iter__(self) -> LoopIterator:
        return self

    def __next__(self) -> Any:
        __tracebackhide__ = True
        before = perf_counter()
        state = self._state
        rec = self._rec
        if state.open:
            rec.close_iteration(state, before)
        item = next(self._iterator)
        after = perf_counter()
        state.index += 1
        state.open = True
        state.start = before
        state.wait = after - before
        rec.loop_advanced(after, after - before)
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
        state = rec.loop_state(loop_id)
        if state.open:
            rec.close_iteration(state, now)
        state.index += 1
        state.open = True
        state.start = now
        state.wait = 0.0
        rec.loop_advanced(now, 0.0)

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
