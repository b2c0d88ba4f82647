"""no-gpu: TensorFlow sees no GPU, and the machine shows none either."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import join_phrases, nvml_devices, tf_gpus, tf_readable
from .reasons import gpu_presence, no_gpu_reasons

CODE = "no-gpu"
TITLE = "No GPU"
DOC = """\
## What it detects
TensorFlow lists no GPU and the machine shows none (NVML lists none, not an Apple-silicon Mac).

## Why it hurts
Training runs on the CPU. Often expected; sometimes the driver or the container is the cause.

## Evidence we show
The reasons found (the CPU-only build, no driver, `CUDA_VISIBLE_DEVICES`, ...), each with its
fix.

## Fix
The fix of each reason, e.g. `--gpus all` for a container, a GPU runtime on a cloud notebook.

## Threshold
No GPU visible to TensorFlow and none present (else it is `gpu-not-used`). An info note.
"""


def check(record: Record, source: str | None) -> Finding | None:
    facts = record.facts.get("gpu") or {}
    if not facts or not tf_readable(record) or tf_gpus(record) or gpu_presence(facts):
        return None
    reasons = no_gpu_reasons(facts)
    because = join_phrases([r["reason"] for r in reasons]) or "no reason found"
    return Finding(
        code=CODE,
        severity="info",
        title=TITLE,
        detail=f"No GPU is visible to TensorFlow: {because}. Training runs on the CPU.",
        fix="\n".join(f"- {r['fix']}" for r in reasons),
        evidence={
            "tensorflow_gpus": 0,
            "nvml_gpus": len(nvml_devices(record)),
            "reasons": [r["code"] for r in reasons],
        },
    )
