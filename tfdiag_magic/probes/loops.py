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

import gc
import math
import threading
import types
from collections.abc import Iterable, Iterator
from time import perf_counter
from typing import Any

from ..record import Record
from ..recorder import OpenLoop, Recorder

NAN = math.nan
get_ident = threading.get_ident


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


class LoopHooks:
    """What the rewritten code calls, held among its constants (never bound to a name).

    During the run its entries are the `LoopRuntime`'s bound methods; otherwise they iterate
    plainly and record nothing. `plain_code` maps each function code object of the rewritten
    code that differs from the plain compilation (by id) to both: after the run, functions
    made from the rewritten code get the plain one back (`make_functions_plain`).
    """

    __slots__ = (
        "end",
        "end_guarded",
        "iterate",
        "iterate_guarded",
        "plain_code",
        "tick",
        "tick_guarded",
    )

    def __init__(self) -> None:
        self.plain_code: dict[int, tuple[types.CodeType, types.CodeType]] = {}
        self.deactivate()

    def activate(self, runtime: LoopRuntime) -> None:
        self.iterate, self.tick, self.end = runtime.iterate, runtime.tick, runtime.end
        self.iterate_guarded = runtime.iterate_guarded
        self.tick_guarded = runtime.tick_guarded
        self.end_guarded = runtime.end_guarded

    def deactivate(self) -> None:
        self.iterate = self.iterate_guarded = _iterate_plainly
        self.tick = self.tick_guarded = self.end = self.end_guarded = _nothing

    def __reduce__(self) -> tuple[Any, ...]:
        # A function pickled by value (cloudpickle: joblib, Ray) takes idle hooks with it.
        return (LoopHooks, ())

    def __repr__(self) -> str:
        return "<tfdiag_magic loop hooks>"

    def make_functions_plain(self) -> None:
        """Give every function whose code is one of the rewritten code objects the plain one.

        Functions are found through the garbage collector's referrers of those code objects:
        wherever they are kept (a namespace, a class, a closure, a callback, a list).
        """
        pairs = self.plain_code
        if not pairs:
            return
        errors: list[BaseException] = []
        for referrer in gc.get_referrers(*(rewritten for rewritten, _ in pairs.values())):
            if type(referrer) is not types.FunctionType:
                continue
            pair = pairs.get(id(referrer.__code__))
            if pair is None or referrer.__code__ is not pair[0]:
                continue
            try:
                referrer.__code__ = pair[1]
            except Exception as exc:  # left rewritten, with idle hooks: it still runs plainly
                errors.append(exc)
        if errors:
            raise errors[0]


class LoopProbe:
    """Activates the hooks of the rewritten code for the run, and idles them after it.

    Nothing is bound among the user's globals or builtins: the code holds the hooks itself.
    """

    name = "loops"

    def __init__(self, hooks: LoopHooks) -> None:
        self._hooks = hooks

    def install(self, recorder: Recorder) -> None:
        self._hooks.activate(LoopRuntime(recorder))

    def remove(self) -> None:
        self._hooks.deactivate()
        self._hooks.make_functions_plain()

    def finish(self, record: Record) -> None:
        """The iterations are the recorder's loop rows and totals; a function's loop that
        never ran an iteration is left out of the record's loops (the cell's own are kept)."""
        record.loops = [
            loop
            for loop in record.loops
            if not loop.function or loop.iterations or loop.rows_dropped
        ]
