"""device-config-too-late: device settings made after TensorFlow's runtime had started."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record

CODE = "device-config-too-late"
TITLE = "Device settings changed after TensorFlow initialised"
DOC = """\
## What it detects
A call to `tf.config.experimental.set_memory_growth`, `tf.config.set_visible_devices`,
`tf.config.set_logical_device_configuration` (virtual devices, memory limits) or
`tf.config.threading.set_*_parallelism_threads` that TensorFlow refused with "cannot be
modified after being initialized" — whether the error ended the cell or was caught and printed
(as TensorFlow's own guide does, which hides it).

## Why it hurts
The setting silently did not happen: memory growth stays off (TensorFlow keeps almost all GPU
memory), the GPU stays visible, the thread counts stay as they were. In a notebook the runtime
starts with the first operation of any cell — creating a tensor, building a model, listing
logical devices — and stays up until the kernel restarts, so running the configuration cell
again does not help.

## Evidence we show
Each refused call and TensorFlow's message.

## Fix
Put the configuration in the first cell of the notebook, before anything else touches
TensorFlow, and restart the kernel (Kernel → Restart) so it runs first. For memory growth,
`TF_FORCE_GPU_ALLOW_GROWTH=true` in the environment before the kernel starts does the same.

## Threshold
Any refused call.
"""


def check(record: Record, source: str | None) -> Finding | None:
    calls = list(record.config_calls)
    error = record.error
    ended = error is not None and "after" in error.message and "initializ" in error.message
    if ended and not any(c.message == error.message for c in calls):
        from ..record import ConfigCall

        calls.append(
            ConfigCall(time=record.wall_time, call="(the cell's error)", message=error.message)
        )
    if not calls:
        return None
    names = sorted({c.call for c in calls})
    evidence = {
        "refused_calls": [{"call": c.call, "message": c.message} for c in calls[:10]],
        "count": len(calls),
        "ended_the_run": ended,
    }
    memory = any("memory_growth" in c.call for c in calls)
    finding = Finding(
        code=CODE,
        severity="error" if ended else "warning",
        title=f"TensorFlow refused {len(calls)} device setting(s): the runtime was already running",
        detail=(
            f'{", ".join(f"`{n}`" for n in names)}: "{calls[0].message}". The setting did not'
            " take effect. In a notebook TensorFlow starts with the first operation of any cell"
            " and stays up until the kernel restarts."
        ),
        fix="Move the configuration to the first cell of the notebook and restart the kernel"
        " (Kernel → Restart), so that it runs before anything else uses TensorFlow.",
        evidence=evidence,
    )
    if memory:
        cell = _memory_growth_cell()
        if cell:
            finding.rewrite = cell
            finding.fix += " The cell to put first is attached."
    return finding


def _memory_growth_cell() -> str | None:
    try:
        from ..rewrite import MEMORY_GROWTH_CELL
    except Exception:
        return None
    return str(MEMORY_GROWTH_CELL)
