"""oom: the run ran out of memory (ResourceExhaustedError, or Python's MemoryError)."""

from __future__ import annotations

import math
import re

import numpy as np

from ..findings import Finding
from ..record import Record
from ..rewrite import gradient_accumulation, larger_batch
from ..stats import memory_stats
from ..units import failed_step, size
from .evidence import first_rewrite, rounded, training_rows, with_rewrite

CODE = "oom"
TITLE = "Out of memory"
DOC = """\
## What it detects
The run ended with `ResourceExhaustedError` ("OOM when allocating tensor with shape[...]"), or
Python's `MemoryError`.

## Why it hurts
The run stops. TensorFlow does not fall back to a slower CPU computation when a GPU runs out
of memory (as some articles claim): it raises, and the step is lost.

## Evidence we show
From TensorFlow's message: the tensor's shape and type, its size, the device and allocator,
and the op; from the run: the batch size (the failing step's own where the probe saw it, else
the completed steps' median), the peak memory measured, and the step where it failed.

## Fix
In order of cost: a smaller batch (or the same effective batch with gradient accumulation);
mixed precision on a GPU (`keras.mixed_precision.set_global_policy("mixed_float16")`, about
half the activation memory); a smaller model or input size. If memory was fine and grew over
the run, fix what grows (see `host-memory-growth` / `device-memory-growth`). Memory growth
(`set_memory_growth`) does not give a process more memory; it stops TensorFlow from
reserving it all up front, which matters when several processes share a GPU.

## Threshold
The error itself.
"""

_SHAPE = re.compile(r"OOM when allocating tensor with shape\s*\[([^\]]*)\]\s*and type (\w+)")
_DEVICE = re.compile(r"on (/job:[^\s]+|/device:[^\s]+|[\w/:]*device:[A-Z]+:\d+)")
_ALLOCATOR = re.compile(r"by allocator (\w+)")
# The op, best first: the graph node (`[[{{node model/dense/MatMul}}]]`), the eager op
# (`[Op:MatMul]`), a node named in the text ("Detected at node ..."). Not the
# `{{function_node __wrapped__...}}` prefix, which names TensorFlow's wrapper function.
_OPS = (
    re.compile(r"\[\[\{\{node ([^}]+)\}\}\]\]"),
    re.compile(r"\[Op:(\w+)\]"),
    re.compile(r"(?<![\w{])node '?([\w/.\-]+)"),
)
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "double": 8,
    "float64": 8,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "int8": 1,
    "bool": 1,
}


def check(record: Record, source: str | None) -> Finding | None:
    error = record.error
    if error is None:
        return None
    host = error.type == "MemoryError"
    if not (
        host or error.type == "ResourceExhaustedError" or "OOM when allocating" in error.message
    ):
        return None
    evidence: dict = {"error": error.type, "step": error.step, "phase": error.phase}
    shape = _SHAPE.search(error.message)
    if shape:
        dims = [int(d) for d in re.findall(r"\d+", shape.group(1))]
        evidence["shape"] = dims
        evidence["dtype"] = shape.group(2)
        item = _DTYPE_BYTES.get(shape.group(2))
        if item:
            evidence["tensor_bytes"] = int(math.prod(dims) * item)
    device = _DEVICE.search(error.message)
    if device:
        evidence["device"] = device.group(1)
    allocator = _ALLOCATOR.search(error.message)
    if allocator:
        evidence["allocator"] = allocator.group(1)
    for pattern in _OPS:
        op = pattern.search(error.message)
        if op:
            evidence["op"] = op.group(1)
            break
    # The failing step's own batch size where the probe saw it; else the completed steps'.
    rows = training_rows(record)
    batches = record.steps["batch"][rows]
    batches = batches[~np.isnan(batches)]
    if error.batch:
        evidence["batch_size"] = int(error.batch)
    elif batches.size:
        evidence["batch_size"] = int(np.median(batches))
    memory = memory_stats(record)
    if memory.host_rss:
        evidence["peak_host_bytes"] = memory.host_rss["peak"]
    for device_name, values in memory.gpu.items():
        evidence[f"peak_{device_name}_bytes"] = values["peak"]
    on_cpu = "CPU" in str(evidence.get("device", "")) or "cpu" in str(evidence.get("allocator", ""))
    what = "host memory" if host or on_cpu else "device memory"
    tensor = ""
    if "shape" in evidence:
        tensor = f" allocating a {evidence['dtype']} tensor of shape {evidence['shape']}"
        if "tensor_bytes" in evidence:
            tensor += f" ({size(evidence['tensor_bytes'])})"
    where = f" on {evidence['device']}" if "device" in evidence else ""
    batch = evidence.get("batch_size")
    finding = Finding(
        code=CODE,
        severity="error",
        title=f"Out of {what}{tensor}{where}",
        detail=(
            f"{error.type} in {failed_step(error.phase, error.step)}"
            + (f" with batch size {batch}" if batch else "")
            + (f", in op {evidence['op']}" if "op" in evidence else "")
            + "."
        ),
        fix="Use a smaller batch (gradient accumulation keeps the effective batch), mixed"
        " precision on a GPU, or a smaller model/input.",
        evidence={k: (rounded(v) if isinstance(v, float) else v) for k, v in evidence.items()},
    )
    new = first_rewrite(source, (gradient_accumulation, {"steps": 2}))
    if new is None and batch and batch >= 2:
        new = first_rewrite(source, (larger_batch, {"batch_size": max(batch // 2, 1)}))
    return with_rewrite(finding, source, new)
