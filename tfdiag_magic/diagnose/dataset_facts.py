"""What the input-bound finding reads of a tf.data pipeline's make-up (`record.DatasetStructure`,
read during the run): whether it already prefetches, caches and maps in parallel, which of
its functions run one element at a time, where its work is, and what is left to do by hand."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..record import DatasetStage, DatasetStructure, KerasCall, Kind, Record
from ..units import and_list

# Stages with a function of the user's (or of a Keras utility) that they run per element.
_FUNCTION_KINDS = {
    "MapDataset": "map",
    "ParallelMapDataset": "map",
    "MapAndBatchDataset": "map",
    "InterleaveDataset": "interleave",
    "ParallelInterleaveDataset": "interleave",
    "FlatMapDataset": "flat_map",
    "FilterDataset": "filter",
    "ScanDataset": "scan",
}
# Sequential stages that `num_parallel_calls` parallelises, with the method that takes it.
_SEQUENTIAL = {"MapDataset": "map", "InterleaveDataset": "interleave"}
# Functions a multi-device or copy-to-device iterator traces when it is created
# (tensorflow/python/data/ops/multi_device_iterator_ops.py, .../experimental/ops/prefetching_ops.py)
CROSS_DEVICE_ITERATOR_FUNCTIONS = frozenset({"_remote_next_func"})


def iterates_across_devices(record: Record, call: KerasCall) -> bool:
    """Whether the Keras call iterated a distributed or copy-to-device dataset: such an
    iterator traces its cross-device functions each time it is made (each epoch)."""
    end = call.start + call.duration
    return any(
        t.function in CROSS_DEVICE_ITERATOR_FUNCTIONS and call.start <= t.time <= end
        for t in record.traces
    )


ITERATOR_START_S = 2.0  # creating a multi-device iterator (before the first wait) takes < 1 s


def loop_iterates_across_devices(record: Record, loop_id: int) -> bool:
    """Whether the loop iterates a distributed or copy-to-device dataset: such an iterator
    traces its cross-device functions when the loop creates it (at each start of the loop)."""
    steps = record.steps
    rows = np.flatnonzero((steps["kind"] == Kind.LOOP) & (steps["loop"] == loop_id))
    if rows.size == 0:
        return False
    first = rows[0]
    begin = float(steps["start"][first]) - float(np.nan_to_num(steps["data_wait"][first]))
    end = float(np.max(steps["start"][rows] + steps["duration"][rows]))
    return any(
        t.function in CROSS_DEVICE_ITERATOR_FUNCTIONS and begin - ITERATOR_START_S <= t.time <= end
        for t in record.traces
    )


def structure_of_call(record: Record, call: KerasCall) -> DatasetStructure | None:
    """The dataset a Keras call consumed: the latest one given to that API from the same loop
    before the call ended."""
    end = call.start + call.duration
    found = None
    for structure in record.datasets:
        if structure.api == call.api and structure.loop == call.loop and structure.time <= end:
            found = structure
    return found


def structure_of_loop(record: Record, loop_id: int) -> DatasetStructure | None:
    """The dataset a loop of the cell iterated (the latest, if it iterated several)."""
    found = None
    for structure in record.datasets:
        if structure.api == "loop" and structure.loop == loop_id:
            found = structure
    return found


def does_work(stage: DatasetStage) -> bool:
    """Whether the stage computes per element (a function, Python, file reads), as opposed to
    moving elements (batch, shuffle, repeat, take, zip, prefetch...)."""
    return bool(stage.kind in _FUNCTION_KINDS or stage.python or stage.reads_files)


def output_path(structure: DatasetStructure) -> list[DatasetStage]:
    """The stages from the output down to the first source or stage with several inputs."""
    return sorted((s for s in structure.stages if not s.branch), key=lambda s: s.depth)


def prefetched(structure: DatasetStructure) -> bool:
    """A prefetch follows the pipeline's last stage that does work: the next batch is made
    while the step runs (Keras' ``timeseries_dataset_from_array`` and
    ``image_dataset_from_directory`` prefetch, then only batch or shuffle), or tf.data adds
    one itself after the pipeline's synchronous last stage."""
    return prefetched_by_the_code(structure) or any(s.auto_prefetch for s in structure.stages)


def prefetched_by_the_code(structure: DatasetStructure) -> bool:
    """A `prefetch` of the code's (or a Keras utility's) follows the last stage that does
    work, leaving out the one tf.data adds itself after a synchronous last stage."""
    for stage in output_path(structure):
        if stage.kind == "PrefetchDataset":
            return True
        if does_work(stage):
            return False
    return False


# Stages that make their elements on threads of their own, ahead of the consumer's request.
_RUNS_AHEAD = frozenset(
    {
        "ParallelMapDataset",
        "ParallelInterleaveDataset",
        "ParallelBatchDataset",
        "MapAndBatchDataset",
    }
)


def runs_ahead(structure: DatasetStructure) -> bool:
    """The pipeline's last stage makes its next elements ahead of the step, on threads of its
    own: a parallel map, interleave or batch, or a map tf.data parallelises itself. That
    overlaps the pipeline with the step as a prefetch would (tf.data adds no prefetch after
    such a stage either): the time-series tutorial's `split_window`, mapped after the batch of
    `timeseries_dataset_from_array`, waited on by fits on 2 CPUs, trained no faster with a
    prefetch after it (6.8-9.2 s against 6.9-8.9 s for fits of two epochs of a linear and a
    dense model, three rounds alternating, quiet) and 16-22% slower beside other programs'
    training."""
    for stage in output_path(structure):
        if stage.kind == "OptionsDataset":
            continue
        return stage.kind in _RUNS_AHEAD or stage.auto_parallel
    return False


def cached(structure: DatasetStructure) -> bool:
    return reads_a_cache(structure.stages)


def reads_a_cache(stages: tuple[DatasetStage, ...]) -> bool:
    """Whether a pipeline of these stages holds a cache (in memory or a file)."""
    return any(stage.kind == "CacheDataset" for stage in stages)


# Stages that hand on what lies under them without work of their own before a first batch.
_PASS_ON = frozenset({"BatchDataset", "PaddedBatchDataset", "PrefetchDataset", "OptionsDataset"})


def served_from_cache(structure: DatasetStructure | None) -> bool:
    """Whether the pipeline's output is a cache with only batching and prefetching over it:
    once its first full pass has filled it, an epoch redoes nothing before its first batch."""
    if structure is None or not structure.complete:
        return False
    for stage in output_path(structure):
        if stage.kind == "CacheDataset":
            return True
        if stage.kind not in _PASS_ON:
            return False
    return False


def sequential(structure: DatasetStructure) -> tuple[tuple[str, str], ...]:
    """(method, function) of the code's own maps and interleaves that run one element at a
    time (not TensorFlow's or Keras' internal ones: the code cannot give them options)."""
    found = {
        (_SEQUENTIAL[s.kind], s.function)
        for s in structure.stages
        if s.kind in _SEQUENTIAL
        and not s.parallel
        and not s.auto_parallel
        and s.function
        and not s.library
    }
    return tuple(sorted(found))


def random_functions(structure: DatasetStructure) -> tuple[str, ...]:
    return tuple(sorted({s.function for s in structure.stages if s.random and s.function}))


def rewrite_facts(structure: DatasetStructure | None) -> dict[str, Any]:
    """What `tune_input_pipeline` needs to propose only what the dataset lacks ({}: nothing
    is known of it, and the rewrite reads the cell alone)."""
    if structure is None:
        return {}
    return {
        # No prefetch is proposed where one follows the last stage that does work, or where
        # that stage runs ahead of the step itself.
        "prefetched": prefetched(structure) or runs_ahead(structure),
        "cached": cached(structure),
        "sequential": sequential(structure),
        "random_functions": random_functions(structure),
    }


def describe_stage(stage: DatasetStage) -> str:
    method = _FUNCTION_KINDS.get(stage.kind, "")
    if stage.function == "from_generator":
        return "a Python generator (`Dataset.from_generator`), one element at a time"
    if method:
        name = "of a lambda" if stage.function in ("", "lambda") else f"`{stage.function}`"
        if stage.library:
            name += ", made by the library"
        if stage.parallel:
            parts = ["in parallel"]
        elif stage.auto_parallel:
            parts = ["in parallel: tf.data's own rewrite parallelises it"]
        else:
            parts = ["one element at a time"]
        if stage.python:
            parts.append("runs Python through `tf.py_function`/`numpy_function`")
        if stage.reads_files:
            parts.append("reads files: " + ", ".join(stage.reads_files))
        if stage.random:
            parts.append("random")
        return f"{method} {name} (" + ", ".join(parts) + ")"
    if stage.reads_files:
        how = "in parallel" if stage.parallel else "one file at a time"
        return f"file reads ({', '.join(stage.reads_files)}, {how})"
    return ""


def where(structure: DatasetStructure) -> str:
    """Where the pipeline's work is, and what it already does, in a sentence or two."""
    counts: dict[str, int] = {}
    for stage in sorted(structure.stages, key=lambda s: -s.depth):  # from the sources out
        text = describe_stage(stage)
        if text:
            counts[text] = counts.get(text, 0) + 1
    work = [f"{n} × {text}" if n > 1 else text for text, n in counts.items()]
    done = []
    if prefetched(structure):
        added = not prefetched_by_the_code(structure)
        done.append("prefetches" + (" (a prefetch tf.data adds itself)" if added else ""))
    elif runs_ahead(structure):
        done.append("makes its next elements ahead of the step (its last stage runs in parallel)")
    if cached(structure):
        to_file = any(s.to_file for s in structure.stages if s.kind == "CacheDataset")
        done.append("caches " + ("to a file" if to_file else "in memory"))
    maps = [s for s in structure.stages if s.kind in _FUNCTION_KINDS and s.kind != "FilterDataset"]
    if maps and not any(
        s.kind in _SEQUENTIAL and not s.parallel and not s.auto_parallel for s in maps
    ):
        done.append("maps in parallel")
    sentence = "Its work: " + "; ".join(work) + "." if work else "No stage of it maps or reads."
    if done:
        sentence += " It already " + and_list(done) + "."
    return sentence


def by_hand(structure: DatasetStructure) -> str:
    """What is left to do when the pipeline's options have nothing more to give."""
    steps = []
    python = [s for s in structure.stages if s.python]
    if any(s.function == "from_generator" for s in python):
        steps.append(
            "a Python generator makes each element under the GIL: move its work into tf.data"
            " ops, or make the data once, offline, and read the result"
        )
    named = sorted({s.function for s in python if s.function not in ("", "from_generator")})
    if named:
        steps.append(
            and_list([f"`{name}`" for name in named])
            + (" runs" if len(named) == 1 else " run")
            + " Python, which holds the GIL whatever `num_parallel_calls` says: write it with"
            " TensorFlow ops, or do that work once, offline, and save its result"
        )
    if any(s.reads_files for s in structure.stages):
        steps.append(
            "reading files: fewer, larger files (TFRecord shards of 100 MB or more) read in"
            " parallel (`interleave(..., num_parallel_calls=tf.data.AUTOTUNE)`,"
            " `num_parallel_reads`), on a local disk"
        )
    if not cached(structure) and _work_a_cache_keeps(structure):
        steps.append(
            "`.cache()` after the steps that are the same every epoch, before any shuffle or"
            " random augmentation, if their output fits in memory (`cache(path)` otherwise)"
        )
    steps.append(
        "fewer, cheaper elements: a vectorised `map` after `batch`, or data prepared once ahead"
        " of training; tf.data shares the machine's CPU cores with the training step"
    )
    return "Left to do by hand: " + "; ".join(steps) + "."


def _work_a_cache_keeps(structure: DatasetStructure) -> bool:
    """Whether any stage does work that is the same every epoch: a function that draws no
    random numbers, a file read, a generator. A pipeline of arrays already in memory that only
    shuffles, samples and batches has none, and a `.cache()` there would keep nothing."""
    return any(
        (s.kind in _FUNCTION_KINDS and not s.random) or s.reads_files or s.python
        for s in structure.stages
    )
