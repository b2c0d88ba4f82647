"""The GPU facts ``%%tfprofile`` reads at the start of every run, and the problems they show.

`session_facts(tf)` is cheap (no C++ log capture, no library search, only NVML's static
fields), never initialises the TensorFlow runtime and never raises: a section that cannot be
read carries an ``"error"`` and None values instead. `gpu_problems(facts)` is the doctor's
diagnosis (`diagnosis.problems`) on those facts.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .diagnosis import problems
from .environment import environment_facts, platform_facts
from .nvml_facts import nvml_facts, unavailable_facts
from .tensorflow_facts import tensorflow_facts


def _tensorflow_unreadable(error: str) -> dict[str, Any]:
    # None, not False: unknown must not read as "CPU-only build" to the diagnosis.
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


def session_facts(tf: ModuleType) -> dict[str, Any]:
    """``{"tensorflow": {...}, "nvml": {...}, "env": {...}, "platform": {...}}``; never raises.

    The boundary below catches everything on purpose: a fact that cannot be read must not stop
    the user's training cell from running; the error is kept in the section instead.
    """
    facts: dict[str, Any] = {"schema": 1}
    try:
        facts["tensorflow"] = tensorflow_facts(tf, full=False)
    except Exception as exc:
        facts["tensorflow"] = _tensorflow_unreadable(f"{type(exc).__name__}: {exc}")
    try:
        facts["nvml"] = nvml_facts(full=False)
    except Exception as exc:
        facts["nvml"] = unavailable_facts(
            f"NVML facts could not be read: {type(exc).__name__}: {exc}"
        )
    facts["env"] = environment_facts()
    try:
        facts["platform"] = platform_facts()
    except Exception as exc:
        facts["platform"] = {"error": f"{type(exc).__name__}: {exc}"}
    return facts


def gpu_problems(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The problems the facts show: ``[{"code", "severity", "title", "message", "fix",
    "evidence"}]``, errors first (see `diagnosis` for every code)."""
    return problems(facts)
