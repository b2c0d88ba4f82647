"""Collects every fact ``%tfgpu`` reports into one JSON-able dict (schema 1).

``{"schema", "tensorflow", "nvml", "env", "platform"}`` and, for CUDA builds on Linux,
``"cuda_libraries"``. ``full=False`` is the cheap subset read at the start of a profiling run.
A section that cannot be read carries an ``"error"`` and None values instead of raising.
"""

from __future__ import annotations

import sys
import time
from types import ModuleType
from typing import Any

from .cuda_libraries import find_cuda_libraries
from .environment import environment_facts, platform_facts
from .nvml_facts import nvml_facts, unavailable_facts
from .tensorflow_facts import tensorflow_facts, try_import_tensorflow

SCHEMA = 1


def tensorflow_unreadable(error: str) -> dict[str, Any]:
    """The TensorFlow section when reading it failed. None, not False, for what is unknown:
    an unknown build must not read as the CPU-only build to the diagnosis."""
    return {
        "available": True,
        "error": error,
        "built_with_cuda": None,
        "cuda_version": None,
        "cudnn_version": None,
        "initialized": None,
        "mixed_precision_policy": None,
        "gpus": [],
    }


def collect_facts(tf: ModuleType | None = None, *, full: bool = True) -> dict[str, Any]:
    """All facts; imports TensorFlow when `tf` is not given (it never initialises its runtime).

    The two boundaries below catch everything on purpose: an unusual TensorFlow or NVML must
    give a report that says what failed, not a traceback instead of the report.
    """
    started = time.perf_counter()
    error = None
    if tf is None:
        tf, error = try_import_tensorflow()
    try:
        tensorflow = tensorflow_facts(tf, full=full, error=error)
    except Exception as exc:
        tensorflow = tensorflow_unreadable(f"{type(exc).__name__}: {exc}")
    try:
        nvml = nvml_facts(full=full)
    except Exception as exc:
        nvml = unavailable_facts(f"NVML facts could not be read: {type(exc).__name__}: {exc}")
    facts: dict[str, Any] = {
        "schema": SCHEMA,
        "tensorflow": tensorflow,
        "nvml": nvml,
        "env": environment_facts(),
        "platform": platform_facts(),
    }
    if full and tensorflow.get("built_with_cuda") and sys.platform.startswith("linux"):
        facts["cuda_libraries"] = find_cuda_libraries(
            tensorflow.get("cuda_version"), tensorflow.get("cudnn_version")
        )
    facts["collect_seconds"] = round(time.perf_counter() - started, 4)
    return facts
