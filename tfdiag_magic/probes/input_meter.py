"""How long training steps waited for the next element of a tf.data iterator, measured during
the run from the iterator's own autotune model, without taking an element.

Used where the iterator is read inside the step, out of the tool's sight: Keras' `fit` on a
dataset (`probes/keras_calls.py`), and a tf.function step given the iterator itself
(`train_step(iterator)` with ``next(iterator)`` inside, as TensorFlow's distributed training
guides write it; `probes/tf_functions.py`).
"""

from __future__ import annotations

import weakref
from array import array
from typing import Any

import numpy as np

from ..record import InputStageWork

# A gap the tf.data model drops (>= 10 s, tensorflow/core/framework/model.cc) would shift the
# window: a training cycle this long ends a measured segment instead.
_LONGEST_CYCLE_S = 5.0
_READ_EVERY = 64  # elements between reads of the model; it keeps the last 100 gaps
_GAP_WINDOW = 100
_PEEKED_MOST = 8  # elements an iterator may have handed out before its first step
_SERIES_KEPT = 2_000  # reads of the model kept in `series`: 128,000 steps at one a step


class InputWaitMeter:
    """How long training steps waited for the next element of their tf.data iterator, measured
    during the run from the iterator's own autotune model, without taking an element.

    tf.data's root iterator records the gap between consecutive ``GetNext`` calls: the time
    the consumer spent elsewhere (`tf.data.experimental.get_model_proto(iterator).gap_times`,
    microseconds, the last 100). A training cycle (from the end of one step to the end of the
    next) is the gaps of its elements plus the time its ``GetNext`` calls blocked, so the wait
    is the cycle's length minus its elements' gaps (tracing and callbacks fall in both). The
    model is read every 64 elements and at the end of each epoch: at the epoch's last step, at
    Keras' ``on_epoch_end`` (a dataset of unknown length), when the iterator runs out inside a
    function's call, or when the next iterator begins; never while a ``GetNext`` could be
    running. The meter holds its iterators weakly: an iterator dies where it would without the
    tool (with its buffers: a shuffle buffer held one step longer would raise the memory peak
    that the tool measures), and what was not read by then is not measured. An iterator's
    first two steps are not measured: the first element has no gap, and the second's gap holds
    the rest of the first step, whose work after its batch arrived is not a steady step's (the
    first execution of a traced function creates variables); so the wait for an epoch's first
    batch is not in this measure.
    """

    # Steps of an iterator before its first read of the model, doubled after each read up to
    # `_READ_EVERY`. An iterator drops its inputs' nodes from its model once they run out,
    # which a pipeline that reads ahead (a shuffle buffer, an autotuned prefetch) does well
    # before the epoch's last step: in TensorFlow's time-series tutorial (65 steps an epoch),
    # reads at step 64 and at the end held 3 of its 13 stages, and the per-element maps that did
    # the work were not among them. Where no step is told that an epoch ends (a function given
    # the iterator), an iterator the code drops unread is lost, and an epoch of 50 steps would
    # never be read at 64 (`tf_functions` reads first at 8).
    FIRST_READ = 16

    def __init__(self) -> None:
        self.wait = 0.0  # seconds the measured cycles' GetNext calls blocked
        self.span = 0.0  # seconds of the measured cycles
        self.elements = 0  # elements those cycles consumed
        self.reads = 0
        self._iterator: Any = None  # the iterator measured: a weak reference, or None
        self._owned: Any = None  # a weak reference to its tf.data iterator, None if unmeasured
        self._read_at = self.FIRST_READ
        self._anchor: float | None = None
        # The end and the steps of each cycle since the last read, in slots written by index
        # (a step appends nothing): `_n` of them are used, at most _READ_EVERY.
        self._ends = array("d", bytes(8 * _READ_EVERY))
        self._fused = array("q", bytes(8 * _READ_EVERY))
        self._n = 0
        self._pending = 0
        self._consumed = 0
        self._extra: int | None = None  # elements taken other than by the steps (see `_read`)
        # (wait, span, elements) measured on the first iterator, taken when a second begins
        self.first_epoch: tuple[float, float, int] | None = None
        self.steps = 0  # steps done on every iterator, measured or not
        # (steps done, wait, span) after each read of the model, the first _SERIES_KEPT reads:
        # where along the run the waits fell
        self.series: list[tuple[int, float, float]] = []
        # The last runtime model read whole (a proto; its times add up over an iterator's life)
        self._model: Any = None

    def begin(self, iterator: Any) -> None:
        """A training step is about to run on `iterator` (a new one starts a new measure)."""
        previous = self._iterator
        if previous is not None and previous() is iterator:
            return
        # The previous iterator's cycles since its last read, where it still lives: no step
        # runs now, so nothing is taking an element from it.
        self.epoch_over()
        if previous is not None and self.first_epoch is None:
            self.first_epoch = (self.wait, self.span, self.elements)
        self._iterator = _weak(iterator) if iterator is not None else None
        owned = _owned_iterator(iterator) if iterator is not None else None
        self._owned = _weak(owned) if owned is not None else None
        self._read_at = self.FIRST_READ
        self._anchor = None
        self._n = 0
        self._pending = 0
        self._consumed = 0
        self._extra = None

    def epoch_over(self) -> None:
        """Read the model for the cycles since the last read, where the iterator still lives
        (an epoch is over, or the run: no ``GetNext`` is running). The measure is the tool's
        business, never the call's: a read that fails ends it."""
        if self._owned is not None and self._n:
            try:
                self._read()
            except Exception:
                self._owned = None

    def flush(self) -> None:
        """Read the cycles since the last read (the run is over), then forget the iterator."""
        self.epoch_over()
        self.release()

    def release(self) -> None:
        """Forget the user's iterator."""
        self._iterator = self._owned = None
        self._n = 0

    def step_done(self, end: float, fused: int, last_of_epoch: bool) -> None:
        """A training step of `fused` steps ended at `end` (the hot path: a cycle inside an
        epoch is noted in two slots; the model is read every `_READ_EVERY` steps)."""
        self.steps += fused
        if self._owned is None:
            return
        self._consumed += fused
        n = self._n
        if n and not last_of_epoch and end - self._ends[n - 1] < _LONGEST_CYCLE_S:
            self._ends[n] = end
            self._fused[n] = fused
            self._n = n = n + 1
            self._pending = pending = self._pending + fused
            if pending >= self._read_at or n == _READ_EVERY:
                self._read()
            return
        self._cycle_edge(end, fused, last_of_epoch)

    def _cycle_edge(self, end: float, fused: int, last_of_epoch: bool) -> None:
        """`step_done` off its hot path: an iterator's first steps, the first cycle after a
        read, a cycle too long to measure, the last step of an epoch."""
        if self._anchor is None or self._consumed <= 2 * fused:
            self._anchor = end  # the first two steps of the iterator (see the docstring)
            return
        n = self._n
        previous = self._ends[n - 1] if n else self._anchor
        if end - previous >= _LONGEST_CYCLE_S:
            self._anchor, self._n, self._pending = end, 0, 0
            return
        self._ends[n] = end
        self._fused[n] = fused
        self._n = n + 1
        self._pending += fused
        if self._pending >= self._read_at or last_of_epoch or self._n == _READ_EVERY:
            self._read()

    def _read(self) -> None:
        import tensorflow as tf

        owned = self._owned()
        if owned is None:  # the code let the iterator go: its cycles since the last read are lost
            self._owned, self._n, self._pending = None, 0, 0
            return
        self._read_at = min(2 * self._read_at, _READ_EVERY)
        try:
            model = tf.data.experimental.get_model_proto(owned)
            gaps, taken = model.gap_times, model.nodes[model.output].num_elements
        except Exception:  # autotune off for this dataset, or an iterator of another kind
            self._owned = None
            return
        # An iterator that ran out has dropped its inputs' nodes from its model: a model
        # with fewer nodes than the one kept is not kept.
        if self._model is None or len(model.nodes) >= len(self._model.nodes):
            self._model = model
        # The elements the iterator handed out must be the steps' own, less the few taken
        # before the first measured step (a batch peeked at to build the model): a step that
        # takes two (a GAN's two batches, a Python next() in the loop besides) would line the
        # gaps up with the wrong cycles and read a wait that is not there. Such an iterator is
        # measured no more; what was measured while it lined up is kept.
        extra = taken - self._consumed
        if self._extra is None and 0 <= extra <= _PEEKED_MOST:
            self._extra = extra
        if extra != self._extra:
            self._owned = None
            return
        self.reads += 1
        n, anchor = self._n, self._anchor
        ends = np.array(self._ends[:n])
        fused = np.array(self._fused[:n])
        expected = min(_GAP_WINDOW, self._consumed - 1)
        self._anchor, self._n, self._pending = float(ends[-1]), 0, 0
        window = len(gaps)
        if window < expected:  # a gap was dropped: the window no longer lines up
            return
        # Keep the newest cycles whose elements all have their gap in the window.
        newest_first = np.cumsum(fused[::-1])
        kept = int(np.searchsorted(newest_first, window, side="right"))
        if kept == 0:
            return
        count = int(newest_first[kept - 1])
        first = n - kept
        start = float(ends[first - 1]) if first > 0 else anchor
        span = float(ends[-1]) - start
        gap = sum(gaps[len(gaps) - count :]) * 1e-6
        self.wait += span - gap
        self.span += span
        self.elements += count
        if len(self.series) < _SERIES_KEPT:
            self.series.append((self.steps, self.wait, self.span))

    def stage_work(self) -> tuple[InputStageWork, ...]:
        """The stages of the last iterator read, as its runtime model measured them (after the
        run: the model is turned into facts once)."""
        return stage_work(self._model) if self._model is not None else ()


_MOST_STAGES = 64


def stage_work(model: Any) -> tuple[InputStageWork, ...]:
    """The nodes of a tf.data runtime model (`get_model_proto`), the root first, then depth
    first from the output towards the sources, inputs in order; () if it cannot be read."""
    try:
        nodes = model.nodes
        found: list[InputStageWork] = []
        stack = [(model.output, 0)]
        while stack and len(found) < _MOST_STAGES:
            key, depth = stack.pop()
            node = nodes[key]
            parallelism = [p.value for p in node.parameters if p.name == "parallelism"]
            found.append(
                InputStageWork(
                    name=str(node.name),
                    depth=depth,
                    elements=int(node.num_elements),
                    seconds=float(node.processing_time) * 1e-9,
                    parallelism=float(parallelism[0]) if parallelism else 0.0,
                )
            )
            stack.extend((each, depth + 1) for each in reversed(node.inputs))
        return tuple(found)
    except Exception:
        return ()


def _weak(value: Any) -> Any:
    """A weak reference to `value`, or where it takes none, a function that returns it."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def _owned_iterator(iterator: Any) -> Any:
    """The one `tf.data` iterator that feeds `iterator` (Keras' epoch iterator hands the train
    function a dataset iterator, or a distributed iterator around one, whose one worker's
    multi-device iterator holds one per device); None if not exactly one."""
    try:
        from tensorflow.python.data.ops import iterator_ops

        found: list[Any] = []
        stack: list[tuple[Any, int]] = [(iterator, 0)]
        while stack:
            item, depth = stack.pop()
            if isinstance(item, iterator_ops.OwnedIterator):
                found.append(item)
                continue
            if depth >= 3:
                continue
            for name in ("_iterators", "_iterator", "_device_iterators"):
                inner = getattr(item, name, None)
                if isinstance(inner, (list, tuple)):
                    stack.extend((each, depth + 1) for each in inner)
                elif inner is not None:
                    stack.append((inner, depth + 1))
        return found[0] if len(found) == 1 else None
    except Exception:
        return None
