"""gpu-shared: other processes use a GPU of this process."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import device_label, gib, nvml_devices
from . import per_device

CODE = "gpu-shared"
TITLE = "Other processes use the GPU"
DOC = """\
## What it detects
Processes other than this one on a GPU (NVML's compute and graphics process lists).

## Why it hurts
They hold memory this process cannot use and share its compute time.

## Evidence we show
Each process's name, PID and GPU memory, and their share of the GPU's memory.

## Fix
Shut down other notebook kernels (a kernel keeps its GPU memory until it exits), stop the
processes, or use another GPU (`CUDA_VISIBLE_DEVICES` before TensorFlow starts).

## Threshold
Any other process. In a container the PIDs may be the host's and nameless.
"""


def check(record: Record, source: str | None) -> Finding | None:
    found = []
    for device in nvml_devices(record):
        others = [p for p in device.get("processes") or [] if not p.get("is_self")]
        if not others:
            continue
        described = ", ".join(
            f"{p.get('name') or 'unknown process'} (pid {p.get('pid')}"
            + (f", {gib(p['memory_used'])}" if p.get("memory_used") is not None else "")
            + ")"
            for p in others
        )
        held = sum(p.get("memory_used") or 0 for p in others)
        total = device.get("memory_total")
        share = f" ({held / total:.0%} of its memory)" if total and held else ""
        found.append(
            (
                f"{len(others)} other process(es) use GPU {device.get('index')}",
                f"{device_label(device)} is also used by {described}{share}. They hold memory "
                "this process cannot use and share its compute time. (In a container the PIDs "
                "may be the host's, and a process outside it has no name here.)",
                "If they are other notebook kernels, shut those kernels down (a kernel keeps its "
                "GPU memory until it exits), or stop the processes (kill PID); otherwise use "
                "another GPU: set CUDA_VISIBLE_DEVICES to its index before TensorFlow starts.",
                {
                    "gpu": device.get("index"),
                    "processes": others,
                    "memory_used_by_others": held,
                    "memory_total": total,
                },
            )
        )
    return per_device(CODE, "warning", found)
