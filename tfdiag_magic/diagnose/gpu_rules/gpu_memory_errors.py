"""gpu-memory-errors: a GPU reported uncorrected ECC memory errors."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import device_label, nvml_devices
from . import per_device

CODE = "gpu-memory-errors"
TITLE = "A GPU has uncorrected memory errors"
DOC = """\
## What it detects
Uncorrected (volatile) ECC errors NVML counts since the driver loaded.

## Why it hurts
Results computed on that GPU may be wrong.

## Evidence we show
The corrected and uncorrected error counts.

## Fix
Tell whoever runs the machine: the GPU needs a reset (`nvidia-smi -r`) and, if the errors
return, a check or replacement.

## Threshold
One uncorrected error or more.
"""


def check(record: Record, source: str | None) -> Finding | None:
    found = []
    for device in nvml_devices(record):
        errors = device.get("ecc_errors") or {}
        uncorrected = errors.get("uncorrected_volatile")
        if uncorrected:
            found.append(
                (
                    f"GPU {device.get('index')} has uncorrected memory errors",
                    f"{device_label(device)} reported {uncorrected} uncorrected ECC error(s) "
                    "since the driver loaded: results computed on it may be wrong.",
                    "Tell whoever runs the machine: the GPU needs a reset (nvidia-smi -r) and, "
                    "if the errors return, a check or replacement.",
                    {"gpu": device.get("index"), "ecc_errors": errors},
                )
            )
    return per_device(CODE, "warning", found)
