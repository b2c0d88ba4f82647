"""repeated-adapt-passes: preprocessing layers adapted one by one over the same tf.data
pipeline, each `adapt()` a whole pass over it from its source."""

from __future__ import annotations

from collections import Counter

from ..findings import Finding
from ..record import AdaptCall, Record
from ..units import and_list, seconds, share
from .dataset_facts import reads_a_cache
from .evidence import rounded

CODE = "repeated-adapt-passes"
TITLE = "Preprocessing layers adapted one by one, each a whole pass over the same pipeline"
DOC = """\
## What it detects
Several `adapt()` calls of Keras preprocessing layers (`Normalization`, `StringLookup`,
`IntegerLookup`, `Discretization`, `TextVectorization`) given tf.data datasets made from the
same pipeline: TensorFlow's "Classify structured data using Keras preprocessing layers"
tutorial adapts one layer per column, each over `train_ds.map(lambda x, y: x[name])`.

## Why it hurts
`adapt()` reads all of its data, and a dataset's data is its whole pipeline, run from its
source: every call shuffles, slices and batches every column again to keep one, and the time
grows with the rows times the calls. Read under the tool on the tutorial's code with 40,000
rows of synthetic data (`tests/test_diagnose_repeated_adapt_passes.py`, a quiet 2-vCPU AMD
EPYC VM), its 12 calls took 3.65 s; the same layers adapted on the columns' arrays took
0.04 s, and over a cache of the pipeline 0.81 s. At the tutorial's own 9,229 training rows the
13 calls took 0.8 s, under this finding's bar.

## Evidence we show
The calls over one pipeline: how many, the layers, their time in all and each on average,
their share of the run, the lines that made them, and the shared pipeline's stages.

`keras.utils.FeatureSpace.adapt` does the same: a pass over the dataset it is given for each
feature's layer, one after the other.

## Fix
Read the data once. Where it is in memory (the pipeline starts from `from_tensor_slices`),
give each layer its values as an array (`layer.adapt(train_df[name].to_numpy())`): no
pipeline at all. Otherwise cache what the calls share, once, and adapt over the cache
(`adapt_ds = train_ds.cache()`, then `layer.adapt(adapt_ds.map(...))`): the first call fills
it, the others read memory. A cache after a shuffle keeps its first order, so train on the
pipeline as it was. For a `FeatureSpace`, give its `adapt` a cache of the dataset in batches
of a thousand or so (`.unbatch().batch(1024).cache()`): on keras-io's FeatureSpace example's
columns, 40,000 rows in batches of 32, its 7 passes took 5.4 s as written, 3.4 s over a cache
and 0.9 s over a cache in batches of 1,024 (a script of the test's cell, run plainly).

## Threshold
At least 3 calls over datasets that share a stage of their pipelines (the same dataset object
under each call's own `map`), whose passes after the first (the calls' time less one call's
on average) took at least 1 s, of wall time and of the process's CPU time alike (a busy
machine stretches the first: a program of 6 calls read 0.65 s quiet and 1.8 s beside a test
suite's workers and a CPU hog), and whose time in all is at least 15% of the run's. Pipelines
that read a cache are left out: their passes after the first run nothing below it again; so
are calls that raised, which read an unknown part of their data.
"""

MIN_CALLS = 3
MIN_REPEATED_S = 1.0
MIN_SHARE = 0.15
# Sources whose elements are arrays the code holds in memory already.
_IN_MEMORY = frozenset({"TensorSliceDataset", "TensorDataset"})


def check(record: Record, source: str | None) -> Finding | None:
    del source  # the fix depends on where the data is, not on how the cell is written
    groups: dict[int, list[AdaptCall]] = {}
    for call in record.adapt_calls:
        # A pipeline that reads a cache: a pass after the one that filled it runs nothing
        # below the cache again. FeatureSpace's calls count as any others.
        # A call that raised read an unknown part of its data: not a pass.
        if call.data == "dataset" and call.finished and not reads_a_cache(call.stages):
            groups.setdefault(call.shared, []).append(call)
    judged = [(calls, _repeated_seconds(calls)) for calls in groups.values()]
    wall = record.wall_time
    found = [
        (calls, repeated)
        for calls, repeated in judged
        if len(calls) >= MIN_CALLS
        and repeated >= MIN_REPEATED_S
        and wall > 0
        and sum(call.wall for call in calls) >= MIN_SHARE * wall
    ]
    if not found:
        return None
    calls, repeated = max(found, key=lambda item: item[1])
    total = sum(call.wall for call in calls)
    layers = Counter(call.layer for call in calls)
    stages = [stage.kind for stage in calls[0].stages]
    in_memory = bool(stages) and stages[-1] in _IN_MEMORY
    lines = sorted({call.line for call in calls if call.line >= 0})
    callers = sorted({call.caller for call in calls if call.caller >= 0} - set(lines))
    layer_text = and_list([f"{count} {name}" for name, count in layers.most_common()])
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{len(calls)} adapt() calls each read the same pipeline whole: {seconds(total)},"
            f" {share(total, wall)} of the run"
        ),
        detail=(
            f"{layer_text} layers were adapted one by one"
            f"{' by `FeatureSpace.adapt`' if calls[0].by_feature_space else ''}"
            " over datasets made from one pipeline"
            f" ({_pipeline_text(stages)}). Each `adapt()` reads all of its data, so each ran"
            f" the pipeline from its source again: {seconds(total / len(calls))} a call on"
            f" average, {seconds(repeated)} of work in the passes after the first."
        ),
        fix=_fix_feature_space() if calls[0].by_feature_space else _fix(in_memory),
        evidence={
            "calls": len(calls),
            "layers": dict(layers.most_common()),
            "seconds": rounded(total),
            "per_call_s": rounded(total / len(calls)),
            "repeated_s": rounded(repeated),
            "cpu_s": rounded(sum(call.cpu for call in calls)),
            "share_of_run": rounded(total / wall, 3),
            "lines": lines,
            "called_from": callers,
            "pipeline": stages,
            "source_in_memory": in_memory,
            "by_feature_space": calls[0].by_feature_space,
        },
        impact=repeated,
    )


def _repeated_seconds(calls: list[AdaptCall]) -> float:
    """The calls' work past one pass: all of it less one call's on average. A call's work is
    its wall time, or the process's CPU time meanwhile where less: a busy machine stretches
    the first, not the second."""
    total = sum(min(call.wall, call.cpu) if call.cpu >= 0 else call.wall for call in calls)
    return total - total / len(calls) if calls else 0.0


def _pipeline_text(stages: list[str]) -> str:
    kinds = [kind.removesuffix("Dataset") or kind for kind in stages]
    return " ← ".join(kinds) if kinds else "its stages unread"


def _fix_feature_space() -> str:
    return (
        "Give `FeatureSpace.adapt` a cache of the dataset in large batches:"
        " `feature_space.adapt(train_ds_with_no_labels.unbatch().batch(1024).cache())`. It"
        " adapts each feature's layer in a pass of its own over the dataset it is given, one"
        " update a batch; over the cache the first pass fills it and the others read memory."
        " Train on the pipeline as it was: a cache after a shuffle keeps its first order."
    )


def _fix(in_memory: bool) -> str:
    cache = (
        "cache what the calls share, once, and adapt over the cache: `adapt_ds ="
        " train_ds.cache()`, then `layer.adapt(adapt_ds.map(...))`; the first call fills it,"
        " the others read memory (a cache after a shuffle keeps its first order: train on the"
        " pipeline as it was)."
    )
    if in_memory:
        return (
            "Read the data once. It is in memory (the pipeline starts from"
            " `from_tensor_slices`): give each layer its values as an array,"
            " `layer.adapt(train_df[name].to_numpy())`, which reads no pipeline at all; or " + cache
        )
    return "Read the data once: " + cache
