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
import math
import threading
from collections.abc import Generator, Iterator
from time import perf_counter
from typing import Any

from ..record import KerasCall
from ..recorder import KIND, PHASE, Recorder
from .inputs import batch_size_of, data_kind, inspect_inputs
from .patching import Patcher, defining_class

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
    each batch, wherever Keras pulls it from (tf.data runs it on one of its own threads)."""

    def __init__(self, source: Iterator[Any]) -> None:
        self._source = source
        self.seconds = 0.0
        self.items = 0

    def generator(self) -> Generator[Any, None, None]:
        __tracebackhide__ = True
        source = self._source
        while True:
            before = perf_counter()
            try:
                item = next(source)
            except StopIteration:
                return
            finally:
                self.seconds += perf_counter() - before
            self.items += 1
            yield item


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
        # Datasets given to fit, kept until the session has timed them alone (see session).
        self.datasets: list[tuple[int, Any]] = []
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

    def remove(self) -> None:
        try:
            self._untime_callbacks()
        finally:
            self._patcher.restore()

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

    def _untime_callbacks(self) -> None:
        while self._timed_callbacks:
            callback, name = self._timed_callbacks.pop()
            with contextlib.suppress(AttributeError):
                delattr(callback, name)
        self._timed_lists.clear()

    # -- wrappers ------------------------------------------------------------------------------

    def _add_call(
        self,
        rec: Recorder,
        api: str,
        model: Any,
        start: float,
        first_row: int,
        data: Any,
        timer: GeneratorTimer | None = None,
    ) -> None:
        end = perf_counter()
        layers = matmul = 0
        if api == "fit":
            try:
                for layer in model._flatten_layers(include_self=False):
                    layers += 1
                    matmul += any(word in type(layer).__name__ for word in _MATMUL_LAYERS)
            except Exception:
                pass
        rec.keras_calls.append(
            KerasCall(
                api=api,
                start=start - rec.t0,
                duration=end - start,
                steps=rec.count - first_row,
                step_time=rec.step_seconds(first_row),
                loop=rec.innermost_loop(),
                model=str(getattr(model, "name", "?")),
                batch_size=rec.keras_batch,
                data=data_kind(data) if api != "compile" else "",
                dense_layers=matmul,
                layers=layers,
                data_time=timer.seconds if timer is not None else NAN,
                data_items=timer.items if timer is not None else 0,
            )
        )

    def _compile(self, rec: Recorder, original: Any) -> Any:
        probe = self

        def compile(model: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            top = (
                rec.driver_depth == 0
                and rec.step_depth == 0
                and threading.get_ident() == rec.thread_id
            )
            start, first_row = perf_counter(), rec.count
            try:
                return original(model, *args, **kwargs)
            finally:
                if top:
                    probe._add_call(rec, "compile", model, start, first_row, None)

        compile.__wrapped__ = original  # type: ignore[attr-defined]
        return compile

    def _driver(self, rec: Recorder, original: Any) -> Any:
        probe = self
        name = original.__name__

        def driver(model: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if threading.get_ident() != rec.thread_id:
                return original(model, *args, **kwargs)
            saved = (rec.driver_eager, rec.keras_epoch, probe._open, rec.keras_batch)
            top = rec.driver_depth == 0 and rec.step_depth == 0
            if top:
                rec.keras_epoch = -1
                data = args[0] if args else kwargs.get("x")
                rec.keras_batch = batch_size_of(data, kwargs)
                first_row, start = rec.count, perf_counter()
                timer = None
                if inspect.isgenerator(data):
                    timer = GeneratorTimer(data)
                    if args:
                        args = (timer.generator(), *args[1:])
                    else:
                        kwargs["x"] = timer.generator()
            rec.driver_depth += 1
            rec.driver_eager = bool(getattr(model, "run_eagerly", False)) or _functions_eager()
            rec.take_wait()  # what the cell waited for before calling Keras is not a batch's
            try:
                return original(model, *args, **kwargs)
            except BaseException as exc:
                if probe._open is not None:
                    rec.note_failure(exc, probe._open[0], rec.keras_batch)
                raise
            finally:
                rec.driver_depth -= 1
                if top:
                    probe._add_call(rec, name, model, start, first_row, data, timer)
                    if name == "fit" and data_kind(data) == "dataset" and len(probe.datasets) < 3:
                        probe.datasets.append((len(rec.keras_calls) - 1, data))
                    probe._untime_callbacks()
                rec.driver_eager, rec.keras_epoch, probe._open, rec.keras_batch = saved

        driver.__wrapped__ = original  # type: ignore[attr-defined]
        return driver

    def _on_batch(self, rec: Recorder, original: Any, phase_name: str) -> Any:
        phase = PHASE[phase_name]
        kind = KIND["on_batch"]
        is_train = phase_name == "train"

        def on_batch(model: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if rec.driver_depth or rec.step_depth or threading.get_ident() != rec.thread_id:
                return original(model, *args, **kwargs)
            wait = rec.take_wait()
            host, batch = inspect_inputs(args, kwargs)
            eager = bool(getattr(model, "run_eagerly", False)) or _functions_eager()
            rec.driver_depth += 1
            start = perf_counter()
            try:
                result = original(model, *args, **kwargs)
            except BaseException as exc:
                rec.note_failure(exc, phase, batch)
                raise
            finally:
                rec.driver_depth -= 1
            end = perf_counter()
            loss = _logs_loss(result) if phase_name != "predict" else None
            rec.add_step(
                phase, kind, start, end, wait, -1, eager, loss, host_bytes=host, batch=batch
            )
            if is_train:
                rec.training_step_done(end)
            return result

        on_batch.__wrapped__ = original  # type: ignore[attr-defined]
        return on_batch

    def _batch_begin(self, rec: Recorder, original: Any, phase_name: str) -> Any:
        probe = self
        phase = PHASE[phase_name]

        def batch_begin(callbacks: Any, batch: int, logs: Any = None) -> Any:
            __tracebackhide__ = True
            if id(callbacks) not in probe._timed_lists and rec.driver_depth:
                probe._time_callbacks(rec, callbacks)
            before = perf_counter()
            result = original(callbacks, batch, logs)
            if rec.driver_depth and not rec.step_depth and threading.get_ident() == rec.thread_id:
                after = perf_counter()
                probe._open = (phase, batch, after, after - before)
            return result

        batch_begin.__wrapped__ = original  # type: ignore[attr-defined]
        return batch_begin

    def _batch_end(self, rec: Recorder, original: Any, phase_name: str) -> Any:
        probe = self
        phase = PHASE[phase_name]
        kind = KIND["keras"]
        is_train = phase_name == "train"
        takes_loss = phase_name != "predict"

        def batch_end(callbacks: Any, batch: int, logs: Any = None) -> Any:
            __tracebackhide__ = True
            end = perf_counter()
            opened = probe._open
            if opened is None or opened[0] != phase or threading.get_ident() != rec.thread_id:
                return original(callbacks, batch, logs)
            probe._open = None
            _, begin_batch, start, begin_callbacks = opened
            fused = batch - begin_batch + 1
            if fused > 1:
                # The last execution of an epoch can hold fewer steps than steps_per_execution.
                steps = _batches_per_epoch(callbacks, phase_name)
                if steps:
                    fused = min(batch, steps - 1) - begin_batch + 1
                fused = max(fused, 1)
            loss = logs.get("loss") if takes_loss and isinstance(logs, dict) else None
            rec.add_step(
                phase,
                kind,
                start,
                end,
                NAN,
                rec.keras_epoch,
                rec.driver_eager,
                loss,
                fused,
                batch=rec.keras_batch,
            )
            if is_train:
                rec.training_step_done(end)
            row = rec.count - 1
            before = perf_counter()
            try:
                return original(callbacks, batch, logs)
            finally:
                rec.add_callback_time(row=row, seconds=begin_callbacks + perf_counter() - before)

        batch_end.__wrapped__ = original  # type: ignore[attr-defined]
        return batch_end

    def _epoch_begin(self, rec: Recorder, original: Any) -> Any:
        def epoch_begin(callbacks: Any, epoch: int, logs: Any = None) -> Any:
            __tracebackhide__ = True
            if rec.driver_depth and threading.get_ident() == rec.thread_id:
                rec.keras_epoch = int(epoch)
            return original(callbacks, epoch, logs)

        epoch_begin.__wrapped__ = original  # type: ignore[attr-defined]
        return epoch_begin


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
