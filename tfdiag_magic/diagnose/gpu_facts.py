"""Reading the GPU facts (the GPU doctor's fact dicts) that a run recorded or ``%tfgpu`` read.

A profiled run keeps them in ``record.facts["gpu"]``; ``%tfgpu`` has no run, so it checks a
`facts_record`: a Record with those facts and nothing measured (`without_run`). The GPU rules
read both through the functions here, so each gives the same advice on the same machine.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..gpu.nvml_facts import gib
from ..record import Record

__all__ = ["gib"]  # the doctor's memory format, for the rules
DOCTOR = "%tfgpu"


def facts_record(facts: dict[str, Any]) -> Record:
    """The GPU doctor's Record: the machine's GPU facts and no run."""
    tf = facts.get("tensorflow") or {}
    return Record(
        facts={
            "gpu": facts,
            "built_with_cuda": tf.get("built_with_cuda"),
            "mixed_precision_policy": tf.get("mixed_precision_policy"),
            "made_by": DOCTOR,
        }
    )


def without_run(record: Record) -> bool:
    """The facts of the machine alone (``%tfgpu``), not of a profiled run."""
    return record.facts.get("made_by") == DOCTOR


def section(record: Record, name: str) -> dict[str, Any]:
    """``tensorflow``, ``nvml``, ``env`` or ``platform`` of the GPU facts ({} when absent)."""
    return (record.facts.get("gpu") or {}).get(name) or {}


def tf_readable(record: Record) -> bool:
    """TensorFlow imported and its device facts read: the TensorFlow checks may judge."""
    tf = section(record, "tensorflow")
    return bool(tf.get("available", True)) and not tf.get("error")


def tf_gpus(record: Record) -> list[dict[str, Any]]:
    """The GPUs TensorFlow lists and may use (not hidden by ``set_visible_devices``)."""
    listed = section(record, "tensorflow").get("gpus")
    if listed is None:
        return [{"name": name} for name in record.facts.get("gpus", [])]
    return [g for g in listed if g.get("visible", True)]


def nvml_devices(record: Record) -> list[dict[str, Any]]:
    nvml = section(record, "nvml")
    return list(nvml.get("devices") or []) if nvml.get("available", True) else []


def nvml_series(record: Record, device: int, field: str) -> np.ndarray:
    values = record.nvml.get(f"nvml{device}:{field}")
    if values is None:
        return np.zeros(0)
    return values[~np.isnan(values)]


def env(record: Record, name: str) -> str | None:
    return section(record, "env").get(name)


def growth_forced(record: Record) -> bool:
    return (env(record, "TF_FORCE_GPU_ALLOW_GROWTH") or "").strip().lower() == "true"


def nvml_match(record: Record, index: int, gpu: dict[str, Any]) -> dict[str, Any]:
    """The NVML device of TensorFlow's GPU `index`: by name, else by index ({} if none)."""
    devices = nvml_devices(record)
    named = [d for d in devices if gpu.get("device_name") and d.get("name") == gpu["device_name"]]
    if named:
        return named[0]
    return devices[index] if index < len(devices) else {}


def gpu_capability(record: Record, index: int, gpu: dict[str, Any]) -> tuple[int, int] | None:
    """A TensorFlow GPU's compute capability, from TensorFlow or else NVML."""
    capability = gpu.get("compute_capability") or nvml_match(record, index, gpu).get(
        "compute_capability"
    )
    return (int(capability[0]), int(capability[1])) if capability else None


def gpu_memory_total(record: Record, gpu: dict[str, Any]) -> int | None:
    """NVML's total memory for a TensorFlow GPU, matched by name (None when ambiguous)."""
    totals = {
        d.get("memory_total")
        for d in nvml_devices(record)
        if d.get("name") and d.get("name") == gpu.get("device_name")
    }
    totals.discard(None)
    return totals.pop() if len(totals) == 1 else None


def version_tuple(text: Any) -> tuple[int, ...] | None:
    """ "12.5.1" -> (12, 5, 1); "2.21.0-rc1" -> (2, 21, 0); None when there is no number."""
    if text is None:
        return None
    numbers = re.findall(r"\d+", str(text).split("-")[0].split("+")[0])
    return tuple(int(n) for n in numbers[:3]) if numbers else None


def cc_text(capability: Any) -> str | None:
    return f"{capability[0]}.{capability[1]}" if capability else None


def gpu_label(gpu: dict[str, Any]) -> str:
    """TensorFlow's GPU as "GPU:0 (NVIDIA H100 80GB HBM3)"."""
    short = str(gpu.get("name", "GPU")).replace("/physical_device:", "")
    return f"{short} ({gpu['device_name']})" if gpu.get("device_name") else short


def device_label(device: dict[str, Any]) -> str:
    """NVML's GPU as "GPU 0 (NVIDIA H100 80GB HBM3)"."""
    return f"GPU {device.get('index')} ({device.get('name') or 'name not available'})"


def join_phrases(phrases: list[str]) -> str:
    if len(phrases) <= 2:
        return ", and ".join(phrases)
    return "; ".join(phrases[:-1]) + f"; and {phrases[-1]}"
