"""tensorflow-facts-unreadable: TensorFlow imports but its device facts could not be read."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import section

CODE = "tensorflow-facts-unreadable"
TITLE = "TensorFlow's device facts could not be read"
DOC = """\
## What it detects
Reading TensorFlow's build or device facts raised (an unusual build, a module that is not
TensorFlow).

## Why it hurts
The TensorFlow checks cannot judge: no advice is better than advice from unknown facts.

## Evidence we show
The error.

## Fix
Run `%tfgpu` for the full report.

## Threshold
Any error while reading the facts.
"""


def check(record: Record, source: str | None) -> Finding | None:
    tf = section(record, "tensorflow")
    if not tf.get("available", True) or not tf.get("error"):
        return None
    return Finding(
        code=CODE,
        severity="warning",
        title=TITLE,
        detail=str(tf.get("error")),
        fix="Run %tfgpu for the full report.",
        evidence={"error": tf.get("error")},
    )
