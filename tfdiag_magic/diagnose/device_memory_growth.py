"""device-memory-growth: GPU memory in use grows steadily with every step."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record
from ..rewrite import detach_appends
from ..units import size
from .evidence import first_rewrite, rounded, with_rewrite
from .growth import is_steady_rise, steady_growth
from .where import growth_place

CODE = "device-memory-growth"
TITLE = "GPU memory in use grows with every step"
DOC = """\
## What it detects
The memory TensorFlow's allocator has in use on a GPU (`tf.config.experimental.get_memory_info`,
`current`) rises in proportion to the steps done and is still rising at the end of the run.

## Why it hurts
It ends in `ResourceExhaustedError: OOM when allocating tensor`, after a long run. Device
memory held per step is almost always tensors the program keeps alive: outputs or losses
appended to Python lists, tensors stored on `self` in a model's `call`, or graphs and
variables from retracing. It is not fragmentation: the allocator's *in-use* figure counts live
tensors only.

## Evidence we show
Per GPU: bytes per step, the total growth, R² against steps done, start and end, and where it
grew: the line of the cell or script that was running while it grew (the growth between two
memory samples is credited to the lines running at them; the line, or the loop holding it,
with the largest share is named, with that share).

## Fix
Keep Python numbers (`float(loss)`) or NumPy copies (`.numpy()`) rather than tensors; do not
keep per-step tensors on objects; fix retracing if it is reported.

## Threshold
At least 64 MiB of growth over the steady part of the run, R² ≥ 0.8 against steps done, still
rising in the last third: the same rule as `host-memory-growth`. Tested on recorded data
(this project's CI machine has no GPU).
"""

MIN_TOTAL = 64 * (1 << 20)


def check(record: Record, source: str | None) -> Finding | None:
    worst = None
    for device, values in record.gpu_memory().items():
        growth = steady_growth(record, values)
        if is_steady_rise(growth, MIN_TOTAL) and (worst is None or growth.total > worst[1].total):
            worst = (device, growth, values)
    if worst is None:
        return None
    device, growth, values = worst
    place = growth_place(record, values, growth.start_time, growth.end_time)
    evidence = {
        "device": device,
        "bytes_per_step": rounded(growth.per_step),
        "growth_bytes": rounded(growth.total),
        "steps": growth.steps,
        "r2": rounded(growth.r2, 3),
        "start_bytes": rounded(growth.start_value),
        "end_bytes": rounded(growth.end_value),
    }
    if place is not None:
        evidence["where"] = place.label
        evidence.update(place.evidence())
    per_step = size(growth.per_step)
    finding = Finding(
        code=CODE,
        severity="warning",
        title=f"{device} memory in use grew {size(growth.total)} ({per_step} per step)",
        detail=(
            f"TensorFlow's allocator on {device} had {size(growth.start_value)} in use and"
            f" {size(growth.end_value)} at the end, rising with every step (R² {growth.r2:.2f}):"
            " tensors are being kept alive per step."
            + (" " + place.sentence() if place is not None else "")
        ),
        fix="Keep Python floats or NumPy copies instead of tensors in lists and on objects.",
        evidence=evidence,
    )
    return with_rewrite(finding, source, first_rewrite(source, (detach_appends, {})))
