"""mixed-precision-without-tensor-cores: mixed_float16 where no Tensor Core can use it."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import cc_text, gpu_capability, gpu_label, tf_gpus, tf_readable
from ..mixed_precision_available import MIN_CAPABILITY

CODE = "mixed-precision-without-tensor-cores"
TITLE = "Mixed precision without Tensor Cores"
DOC = """\
## What it detects
The Keras policy `mixed_float16` on GPUs below compute capability 7.0, or on the CPU.

## Why it hurts
Without Tensor Cores float16 compute is rarely faster and adds casts; on the CPU float16
arithmetic has no fast path and is usually much slower than float32 (TensorFlow's
mixed-precision guide, run on a 2-vCPU AMD EPYC, trained 19-47% slower in its steady epochs
under `mixed_float16` than under float32). `%%tfprofile` reads the policy the run trained
under (at its end: one the cell set itself counts); `%tfgpu` reads the one in force.

## Evidence we show
The policy and each GPU's compute capability.

## Fix
`keras.mixed_precision.set_global_policy("float32")` before building the model.

## Threshold
Policy `mixed_float16` and no GPU of compute capability ≥ 7.0 (the same limit as
`mixed-precision-available`). `mixed_bfloat16` on the CPU is left alone: CPUs with AVX-512
BF16 or AMX have a fast path for it.
"""


def check(record: Record, source: str | None) -> Finding | None:
    if record.facts.get("mixed_precision_policy") != "mixed_float16" or not tf_readable(record):
        return None
    gpus = tf_gpus(record)
    capabilities = [gpu_capability(record, i, g) for i, g in enumerate(gpus)]
    if any(c and c >= MIN_CAPABILITY for c in capabilities):
        return None
    if gpus:
        where = ", ".join(
            f"{gpu_label(g)} (compute capability {cc_text(c) or '?'})"
            for g, c in zip(gpus, capabilities, strict=True)
        )
        detail = (
            f"The Keras policy is mixed_float16 but {where} has no Tensor Cores (compute "
            "capability below 7.0): float16 compute is rarely faster there and adds casts."
        )
    else:
        detail = (
            "The Keras policy is mixed_float16 but TensorFlow runs on the CPU, where float16 "
            "arithmetic has no fast path and is usually much slower than float32."
        )
    return Finding(
        code=CODE,
        severity="warning",
        title=TITLE,
        detail=detail,
        fix='keras.mixed_precision.set_global_policy("float32") (or remove the '
        "set_global_policy call) before building the model.",
        evidence={
            "policy": "mixed_float16",
            "compute_capabilities": {
                g.get("name"): list(c) if c else None
                for g, c in zip(gpus, capabilities, strict=True)
            },
        },
    )
