"""gpu-clocks-throttled: a GPU lowers its clocks against its will (heat, power supply)."""

from __future__ import annotations

from typing import Any

from ...findings import Finding
from ...record import Record
from ..gpu_facts import device_label, nvml_devices
from . import per_device

CODE = "gpu-clocks-throttled"
TITLE = "A GPU is throttled"
DOC = """\
## What it detects
NVML's clock-event (throttle) reasons that mean the GPU slows down against its will: thermal
slowdown (driver or hardware), hardware slowdown, the power brake.

## Why it hurts
Every kernel runs slower by the clock's drop, often by half or more.

## Evidence we show
The reasons, the temperature, the power draw and limit, the SM clock and its maximum.

## Fix
Better cooling (airflow, fan curve, dust) and a check of the power connectors and supply;
`nvidia-smi -q -d PERFORMANCE,TEMPERATURE` shows the limits in force.

## Threshold
Any of the reasons in `THROTTLE_CAUSES` set when the facts were read (NVML's
nvmlDeviceGetCurrentClocksEventReasons bits).
"""

THROTTLE_CAUSES = {
    "sw_thermal_slowdown": "too hot (driver thermal limit)",
    "hw_thermal_slowdown": "too hot (hardware thermal protection)",
    "hw_slowdown": "hardware slowdown (temperature or power supply)",
    "hw_power_brake_slowdown": "power brake asserted by the board's power supply",
}


def clock_evidence(device: dict[str, Any]) -> dict[str, Any]:
    keys = ("temperature_c", "power_w", "power_limit_w", "sm_clock_mhz", "sm_clock_max_mhz")
    return {
        "gpu": device.get("index"),
        "clock_event_reasons": device.get("clock_event_reasons") or [],
        **{key: device.get(key) for key in keys},
    }


def clocks_text(device: dict[str, Any]) -> str:
    if device.get("sm_clock_mhz") and device.get("sm_clock_max_mhz"):
        return f" (SM clock {device['sm_clock_mhz']} of {device['sm_clock_max_mhz']} MHz)"
    return ""


def check(record: Record, source: str | None) -> Finding | None:
    found = []
    for device in nvml_devices(record):
        reasons = device.get("clock_event_reasons") or []
        causes = [THROTTLE_CAUSES[r] for r in reasons if r in THROTTLE_CAUSES]
        if not causes:
            continue
        temperature = device.get("temperature_c")
        found.append(
            (
                f"GPU {device.get('index')} is throttled",
                f"{device_label(device)} lowers its clocks{clocks_text(device)}: "
                + "; ".join(causes)
                + (f"; it is at {temperature} °C" if temperature is not None else "")
                + ".",
                "Improve cooling (airflow, fan curve, room temperature, dust) and check the "
                "power connectors and supply; nvidia-smi -q -d PERFORMANCE,TEMPERATURE shows "
                "the limits in force.",
                clock_evidence(device),
            )
        )
    return per_device(CODE, "warning", found)
