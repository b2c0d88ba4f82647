"""What a tf.data pipeline given to training is made of: its prefetches, caches, maps (parallel
or not, and what their functions run), file reads and Python generators, as plain facts
(`record.DatasetStructure`) that the diagnosis reads without TensorFlow.

Read once per dataset when a Keras call is given one or a loop of the cell starts iterating one,
never per step, from the dataset's own Python objects: each transformation's inputs and the
graphs of the functions it traced. The dataset is never iterated, and its graph is not
serialised (`DatasetToGraphV2` would copy the arrays a `from_tensor_slices` holds: 0.35 s for
100 MB here). Any failure leaves no facts and never reaches the user's run.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import os
import re
import sys
import types
import weakref
from time import perf_counter
from typing import Any

from ..record import DatasetStage, DatasetStructure
from ..recorder import Recorder

MAX_STAGES = 64  # transformations read per dataset; a longer pipeline is marked incomplete
MAX_DATASETS = 64  # datasets (and uses of one) recorded per run
MAX_NESTED = 32  # nested functions read per transformation's function

# Ops a function runs Python with (`tf.py_function`, `tf.numpy_function`, `from_generator`).
_PYTHON_OPS = frozenset({"EagerPyFunc", "PyFunc", "PyFuncStateless", "GeneratorDataset"})
# Ops and sources that read files, version suffixes left out.
_FILE_OPS = frozenset(
    {
        "ReadFile",
        "TFRecordDataset",
        "TextLineDataset",
        "FixedLengthRecordDataset",
        "CSVDataset",
        "CsvDataset",
        "SqlDataset",
        "MatchingFilesDataset",
        "LoadDataset",
    }
)
# Calls of nested functions: what they run is read from the nested functions themselves.
_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
# Stateful ops that hold no state: tf.data's map_parallelization ignores them too.
_HARMLESS_STATEFUL = frozenset({"Assert"}) | _CALL_OPS
# Transformations that run `num_parallel_calls` elements at once when asked.
_PARALLEL_KINDS = frozenset(
    {"ParallelMapDataset", "ParallelInterleaveDataset", "ParallelBatchDataset"}
)
_ALWAYS_PARALLEL = frozenset({"MapAndBatchDataset"})
_METHODS = (
    "flat_map",
    "interleave",
    "map",
    "filter",
    "scan",
    "take_while",
    "group_by_window",
    "group_by_reducer",
    "from_generator",
)
_VERSION = re.compile(r"V\d+$")
_FUNCTION_NAME = re.compile(r"^Dataset_(?:" + "|".join(_METHODS) + r")_(.*)$")

# Stages read, per dataset object (datasets are immutable; the entry goes with the dataset).
_read: weakref.WeakKeyDictionary[Any, tuple[tuple[DatasetStage, ...], bool]] = (
    weakref.WeakKeyDictionary()
)


# Builtin wrappers a loop puts around a dataset (`enumerate(ds)`, `zip(a, b)`): their
# ``__reduce__`` returns the iterators they hold, running nothing.
_WRAPPERS = (enumerate, zip)
# Iterators that make their items without running Python code of anyone's.
_PLAIN_ITERATORS = (
    *(type(iter(kind)) for kind in ([], (), range(1), range(1 << 70), "", b"", {}.items())),
    itertools.count,
    itertools.repeat,
)
MAX_WRAPPED = 8  # iterators read inside one loop's iterable


def datasets_drawn_by(iterable: Any) -> list[Any]:
    """The tf.data datasets a loop over `iterable` takes its items from: the dataset itself or
    its iterator, alone or inside `enumerate`, `zip` (beside iterators that run no Python: a
    list's, a range's) or a `tqdm` progress bar; [] where any Python code makes items (a
    generator, a Python iterator class): then the loop's waits are Python's. Reads only what
    the objects hold: nothing is iterated. Never raises."""
    try:
        found: list[Any] = []
        pending = [iterable]
        seen = 0
        while pending:
            current = pending.pop()
            seen += 1
            if seen > MAX_WRAPPED:
                return []
            kind = type(current)
            if kind in _WRAPPERS:  # enumerate holds (iterator, count), zip its iterators
                held = current.__reduce__()[1]
                pending.extend(item for item in held if not isinstance(item, int))
                continue
            if kind.__module__.startswith("tqdm.") and hasattr(current, "iterable"):
                pending.append(current.iterable)  # a progress bar: it yields what it iterates
                continue
            dataset = tf_dataset(current)
            if dataset is not None:
                found.append(dataset)
            elif kind not in _PLAIN_ITERATORS:
                return []
        return found
    except Exception:
        return []


def tf_dataset(data: Any) -> Any | None:
    """`data` if it is a tf.data dataset, the dataset a tf.data iterator reads, else None."""
    if not type(data).__module__.startswith("tensorflow"):
        return None
    from tensorflow.python.data.ops.dataset_ops import DatasetV2

    if isinstance(data, DatasetV2):
        return data
    dataset = getattr(data, "_dataset", None)  # iterator_ops.OwnedIterator's
    return dataset if isinstance(dataset, DatasetV2) else None


def note_dataset(rec: Recorder, data: Any, api: str, loop: int | None = None) -> None:
    """Record what `data` is made of, when it is a tf.data dataset that `api` ("fit",
    "evaluate", "predict" or "loop") is about to consume; `loop`: the loop iterating it (None:
    the innermost loop running). Never raises."""
    try:
        if not type(data).__module__.startswith("tensorflow"):
            return
        from tensorflow.python.data.ops.dataset_ops import DatasetV2

        if not isinstance(data, DatasetV2):
            return
        where = rec.innermost_loop() if loop is None else loop
        read = _read.get(data)
        if read is None:
            read = read_stages(data)
            _read[data] = read
        stages, complete = read
        for seen in reversed(rec.datasets):  # the latest use from the same place
            if seen.api == api and seen.loop == where:
                if seen.stages is stages:  # a loop over epochs starts on it each time
                    return
                break
        if len(rec.datasets) >= MAX_DATASETS:
            return
        rec.datasets.append(
            DatasetStructure(
                time=perf_counter() - rec.t0,
                api=api,
                loop=where,
                stages=stages,
                complete=complete,
            )
        )
    except Exception:  # what the pipeline is made of is the tool's business, never the run's
        return


def read_stages(dataset: Any) -> tuple[tuple[DatasetStage, ...], bool]:
    """The stages of `dataset`, from its output towards its sources, depth first, and whether
    all were read."""
    stages: list[DatasetStage] = []
    rewrites = _default_rewrites(dataset)
    # (dataset, depth, below a stage with several inputs, the kind of the stage it feeds)
    stack: list[tuple[Any, int, bool, str]] = [(dataset, 0, False, "")]
    complete = True
    while stack:
        if len(stages) >= MAX_STAGES:
            return tuple(stages), False
        current, depth, branch, consumer = stack.pop()
        stage = _stage(current, depth, branch)
        if _parallelised_by_tf_data(stage, consumer, rewrites):
            stage = dataclasses.replace(stage, auto_parallel=True)
        stages.append(stage)
        try:
            inputs = list(current._inputs())
        except Exception:  # a dataset class that does not say its inputs
            complete = False
            continue
        below = branch or len(inputs) > 1
        stack.extend((each, depth + 1, below, stage.kind) for each in reversed(inputs))
    last = _last_stage(stages)
    if last is not None and _prefetched_by_tf_data(stages, last, rewrites):
        stages[last] = dataclasses.replace(stages[last], auto_prefetch=True)
    return tuple(stages), complete


# Stages tf.data runs ahead of their consumer on threads of their own: no prefetch is added
# after them.
_ASYNCHRONOUS = frozenset(
    {
        "PrefetchDataset",
        "ParallelMapDataset",
        "ParallelInterleaveDataset",
        "ParallelBatchDataset",
        "MapAndBatchDataset",
    }
)
# Stages that only carry options: the pipeline's last stage is the one below them.
_OPTIONS_ONLY = frozenset({"OptionsDataset"})


def _last_stage(stages: list[DatasetStage]) -> int | None:
    """The index of the pipeline's last stage that runs (options left out), if read."""
    for index, stage in enumerate(stages):
        if stage.depth != index:
            return None
        if stage.kind not in _OPTIONS_ONLY:
            return index
    return None


def _prefetched_by_tf_data(stages: list[DatasetStage], last: int, rewrites: frozenset[str]) -> bool:
    """Whether tf.data follows the pipeline's last stage with a prefetch of its own
    (`inject_prefetch`): where that stage runs synchronously, that is not a prefetch, a parallel
    stage, a map it parallelises itself, or a `batch` it fuses with the map before it."""
    if "inject_prefetch" not in rewrites:
        return False
    stage = stages[last]
    if stage.kind in _ASYNCHRONOUS or stage.auto_parallel:
        return False
    below = stages[last + 1] if last + 1 < len(stages) else None
    fused = (
        stage.kind == "BatchDataset"
        and below is not None
        and below.depth == stage.depth + 1
        and below.kind in ("MapDataset", "ParallelMapDataset")
        and "map_and_batch_fusion" in rewrites
    )
    return not fused


def _default_rewrites(dataset: Any) -> frozenset[str]:
    """Which of tf.data's own rewrites that change how a map runs or add a prefetch are on for
    `dataset` (`map_parallelization`, `map_and_batch_fusion`, `inject_prefetch`): each is on
    unless its options turn it off, or turn the default rewrites off without asking for it."""
    on = {"map_parallelization", "map_and_batch_fusion", "inject_prefetch"}
    try:
        optimization = dataset.options().experimental_optimization
    except Exception:
        return frozenset(on)
    defaults = optimization.apply_default_optimizations is not False
    return frozenset(
        name
        for name in on
        if getattr(optimization, name, None) is True
        or (getattr(optimization, name, None) is None and defaults)
    )


def _parallelised_by_tf_data(stage: DatasetStage, consumer: str, rewrites: frozenset[str]) -> bool:
    """Whether tf.data runs this serial map in parallel itself: `map_parallelization` rewrites
    a `map` whose function holds no state into a parallel one (autotuned, in order), but
    `map_and_batch_fusion` fuses a `map` followed by `batch` first, keeping its one call at a
    time (both read from TensorFlow's runtime model of such pipelines)."""
    if stage.kind != "MapDataset" or stage.parallel or stage.stateful or stage.python:
        return False
    if "map_parallelization" not in rewrites:
        return False
    return not (consumer == "BatchDataset" and "map_and_batch_fusion" in rewrites)


def _stage(dataset: Any, depth: int, branch: bool) -> DatasetStage:
    kind = _VERSION.sub("", type(dataset).__name__.lstrip("_"))
    function, stateful, python, random = "", False, False, False
    reads: set[str] = {kind} if kind in _FILE_OPS else set()
    try:
        functions = list(dataset._functions())
    except Exception:
        functions = []
    library = False
    for index, wrapper in enumerate(functions):
        name, ops = _function_ops(wrapper)
        if index == 0:
            function = name
            library = _library_function(getattr(wrapper, "_func", None))
        stateful = stateful or any(_stateful(op) for op in ops)
        python = python or bool(ops & _PYTHON_OPS)
        random = random or any(_random(op) for op in ops)
        reads |= {_VERSION.sub("", op) for op in ops} & _FILE_OPS
        if "GeneratorDataset" in ops:
            function = "from_generator"
    return DatasetStage(
        kind=kind,
        depth=depth,
        branch=branch,
        function=function,
        parallel=_parallel(dataset, kind),
        stateful=stateful,
        python=python,
        random=random,
        reads_files=tuple(sorted(reads)),
        to_file=kind == "CacheDataset" and bool(_tensor_value(dataset, "_filename", b"")),
        library=library,
    )


def _library_function(func: Any) -> bool:
    """Whether a dataset function is one TensorFlow or Keras made while building the
    pipeline: a function defined inside a function of their own code (the map
    `sample_from_datasets` adds, a loader lambda of `image_dataset_from_directory`). A library
    function the code passed itself (`ds.map(tf.image.per_image_standardization)`), or a
    callable object (a Keras layer), is the code's own choice."""
    while isinstance(func, functools.partial):
        func = func.func
    if not isinstance(func, types.FunctionType):
        return False
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    return (
        code is not None
        and "<locals>" in getattr(func, "__qualname__", "")
        and code.co_filename.startswith(_library_dirs())
    )


def _library_dirs() -> tuple[str, ...]:
    """The folders of TensorFlow's and Keras' packages, as loaded."""
    found = []
    for name in ("tensorflow", "keras", "tf_keras"):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            found.append(os.path.dirname(path) + os.sep)
    return tuple(found)


def _function_ops(wrapper: Any) -> tuple[str, set[str]]:
    """The user's name for a traced dataset function, and the op types it and the functions it
    calls run."""
    try:
        concrete = wrapper.function
    except Exception:
        return "", set()
    raw = getattr(concrete, "name", b"")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    text = re.sub(r"_\d+$", "", text.removeprefix("__inference_"))
    found = _FUNCTION_NAME.match(text)
    name = found.group(1) if found else ""
    if name.startswith("class"):  # a class given as the function (`interleave(TFRecordDataset)`)
        name = ""
    ops: set[str] = set()
    try:
        graph = concrete.graph
        ops.update(op.type for op in graph.get_operations())
        nested = list(getattr(graph, "_functions", {}).values())[:MAX_NESTED]
        for each in nested:
            definition = getattr(each, "definition", None)
            if definition is not None:
                ops.update(node.op for node in definition.node_def)
    except Exception:
        pass
    return name, ops


def _stateful(op: str) -> bool:
    if op in _HARMLESS_STATEFUL:
        return False
    try:
        from tensorflow.python.framework import op_def_registry

        definition = op_def_registry.get(op)
    except Exception:
        return False
    return definition is not None and bool(definition.is_stateful)


def _random(op: str) -> bool:
    return (
        "Random" in op
        or "Multinomial" in op
        or "TruncatedNormal" in op
        or op.startswith(("StatefulUniform", "StatefulStandardNormal", "Rng"))
    )


def _parallel(dataset: Any, kind: str) -> bool:
    if kind in _ALWAYS_PARALLEL:
        return True
    if kind in _PARALLEL_KINDS:
        return bool(_tensor_value(dataset, "_num_parallel_calls", -1) != 1)
    if kind in _FILE_OPS:
        reads = getattr(dataset, "_num_parallel_reads", None)
        return reads is not None and bool(_as_value(reads, 1) != 1)
    return False


def _tensor_value(dataset: Any, name: str, default: Any) -> Any:
    return _as_value(getattr(dataset, name, default), default)


def _as_value(value: Any, default: Any) -> Any:
    try:
        return value.numpy() if hasattr(value, "numpy") else value
    except Exception:  # a symbolic tensor (a dataset built in a graph)
        return default
