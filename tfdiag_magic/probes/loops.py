"""Loop probe: the runtime that the instrumented loops of the code call (see `instrument`).

`iterate()` wraps the loop's iterator: each `next()` closes the previous iteration and times
the wait for the next item, which becomes the iteration's data wait and the data wait of the
first step inside it. The rewritten code calls a `LoopHooks` object held among its constants:
during the run its entries are the runtime's, before and after they iterate plainly. The loops
of functions call the guarded entries, which iterate plainly where the loop is no loop of the
run's own thread (another thread, a tf.function being traced or called, a Keras call). When
the run ends, every function made from the rewritten code gets its plain compilation back.
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from time import perf_counter
from typing import Any

import numpy as np

from ..record import Record
from ..recorder import OpenLoop, Recorder
from .dataset_structure import datasets_drawn_by, note_dataset
from .loop_stage_work import LoopStageReader

NAN = math.nan
get_ident = threading.get_ident


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
        self._state.fetching = True  # this wait is the loop's (see `probes.dataset_waits`)
        try:
            item = self._next()
        except BaseException as error:
            # Exhausted (or raising): the iteration that was open ends when the next item was
            # asked for, as it would had one come.
            self._rec.next_item(self._state, before, None)
            if isinstance(error, StopIteration):  # the wait for the end of the items
                self._rec.items_ran_out(self._state, perf_counter() - before)
            raise
        self._rec.next_item(self._state, before, perf_counter())
        return item


class LoopRuntime:
    """The object the instrumented cell calls as ``_tfdiag_loops_``."""

    def __init__(self, rec: Recorder) -> None:
        self._rec = rec
        # Per loop that drew from a tf.data iterator: what reads its runtime model
        self.stage_readers: dict[int, LoopStageReader] = {}

    def iterate(self, iterable: Iterable[Any], loop_id: int) -> Iterator[Any]:
        __tracebackhide__ = True
        drawn = datasets_drawn_by(iterable)
        for dataset in drawn:  # a tf.data pipeline's make-up
            note_dataset(self._rec, dataset, "loop", loop_id)
        iterator = iter(iterable)
        state = self._rec.begin_loop(loop_id)
        if drawn:  # where its pipeline's work goes (`probes.loop_stage_work`)
            reader = self.stage_readers.get(loop_id) or LoopStageReader()
            if reader.follow(iterator):
                state.reader = self.stage_readers[loop_id] = reader
        return LoopIterator(iterator, self._rec, state)

    def tick(self, loop_id: int) -> None:
        now = perf_counter()
        rec = self._rec
        rec.next_item(rec.loop_state(loop_id), now, now)

    def host(self, value: Any) -> Any:
        """A conversion call of the code is given `value` (see `instrument_conversions`): a
        NumPy array's bytes go to the next step, when one of the code's loops is running (a
        helper converting the whole dataset before the loop converts no step's batch) and the
        call is made outside any step or Keras call, on the run's thread."""
        if isinstance(value, np.ndarray):
            rec = self._rec
            if rec.open_loops and not rec.step_depth and not rec.driver_depth and rec.here.main:
                rec.pending_host_bytes += value.nbytes
        return value

    def end(self, loop_id: int) -> None:
        self._rec.end_loop(loop_id)

    # The loops of functions: the same, where the loop is the run's own (the guard holds for
    # the whole of one run of a loop: it starts and ends in one frame, on one thread, and a
    # tf.function or Keras call made in its body has returned before its next iteration).

    def _elsewhere(self) -> bool:
        """Another thread (tf.data's, a Keras worker's), or inside a tf.function (traced or run
        eagerly) or a Keras fit/evaluate/predict: their steps are recorded as theirs."""
        rec = self._rec
        elsewhere = rec.top_function is not None or rec.driver_depth
        return bool(elsewhere) or get_ident() != rec.thread_id

    def iterate_guarded(self, iterable: Iterable[Any], loop_id: int) -> Iterator[Any]:
        __tracebackhide__ = True
        if self._elsewhere():
            return iter(iterable)
        return self.iterate(iterable, loop_id)

    def tick_guarded(self, loop_id: int) -> None:
        rec = self._rec
        if rec.top_function is None and not rec.driver_depth and get_ident() == rec.thread_id:
            self.tick(loop_id)

    def end_guarded(self, loop_id: int) -> None:
        if not self._elsewhere():
            self.end(loop_id)


def _iterate_plainly(iterable: Iterable[Any], loop_id: int) -> Iterator[Any]:
    __tracebackhide__ = True
    return iter(iterable)


def _nothing(loop_id: int) -> None:
    """Outside the run a loop records nothing."""


def _value_itself(value: Any) -> Any:
    """Outside the run a conversion's argument is passed on, unrecorded."""
    return value


class LoopHooks:
    """What the rewritten code calls, held among its constants (never bound to a name).

    During the run its entries are the `LoopRuntime`'s bound methods; otherwise they iterate
    plainly and record nothing. `plain_code` maps each function code object of the rewritten
    code that differs from the plain compilation (by id) to both: after the run, functions
    made from the rewritten code get the plain one back (`make_functions_plain`).
    """

    __slots__ = (
        "_code",
        "_references",
        "end",
        "end_guarded",
        "host",
        "iterate",
        "iterate_guarded",
        "plain_code",
        "tick",
        "tick_guarded",
    )

    def __init__(self) -> None:
        self.plain_code: dict[int, tuple[types.CodeType, types.CodeType]] = {}
        self._code: types.CodeType | None = None
        self._references: dict[int, int] = {}
        self.deactivate()

    def seal(self, code: types.CodeType) -> None:
        """`plain_code` is complete for the rewritten module `code`: hold it (its constants
        hold the top-level functions' code), and note how many references each rewritten code
        object has while no function holds it (see `make_functions_plain`)."""
        self._code = code
        self._references = {key: sys.getrefcount(pair[0]) for key, pair in self.plain_code.items()}

    def activate(self, runtime: LoopRuntime) -> None:
        self.iterate, self.tick, self.end = runtime.iterate, runtime.tick, runtime.end
        self.iterate_guarded = runtime.iterate_guarded
        self.tick_guarded = runtime.tick_guarded
        self.end_guarded = runtime.end_guarded
        self.host = runtime.host

    def deactivate(self) -> None:
        self.iterate = self.iterate_guarded = _iterate_plainly
        self.tick = self.tick_guarded = self.end = self.end_guarded = _nothing
        self.host = _value_itself

    def __reduce__(self) -> tuple[Any, ...]:
        # A function pickled by value (cloudpickle: joblib, Ray) takes idle hooks with it.
        return (LoopHooks, ())

    def __repr__(self) -> str:
        return "<tfdiag_magic loop hooks>"

    def _still_held(self) -> list[types.CodeType]:
        """The rewritten code objects that something besides this code holds: a function, or
        the frame of a call that has not returned (a thread's, a traceback's)."""
        references = self._references
        return [
            pair[0]
            for key, pair in self.plain_code.items()
            if sys.getrefcount(pair[0]) > references.get(key, 0)
        ]

    def make_functions_plain(self, namespace: dict[str, Any] | None = None) -> None:
        """Give every function whose code is one of the rewritten code objects the plain one.

        The functions are looked for where they usually are (the `namespace`'s functions and
        classes, what they wrap and close over); only if a rewritten code object is still held
        by something else after that are all objects searched (the garbage collector's
        referrers: a callback's attribute, a list, a thread's frame), 30-100 ms in a
        TensorFlow process.
        """
        pairs = self.plain_code
        if not pairs:
            return
        errors: list[BaseException] = []

        def give_back(function: types.FunctionType) -> None:
            pair = pairs.get(id(function.__code__))
            if pair is not None and function.__code__ is pair[0]:
                try:
                    function.__code__ = pair[1]
                except Exception as exc:  # left rewritten, with idle hooks: still plain Python
                    errors.append(exc)

        if namespace is not None and self._still_held():
            for function in _usual_places(namespace):
                give_back(function)
        held = self._still_held()
        if held:
            for referrer in gc.get_referrers(*held):
                if type(referrer) is types.FunctionType:
                    give_back(referrer)
        if errors:
            raise errors[0]


def _usual_places(namespace: dict[str, Any]) -> Iterator[types.FunctionType]:
    """The functions of `namespace`, of the classes it defined, of what they decorate (the
    original behind ``__wrapped__`` and in closures), and the methods, static and class
    methods and properties of those classes."""
    module = namespace.get("__name__")
    pending = list(namespace.values())
    seen: set[int] = set()
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if type(value) is types.FunctionType:
            yield value
            for cell in value.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    pending.append(cell.cell_contents)
            wrapped = value.__dict__.get("__wrapped__")
            if wrapped is not None:
                pending.append(wrapped)
        elif isinstance(value, type):
            if value.__module__ == module:  # the code's own classes, not an imported one's
                pending.extend(vars(value).values())
        elif isinstance(value, (staticmethod, classmethod, types.MethodType)):
            pending.append(value.__func__)
        elif isinstance(value, property):
            pending.extend((value.fget, value.fset, value.fdel))


class LoopProbe:
    """Activates the hooks of the rewritten code for the run, and idles them after it.

    Nothing is bound among the user's globals or builtins: the code holds the hooks itself.
    """

    name = "loops"

    def __init__(self, hooks: LoopHooks, namespace: dict[str, Any] | None = None) -> None:
        self._hooks = hooks
        self._namespace = namespace
        self._recorder: Recorder | None = None
        self._runtime: LoopRuntime | None = None

    def install(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._runtime = LoopRuntime(recorder)
        self._hooks.activate(self._runtime)

    def remove(self) -> None:
        self._hooks.deactivate()
        self._hooks.make_functions_plain(self._namespace)

    def finish(self, record: Record) -> None:
        """The iterations are the recorder's loop rows and totals; a function's loop that
        never ran an iteration is left out of the record's loops (the cell's own are kept)."""
        record.loops = [
            loop
            for loop in record.loops
            if not loop.function or loop.iterations or loop.rows_dropped
        ]
        rec, self._recorder = self._recorder, None
        runtime, self._runtime = self._runtime, None
        readers = runtime.stage_readers if runtime is not None else {}
        for loop in record.loops:
            if loop.id in readers:
                loop.input_stages = readers[loop.id].stages()
        if rec is not None and rec.ran_out_wait[0]:
            # The waits of the loops' last `next()`, which found no item (a reader's slow end):
            # data wait, inside the outer loop's iterations where the loop ran in one.
            record.facts["loop_end_wait_s"] = rec.ran_out_wait[0]
            record.facts["inner_loop_end_wait_s"] = rec.ran_out_wait[1]
