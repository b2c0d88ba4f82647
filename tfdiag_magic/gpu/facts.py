"""Collects every fact ``%tfgpu`` reports into one JSON-able dict (schema 1).

``{"schema", "tensorflow", "nvml", "env", "platform"}`` and, for CUDA builds on Linux,
``"cuda_libraries"``. ``full=False`` is the cheap subset read at the start of a profiling run.
"""

from __future__ import annotations

import sys
import time
from types import ModuleType
from typing import Any

from .cuda_libraries import find_cuda_libraries
from .environment import environment_facts, platform_facts
from .nvml_facts import nvml_facts
from .tensorflow_facts import import_tensorflow, tensorflow_facts

SCHEMA = 1


def collect_facts(tf: ModuleType | None = None, *, full: bool = True) -> dict[str, Any]:
    """All facts; imports TensorFlow when `tf` is not given (it never initialises its runtime)."""
    started = time.perf_counter()
    error = None
    if tf is None:
        tf, error = import_tensorflow()
    tensorflow = tensorflow_facts(tf, full=full, error=error)
    facts: dict[str, Any] = {
        "schema": SCHEMA,
        "tensorflow": tensorflow,
        "nvml": nvml_facts(full=full),
        "env": environment_facts(),
        "platform": platform_facts(),
    }
    if full and tensorflow.get("built_with_cuda") and sys.platform.startswith("linux"):
        facts["cuda_libraries"] = find_cuda_libraries(
            tensorflow.get("cuda_version"), tensorflow.get("cudnn_version")
        )
    facts["collect_seconds"] = round(time.perf_counter() - started, 4)
    return facts
