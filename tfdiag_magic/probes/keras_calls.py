"""Keras probe: a step per batch of fit/evaluate/predict, and per ``*_on_batch`` call.

Batches are timed by wrapping the methods of Keras' `CallbackList` that the trainer calls around
every batch: the step runs from the end of the batch-begin callbacks to the start of the
batch-end callbacks, so it holds exactly the train/test/predict function, and the callbacks'
own time is kept apart. The Keras entry points are wrapped too, to know that steps inside them
belong to Keras (a tf.function called by Keras is not a step of its own).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
import os
import threading
import weakref
from collections.abc import Iterator
from time import perf_counter
from typing import Any

import numpy as np

from ..record import EpochStart, KerasCall, Kind, Phase, Record
from ..recorder import Recorder, StepMark
from .cpu_wait import this_thread_times
from .dataset_structure import note_dataset
from .input_meter import InputWaitMeter
from .inputs import batch_size_of, data_kind, inspect_inputs, keras_float_cast
from .patching import Patcher, defining_class, wraps_exactly
from .step_logs import StepLogs

_DRIVERS = ("fit", "evaluate", "predict")
_ON_BATCH = {"train_on_batch": "train", "test_on_batch": "eval", "predict_on_batch": "predict"}
_BATCH_HOOKS = {"train": "on_train_batch", "eval": "on_test_batch", "predict": "on_predict_batch"}
NAN = math.nan
_CALLBACK_METHODS = tuple(
    f"on_{phase}_batch_{end}" for phase in ("train", "test", "predict") for end in ("begin", "end")
)
# Layers whose work is matrix multiplies or convolutions: what Tensor Cores speed up.
_MATMUL_LAYERS = ("Dense", "Conv", "Attention", "LSTM", "GRU", "Embedding")


def _logs_loss(logs: Any) -> Any:
    if isinstance(logs, dict):
        return logs.get("loss")
    if isinstance(logs, (list, tuple)) and logs:
        return logs[0]
    return logs if isinstance(logs, float) else None


class GeneratorTimer:
    """Times a Python generator given to fit/evaluate/predict: the seconds it takes to make
    each batch, wherever Keras pulls it from (tf.data runs it on one of its own threads).

    Keras gets the user's own generator object. Its `GeneratorDataAdapter` peeks two batches
    in ``__init__`` (timed here as a whole) and later iterates ``adapter.generator()``, which
    is ``chain(first_batches, generator)``; for the adapter built on this generator that
    callable is replaced, for the call only, by the same chain with the generator's part read
    through ``map(self.after, iter(perf_counter, None), generator)``. Both are C iterators, so
    when the generator raises, no frame of the tool lies between Keras' frame and the user's
    (the error tf.data builds embeds that traceback), and the generator is never pulled once
    more than Keras pulls it.
    """

    def __init__(self, source: Iterator[Any]) -> None:
        self._source: Iterator[Any] | None = source
        self.seconds = 0.0
        self.items = 0
        self._adapters: list[tuple[Any, Any]] = []  # (adapter, Keras' own `generator`)

    def after(self, started: float, item: Any) -> Any:
        """`map` calls this with the clock read just before it pulled `item` from the source."""
        self.seconds += perf_counter() - started
        self.items += 1
        return item

    def wrap_init(self, original: Any) -> Any:
        """`GeneratorDataAdapter.__init__`, timed, with the timed chain set on the adapter
        that is built on this timer's generator (any other adapter is left as Keras makes it)."""
        timer = self

        def __init__(self: Any, generator: Any) -> None:  # noqa: N807 (the name Python looks up)
            __tracebackhide__ = True
            if generator is not timer._source or timer._source is None:
                return original(self, generator)
            before = perf_counter()
            try:
                original(self, generator)
            finally:
                timer.seconds += perf_counter() - before
            timer._time(self, generator)

        return wraps_exactly(__init__, original)

    def _time(self, adapter: Any, generator: Iterator[Any]) -> None:
        first = vars(adapter).get("_first_batches")
        keras_own = vars(adapter).get("generator")
        if not isinstance(first, list) or not callable(keras_own):
            return  # not the adapter this timer knows how to read: leave it as Keras made it
        self.items += len(first)  # the peeked batches; their time is __init__'s
        after = self.after

        def timed_batches() -> Iterator[Any]:
            return itertools.chain(first, map(after, iter(perf_counter, None), generator))

        adapter.generator = timed_batches
        self._adapters.append((adapter, keras_own))

    def release(self) -> None:
        """Put Keras' own `generator` back on the adapters and drop the references."""
        self._source = None
        while self._adapters:
            adapter, keras_own = self._adapters.pop()
            adapter.generator = keras_own


def _generator_timer(data: Any, patcher: Patcher) -> GeneratorTimer | None:
    """Time the generator `data` through Keras' `GeneratorDataAdapter`, for this call only;
    None where that adapter is not there to patch (another Keras)."""
    try:
        from keras.src.trainers.data_adapters.generator_data_adapter import (
            GeneratorDataAdapter,
        )

        timer = GeneratorTimer(data)
        owner = defining_class(GeneratorDataAdapter, "__init__")
        patcher.replace(owner, "__init__", timer.wrap_init(vars(owner)["__init__"]))
        return timer
    except Exception:
        return None


class ItemTimer:
    """Times the `__getitem__` of one `keras.utils.PyDataset` (or `Sequence`) given to
    fit/evaluate/predict: the seconds it takes to make each batch, on whichever thread Keras
    asks for it (its enqueuer's worker threads when ``workers > 1``). Only Keras' own calls
    are timed; nothing calls `__getitem__` an extra time."""

    def __init__(self, target: Any, workers: int) -> None:
        self._target = target
        self.workers = max(int(workers), 1)
        self.seconds = 0.0
        self.items = 0
        self._lock = threading.Lock()

    def wrap(self, original: Any) -> Any:
        timer = self

        def __getitem__(self: Any, index: Any) -> Any:  # noqa: N807 (the name Python looks up)
            __tracebackhide__ = True
            if self is not timer._target:
                return original(self, index)
            before = perf_counter()
            try:
                return original(self, index)
            finally:
                elapsed = perf_counter() - before
                with timer._lock:
                    timer.seconds += elapsed
                    timer.items += 1

        return wraps_exactly(__getitem__, original)

    def release(self) -> None:
        self._target = None


def _pydataset_timer(data: Any, patcher: Patcher) -> ItemTimer | None:
    """Time `data`'s `__getitem__` on its class (Python looks dunder methods up on the type),
    for this call only; None when `data` is no PyDataset or Keras makes its batches in other
    processes, where a patch made here does not reach."""
    try:
        from keras.utils import PyDataset

        # The settings as Keras keeps them, not through its properties: those warn (from a
        # line of their own, which Python's once-per-place filter does not know) and set the
        # defaults on a PyDataset whose `__init__` did not call `super().__init__`.
        state = vars(data) if isinstance(data, PyDataset) else {}
        if not isinstance(data, PyDataset) or bool(state.get("_use_multiprocessing", False)):
            return None
        cls = type(data)
        timer = ItemTimer(data, state.get("_workers", 1) or 1)
        patcher.replace(cls, "__getitem__", timer.wrap(cls.__getitem__))
        return timer
    except Exception:
        return None


def _first_epoch_fields(meter: InputWaitMeter | None) -> dict[str, Any]:
    """KerasCall's first-epoch input measure, where a later epoch was measured too."""
    first = meter.first_epoch if meter is not None else None
    if first is None or meter is None or meter.elements <= first[2]:
        return {}
    wait, span, elements = first
    return {"first_epoch_wait": wait, "first_epoch_span": span, "first_epoch_elements": elements}


def _current_iterator(epoch_iterator: Any) -> Any:
    """The iterator Keras' epoch iterator hands the train function in this epoch: its
    ``_current_iterator``, or, for data of unknown length, the local ``iterator`` of its
    running epoch generator (``EpochIterator._enumerate_iterator``); None if neither is there."""
    if epoch_iterator is None:
        return None
    current = getattr(epoch_iterator, "_current_iterator", None)
    if current is not None:
        return current
    generator = getattr(epoch_iterator, "_epoch_iterator", None)
    frame = getattr(generator, "gi_frame", None)
    return frame.f_locals.get("iterator") if frame is not None else None


# An epoch's or a validation's start: (epoch, wall clock, the thread's CPU and run-queue s)
Began = tuple[int, float, tuple[float, float] | None]


def _note_start(rec: Recorder, began: Began, validation: bool) -> None:
    """The time from `began` to now, and how much of it the thread ran or waited for a CPU,
    as an `EpochStart` of the record (once per epoch or validation, never per step)."""
    epoch, start, clocks = began
    wall = perf_counter() - start
    now = this_thread_times()
    on_cpu = wait = NAN
    if clocks is not None and now is not None:
        on_cpu, wait = now[0] - clocks[0], now[1] - clocks[1]
    rec.epoch_starts.append(EpochStart(start - rec.t0, epoch, wall, on_cpu, wait, validation))


class KerasProbe:
    name = "keras"

    def __init__(self) -> None:
        self._patcher = Patcher()

    def install(self, recorder: Recorder) -> None:
        import keras
        from keras.src.callbacks.callback_list import CallbackList

        rec = recorder
        self._open: tuple[int, int, float, float] | None = None  # phase, begin batch, start, cb
        self._timed_lists: set[int] = set()
        self._timed_callbacks: list[tuple[Any, str]] = []
        self._keras_own_callbacks: set[str] = set()  # timed callbacks of Keras' own classes
        self._call_patcher = Patcher()  # what one call patched (a PyDataset's __getitem__)
        self._meter: InputWaitMeter | None = None  # the top-level fit's input wait
        self._epoch_iterator: Any = None  # Keras' epoch iterator of the running top-level fit
        self._last_list: Any = None  # the CallbackList of the latest batch (see batch_begin)
        self._steps: int | None = None  # batches per epoch of the running top-level fit
        # The top-level fit's epoch that began (its callbacks done) and has no batch yet, and
        # its validation likewise: (epoch, wall clock, this thread's CPU and run-queue seconds)
        self._epoch_began: Began | None = None
        self._validation_began: Began | None = None
        # The top-level fit's end after its last epoch, where Keras lets the validation's and
        # then the training's iterators go: where the part being measured began, and
        # [wall, on a CPU, waiting for one, when it began] of the parts so far (the callbacks'
        # `on_train_end` left out).
        self._fit_tail: Began | None = None
        self._fit_end: list[float] | None = None
        # The top-level fit's returned values that no metric holds (`last-batch-logs`); its
        # `keys` () once the fit's first batch showed there are none: no call per batch then.
        self._step_logs = StepLogs(rec.epoch_logs)
        # Likewise a top-level evaluate's test batches, or the top-level fit's validation's:
        # the driver depth its batches run at (0: none read now), and the top-level evaluate
        # calls so far (their `EpochLogs.epoch`).
        self._eval_logs = StepLogs(rec.epoch_logs, "evaluate")
        self._eval_depth = 0
        self._evaluations = 0
        owner = defining_class(keras.Model, "compile")
        self._patcher.replace(owner, "compile", self._compile(rec, vars(owner)["compile"]))
        for name in _DRIVERS:
            owner = defining_class(keras.Model, name)
            self._patcher.replace(owner, name, self._driver(rec, vars(owner)[name]))
        for name, phase in _ON_BATCH.items():
            owner = defining_class(keras.Model, name)
            self._patcher.replace(owner, name, self._on_batch(rec, vars(owner)[name], phase))
        for phase, hook in _BATCH_HOOKS.items():
            begin = defining_class(CallbackList, hook + "_begin")
            end = defining_class(CallbackList, hook + "_end")
            self._patcher.replace(
                begin, hook + "_begin", self._batch_begin(rec, vars(begin)[hook + "_begin"], phase)
            )
            self._patcher.replace(
                end, hook + "_end", self._batch_end(rec, vars(end)[hook + "_end"], phase)
            )
        owner = defining_class(CallbackList, "on_epoch_begin")
        self._patcher.replace(
            owner, "on_epoch_begin", self._epoch_begin(rec, vars(owner)["on_epoch_begin"])
        )
        owner = defining_class(CallbackList, "on_epoch_end")
        self._patcher.replace(
            owner, "on_epoch_end", self._epoch_end(rec, vars(owner)["on_epoch_end"])
        )
        owner = defining_class(CallbackList, "on_train_end")
        self._patcher.replace(
            owner, "on_train_end", self._train_end(rec, vars(owner)["on_train_end"])
        )
        _hide_tool_frames_from_keras(self._patcher)
        epoch_iterator = _tf_epoch_iterator()
        if epoch_iterator is not None:
            owner = defining_class(epoch_iterator, "__iter__")
            self._patcher.replace(owner, "__iter__", self._epoch_iter(rec, vars(owner)["__iter__"]))

    def remove(self) -> None:
        try:
            self._untime_callbacks()
        finally:
            try:
                self._call_patcher.restore()
            finally:
                self._meter = self._epoch_iterator = self._last_list = None
                self._epoch_began = self._validation_began = None
                self._fit_tail = self._fit_end = None
                self._patcher.restore()

    def finish(self, record: Record) -> None:
        """Which of the timed callbacks are Keras' own (`facts["keras_own_callbacks"]`): their
        batch hooks are not the user's to move. The steps, calls and callback times are in the
        recorder's."""
        if self._keras_own_callbacks:
            record.facts["keras_own_callbacks"] = sorted(self._keras_own_callbacks)

    def _time_callbacks(self, rec: Recorder, callbacks: Any) -> None:
        """Time each callback of a CallbackList that has batch hooks of its own, by class."""
        from keras.src.callbacks.callback import Callback

        self._timed_lists.add(id(callbacks))
        seconds = rec.callback_seconds
        for callback in list(getattr(callbacks, "callbacks", []) or []):
            cls = type(callback)
            label = cls.__name__
            for name in _CALLBACK_METHODS:
                method = getattr(cls, name, None)
                if method is None or method is getattr(Callback, name, None):
                    continue
                if name in vars(callback):  # set on the instance already: leave it alone
                    continue
                bound = getattr(callback, name)

                def timed(*args: Any, _bound: Any = bound, _label: str = label, **kwargs: Any):
                    __tracebackhide__ = True
                    before = perf_counter()
                    try:
                        return _bound(*args, **kwargs)
                    finally:
                        seconds[_label] = seconds.get(_label, 0.0) + perf_counter() - before

                setattr(callback, name, timed)
                self._timed_callbacks.append((callback, name))
                # LambdaCallback runs the user's own functions.
                if cls.__module__.startswith("keras.") and label != "LambdaCallback":
                    self._keras_own_callbacks.add(label)

    def _untime_callbacks(self) -> None:
        while self._timed_callbacks:
            callback, name = self._timed_callbacks.pop()
            with contextlib.suppress(AttributeError):
                delattr(callback, name)
        self._timed_lists.clear()
        self._last_list = None

    # -- wrappers ------------------------------------------------------------------------------

    def add_call(
        self,
        rec: Recorder,
        api: str,
        model: Any,
        start: float,
        mark: StepMark,
        data: Any,
        timer: GeneratorTimer | ItemTimer | None = None,
        meter: InputWaitMeter | None = None,
        casts: tuple[str, str] = ("", ""),
    ) -> None:
        """Give `rec` the top-level Keras call `api` of `model` that began at `start` (steps
        since `mark`), now that it ended, with what `timer` and `meter` measured of its data
        and the float types Keras cast its pandas x and y to (`casts`)."""
        end = perf_counter()
        layers = matmul = stateful = 0
        if api == "fit":
            try:
                for layer in model._flatten_layers(include_self=False):
                    layers += 1
                    matmul += any(word in type(layer).__name__ for word in _MATMUL_LAYERS)
                    stateful += getattr(layer, "stateful", False) is True
            except Exception:
                pass
        # Read for the calls kept one by one (past them, calls are summed by kind).
        kept = len(rec.keras_calls) < rec.keras_calls_kept
        line, outermost = rec.user_lines() if kept else (-1, -1)
        rec.add_keras_call(  # kept, or past the first ones summed with its kind (bounded)
            KerasCall(
                api=api,
                start=start - rec.t0,
                duration=end - start,
                steps=rec.steps_since(mark),
                step_time=rec.seconds_since(mark),
                loop=rec.innermost_loop(),
                model=str(getattr(model, "name", "?")),
                batch_size=rec.keras_batch,
                line=line,
                caller_line=outermost if outermost != line else -1,
                data=data_kind(data) if api != "compile" else "",
                x_cast=casts[0],
                y_cast=casts[1],
                dense_layers=matmul,
                layers=layers,
                stateful_layers=stateful,
                data_time=timer.seconds if timer is not None else NAN,
                data_items=timer.items if timer is not None else 0,
                data_workers=getattr(timer, "workers", 1),
                input_wait=meter.wait if meter is not None and meter.elements else NAN,
                input_span=meter.span if meter is not None else 0.0,
                input_elements=meter.elements if meter is not None else 0,
                input_stages=meter.stage_work() if meter is not None else (),
                **_first_epoch_fields(meter),
            )
        )

    def _compile(self, rec: Recorder, original: Any) -> Any:
        probe = self

        # Unannotated `*args, **kwargs`: the parameters of Keras' own traceback-filtering
        # wrapper that `original` is, for `getfullargspec` (see `wraps_exactly`).
        def compile(*args, **kwargs):
            __tracebackhide__ = True
            if not args:  # no model: the original says what is wrong
                return original(*args, **kwargs)
            self, args = args[0], args[1:]
            top = (
                rec.driver_depth == 0
                and rec.step_depth == 0
                and threading.get_ident() == rec.thread_id
            )
            start, mark = perf_counter(), rec.step_mark()
            try:
                return original(self, *args, **kwargs)
            finally:
                if top:
                    probe.add_call(rec, "compile", self, start, mark, None)

        return wraps_exactly(compile, original)

    def _driver(self, rec: Recorder, original: Any) -> Any:
        probe = self
        name = original.__name__

        # Unannotated `*args, **kwargs`: the parameters of Keras' own traceback-filtering
        # wrapper that `original` is, for `getfullargspec` (see `wraps_exactly`).
        def driver(*args, **kwargs):
            __tracebackhide__ = True
            if not args or threading.get_ident() != rec.thread_id:
                return original(*args, **kwargs)
            self, args = args[0], args[1:]
            saved = (rec.driver_eager, rec.keras_epoch, probe._open, rec.keras_batch)
            top = rec.driver_depth == 0 and rec.step_depth == 0
            if top:
                rec.keras_epoch = -1
                data = args[0] if args else kwargs.get("x")
                labels = args[1] if len(args) > 1 else kwargs.get("y")
                casts = (keras_float_cast(data), keras_float_cast(labels))
                rec.keras_batch = batch_size_of(data, kwargs)
                note_dataset(rec, data, name)  # what a tf.data pipeline is made of
                mark, start = rec.step_mark(), perf_counter()
                timer: GeneratorTimer | ItemTimer | None = None
                if inspect.isgenerator(data):
                    timer = _generator_timer(data, probe._call_patcher)
                else:
                    timer = _pydataset_timer(data, probe._call_patcher)
                meter = InputWaitMeter() if name == "fit" else None
                probe._meter = meter
                if name == "fit":
                    if weakref.ref(self) not in rec.trained:
                        rec.first_training(self)  # before its first batch: its state as it came
                    rec.fit_started(self)
                    probe._step_logs.fit_began()
            elif name == "evaluate" and rec.driver_depth == 1:
                # A fit's validation: until its first batch (the last one's iterator goes).
                probe._validation_began = (rec.keras_epoch, perf_counter(), this_thread_times())
            reads_eval = name == "evaluate" and (
                top or (rec.driver_depth == 1 and bool(kwargs.get("_use_cached_eval_dataset")))
            )
            if reads_eval:  # what its test step returns is decided at its first batch
                probe._eval_logs.fit_began()
                probe._eval_depth = rec.driver_depth + 1
            rec.driver_depth += 1
            rec.driver_eager = bool(getattr(self, "run_eagerly", False)) or _functions_eager()
            rec.take_wait()  # what the cell waited for before calling Keras is not a batch's
            returned = False
            try:
                result = original(self, *args, **kwargs)
                returned = True
                return result
            except BaseException as exc:
                if probe._open is not None:
                    rec.note_failure(exc, probe._open[0], rec.keras_batch)
                raise
            finally:
                rec.driver_depth -= 1
                if reads_eval:
                    probe._eval_read(rec, top, returned)
                if top:
                    try:
                        probe._call_patcher.restore()
                    finally:
                        if meter is not None:
                            # Cycles no epoch's end read (each epoch is read at its last
                            # step or at on_epoch_end), where the iterator still lives.
                            if returned:
                                meter.flush()
                            meter.release()
                        if timer is not None:
                            timer.release()
                        probe._meter = probe._epoch_iterator = None
                        probe._steps = None
                        if name == "fit":
                            probe._step_logs.release()
                            if returned:
                                probe._note_fit_end(rec)
                            probe._fit_tail = probe._fit_end = None
                            _count_training(rec, self, mark)
                            rec.fit_done(self)
                        probe.add_call(rec, name, self, start, mark, data, timer, meter, casts)
                        probe._untime_callbacks()
                        rec.fit_callbacks = None
                rec.driver_eager, rec.keras_epoch, probe._open, rec.keras_batch = saved

        return wraps_exactly(driver, original)

    def _eval_read(self, rec: Recorder, top: bool, returned: bool) -> None:
        """A top-level evaluate, or the top-level fit's validation, ended: read what its test
        batches returned that no metric holds (where they did), and let it go."""
        logs, self._eval_depth = self._eval_logs, 0
        try:
            if returned and logs.keys:
                if top:
                    logs.epoch_done(self._evaluations, "evaluate")
                else:
                    logs.epoch_done(max(rec.keras_epoch, 0), "validation")
        except Exception:  # the reading is the tool's business, never the call's
            pass
        finally:
            logs.release()
            if top:
                self._evaluations += 1

    def _on_batch(self, rec: Recorder, original: Any, phase_name: str) -> Any:
        # A hot path (a step per call): no call it can avoid (see tf_functions' `call`).
        from tensorflow.python.eager.polymorphic_function import eager_function_run

        phase = Phase.of(phase_name)
        kind = Kind.ON_BATCH
        trains, trained, ref = phase_name == "train", rec.trained, weakref.ref
        predicts = phase_name == "predict"
        here, add_step, clock, nan = rec.here, rec.add_step, perf_counter, NAN
        ndarray = np.ndarray
        last: list[Any] = [None]  # the weak reference to the model of the last batch

        def on_batch(self: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if rec.driver_depth or rec.step_depth or not here.main:
                return original(self, *args, **kwargs)
            if trains:  # the model's state is read at first sight; the same model: no lookup
                key = last[0]
                if key is None or key() is not self:
                    key = last[0] = ref(self)
                    if key not in trained:
                        rec.first_training(self)
            wait = rec.pending_wait
            rec.pending_wait = nan
            # NumPy x and y, the usual batch, are read here; anything else by `inspect_inputs`.
            x = args[0] if args else None
            rest = args[1:]  # slices, not len(): no call
            y = rest[0] if rest else None
            if (
                not kwargs
                and not rest[1:]
                and type(x) is ndarray
                and x.ndim
                and (y is None or type(y) is ndarray)
            ):
                host = x.nbytes + (y.nbytes if y is not None else 0)
                batch = float(x.shape[0])
            else:
                host, batch = inspect_inputs(args, kwargs)
            try:  # what the `run_eagerly` property returns, without its call
                eager = bool(self._run_eagerly or eager_function_run.RUN_FUNCTIONS_EAGERLY)
            except AttributeError:
                eager = bool(
                    getattr(self, "run_eagerly", False) or eager_function_run.RUN_FUNCTIONS_EAGERLY
                )
            rec.driver_depth += 1
            start = clock()
            try:
                result = original(self, *args, **kwargs)
            except BaseException as exc:
                rec.note_failure(exc, phase, batch)
                raise
            finally:
                rec.driver_depth -= 1
            end = clock()
            if trains:
                trained[key] += 1
            if predicts:
                loss = None
            elif type(result) is float:
                loss = result
            else:
                loss = _logs_loss(result)
            # A train batch is a training step: `add_step` marks it.
            add_step(phase, kind, start, end, wait, -1, eager, loss, 1, host, batch)
            return result

        return wraps_exactly(on_batch, original)

    def _batch_begin(self, rec: Recorder, original: Any, phase_name: str) -> Any:
        # A hot path (a call per batch): see tf_functions' `call` for how it avoids calls.
        probe = self
        phase = Phase.of(phase_name)
        is_train = phase_name == "train"
        here, clock = rec.here, perf_counter

        def batch_begin(self: Any, batch: int, logs: Any = None) -> Any:
            __tracebackhide__ = True
            if self is not probe._last_list and rec.driver_depth == 1:
                # The top-level call's lists alone: a Keras call nested in a callback (a
                # predict each batch) makes a list with callbacks of its own each time, which
                # the timing would keep until the top-level call ends.
                probe._first_batch_of(rec, self)
            before = clock()
            result = original(self, batch, logs)
            if rec.driver_depth and not rec.step_depth and here.main:
                after = clock()
                probe._open = (phase, batch, after, after - before)
                if is_train and batch == 0 and rec.driver_depth == 1:
                    probe._epoch_starts(rec, self)  # an epoch of the top-level fit begins
                elif batch == 0 and probe._validation_began is not None:
                    began, probe._validation_began = probe._validation_began, None
                    _note_start(rec, began, validation=True)
            return result

        return wraps_exactly(batch_begin, original)

    def _first_batch_of(self, rec: Recorder, callbacks: Any) -> None:
        """A CallbackList's first batch in this run: time its callbacks, once."""
        self._last_list = callbacks
        if id(callbacks) not in self._timed_lists:
            self._time_callbacks(rec, callbacks)

    def _epoch_starts(self, rec: Recorder, callbacks: Any) -> None:
        """Once per epoch of the top-level fit, at its first batch: the time since the epoch
        began, the epoch's tf.data iterator for the input meter, and the batches an epoch
        has."""
        began = self._epoch_began
        if began is not None:
            self._epoch_began = None
            _note_start(rec, began, validation=False)
        self._steps = _batches_per_epoch(callbacks, "train")
        meter = self._meter
        if meter is None:
            return
        try:
            meter.begin(_current_iterator(self._epoch_iterator))
        except Exception:  # the measure is the tool's business, never the call's
            self._meter = None

    def _batch_end(self, rec: Recorder, original: Any, phase_name: str) -> Any:
        # A hot path (a call per batch): see tf_functions' `call` for how it avoids calls.
        probe = self
        phase = Phase.of(phase_name)
        kind = Kind.KERAS
        is_train = phase_name == "train"
        is_eval = phase_name == "eval"
        takes_loss = phase_name != "predict"
        here, clock, add_step, nan = rec.here, perf_counter, rec.add_step, NAN
        step_logs, eval_logs = probe._step_logs, probe._eval_logs

        def batch_end(self: Any, batch: int, logs: Any = None) -> Any:
            __tracebackhide__ = True
            end = clock()
            opened = probe._open
            if opened is None or opened[0] != phase or not here.main:
                return original(self, batch, logs)
            probe._open = None
            _, begin_batch, start, begin_callbacks = opened
            fused = batch - begin_batch + 1
            if fused > 1:
                # The last execution of an epoch can hold fewer steps than steps_per_execution.
                steps = _batches_per_epoch(self, phase_name)
                if steps:
                    fused = min(batch, steps - 1) - begin_batch + 1
                fused = max(fused, 1)
            loss = logs["loss"] if takes_loss and type(logs) is dict and "loss" in logs else None
            top_train = is_train and rec.driver_depth == 1
            if top_train:
                rec.fit_callbacks, rec.fit_batch = self, batch
                if step_logs.keys != ():
                    step_logs.batch(self, logs)
            elif is_eval and rec.driver_depth == probe._eval_depth and eval_logs.keys != ():
                eval_logs.batch(self, logs)
            try:
                return original(self, batch, logs)
            finally:
                # The batch's row, written once its callbacks are done and timed (a callback
                # that predicts has appended its own rows by now: the table sorts by start).
                add_step(
                    phase,
                    kind,
                    start,
                    end,
                    nan,
                    rec.keras_epoch,
                    rec.driver_eager,
                    loss,
                    fused,
                    0.0,
                    rec.keras_batch,
                    begin_callbacks + clock() - end,
                )  # a train batch is a training step: `add_step` marks it
                meter = probe._meter
                if top_train and meter is not None:
                    steps = probe._steps
                    try:
                        meter.step_done(end, fused, bool(steps) and batch + 1 >= steps)
                    except Exception:  # the measure is the tool's business, never the call's
                        probe._meter = None

        return wraps_exactly(batch_end, original)

    def _epoch_begin(self, rec: Recorder, original: Any) -> Any:
        probe = self

        def epoch_begin(self: Any, epoch: int, logs: Any = None) -> Any:
            __tracebackhide__ = True
            own = rec.driver_depth and threading.get_ident() == rec.thread_id
            if own:
                rec.keras_epoch = int(epoch)
            before = perf_counter()
            try:
                return original(self, epoch, logs)
            finally:
                after = perf_counter()
                rec.epoch_hook_seconds += after - before
                if own and rec.driver_depth == 1:  # the top-level fit's epoch: until its batch
                    probe._epoch_began = (int(epoch), after, this_thread_times())
                    probe._fit_tail = probe._fit_end = None  # not the fit's end

        return wraps_exactly(epoch_begin, original)

    def _epoch_end(self, rec: Recorder, original: Any) -> Any:
        """The end of an epoch of the top-level fit: the input meter reads the epoch's last
        cycles. Fit's loop variable still holds the epoch's iterator, which no step told it
        was the last where the data's length is unknown; the next epoch's first step lets it
        go, or fit's return (the meter holds it weakly)."""
        probe = self

        def epoch_end(self: Any, epoch: int, logs: Any = None) -> Any:
            __tracebackhide__ = True
            meter = probe._meter
            if meter is not None and rec.driver_depth == 1 and rec.here.main:
                meter.epoch_over()
            if probe._step_logs.keys and rec.driver_depth == 1 and rec.here.main:
                probe._step_logs.epoch_done(int(epoch))
            before = perf_counter()
            try:
                return original(self, epoch, logs)
            finally:
                after = perf_counter()
                rec.epoch_hook_seconds += after - before
                if rec.driver_depth == 1 and rec.here.main:  # the fit may end here
                    probe._fit_tail = (int(epoch), after, this_thread_times())
                    probe._fit_end = None

        return wraps_exactly(epoch_end, original)

    def _train_end(self, rec: Recorder, original: Any) -> Any:
        """The top-level fit's callbacks' `on_train_end`, between the release of the
        validation's iterator and of the training's: left out of the fit's end."""
        probe = self

        def train_end(self: Any, logs: Any = None) -> Any:
            __tracebackhide__ = True
            top = rec.driver_depth == 1 and rec.here.main and probe._fit_tail is not None
            if top:
                probe._end_part()
            try:
                return original(self, logs)
            finally:
                if top:
                    epoch = rec.keras_epoch
                    probe._fit_tail = (epoch, perf_counter(), this_thread_times())

        return wraps_exactly(train_end, original)

    def _end_part(self) -> None:
        """Add the part of the fit's end measured since `_fit_tail` to `_fit_end`."""
        tail, self._fit_tail = self._fit_tail, None
        if tail is None:
            return
        _, start, clocks = tail
        now, after = perf_counter(), this_thread_times()
        parts = self._fit_end if self._fit_end is not None else [0.0, 0.0, 0.0, start]
        parts[0] += now - start
        if clocks is None or after is None:
            parts[1] = parts[2] = NAN
        else:
            parts[1] += after[0] - clocks[0]
            parts[2] += after[1] - clocks[1]
        self._fit_end = parts

    def _note_fit_end(self, rec: Recorder) -> None:
        """The top-level fit returned: its end, from its last epoch's callbacks to its return
        (where Keras let its iterators go), as an `EpochStart` marked `fit_end`."""
        self._end_part()
        parts, self._fit_end = self._fit_end, None
        if parts is not None:
            wall, on_cpu, wait, start = parts
            epoch = rec.keras_epoch
            rec.epoch_starts.append(
                EpochStart(start - rec.t0, epoch, wall, on_cpu, wait, False, fit_end=True)
            )

    def _epoch_iter(self, rec: Recorder, original: Any) -> Any:
        """Keras' TF epoch iterator starts each epoch with ``iter()``: keep the epoch iterator of
        the top-level fit, whose tf.data iterator the input meter reads (`_current_iterator`)."""
        probe = self

        def __iter__(self: Any) -> Any:  # noqa: N807 (the name Python looks up)
            __tracebackhide__ = True
            result = original(self)
            if probe._meter is not None and rec.driver_depth == 1 and rec.here.main:
                probe._epoch_iterator = self  # not a nested call's (validation, a predict)
            return result

        return wraps_exactly(__iter__, original)


# The package's own folder (with its separator, so that no sibling folder matches).
_TOOL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def _count_training(rec: Recorder, model: Any, mark: StepMark) -> None:
    """Add the training batches of the top-level `fit` of `model` that is ending to its count
    in `rec.trained`: from its callbacks' progress, else every step since `mark` (validation
    batches included)."""
    key = weakref.ref(model)
    if key in rec.trained:
        progress = rec.fit_progress()
        rec.trained[key] += progress[0] if progress is not None else rec.steps_since(mark)


def _hide_tool_frames_from_keras(patcher: Patcher) -> None:
    """Make Keras' traceback filter drop the tool's frames, as it drops its own.

    Keras re-raises an error from fit/evaluate/predict with a traceback of the frames outside
    Keras and ``tensorflow/python``, and where none is left, with the innermost frame alone
    (TensorFlow's ``quick_execute`` for an error in a tf.data generator). A frame of another
    probe inside fit (a tf.function call wrapper) would be kept instead of that frame, and the
    user would see a traceback that a plain run does not show.
    """
    try:
        from keras.src.utils import traceback_utils

        excluded = traceback_utils._EXCLUDED_PATHS
        if isinstance(excluded, tuple) and all(isinstance(path, str) for path in excluded):
            patcher.replace(traceback_utils, "_EXCLUDED_PATHS", (*excluded, _TOOL_DIR))
    except Exception:  # another Keras: its tracebacks keep the tool's frames
        pass


def _tf_epoch_iterator() -> type | None:
    """Keras' epoch iterator class of the TensorFlow backend, when that is the backend."""
    try:
        import keras

        if keras.backend.backend() != "tensorflow":
            return None
        from keras.src.backend.tensorflow.trainer import TFEpochIterator

        return TFEpochIterator
    except Exception:
        return None


def _functions_eager() -> bool:
    from tensorflow.python.eager.polymorphic_function import eager_function_run

    return bool(eager_function_run.RUN_FUNCTIONS_EAGERLY)


def _batches_per_epoch(callbacks: Any, phase_name: str) -> int | None:
    """Batches per epoch of the data this phase iterates, when Keras knows it.

    Inside fit, validation shares fit's CallbackList, whose ``steps`` are the training
    batches: the validation count is on the model's cached evaluation iterator.
    """
    model = getattr(callbacks, "model", None)
    if phase_name == "eval" and getattr(model, "_eval_epoch_iterator", None) is not None:
        return getattr(model._eval_epoch_iterator, "num_batches", None)
    return (getattr(callbacks, "params", None) or {}).get("steps")
