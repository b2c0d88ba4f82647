"""tf.function probe: calls, tracings, and a step for each top-level call made by the cell.

`Function.__call__` is wrapped to count calls per function and to time the calls the cell makes
itself (not those made by Keras or from inside another function): a call whose function traced
an optimizer update is a training step, any other such call a ``function`` row. The tracing
entry point of TensorFlow is wrapped to record every tracing with its input signature; it runs
only when a function is traced, so it costs nothing in steady state.
"""

from __future__ import annotations

import inspect
import math
import weakref
from time import perf_counter
from typing import Any

import numpy as np

from ..record import FunctionStats, Kind, Phase, Record, TraceEvent
from ..recorder import Recorder
from .input_meter import InputWaitMeter
from .inputs import host_bytes, leading_dimension
from .patching import Patcher, wraps_exactly

_SIGNATURE_CHARS = 400
# Argument types that may hold NumPy arrays (`host_bytes` reads them): any other argument, a
# tensor most often, is passed over without a call.
_HOST_TYPES = frozenset({np.ndarray, tuple, list, dict})
_PROBE_CALLS = 2  # calls after which a function making one update per call is read no more
_COUNTED_OPTIMIZERS = 4  # optimizers watched per function


class FunctionEntry:
    """What the probe learned about one tf.function object during the run.

    The function itself is held only weakly: a run must not keep alive the functions that a
    cell creates and drops (a tf.function made anew in a loop is a retracing cause we report).
    """

    __slots__ = (
        "batch",
        "calls",
        "code",
        "counted_calls",
        "counters",
        "failed_traces",
        "keras_internal",
        "last_count",
        "loss_at",
        "meter",
        "name",
        "ready",
        "ref",
        "traces_before",
        "updated",
        "updates",
        "watching",
    )

    def __init__(self, function: Any) -> None:
        self.ref = weakref.ref(function)
        python_function = getattr(function, "python_function", None)
        self.name: str = getattr(python_function, "__qualname__", None) or getattr(
            function, "__name__", "tf.function"
        )
        self.keras_internal = is_keras_internal(python_function)
        self.code = defined_at(python_function)
        self.calls = 0
        self.batch = float("nan")  # batch size of its first top-level call
        self.traces_before = self.last_count = _tracing_count(function)
        # Tracings that raised: TensorFlow counts only those that made a graph.
        self.failed_traces = 0
        self.updates = False
        # The optimizers whose update was traced inside this function, each with its
        # `iterations` when last read: read after each of the first calls, and after every call
        # of a function seen to make several updates per call (see `updates_in_call`).
        self.counters: list[tuple[weakref.ref[Any], list[int]]] = []
        self.watching = False
        self.updated = 0  # updates counted over the calls that made several
        self.counted_calls = 0  # those calls
        self.ready = False  # its first top-level call was seen (see `first_call`)
        self.loss_at: Any = None  # where the returned loss sits, learned on the first call
        # An `ArgumentMeter` where the function is given an iterator, learned on the first call
        self.meter: Any = _UNKNOWN

    def watch(self, optimizer: Any) -> None:
        """An update of `optimizer` was traced inside this function: read its `iterations`
        now (at tracing, before the call runs the update) and after the calls."""
        if len(self.counters) >= _COUNTED_OPTIMIZERS or any(
            ref() is optimizer for ref, _ in self.counters
        ):
            return
        value = _iterations(optimizer)
        if value is not None:
            self.counters.append((weakref.ref(optimizer), [value]))
            self.watching = True

    def updates_in_call(self) -> int:
        """Optimizer updates the call that just ended made: the largest rise of a watched
        optimizer's `iterations` (two optimizers updated once each, a GAN's step, make one).

        Read after the first `_PROBE_CALLS` calls, and then only while calls make several
        updates: a read waits for the call's work to finish, which a whole epoch's call has
        done anyway, while a one-update step on a GPU must keep running ahead of the host.
        """
        most = 0
        for ref, last in self.counters:
            value = _iterations(ref())
            if value is not None:
                most = max(most, value - last[0])
                last[0] = value
        if most > 1:
            self.updated += most
            self.counted_calls += 1
        elif self.calls >= _PROBE_CALLS and not self.counted_calls:
            self.watching = False  # one update per call: the rows are the steps
        return max(most, 1)

    def traces(self) -> int:
        """Tracings during the run, those that raised included (counted when last seen, if the
        function is gone)."""
        function = self.ref()
        count = _tracing_count(function) if function is not None else self.last_count
        return max(count - self.traces_before, 0) + self.failed_traces

    def raised_after_tracing(self, function: Any) -> None:
        """A call of `function` raised after something was traced in it: where TensorFlow's
        count of its tracings did not rise, its own tracing is what raised (an error in the
        Python code a tracing runs, a shape it cannot take)."""
        if _tracing_count(function) == self.last_count:
            self.failed_traces += 1


def _iterations(optimizer: Any) -> int | None:
    """An optimizer's `iterations` now, read eagerly (also while a graph is traced); None if
    it has none or it cannot be read."""
    if optimizer is None:
        return None
    try:
        import tensorflow as tf

        with tf.init_scope():
            return int(np.asarray(optimizer.iterations.numpy()))
    except Exception:
        return None


# Modules whose plain functions, made into tf.functions, are the libraries' own.
_LIBRARY_MODULES = ("keras.", "tf_keras.", "tensorflow.")


def is_keras_internal(python_function: Any) -> bool:
    """Whether a tf.function wraps a function that Keras or TensorFlow defines and wraps itself.

    Keras' trainer makes its train/test/predict functions (``one_step_on_data``,
    ``multi_step_on_iterator``, ...) as plain functions in ``keras.src``; TensorFlow's saver
    decorates its ``MultiDeviceSaver._traced_save`` and ``_traced_restore`` in
    ``tensorflow.python.checkpoint``, traced when a SavedModel is written (``model.export``, a
    TFLite conversion). A model object or a bound method given to ``tf.function`` by the cell
    (``tf.function(model)``) is the cell's function even though its class is Keras': its
    retracing is the cell's to fix.
    """
    if not inspect.isfunction(python_function):
        return False
    module = getattr(python_function, "__module__", "") or ""
    return module.startswith(_LIBRARY_MODULES)


_ASSIGN_OPS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})


def graph_updates_trainable_variables(function: Any) -> bool:
    """Whether a graph of `function` updates trainable variables (it is a training step).

    Used for functions traced before the run started, whose optimizer update the optimizer
    probe could not see being traced. A function trains when its graph assigns a captured
    trainable variable, or when it takes gradients and assigns variables inside a nested
    function or branch (an update under ``tf.cond``: loss scaling, gradient accumulation; an
    apply step in a nested tf.function). Metric and optimizer-slot variables are not
    trainable, and evaluation steps take no gradients, so they are not taken for training.
    """
    try:
        concrete_functions = function._list_all_concrete_functions()
    except Exception:
        return False
    for concrete in concrete_functions:
        graph = concrete.graph
        by_handle = {id(v.handle): v for v in concrete.variables}
        captured = {
            inner.name: by_handle[id(outer)]
            for outer, inner in graph.captures
            if id(outer) in by_handle
        }
        operations = graph.get_operations()
        for op in operations:
            if op.type in _ASSIGN_OPS and op.inputs:
                variable = captured.get(op.inputs[0].name)
                if variable is not None and getattr(variable, "trainable", False):
                    return True
        takes_gradients = any(op.name.startswith("gradient_tape/") for op in operations)
        if takes_gradients and _nested_graphs_assign(graph, set()):
            return True
    return False


def _nested_graphs_assign(graph: Any, seen: set[str]) -> bool:
    for name, nested in getattr(graph, "_functions", {}).items():
        if name in seen:
            continue
        seen.add(name)
        inner = getattr(nested, "graph", None)
        if inner is None:
            continue
        if any(op.type in _ASSIGN_OPS for op in inner.get_operations()):
            return True
        if _nested_graphs_assign(inner, seen):
            return True
    return False


def _tracing_count(function: Any) -> int:
    try:
        return int(function.experimental_get_tracing_count())
    except Exception:
        return 0


_UNKNOWN = object()


def _is_scalar_float(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    return bool(getattr(dtype, "is_floating", False)) and shape is not None and len(shape) == 0


def first_call(
    entry: FunctionEntry, function: Any, args: Any, kwargs: Any, result: Any, eager: bool
) -> None:
    """What the first top-level call of a function tells that every later call reads from its
    entry (`entry.ready` then): the batch size, whether its graph updates trainable
    variables, where its result holds the loss."""
    entry.ready = True
    entry.batch = leading_dimension(args, kwargs)
    if not entry.updates and not eager:
        entry.updates = graph_updates_trainable_variables(function)
    entry.loss_at = loss_location(result)


def loss_location(result: Any) -> str | int | None:
    """Where a step function's result holds its loss: the result itself, key "loss", index 0."""
    if _is_scalar_float(result):
        return "self"
    if isinstance(result, dict) and _is_scalar_float(result.get("loss")):
        return "loss"
    if isinstance(result, (tuple, list)) and result and _is_scalar_float(result[0]):
        return 0
    return None


def loss_at(result: Any, location: str | int | None) -> Any:
    """The loss in `result` at `location` (see `loss_location`), without reading its value."""
    try:
        if location == "self":
            return result
        if location == "loss":
            return result["loss"]
        if location == 0:
            return result[0]
    except (KeyError, IndexError, TypeError):
        pass
    return None


class TFFunctionProbe:
    name = "tf_function"

    def __init__(self) -> None:
        self._patcher = Patcher()
        self._rec: Recorder | None = None

    def install(self, recorder: Recorder) -> None:
        from tensorflow.python.eager.polymorphic_function import (
            polymorphic_function,
            tracing_compilation,
        )

        self._rec = recorder
        cls = polymorphic_function.Function
        self._patcher.replace(cls, "__call__", self._call_wrapper(recorder, cls.__call__))
        self._patcher.replace(
            tracing_compilation,
            "_create_concrete_function",
            self._trace_wrapper(recorder, tracing_compilation._create_concrete_function),
        )

    def remove(self) -> None:
        self._patcher.restore()
        rec = self._rec
        if rec is not None:  # the iterators given to functions are the user's: let them go
            for entry in [*rec.functions.values(), *rec.retired_functions]:
                if isinstance(entry.meter, ArgumentMeter):
                    entry.meter.flush()

    def finish(self, record: Record) -> None:
        """The function table (`Record.functions`); the tracings are the recorder's."""
        record.functions = self.function_stats()

    def function_stats(self) -> list[FunctionStats]:
        """Per Python function: calls, tracings during the run, objects; read after the run."""
        rec = self._rec
        if rec is None:
            return []
        # One row per Python function: its name and where it is defined (two functions of one
        # name, in two cells, are two rows; one function wrapped twice is one, two objects).
        grouped: dict[tuple[str, tuple], FunctionStats] = {}
        by_function: dict[tuple[str, tuple], list[FunctionEntry]] = {}
        for entry in [*rec.functions.values(), *rec.retired_functions]:
            key = (entry.name, entry.code)
            by_function.setdefault(key, []).append(entry)
            traces = entry.traces()
            stats = grouped.get(key)
            if stats is None:
                grouped[key] = FunctionStats(
                    name=entry.name,
                    calls=entry.calls,
                    traces=traces,
                    objects=1,
                    keras_internal=entry.keras_internal,
                    updates_weights=entry.updates,
                    updates_per_call=_per_call(entry),
                    defined_at=entry.code,
                )
            else:
                stats.calls += entry.calls
                stats.traces += traces
                stats.objects += 1
                stats.updates_weights = stats.updates_weights or entry.updates
                stats.updates_per_call = max(stats.updates_per_call, _per_call(entry))
        for key, entries in by_function.items():
            for name, value in _input_measure(entries).items():
                setattr(grouped[key], name, value)
        return sorted(grouped.values(), key=lambda s: (-s.calls, s.name))

    @staticmethod
    def _call_wrapper(rec: Recorder, original: Any) -> Any:
        # The hot path. Everything it reads is bound here once, and it makes no call it can
        # avoid (issue 18 counts them: `benchmarks/calls_per_step.py`): the function's entry is
        # the last one's when the same function is called again, the thread test is an
        # attribute of a thread-local, a tracing shows in a counter, arguments are told apart
        # by type, and the row is one `add_step`.
        from tensorflow.python.eager.polymorphic_function import eager_function_run

        functions = rec.functions
        here = rec.here
        train, other, kind = Phase.TRAIN, Phase.FUNCTION, Kind.TF_FUNCTION
        clock = perf_counter
        add_step = rec.add_step
        nan = math.nan
        unknown = _UNKNOWN
        last: list[FunctionEntry | None] = [None]  # the entry of the function called last

        def entry_of(function: Any) -> FunctionEntry:
            entry = functions.get(id(function))
            if entry is None or entry.ref() is not function:
                if entry is not None:  # that id belonged to a function that is gone
                    rec.retired_functions.append(entry)
                entry = functions[id(function)] = FunctionEntry(function)
            last[0] = entry
            return entry

        # Named `self` as in Function.__call__, and signed as it (`wraps_exactly`).
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            function = self
            entry = last[0]
            if entry is None or entry.ref() is not function:
                entry = entry_of(function)
            entry.calls += 1
            traced_before = rec.trace_count
            if rec.top_function is not None or rec.driver_depth or rec.step_depth:
                # A call inside another function, Keras' own function, or a call inside a
                # marked step: counted, not a step. On the main thread it becomes the top
                # function while it runs, so that an optimizer update traced inside it is its
                # own; a call from another thread (tf.distribute replicas) leaves it alone.
                outermost = rec.top_function is None and here.main
                if outermost:
                    rec.top_function = function
                try:
                    return original(function, *args, **kwargs)
                except BaseException:
                    if rec.trace_count != traced_before:
                        entry.raised_after_tracing(function)
                    raise
                finally:
                    if outermost:
                        rec.top_function = None
                    if rec.trace_count != traced_before:
                        entry.last_count = _tracing_count(function)
            if not here.main:
                try:
                    return original(function, *args, **kwargs)
                except BaseException:
                    if rec.trace_count != traced_before:
                        entry.raised_after_tracing(function)
                    raise
                finally:
                    if rec.trace_count != traced_before:
                        entry.last_count = _tracing_count(function)
            wait = rec.pending_wait
            rec.pending_wait = nan
            host = 0.0
            if kwargs:
                host = host_bytes(args, kwargs)
            else:
                for value in args:  # NumPy arguments, which the call converts: read them all
                    if type(value) in _HOST_TYPES:
                        host = host_bytes(args, kwargs)
                        break
            meter = entry.meter
            if meter is not None:  # read once: does the function take an iterator?
                if meter is unknown:
                    meter = entry.meter = iterator_meter(args, kwargs)
                if meter is not None:
                    meter.begin_call(args, kwargs)
            rec.top_function = function
            rec.step_depth += 1
            start = clock()
            try:
                result = original(function, *args, **kwargs)
            except BaseException as exc:
                if rec.trace_count != traced_before:
                    entry.raised_after_tracing(function)
                # The batch size is read once per function on the hot path; a failing call
                # (an OOM at a larger batch) gets its own read.
                rec.note_failure(
                    exc, train if entry.updates else other, leading_dimension(args, kwargs)
                )
                if meter is not None:  # an iterator that ran out: the code may drop it now
                    meter.epoch_over()
                raise
            finally:
                rec.top_function = None
                rec.step_depth -= 1
                if rec.trace_count != traced_before:
                    entry.last_count = _tracing_count(function)
            end = clock()
            # What `Function._run_functions_eagerly` returns, read without the property's call.
            eager = eager_function_run.RUN_FUNCTIONS_EAGERLY
            if not entry.ready:  # the first call: what every later call reads from the entry
                first_call(entry, function, args, kwargs, result, eager)
            location = entry.loss_at
            if location is None:
                loss = None
            elif location == "self":
                loss = result
            else:
                loss = loss_at(result, location)
            fused = 1
            if entry.updates:  # a training step (`add_step` marks it as one)
                if entry.watching:
                    # A call that made several optimizer updates (a whole epoch in one
                    # function) is as many steps, each an equal share of the call.
                    fused = entry.updates_in_call()
                add_step(train, kind, start, end, wait, -1, eager, loss, fused, host, entry.batch)
            else:
                add_step(other, kind, start, end, wait, -1, eager, loss, 1, host, entry.batch)
                if not eager:
                    rec.graph_calls += 1
            if meter is not None:
                meter.step_done(end, fused, False)
            return result

        return wraps_exactly(call, original)

    @staticmethod
    def _trace_wrapper(rec: Recorder, original: Any) -> Any:
        from tensorflow.python.framework import ops

        def _create_concrete_function(
            function_type: Any, type_context: Any, func_graph: Any, tracing_options: Any
        ) -> Any:
            __tracebackhide__ = True
            nested = ops.inside_function()
            start = perf_counter()
            try:
                return original(function_type, type_context, func_graph, tracing_options)
            finally:
                end = perf_counter()
                traced = dataset_function(getattr(tracing_options, "python_function", None))
                rec.trace_count += 1
                rec.traces.append(
                    TraceEvent(
                        time=start - rec.t0,
                        duration=end - start,
                        function=str(getattr(tracing_options, "name", "?")),
                        signature=_signature(function_type),
                        nested=bool(nested),
                        library=is_keras_internal(traced),
                        defined_at=defined_at(traced),
                    )
                )

        return wraps_exactly(_create_concrete_function, original)


_UNWRAP_LEVELS = 8  # decorators over decorators; a cycle of `__wrapped__` ends here
_TF_DATA_WRAPPERS = "tensorflow.python.data.ops.structured_function"


def dataset_function(python_function: Any) -> Any:
    """The function a tf.data transformation was given (``ds.map(self.split_window)``), where
    `python_function` is the wrapper tf.data traces in its place (`wrapped_fn`, which holds the
    `StructuredFunctionWrapper` whose `_func` it is; under TensorFlow's own wrapper of a first
    call, which names it in `__wrapped__`); `python_function` itself otherwise. The wrapper is
    TensorFlow's code, the function the code's own or a library's."""
    wrapper = python_function
    for _ in range(_UNWRAP_LEVELS):  # TensorFlow's variable-capturing wrapper of a first call
        inner = getattr(wrapper, "__wrapped__", None)
        if inner is None or inner is wrapper:
            break
        wrapper = inner
    if getattr(wrapper, "__module__", None) != _TF_DATA_WRAPPERS:
        return python_function
    for cell in getattr(wrapper, "__closure__", None) or ():
        try:
            given = getattr(cell.cell_contents, "_func", None)
        except Exception:  # an empty cell; an object whose attributes raise: not tf.data's
            continue
        if given is not None:
            return given
    return python_function


def defined_at(python_function: Any) -> tuple[str, int] | tuple[()]:
    """Where a Python function is defined: its code's file and first line (a bound method's
    function's; through the wrappers that name what they wrap in `__wrapped__`, TensorFlow's
    variable-creating wrapper of a first call among them), or () where it has no code of its
    own (a callable object, a builtin)."""
    function = python_function
    for _ in range(_UNWRAP_LEVELS):
        inner = getattr(function, "__wrapped__", None)
        if inner is None or inner is function:
            break
        function = inner
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    if code is None:
        return ()
    return (code.co_filename, code.co_firstlineno)


class ArgumentMeter(InputWaitMeter):
    """The input wait of a function's calls that read an iterator given as argument `at` (a
    position or a keyword)."""

    FIRST_READ = 8  # no step is told that an epoch ends: read early, then every 64 steps

    def __init__(self, at: int | str) -> None:
        super().__init__()
        self.at = at

    def begin_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        at = self.at
        self.begin(args[at] if type(at) is int and at < len(args) else kwargs.get(str(at)))


def iterator_meter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> ArgumentMeter | None:
    """A meter for the one tf.data or distributed iterator among a call's arguments; None where
    there is none, or several."""
    import tensorflow as tf

    kinds = (tf.data.Iterator, tf.distribute.DistributedIterator)
    places = [i for i, value in enumerate(args) if isinstance(value, kinds)]
    places += [key for key, value in kwargs.items() if isinstance(value, kinds)]
    return ArgumentMeter(places[0]) if len(places) == 1 else None


def _input_measure(entries: list[FunctionEntry]) -> dict[str, Any]:
    """FunctionStats' input fields from the meters of a function's entries."""
    meters = [e.meter for e in entries if isinstance(e.meter, ArgumentMeter) and e.meter.elements]
    if not meters:
        return {}
    return {
        "input_wait": sum(m.wait for m in meters),
        "input_span": sum(m.span for m in meters),
        "input_elements": sum(m.elements for m in meters),
        "input_series": list(meters[0].series),
        "input_stages": meters[0].stage_work(),
    }


def _per_call(entry: FunctionEntry) -> float:
    return entry.updated / entry.counted_calls if entry.counted_calls else 0.0


def _signature(function_type: Any) -> str:
    try:
        text = str(function_type)
    except Exception:
        return "?"
    return text if len(text) <= _SIGNATURE_CHARS else text[: _SIGNATURE_CHARS - 1] + "…"
