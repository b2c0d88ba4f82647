"""The GPU facts ``%%tfprofile`` reads at the start of every run, and the problems they show.

`session_facts(tf)` is `facts.collect_facts` in its cheap form: no C++ log capture, no
library search, only NVML's static fields. It never initialises the TensorFlow runtime and
never raises: a section that cannot be read carries an ``"error"`` and None values instead.
The doctor's diagnosis of them is `diagnose.gpu_rules.problems`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .facts import collect_facts, tensorflow_unreadable


def session_facts(tf: ModuleType) -> dict[str, Any]:
    """``{"tensorflow": {...}, "nvml": {...}, "env": {...}, "platform": {...}, ...}``.

    The guard below is the last line: `collect_facts` already turns a section's failure into
    an error inside it, and a profiling run must start whatever happens here.
    """
    try:
        return collect_facts(tf, full=False)
    except Exception as exc:
        return {
            "schema": 1,
            "tensorflow": tensorflow_unreadable(f"{type(exc).__name__}: {exc}"),
            "nvml": {
                "available": False,
                "reason": "not read",
                "driver_version": None,
                "cuda_driver_version": None,
                "devices": [],
            },
            "env": {},
            "platform": {},
        }
