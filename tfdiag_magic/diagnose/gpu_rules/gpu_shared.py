"""gpu-shared: other processes use a GPU of this process."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import device_label, gib, nvml_devices, section, tf_gpus
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
Any other process: a warning. In a container NVML may list processes by the host's PIDs,
which have no name in the container's PID namespace. Where NVML lists no process as this one
although this process holds a context on the GPU (TensorFlow's runtime is initialised with a
GPU visible) and every process listed is nameless, one of them is likely this process itself:
an info note that says so. (On an NVIDIA H200 machine lent to us, NVML's PIDs were this
namespace's: this process was listed as itself and a child process by its name.)
"""


def check(record: Record, source: str | None) -> Finding | None:
    found = []
    unsure = []
    # This process holds a context on its visible GPUs once TensorFlow's runtime is up.
    holds_context = bool(section(record, "tensorflow").get("initialized")) and bool(tf_gpus(record))
    for device in nvml_devices(record):
        processes = device.get("processes") or []
        others = [p for p in processes if not p.get("is_self")]
        if not others:
            continue
        maybe_self = (
            holds_context
            and len(others) == len(processes)
            and all(p.get("name") is None for p in others)
        )
        described = ", ".join(
            f"{p.get('name') or 'unknown process'} (pid {p.get('pid')}"
            + (f", {gib(p['memory_used'])}" if p.get("memory_used") is not None else "")
            + ")"
            for p in others
        )
        held = sum(p.get("memory_used") or 0 for p in others)
        total = device.get("memory_total")
        share = f" ({held / total:.0%} of its memory)" if total and held else ""
        if maybe_self:
            unsure.append(
                (
                    f"NVML lists {len(others)} process(es) on GPU {device.get('index')} by PIDs"
                    " unknown here",
                    f"{device_label(device)} is used by {described}{share}, processes with no"
                    " name in this process's PID namespace, and NVML does not list this process,"
                    " although it holds a context on the GPU (TensorFlow's runtime is"
                    " initialised). In a container NVML gives the host's PIDs: one of them is"
                    " likely this process itself.",
                    "If `nvidia-smi` on the host shows other processes beside this kernel, shut"
                    " down the ones you own (a notebook kernel keeps its GPU memory until it"
                    " exits), or set CUDA_VISIBLE_DEVICES to another GPU before TensorFlow"
                    " starts.",
                    {
                        "gpu": device.get("index"),
                        "processes": others,
                        "memory_used_by_them": held,
                        "memory_total": total,
                        "this_process_listed": False,
                    },
                )
            )
            continue
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
    return per_device(CODE, "warning", found) or per_device(CODE, "info", unsure)
