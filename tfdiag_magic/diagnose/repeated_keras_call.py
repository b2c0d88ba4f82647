"""repeated-keras-call: fit / evaluate / predict / compile called over and over in a loop."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..findings import Finding
from ..record import OTHER_CALLS, KerasCall, KerasCallGroup, Kind, Record
from ..rewrite import compile_once, fit_once, predict_in_loop, train_on_batch_in_loop
from ..units import seconds, share
from .evidence import first_rewrite, loop_label, loop_line, rounded, with_rewrite

CODE = "repeated-keras-call"
TITLE = "Keras fit/predict/evaluate/compile called in a Python loop"
DOC = """\
## What it detects
`model.fit`, `model.predict`, `model.evaluate` or `model.compile` called many times from a
Python loop of the cell, where most of each call's time is spent outside the work it does.

## Why it hurts
Each of these calls sets up a run: it wraps the data in a new iterator (a new tf.data
pipeline), builds the callback list and progress bar, and on the first call after `compile`
builds and traces the train/test/predict function. `compile` drops the compiled function, so
the next `fit` traces again. Called once per sample or per epoch, this set-up dominates:
`predict` on one sample costs milliseconds of set-up for microseconds of work, and the
difference grows with the number of calls.

## Evidence we show
The API, the number of calls from one loop, the median time of a call, and the time spent in
the batches inside the calls (the work), so the set-up share is measured, not guessed. Other
APIs the same loop repeats past the threshold (its `predict` and its `fit`) are named in the
same finding (`also`), and the rewrite fixes each. One API's calls on several models of the
loop (a deep-Q network's online and target models) count together, the models named.

## Fix
- `predict` on one batch in a loop: `model.predict_on_batch(x)` (returns NumPy too) or
  `model(x, training=False)`; better, predict all inputs in one call.
- `fit(..., epochs=1)` in a loop: one `fit(..., epochs=N)`, with a callback for per-epoch work.
  Where each call fits one batch of data the loop makes (a replay buffer's sample in
  reinforcement learning), `model.train_on_batch(x, y)`: the same step without the set-up.
- `compile` in a loop: compile once, before the loop.

## Threshold
Five or more calls of one API on one model from the same loop, with set-up (call time minus
batch time) taking at least 30% of their total and at least 0.2 s in all; `compile` counts
from three calls, since each one also forces the next `fit` to trace again. A warning where the
set-up takes at least 10% of the run's time, a note (info) below. A model built
anew in the loop starts its own count (a search over models compiles and fits each one; with
`clear_session()` the new models reuse the old names, so builds are told apart by time).
"""

MIN_CALLS = 5
MIN_COMPILES = 3
MIN_OVERHEAD_SHARE = 0.3
MIN_OVERHEAD_SECONDS = 0.2
WARNING_RUN_SHARE = 0.1  # of the run's wall time in set-up, from which it is a warning


def check(record: Record, source: str | None) -> Finding | None:
    # Calls on one model from one loop: a new model per iteration (a search over models)
    # needs its own compile and fit, and is `model-rebuilt-in-loop`'s business. A model is
    # told by its name and by when it was built: after `clear_session()` names repeat.
    groups: dict[tuple[str, int, str, int], list[KerasCall]] = defaultdict(list)
    # A long run keeps its first calls one by one and sums the later ones by the same key.
    summed: dict[tuple[str, int, str, int], list[KerasCallGroup]] = defaultdict(list)
    builds = _builds_by_name(record)
    for call in record.keras_calls:
        if call.loop >= 0:
            groups[(call.api, call.loop, call.model, _built(builds, call))].append(call)
    for group in record.keras_call_groups:
        if group.loop >= 0 and group.built != OTHER_CALLS:
            summed[(group.api, group.loop, group.model, group.built)].append(group)
    # The groups past the thresholds, one per API and loop: the same API on other models of
    # the loop (a deep-Q network's `model.predict` and `target_model.predict`) adds to it.
    found: dict[tuple[str, int], _Repeated] = {}
    for key in [*groups, *(key for key in summed if key not in groups)]:  # in call order
        api, loop = key[0], key[1]
        calls, later = groups.get(key, []), summed.get(key, [])
        count, total, work, _ = _totals(calls, later)
        overhead = total - work
        if api == "compile":
            overhead = total + _retracing_after(record, calls, builds)
        needed = MIN_COMPILES if api == "compile" else MIN_CALLS
        if count < needed or overhead < MIN_OVERHEAD_SECONDS:
            continue
        if api != "compile" and overhead < MIN_OVERHEAD_SHARE * total:
            continue
        repeated = found.setdefault((api, loop), _Repeated(api, loop))
        repeated.overhead += overhead
        repeated.calls += calls
        repeated.later += later
        repeated.models.setdefault((key[2], key[3]), None)
    if not found:
        return None
    best = max(found.values(), key=lambda group: group.overhead)
    overhead, api, loop = best.overhead, best.api, best.loop
    calls, later = best.calls, best.later
    # The other APIs repeated in the same loop (a replay loop's predicts and fits): named in
    # the same finding, and fixed in the same rewrite.
    also = sorted(
        (group for group in found.values() if group.loop == loop and group.api != api),
        key=lambda group: -group.overhead,
    )
    count, total, work, batches = _totals(calls, later)
    if api == "compile":
        total = overhead + work
    per_call = total / count
    # The median of the calls kept one by one (a long run's first ones); the mean where
    # every call of the group was summed.
    median = sorted(c.duration for c in calls)[len(calls) // 2] if calls else per_call
    evidence = {
        "api": api,
        "calls": count,
        "loop": loop_label(record, loop),
        "median_call_s": rounded(median),
        "work_in_batches_s": rounded(work),
        "setup_s": rounded(overhead),
        "setup_share": rounded(overhead / total if total else 0.0, 3),
        "batches_per_call": rounded(batches / count, 3),
    }
    lineno = loop_line(record, loop)
    one_batch = batches <= count  # every call ran one batch (or none)
    rewritten, by = _rewrite(source, lineno, [(api, one_batch)])
    fix = _fix(api, one_batch, by)
    if len(best.models) > 1:
        evidence["models"] = [name for name, _ in best.models]
    detail = (
        f"`model.{api}` was called {count} times{_on_models(best)} from {evidence['loop']};"
        f" a call took {seconds(per_call)} on average (median {seconds(median)}; the first"
        f" traces), of which {share(overhead, total)} was set-up outside its batches"
        f" ({seconds(work / count)} of batches per call on average)."
    )
    if api == "compile":
        detail += " Each compile also discards the compiled train function, so the next fit"
        detail += " traces it again."
    if api == "fit" and by is not train_on_batch_in_loop:
        # Measured here: one fit(epochs=1) took 0.21 s where an epoch of fit(epochs=10) took
        # 0.15 s; epoch-end work (callbacks, validation, a new pass over the data) remains.
        detail += (
            " One `fit` with `epochs=N` saves the call's set-up, not all of this: each epoch"
            " still has work of its own at its ends (callbacks, validation, a new pass over"
            " the data)."
        )
    in_all = overhead
    for other in also:
        other_api, other_overhead = other.api, other.overhead
        other_count, other_total, _, other_batches = _totals(other.calls, other.later)
        other_one_batch = other_batches <= other_count
        rewritten_too, other_by = _rewrite(
            rewritten or source, lineno, [(other_api, other_one_batch)]
        )
        rewritten = rewritten_too or rewritten
        detail += (
            f" The same loop also calls `{other_api}` {other_count} times{_on_models(other)},"
            f" {share(other_overhead, other_total)} of its time outside its batches"
            f" ({seconds(other_overhead)} in all)."
        )
        fix += f" `{other_api}`: {_fix(other_api, other_one_batch, other_by)}"
        if "also_api" not in evidence:  # the largest of them
            evidence["also_api"] = other_api
            evidence["also_calls"] = other_count
            evidence["also_setup_s"] = rounded(other_overhead)
        in_all += other_overhead
    run_share = in_all / record.wall_time if record.wall_time > 0 else 1.0
    evidence["setup_share_of_run"] = rounded(run_share, 3)
    finding = Finding(
        code=CODE,
        # A set-up cost that is a small part of the run (five predicts of a plotting loop
        # after a long training) is worth knowing, not a warning.
        severity="warning" if run_share >= WARNING_RUN_SHARE else "info",
        title=(
            f"`{api}` called {count} times in a loop:"
            f" {share(overhead, total)} of its time outside its batches"
        ),
        detail=detail,
        fix=fix,
        evidence=evidence,
        impact=in_all,
    )
    return with_rewrite(finding, source, rewritten)


@dataclass
class _Repeated:
    """One API repeated in one loop: its calls on each model there past the thresholds."""

    api: str
    loop: int
    overhead: float = 0.0  # seconds of set-up, all its models'
    calls: list[KerasCall] = field(default_factory=list)
    later: list[KerasCallGroup] = field(default_factory=list)
    # Its models, in call order: (name, build), as a clone keeps its model's name.
    models: dict[tuple[str, int], None] = field(default_factory=dict)


def _on_models(group: _Repeated) -> str:
    """ " on 2 models (`sequential`, `sequential_1`)" where the calls were on more than one
    (" on 2 models (named `sequential`)" where they share a name: a clone)."""
    count = len(group.models)
    if count < 2:
        return ""
    names = list(dict.fromkeys(name for name, _ in group.models))
    listed = ", ".join(f"`{name}`" for name in names)
    return (
        f" on {count} models ({listed})"
        if len(names) == count
        else f" on {count} models (named {listed})"
    )


_FIXES = {
    "predict": "Use `model.predict_on_batch(x)` or `model(x, training=False)` in the loop,"
    " or predict all inputs in one call.",
    "compile": "Compile once, before the loop.",
    "fit": "Call `fit` once with `epochs=N`; do per-epoch work in a callback.",
    "evaluate": "Evaluate once on all the data, or use `model(x, training=False)` and a"
    " metric object in the loop.",
}
# Each call fitted one batch: where the loop makes new data each time (a replay buffer's
# sample), fitting it once with more epochs is not the same training.
_FIT_NEW_DATA_FIX = (
    "Where each call fits one batch of new data (a replay buffer's sample),"
    " `model.train_on_batch(x, y)` runs the same training step without the call's set-up;"
    " or gather the batches and fit them in one call."
)


def _fix(api: str, one_batch: bool, by: Callable[..., str | None] | None) -> str:
    """The fix in words: a fit of one batch a call may be new data each time, where fitting
    it once with more epochs is not the same training (`train_on_batch` where the rewrite
    saw the data made in the loop)."""
    if api != "fit" or not one_batch:
        return _FIXES[api]
    if by is train_on_batch_in_loop:
        return _FIT_NEW_DATA_FIX
    return f"{_FIXES[api]} {_FIT_NEW_DATA_FIX}"


def _rewrite(
    source: str | None, lineno: int | None, apis: list[tuple[str, bool]]
) -> tuple[str | None, Callable[..., str | None] | None]:
    """The cell with the fix of each (api, one batch a call) made in turn, and the rewrite
    function of the last that applied; (None, None) where none did."""
    current, by = source, None
    for api, one_batch in apis:
        attempts = {
            "predict": [(predict_in_loop, {"loop_lineno": lineno})],
            "compile": [(compile_once, {})],
            "fit": [(fit_once, {})],
            "evaluate": [],
        }[api]
        if api == "fit" and one_batch:
            attempts = [(train_on_batch_in_loop, {"loop_lineno": lineno}), *attempts]
        for function, facts in attempts:
            result = first_rewrite(current, (function, facts))
            if result is not None:
                current, by = result, function
                break
    return (current, by) if current != source else (None, None)


Builds = dict[str, tuple[list[float], list[int]]]


def _totals(calls: list[KerasCall], later: list[KerasCallGroup]) -> tuple[int, float, float, int]:
    """Calls, seconds in them, seconds in their batches and batches, over the calls kept one
    by one and the ones summed in groups."""
    return (
        len(calls) + sum(g.calls for g in later),
        sum(c.duration for c in calls) + sum(g.duration for g in later),
        sum(c.step_time for c in calls) + sum(g.step_time for g in later),
        sum(c.steps for c in calls) + sum(g.steps for g in later),
    )


def _builds_by_name(record: Record) -> Builds:
    """Model name -> (build times, indices in `record.models`), in time order."""
    builds: Builds = {}
    for index, model in sorted(enumerate(record.models), key=lambda item: item[1].time):
        times, indices = builds.setdefault(model.name, ([], []))
        times.append(model.time)
        indices.append(index)
    return builds


def _built(builds: Builds, call: KerasCall) -> int:
    """Which model of that name the call was made on: the index of its latest build before
    the call (-1: built before the run)."""
    times, indices = builds.get(call.model, ([], []))
    slot = bisect.bisect_right(times, call.start) - 1
    return indices[slot] if slot >= 0 else -1


def _retracing_after(record: Record, compiles: list[KerasCall], builds: Builds) -> float:
    """Seconds of traced Keras steps in the calls on the same model that follow these
    compiles (each compile drops the train function, so the next fit traces it again). Read
    from the calls kept one by one and the step table: a lower bound on a very long run."""
    import numpy as np

    if not compiles:
        return 0.0
    steps = record.steps
    first = min(c.start for c in compiles)
    key = (compiles[0].model, compiles[0].loop, _built(builds, compiles[0]))
    keras_traced = (steps["kind"] == Kind.KERAS) & steps["traced"]
    total = 0.0
    for call in record.keras_calls:
        if call.api == "compile" or call.start <= first:
            continue
        if (call.model, call.loop, _built(builds, call)) != key:
            continue
        inside = (steps["start"] >= call.start) & (steps["start"] <= call.start + call.duration)
        total += float(np.sum(steps["duration"][keras_traced & inside]))
    return total
