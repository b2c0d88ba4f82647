"""several-tensorflow-builds: more than one TensorFlow distribution is installed."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import section, tf_readable

CODE = "several-tensorflow-builds"
TITLE = "Several TensorFlow builds installed"
DOC = """\
## What it detects
Two or more of tensorflow, tensorflow-cpu, tensorflow-intel, tf-nightly... installed together.

## Why it hurts
They all install the same `tensorflow` module: the last one installed overwrote the others'
files, so the build that runs may not be the one chosen (often the CPU-only one).

## Evidence we show
The distributions and their versions.

## Fix
Uninstall them all, install exactly one, restart the kernel.

## Threshold
Two or more distributions.
"""


def check(record: Record, source: str | None) -> Finding | None:
    distributions = section(record, "tensorflow").get("distributions") or {}
    if len(distributions) < 2 or not tf_readable(record):
        return None
    listed = ", ".join(f"{name} {version}" for name, version in sorted(distributions.items()))
    return Finding(
        code=CODE,
        severity="warning",
        title=TITLE,
        detail=f"{listed} are installed together. They all install the same `tensorflow` "
        "module, so the files of whichever was installed last overwrote the others: the build "
        "that runs may not be the one you chose.",
        fix=f"pip uninstall -y {' '.join(sorted(distributions))}, then install exactly one "
        "(e.g. pip install 'tensorflow[and-cuda]') and restart the kernel.",
        evidence={"distributions": distributions},
    )
