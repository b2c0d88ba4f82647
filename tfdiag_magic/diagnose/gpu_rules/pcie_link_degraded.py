"""pcie-link-degraded: a GPU's PCIe link runs narrower or slower than it can."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import device_label, nvml_devices
from . import per_device

CODE = "pcie-link-degraded"
TITLE = "A GPU's PCIe link runs below its maximum"
DOC = """\
## What it detects
A GPU's PCIe link with fewer lanes than it supports, or a lower generation while the GPU is busy.

## Why it hurts
Copies between host and GPU (the input pipeline's batches) are slower by the same factor.

## Evidence we show
Current and maximum link width and generation (NVML), and the GPU's utilization.

## Fix
A full x16 slot (slots that share lanes drop to x8; avoid x1/x8 risers); the slot's PCIe
generation and the BIOS PCIe speed setting.

## Threshold
Width below the maximum; or generation below the maximum while the GPU's utilization is above
0% (GPUs lower the generation while idle to save power, so an idle GPU's counts for nothing).
"""


def check(record: Record, source: str | None) -> Finding | None:
    found = []
    for device in nvml_devices(record):
        width, width_max = device.get("pcie_width"), device.get("pcie_width_max")
        gen, gen_max = device.get("pcie_gen"), device.get("pcie_gen_max")
        narrow = bool(width and width_max and width < width_max)
        slow = bool(gen and gen_max and gen < gen_max)
        busy = (device.get("utilization_gpu") or 0) > 0
        if not (narrow or (slow and busy)):
            continue
        parts = [f"x{width} of x{width_max} lanes"] if narrow else []
        fixes = (
            [
                "Put the GPU in a full x16 slot: check the board's manual for slots that share "
                "lanes (a x16 slot drops to x8 when its neighbour is used) and avoid x1/x8 risers"
            ]
            if narrow
            else []
        )
        if slow:
            parts.append(f"generation {gen} of {gen_max}")
            fixes.append(
                "check the slot's PCIe generation and the BIOS PCIe speed setting (Auto / "
                f"Gen{gen_max}), and the riser cable if there is one"
            )
        found.append(
            (
                f"GPU {device.get('index')}'s PCIe link runs below its maximum",
                f"The PCIe link of {device_label(device)} runs at {' and '.join(parts)}"
                + (" while busy" if slow and busy else "")
                + ": copies between host and GPU (the input pipeline's batches) are slower by "
                "the same factor.",
                "; ".join(fixes) + ".",
                {
                    "gpu": device.get("index"),
                    "pcie_width": width,
                    "pcie_width_max": width_max,
                    "pcie_gen": gen,
                    "pcie_gen_max": gen_max,
                    "utilization_gpu": device.get("utilization_gpu"),
                },
            )
        )
    return per_device(CODE, "warning", found)
