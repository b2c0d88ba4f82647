"""retracing: a tf.function keeps tracing after its warm-up."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Kind, Record
from ..rewrite import hoist_function, reduce_retracing, scalars_to_tensors
from ..units import seconds
from .evidence import first_rewrite, rounded, with_rewrite
from .signatures import changing_arguments, is_python_value, is_shape_change, shape_of

CODE = "retracing"
TITLE = "A tf.function keeps tracing"
DOC = """\
## What it detects
A `tf.function` of the cell traced (built a new graph) again and again during the run, not
only on its first calls. TensorFlow traces once per new *input signature*: every new value of
a Python argument (`step=i`, `training=flag` from a Python int), every new tensor shape (a last
partial batch, variable-length inputs), and every *new function object* (a `tf.function` or a
bound method created anew inside a loop: each object has its own cache, so it traces on its
first call).

## Why it hurts
A tracing runs the Python function symbolically and builds and optimises a graph: tens of
milliseconds to seconds, against a steady step of microseconds to milliseconds. Each new graph
is also kept, so memory grows with the number of tracings. This is the usual cause of training
that "gets slower and uses more memory as it runs", which articles blame on memory
fragmentation or on the optimizer state; neither grows in a well-formed loop.

## Evidence we show
The function, its tracings and calls during the run, how many function objects were made, the
time spent tracing against the median time of a call that did not trace, and the argument whose
type changed between tracings (read from the recorded signatures).

## Fix
- A Python number that changes every call: pass a tensor (`tf.constant(step)`), so the value
  lives in the graph's input instead of its structure.
- Shapes that change: `@tf.function(reduce_retracing=True)`, or an `input_signature` with
  `None` in the changing dimension, or batches of one shape (`drop_remainder=True`).
- A function created in a loop: create it once, before the loop.

## Threshold
Five tracings of one Python function in a run, TensorFlow's own retracing-warning threshold
(`FREQUENT_TRACING_WARNING_THRESHOLD = 5` in
`tensorflow/python/eager/polymorphic_function/polymorphic_function.py`), and more than one
tracing after the first call. Keras' own train/test/predict functions (functions Keras
defines in `keras.src` and wraps itself) are left out: each model's are made anew after each
`compile`, and the inner `one_step_on_data` traces on each of its calls, which happen only
while its outer function traces, so their counts are expected; so is any function whose
tracings (all but four) ran inside another tracing: a recursive `tf.function` called with a
Python number traces once per level while its one graph is built (TensorFlow's tf.function
guide shows it), and a helper traces with the function that calls it, which is the one to
fix; a Keras call repeated in a loop is `repeated-keras-call`. A model or method that the
cell wraps in `tf.function` is the cell's. A function made anew for each model built in the
run (a sweep over models), each object traced only on its first call or two (a first call
that creates variables traces twice), is not retracing: every model needs its own graph.

Nor is a handful of signatures among many calls: TensorFlow warns only where 5 of the last
10 calls traced. The tracings must also recur: at least one call in 20 traced, or tracing
took a quarter of the run, or one argument took five or more values (Python values other than
`None`, or tensor shapes and dtypes, their spec names aside), or the function objects were
made anew. A text generator whose step is called first with `states=None`, then with the
state, for one prompt and then for a batch of five, and again after its SavedModel is
reloaded, traces 8 times in 2,000 calls for 1 s of a 92 s run: four signatures, each needed.
The same step for three batch sizes, 6,000 calls, traced for 8% of a 3.4 s run in a warm
process, but for 10-17% of the run as a script of its own (four runs at a load of 3-5 on
2 vCPUs: the first tracing builds the layer), and was called retracing against a bar of a
tenth then.
"""

MIN_TRACES = 5
# A function whose first call creates variables (a Keras optimizer's slots) traces twice.
WARM_UP_TRACES = 2
# What makes tracings recur rather than a few needed variants (see the threshold above).
FREQUENT_SHARE = 0.05  # tracings per call
COSTLY_SHARE = 0.25  # tracing time over the run's wall time


def check(record: Record, source: str | None) -> Finding | None:
    candidates = [
        f
        for f in record.functions
        if not f.keras_internal
        and f.traces >= MIN_TRACES
        and not _one_per_model(record, f)
        and not _traced_inside_others(record, f)
        and _keeps_tracing(record, f)
    ]
    if not candidates:
        return None
    worst = max(candidates, key=lambda f: f.traces)
    events = _top_level_tracings(record, worst)
    trace_time = sum(t.duration for t in events)
    changing = changing_arguments([t.signature for t in events])
    traced, untraced = _call_times(record, worst, events)
    evidence = {
        "function": worst.name,
        "traces": worst.traces,
        "calls": worst.calls,
        "function_objects": worst.objects,
        "tracing_time_s": rounded(trace_time),
        "median_traced_call_s": rounded(float(np.median(traced))) if traced.size else None,
        "median_untraced_call_s": rounded(float(np.median(untraced))) if untraced.size else None,
        "changing_arguments": {k: v[:5] for k, v in changing.items()},
    }
    cause, attempts = _cause(worst, changing)
    title = (
        f"`{worst.name}` traced {worst.traces} times in {worst.calls} calls"
        f" ({seconds(trace_time)} tracing)"
    )
    finding = Finding(
        code=CODE,
        severity="warning",
        title=title,
        detail=cause,
        fix=_fix_words(worst, changing),
        evidence=evidence,
        impact=trace_time,
    )
    return with_rewrite(finding, source, first_rewrite(source, *attempts))


def _call_times(record: Record, function, events: list) -> tuple[np.ndarray, np.ndarray]:
    """The durations of the rows that were `function`'s traced calls, and of its untraced ones.

    The table has no column naming a row's function. A traced row is the function's where
    one of its own top-level tracings began inside it. Untraced rows are read only where
    every call row of the table is the function's (its calls as many as the rows, or no other
    function of the code's called at all): other functions' calls (a second function in the
    loop) would be counted as its own. Where the function has no rows of its own (called
    inside a Keras or loop step), the rows are steps, not calls: neither is read."""
    steps = record.steps
    calls = steps["kind"] == Kind.TF_FUNCTION
    if not calls.any():
        return np.empty(0), np.empty(0)
    starts = steps["start"][calls]
    durations = steps["duration"][calls]
    traced_rows = steps["traced"][calls]
    began = np.sort(np.array([event.time for event in events], dtype=float))
    after_start = np.searchsorted(began, starts)
    inside = after_start < began.size
    inside[inside] = began[after_start[inside]] <= (starts + durations)[inside]
    traced = durations[traced_rows & inside]
    only_function = all(
        other is function or other.keras_internal or not other.calls for other in record.functions
    )
    if int(calls.sum()) != function.calls and not only_function:  # (a long run's table is
        return traced, np.empty(0)  # a sample: its rows fewer than the calls)
    return traced, durations[~traced_rows]


def _top_level_tracings(record: Record, function) -> list:
    return [t for t in record.traces if not t.nested and traced_from(t, function)]


def traced_from(trace, function) -> bool:
    """Whether the tracing event `trace` traced the Python function `function` (a row of the
    function table): by name, and by where it is defined where both are known (two functions
    of one name in two cells are two)."""
    if not same_function(trace.function, function.name):
        return False
    return not (trace.defined_at and function.defined_at) or trace.defined_at == function.defined_at


def _keeps_tracing(record: Record, function) -> bool:
    """Whether the function's tracings recur, rather than a few signatures each traced once
    among many calls (see the threshold): frequent, costly, over many values of an argument,
    or of function objects made anew."""
    if function.objects >= max(2, function.traces // 2):
        return True
    if function.traces >= FREQUENT_SHARE * max(function.calls, 1):
        return True
    events = _top_level_tracings(record, function)
    if record.wall_time and sum(t.duration for t in events) >= COSTLY_SHARE * record.wall_time:
        return True
    changing = changing_arguments([t.signature for t in events])
    return any(len(_distinct_values(values)) >= MIN_TRACES for values in changing.values())


def _distinct_values(values: list[str]) -> set[str]:
    """An argument's values that make distinct graphs: Python values but `None` (an optional
    argument's first call), tensor specs by shape and dtype (a spec's name aside)."""
    return {shape_of(v) for v in values if v not in ("Literal[None]", "<absent>")}


def _traced_inside_others(record: Record, function) -> bool:
    """Most of the function's tracings ran inside another tracing (a recursive tf.function
    calling itself with a smaller Python number, or a helper called by a function that
    traces): fewer than `MIN_TRACES` of them began at a call of the code's own, so building
    the graphs it was called for took them, once each, not its calls."""
    events = [t for t in record.traces if traced_from(t, function)]
    own = sum(not t.nested for t in events)
    return len(events) >= function.traces and own < MIN_TRACES


def _one_per_model(record: Record, function) -> bool:
    """A step function made anew for each model of a sweep, each traced only for its first
    calls: every model needs its own graph, so these tracings are not retracing."""
    return (
        function.objects >= 2
        and function.traces <= WARM_UP_TRACES * function.objects
        and len(record.models) >= function.objects
    )


def same_function(traced_name: str, qualname: str) -> bool:
    """Whether a tracing event's function name is the Python function `qualname`."""
    short = qualname.rsplit(".", 1)[-1]
    return traced_name in (qualname, short) or traced_name.endswith("." + short)


def _cause(function, changing: dict[str, list[str]]) -> tuple[str, list]:
    name = function.name.rsplit(".", 1)[-1]
    if function.objects >= max(2, function.traces // 2):
        return (
            f"{function.objects} separate tf.function objects were made for `{function.name}`:"
            " each new object traces on its first call, so creating the function inside a loop"
            " (or wrapping a bound method anew) traces every time.",
            [(hoist_function, {})],
        )
    # `None` alone is an optional argument's first call, not a value that changes.
    python_args = [
        k
        for k, v in changing.items()
        if any(is_python_value(x) and x != "Literal[None]" for x in v)
    ]
    if python_args:
        shown = ", ".join(f"`{a}`" for a in python_args)
        values = ", ".join(changing[python_args[0]][:3])
        return (
            f"The Python argument {shown} takes a new value on each call ({values}, ...):"
            " a Python value is part of the graph's signature, so each new value traces a new"
            " graph.",
            # Not `reduce_retracing`: it generalises shapes, and a Python value stays part of
            # the signature (the same 8 traces for 8 values). No tensor rewrite: no rewrite.
            [(scalars_to_tensors, {"function": name, "arguments": python_args})],
        )
    shape_args = [k for k, v in changing.items() if is_shape_change(v)]
    if shape_args:
        shown = ", ".join(f"`{a}`" for a in shape_args)
        return (
            f"The tensor argument {shown} arrives with new shapes"
            f" ({'; '.join(changing[shape_args[0]][:2])}): each new shape traces a new graph.",
            [(reduce_retracing, {"function": name})],
        )
    return (
        f"`{function.name}` was traced {function.traces} times; the recorded signatures do not"
        " show which input changed (a closure, a global or a default argument may).",
        [(reduce_retracing, {"function": name}), (hoist_function, {})],
    )


def _fix_words(function, changing: dict[str, list[str]]) -> str:
    if function.objects >= max(2, function.traces // 2):
        return "Create the tf.function once, outside the loop, and call that one object."
    if any(any(is_python_value(x) for x in v) for v in changing.values()):
        return (
            "Pass changing numbers as tensors (`tf.constant(i)`), or keep them out of the"
            " function's arguments."
        )
    return (
        "Give the function inputs of one shape, or trace it for a general shape:"
        " `@tf.function(reduce_retracing=True)` or an `input_signature` with `None` dimensions."
    )
