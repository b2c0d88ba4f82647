"""gpu-power-capped: a GPU holds its clocks down to stay within its power limit."""

from __future__ import annotations

from ...findings import Finding
from ...record import Record
from ..gpu_facts import device_label, nvml_devices
from . import per_device
from .gpu_clocks_throttled import THROTTLE_CAUSES, clock_evidence, clocks_text

CODE = "gpu-power-capped"
TITLE = "A GPU is at its power limit"
DOC = """\
## What it detects
NVML's `sw_power_cap` clock-event reason, without any of `gpu-clocks-throttled`'s causes.

## Why it hurts
Under full load this is normal; it costs speed only where the limit was lowered.

## Evidence we show
The power draw and the enforced limit, the SM clock and its maximum.

## Fix
Nothing, unless the limit was lowered on purpose (`nvidia-smi -q -d POWER` shows the default
and the enforced limit; `nvidia-smi -pl` sets it).

## Threshold
`sw_power_cap` set when the facts were read. An info note.
"""


def check(record: Record, source: str | None) -> Finding | None:
    found = []
    for device in nvml_devices(record):
        reasons = device.get("clock_event_reasons") or []
        if "sw_power_cap" not in reasons or any(r in THROTTLE_CAUSES for r in reasons):
            continue
        power, limit = device.get("power_w"), device.get("power_limit_w")
        drawn = f" ({power:.0f} W of {limit:.0f} W)" if power and limit else ""
        found.append(
            (
                f"GPU {device.get('index')} is at its power limit",
                f"{device_label(device)} lowers its clocks to stay within its power limit"
                f"{drawn}{clocks_text(device)}. Under full load this is normal.",
                "Nothing to do unless the limit was lowered on purpose (nvidia-smi -q -d "
                "POWER shows the default and the enforced limit; nvidia-smi -pl sets it).",
                clock_evidence(device),
            )
        )
    return per_device(CODE, "info", found)
