"""NVML facts for ``%tfgpu``: the driver, the CUDA version it supports, and each GPU's state.

Every query goes through `tfdiag_magic.nvml.nvml_query`, which turns an `NVMLError` into
``None`` and a reason in the device's ``unavailable`` map, so one query NVML cannot answer (ECC
on a consumer card, PCIe counters in a MIG slice, a function an older driver lacks) never hides
the others. NVML missing altogether (no driver, no library, no `nvidia-ml-py`) is a normal
state: ``available`` is False and ``reason`` says why in words.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..nvml import (
    NVMLUnavailableError,
    init_failure_reason,
    nvml_error_text,
    nvml_query,
    nvml_session,
)

__all__ = ["init_failure_reason", "nvml_error_text"]  # NVML's words, for the views and tests

NOT_AVAILABLE = "not available"
GIB = 1024**3


def gib(value: int | float | None) -> str:
    """Memory as the GPU doctor writes it: "79.6 GiB"."""
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


# Bits of nvmlDeviceGetCurrentClocksEventReasons (formerly ...ThrottleReasons), by name.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class FieldReader:
    """Reads one NVML field at a time; a failed field becomes None and its reason is kept."""

    def __init__(self) -> None:
        self.unavailable: dict[str, str] = {}

    def read(self, field: str, query: Any, *args: Any) -> Any:
        """``query(*args)``, or None with the reason in `unavailable` when NVML cannot answer."""
        return nvml_query(query, *args, why=self.unavailable, field=field)


def _cuda_version_text(value: int | None) -> str | None:
    """NVML's CUDA version integer (12040) as "12.4"."""
    if value is None or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def unavailable_facts(reason: str, error: str | None = None) -> dict[str, Any]:
    return {
        "available": False,
        "reason": reason,
        "error": error,
        "driver_version": None,
        "cuda_driver_version": None,
        "devices": [],
    }


def nvml_facts(*, full: bool = True) -> dict[str, Any]:
    """The driver and every GPU NVML sees; ``full=False`` reads only the cheap static fields."""
    try:
        with nvml_session() as nvml:
            return _read_all(nvml, full)
    except NVMLUnavailableError as exc:
        return unavailable_facts(exc.reason, exc.error)


def _read_all(nvml: Any, full: bool) -> dict[str, Any]:
    reader = FieldReader()
    driver = reader.read("driver_version", nvml.nvmlSystemGetDriverVersion)
    cuda = reader.read("cuda_driver_version", nvml.nvmlSystemGetCudaDriverVersion)
    count = reader.read("device_count", nvml.nvmlDeviceGetCount)
    devices = []
    for index in range(count or 0):
        handle_reader = FieldReader()
        handle = handle_reader.read("handle", nvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            devices.append(
                {"index": index, "name": None, "unavailable": dict(handle_reader.unavailable)}
            )
            continue
        devices.append(device_facts(nvml, handle, index, full=full))
    facts: dict[str, Any] = {
        "available": True,
        "reason": None if count else _no_device_reason(reader),
        "error": None,
        "driver_version": driver,
        "cuda_driver_version": _cuda_version_text(cuda),
        "device_count": count,
        "devices": devices,
    }
    facts["unavailable"] = reader.unavailable
    return facts


def _no_device_reason(reader: FieldReader) -> str:
    if "device_count" in reader.unavailable:
        return f"NVML could not count the GPUs: {reader.unavailable['device_count']}"
    return "the NVIDIA driver is loaded but NVML sees no GPU"


def device_facts(nvml: Any, handle: Any, index: int, *, full: bool = True) -> dict[str, Any]:
    """One GPU's fields; each is None on its own when NVML cannot answer it."""
    reader = FieldReader()

    def query(name: str) -> Callable[..., Any] | None:
        return getattr(nvml, name, None)

    memory = reader.read("memory", query("nvmlDeviceGetMemoryInfo"), handle)
    capability = reader.read(
        "compute_capability", query("nvmlDeviceGetCudaComputeCapability"), handle
    )
    facts: dict[str, Any] = {
        "index": index,
        "name": reader.read("name", query("nvmlDeviceGetName"), handle),
        "uuid": reader.read("uuid", query("nvmlDeviceGetUUID"), handle),
        "memory_total": int(memory.total) if memory is not None else None,
        "memory_used": int(memory.used) if memory is not None else None,
        "compute_capability": [int(capability[0]), int(capability[1])] if capability else None,
        "pcie_gen": reader.read("pcie_gen", query("nvmlDeviceGetCurrPcieLinkGeneration"), handle),
        "pcie_gen_max": reader.read(
            "pcie_gen_max", query("nvmlDeviceGetMaxPcieLinkGeneration"), handle
        ),
        "pcie_width": reader.read("pcie_width", query("nvmlDeviceGetCurrPcieLinkWidth"), handle),
        "pcie_width_max": reader.read(
            "pcie_width_max", query("nvmlDeviceGetMaxPcieLinkWidth"), handle
        ),
    }
    if full:
        facts.update(_dynamic_facts(nvml, handle, reader, query))
        facts["memory_free"] = int(memory.free) if memory is not None else None
    facts["unavailable"] = reader.unavailable
    return facts


def _dynamic_facts(
    nvml: Any, handle: Any, reader: FieldReader, query: Callable[[str], Any]
) -> dict[str, Any]:
    rates = reader.read("utilization", query("nvmlDeviceGetUtilizationRates"), handle)
    power_mw = reader.read("power", query("nvmlDeviceGetPowerUsage"), handle)
    limit_mw = reader.read("power_limit", query("nvmlDeviceGetEnforcedPowerLimit"), handle)
    clock = query("nvmlDeviceGetClockInfo")
    max_clock = query("nvmlDeviceGetMaxClockInfo")
    sm, mem = get_constant(nvml, "NVML_CLOCK_SM", 1), get_constant(nvml, "NVML_CLOCK_MEM", 2)
    reasons = reader.read(
        "clock_event_reasons",
        query("nvmlDeviceGetCurrentClocksEventReasons")
        or query("nvmlDeviceGetCurrentClocksThrottleReasons"),
        handle,
    )
    mig = reader.read("mig_mode", query("nvmlDeviceGetMigMode"), handle)
    ecc = reader.read("ecc_mode", query("nvmlDeviceGetEccMode"), handle)
    uncorrected = get_constant(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    corrected = get_constant(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    volatile = get_constant(nvml, "NVML_VOLATILE_ECC", 0)
    ecc_errors = None
    if ecc and ecc[0]:
        total = query("nvmlDeviceGetTotalEccErrors")
        ecc_errors = {
            "corrected_volatile": reader.read("ecc_corrected", total, handle, corrected, volatile),
            "uncorrected_volatile": reader.read(
                "ecc_uncorrected", total, handle, uncorrected, volatile
            ),
        }
    return {
        "utilization_gpu": int(rates.gpu) if rates is not None else None,
        "utilization_memory": int(rates.memory) if rates is not None else None,
        "temperature_c": reader.read(
            "temperature",
            query("nvmlDeviceGetTemperature"),
            handle,
            get_constant(nvml, "NVML_TEMPERATURE_GPU", 0),
        ),
        "power_w": power_mw / 1000.0 if power_mw is not None else None,
        "power_limit_w": limit_mw / 1000.0 if limit_mw is not None else None,
        "performance_state": reader.read(
            "performance_state", query("nvmlDeviceGetPerformanceState"), handle
        ),
        "sm_clock_mhz": reader.read("sm_clock", clock, handle, sm),
        "sm_clock_max_mhz": reader.read("sm_clock_max", max_clock, handle, sm),
        "memory_clock_mhz": reader.read("memory_clock", clock, handle, mem),
        "memory_clock_max_mhz": reader.read("memory_clock_max", max_clock, handle, mem),
        "clock_event_mask": reasons,
        "clock_event_reasons": clock_event_names(reasons),
        "mig_mode": bool(mig[0]) if mig is not None else None,
        "mig_mode_pending": bool(mig[1]) if mig is not None else None,
        "ecc_mode": bool(ecc[0]) if ecc is not None else None,
        "ecc_errors": ecc_errors,
        "processes": _processes(nvml, handle, reader, query),
    }


def get_constant(nvml: Any, name: str, default: int) -> int:
    return int(getattr(nvml, name, default))


def clock_event_names(mask: int | None) -> list[str] | None:
    """The names of the bits set in a clocks-event (throttle) reason mask."""
    if mask is None:
        return None
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    known = sum(CLOCK_EVENT_REASONS)
    if mask & ~known:
        names.append(f"other(0x{mask & ~known:x})")
    return names


def _processes(
    nvml: Any, handle: Any, reader: FieldReader, query: Callable[[str], Any]
) -> list[dict[str, Any]] | None:
    """Compute and graphics processes on the GPU with their memory; None if NVML cannot say."""
    found: dict[int, dict[str, Any]] = {}
    answered = False
    for kind, name in (
        ("compute", "nvmlDeviceGetComputeRunningProcesses"),
        ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    ):
        listed = reader.read(f"{kind}_processes", query(name), handle)
        if listed is None:
            continue
        answered = True
        for process in listed:
            pid = int(process.pid)
            entry = found.setdefault(
                pid, {"pid": pid, "name": None, "memory_used": None, "kinds": []}
            )
            entry["kinds"].append(kind)
            used = getattr(process, "usedGpuMemory", None)
            if used is not None:
                entry["memory_used"] = max(entry["memory_used"] or 0, int(used))
    if not answered:
        return None
    me = os.getpid()
    for entry in found.values():
        entry["name"] = process_name(nvml, entry["pid"])
        entry["is_self"] = entry["pid"] == me
    return sorted(found.values(), key=lambda entry: entry["pid"])


def process_name(nvml: Any, pid: int) -> str | None:
    """NVML's name for a process, else psutil's, else None (another PID namespace)."""
    name = nvml_query(getattr(nvml, "nvmlSystemGetProcessName", None), pid)
    if name:
        return str(name)
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # psutil.NoSuchProcess, AccessDenied, or no psutil: the name is unknown
        return None
