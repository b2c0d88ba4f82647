"""Dataset-wait probe: the time the run's thread waits in ``next()`` on a tf.data iterator.

A custom training loop waits for its data wherever it is written: in the cell, in a function
of the cell, in a module the cell imports. ``next()`` on a tf.data iterator (and on a
``tf.distribute`` one) is timed for the run only, on the thread that runs the code, and each
wait goes to the next step as the instrumented loops' waits do (`Recorder.loop_advanced`).

Not timed where something else accounts for it: inside ``next()`` of an instrumented loop
(the loop times that wait itself: the innermost open loop is fetching its next item then), inside
a step (a tf.function being called or traced, a ``step()`` block: the wait is in the step's
own time), and inside Keras' fit/evaluate/predict (Keras reads its input inside each step).
The waits timed outside the instrumented loops are the record's
``facts["iterator_wait_s"]`` and ``facts["iterator_waits"]``; the time split adds them to
the loops' waits.
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Any

from ..record import Record
from ..recorder import Recorder
from .patching import Patcher, defining_class, wraps_exactly


class _Totals:
    __slots__ = ("count", "seconds")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0


class DatasetWaitProbe:
    name = "dataset waits"

    def __init__(self) -> None:
        self._patcher: Patcher | None = None
        self._totals = _Totals()

    def install(self, recorder: Recorder) -> None:
        from tensorflow.python.data.ops import iterator_ops
        from tensorflow.python.distribute import input_lib

        self._totals = _Totals()
        # An attribute of the run's thread only: reading it elsewhere raises, and on the
        # run's thread it costs no call.
        here = threading.local()
        if threading.get_ident() == recorder.thread_id:
            here.runs = True
        patcher = self._patcher = Patcher()
        for cls in (iterator_ops.OwnedIterator, input_lib.DistributedIteratorBase):
            owner = defining_class(cls, "__next__")
            original = vars(owner)["__next__"]
            patcher.replace(owner, "__next__", _timed_next(recorder, original, here, self._totals))

    def remove(self) -> None:
        if self._patcher is not None:
            self._patcher.restore()
            self._patcher = None

    def finish(self, record: Record) -> None:
        totals = self._totals
        if totals.count:
            record.facts["iterator_wait_s"] = totals.seconds
            record.facts["iterator_waits"] = totals.count


def _timed_next(rec: Recorder, original: Any, here: threading.local, totals: _Totals) -> Any:
    clock = perf_counter
    advanced = rec.loop_advanced

    # Named and signed as the iterator's own `__next__` (`wraps_exactly`).
    def __next__(self: Any) -> Any:  # noqa: N807
        __tracebackhide__ = True
        try:
            here.runs  # noqa: B018 (raises on any other thread)
        except AttributeError:
            return original(self)
        open_loops = rec.open_loops
        if (
            rec.step_depth
            or rec.driver_depth
            or rec.top_function is not None
            or (open_loops and open_loops[-1].fetching)
        ):
            return original(self)
        before = clock()
        item = original(self)
        after = clock()
        wait = after - before
        advanced(after, wait)
        totals.seconds += wait
        totals.count += 1
        return item

    return wraps_exactly(__next__, original)
