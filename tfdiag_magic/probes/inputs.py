"""What a step call was given: bytes of NumPy arrays (converted to tensors by the call) and the
batch size. Looks one level into tuples, lists and dicts, as a step's arguments usually are."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

NAN = math.nan
_ndarray = np.ndarray


def host_bytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """Bytes of the NumPy arrays among the arguments (which the call converts to tensors).

    This runs on every step call, so it does as little as it can: one type check per
    argument, and per item of a tuple, list or dict argument.
    """
    host = 0.0
    for value in args:
        kind = type(value)
        if kind is tuple or kind is list:
            for item in value:
                if isinstance(item, _ndarray):
                    host += item.nbytes
        elif kind is dict:
            for item in value.values():
                if isinstance(item, _ndarray):
                    host += item.nbytes
        elif isinstance(value, _ndarray):
            host += value.nbytes
    if kwargs:
        host += host_bytes(tuple(kwargs.values()), {})
    return host


def leading_dimension(args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """The leading dimension of the first array-like among the arguments (NaN if none).

    Reading a tensor's shape costs about a microsecond, so callers on the hot path read it
    once per function and reuse it. This runs inside the user's call: a shape it cannot read
    (unknown rank, `TensorShape(None)`, a symbolic tensor inside another tf.function, an
    object whose `shape` is something else) is passed over, never raised.
    """
    try:
        return _leading_dimension(args, kwargs)
    except Exception:
        return NAN


def _leading_dimension(args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    for value in (*args, *kwargs.values()):
        items: Any
        if isinstance(value, (tuple, list)):
            items = value
        elif isinstance(value, dict):
            items = value.values()
        else:
            items = (value,)
        for item in items:
            shape = getattr(item, "shape", None)
            if shape is None:
                continue
            try:
                if len(shape) < 1:  # TensorShape(None): len() raises ValueError
                    continue
                first = shape[0]
            except (TypeError, ValueError, IndexError):
                continue
            if isinstance(first, int):
                return float(first)
            if first is not None:
                with contextlib.suppress(TypeError, ValueError):
                    return float(int(first))
    return NAN


def inspect_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[float, float]:
    """(bytes of NumPy arrays among the arguments, leading dimension of the first array-like)."""
    return host_bytes(args, kwargs), leading_dimension(args, kwargs)


def data_kind(data: Any) -> str:
    """A word for what was passed to fit/evaluate/predict as data."""
    if data is None:
        return "none"
    if isinstance(data, np.ndarray):
        return "numpy"
    module = type(data).__module__ or ""
    name = type(data).__name__
    if "tensorflow" in module and "data" in module:
        return "dataset"
    if hasattr(data, "__next__"):
        return "generator"
    if any(
        c.__name__ == "PyDataset" and (c.__module__ or "").startswith("keras")
        for c in type(data).__mro__
    ):  # the user's subclass, defined in their own module
        return "pydataset"
    if "Tensor" in name:
        return "tensor"
    if isinstance(data, (list, tuple, dict)):
        return "structure"
    if module.startswith("pandas"):
        return "pandas"
    return name


def keras_float_cast(data: Any) -> str:
    """The float type Keras casts `data` to before it slices it, where `data` is a pandas frame
    or series that Keras casts ("" otherwise): a frame holding a float column of another width
    than Keras' float type is cast whole, its int and bool columns included, and a series of such
    floats (`array_slicing.convert_to_sliceable`). Read once per call, never per step."""
    if not (type(data).__module__ or "").startswith("pandas"):
        return ""
    try:
        from keras.src import backend

        floatx = backend.floatx()
        dtypes = list(data.dtypes.values) if hasattr(data, "columns") else [data.dtype]
        casts = any(
            dtype is not object
            and backend.is_float_dtype(dtype)
            and backend.standardize_dtype(dtype) != floatx
            for dtype in dtypes
        )
    except Exception:  # another Keras, or a dtype it cannot name: nothing known
        return ""
    return floatx if casts else ""


def batch_size_of(data: Any, kwargs: dict[str, Any]) -> float:
    """Batch size Keras will use for `data`: the argument, the default 32 for arrays, or the
    dataset's static batch dimension."""
    size = kwargs.get("batch_size")
    if isinstance(size, int):
        return float(size)
    kind = data_kind(data)
    if kind in ("numpy", "tensor", "structure", "pandas"):
        return 32.0
    if kind == "dataset":
        try:
            spec = data.element_spec
            first = spec[0] if isinstance(spec, tuple) else spec
            if isinstance(first, dict):
                first = next(iter(first.values()))
            dim = first.shape[0]
        except Exception:
            return NAN
        return float(dim) if dim is not None else dataset_batch_size(data)
    return NAN


# Batching transformations, by class name (leading underscore and version left out), and those
# that hand each batch on whole: the batch a step gets is that of the nearest batching stage
# below a chain of these. (A map of a batch keeps its rows in practice.)
_BATCHING = frozenset({"BatchDataset", "PaddedBatchDataset", "ParallelBatchDataset"})
_KEEPS_BATCHES = frozenset(
    {
        "PrefetchDataset",
        "OptionsDataset",
        "MapDataset",
        "ParallelMapDataset",
        "RepeatDataset",
        "ShuffleDataset",
        "CacheDataset",
        "TakeDataset",
        "SkipDataset",
        "FilterDataset",
        "ShardDataset",
        "AssertCardinalityDataset",
        "IgnoreErrorsDataset",
    }
)
_MOST_STAGES = 64


def dataset_batch_size(dataset: Any) -> float:
    """The batch size of a tf.data dataset whose batch dimension is not static (``batch(n)``
    without ``drop_remainder``): the size of the batching stage nearest its output, read from
    the dataset's own objects (never by taking an element) when every stage above it hands
    each batch on whole; NaN otherwise (an unbatch, a rebatch, a zip...). The last, partial
    batch of an epoch counts as a full one."""
    current = dataset
    try:
        for _ in range(_MOST_STAGES):
            kind = type(current).__name__.lstrip("_")
            kind = kind[:-2] if kind.endswith("V2") else kind
            if kind in _BATCHING:
                size = current._batch_size
                size = int(size.numpy() if hasattr(size, "numpy") else size)
                return float(size) if size > 0 else NAN
            if kind not in _KEEPS_BATCHES:
                return NAN
            inputs = current._inputs()
            if len(inputs) != 1:
                return NAN
            current = inputs[0]
    except Exception:  # a symbolic size, a dataset class of its own: unknown
        return NAN
    return NAN
