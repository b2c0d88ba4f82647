"""Reading the GPU facts a run recorded (TensorFlow's view, the driver's view, NVML samples)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..record import Record


def tf_gpus(record: Record) -> list[dict[str, Any]]:
    gpu = record.facts.get("gpu") or {}
    listed = (gpu.get("tensorflow") or {}).get("gpus")
    if listed is not None:
        return list(listed)
    return [{"name": name} for name in record.facts.get("gpus", [])]


def nvml_devices(record: Record) -> list[dict[str, Any]]:
    gpu = record.facts.get("gpu") or {}
    return list((gpu.get("nvml") or {}).get("devices") or [])


def nvml_series(record: Record, device: int, field: str) -> np.ndarray:
    values = record.nvml.get(f"nvml{device}:{field}")
    if values is None:
        return np.zeros(0)
    return values[~np.isnan(values)]


def env(record: Record, name: str) -> str | None:
    gpu = record.facts.get("gpu") or {}
    return (gpu.get("env") or {}).get(name)


def doctor_problems(record: Record, code: str) -> list[dict[str, Any]]:
    """The GPU doctor's diagnoses of this code for the run's facts (empty without it)."""
    facts = record.facts.get("gpu")
    if not facts:
        return []
    try:
        from ..gpu.session_facts import gpu_problems
    except ImportError:
        return []
    try:
        return [p for p in gpu_problems(facts) if p.get("code") == code]
    except Exception:
        return []
