"""tensorflow-missing: TensorFlow cannot be imported."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import section

CODE = "tensorflow-missing"
TITLE = "TensorFlow cannot be imported"
DOC = """\
## What it detects
`import tensorflow` fails in the kernel's Python.

## Why it hurts
Nothing can run; often the package went into another environment than the kernel's.

## Evidence we show
The import error.

## Fix
`pip install 'tensorflow[and-cuda]'` (Linux with an NVIDIA GPU) or `pip install tensorflow-cpu`
in the kernel's environment, then restart the kernel.

## Threshold
The import failed.
"""


def check(record: Record, source: str | None) -> Finding | None:
    tf = section(record, "tensorflow")
    if tf.get("available", True):
        return None
    return Finding(
        code=CODE,
        severity="error",
        title=TITLE,
        detail=f"import tensorflow failed: {tf.get('error')}",
        fix="pip install 'tensorflow[and-cuda]' (Linux with an NVIDIA GPU) or pip install "
        "tensorflow-cpu, in the environment of this kernel; then restart the kernel.",
        evidence={"error": tf.get("error")},
    )
