"""driver-older-than-build: the driver supports an older CUDA than TensorFlow was built with."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import section, tf_gpus, tf_readable, version_tuple

CODE = "driver-older-than-build"
TITLE = "Driver older than the build"
DOC = """\
## What it detects
The CUDA version the NVIDIA driver supports (NVML) is older than the CUDA of the TensorFlow build.

## Why it hurts
An older major version cannot start CUDA at all. An older minor version runs (CUDA's
minor-version compatibility) but kernels compiled from PTX at run time fail with
CUDA_ERROR_UNSUPPORTED_PTX_VERSION.

## Evidence we show
The driver's version and its CUDA version, and the build's CUDA version.

## Fix
Update the driver to one that supports the build's CUDA (nvidia-smi shows it).

## Threshold
Driver CUDA (major, minor) below the build's: an error for the major version, a warning for the
minor. Where TensorFlow sees no GPU the major version is given as `gpu-not-used`'s reason instead.
"""


def check(record: Record, source: str | None) -> Finding | None:
    tf, nvml = section(record, "tensorflow"), section(record, "nvml")
    driver = version_tuple(nvml.get("cuda_driver_version"))
    build = version_tuple(tf.get("cuda_version"))
    if not (tf_readable(record) and tf.get("built_with_cuda") and driver and build):
        return None
    if driver[:2] >= build[:2] or (driver[0] < build[0] and not tf_gpus(record)):
        return None
    major = driver[0] < build[0]
    said = f"The driver supports CUDA {nvml.get('cuda_driver_version')}"
    built = f"CUDA {tf.get('cuda_version')}"
    return Finding(
        code=CODE,
        severity="error" if major else "warning",
        title="Driver too old" if major else TITLE,
        detail=f"{said}, older than the {built} this TensorFlow was built with."
        if major
        else f"{said} and this TensorFlow was built with {built}. CUDA's minor-version "
        "compatibility lets it run, but kernels that must be compiled from PTX at run time need "
        "a driver at least as new as the build (they fail with "
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION).",
        fix=f"Update the NVIDIA driver to one that supports CUDA {build[0]}.{build[1]} or newer "
        "(nvidia-smi shows the CUDA version a driver supports).",
        evidence={
            "driver_version": nvml.get("driver_version"),
            "driver_cuda_version": nvml.get("cuda_driver_version"),
            "build_cuda_version": tf.get("cuda_version"),
        },
    )
