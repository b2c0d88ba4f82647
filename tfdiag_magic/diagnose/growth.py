"""A steady rise of a memory series against steps: the slope, its fit and where it ran."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..record import KINDS, Record


@dataclass
class Growth:
    per_step: float  # bytes per step (least-squares slope)
    total: float  # bytes from the start of the steady part to the end
    steps: int  # steps the fit covers
    r2: float
    late_per_step: float  # the slope over the last third only
    start_value: float
    end_value: float
    start_time: float = float("nan")  # when the fitted part began (seconds into the run)
    end_time: float = float("nan")


def steps_done(record: Record) -> np.ndarray | None:
    """For each memory sample, the steps done when it was taken.

    The steps are the run's work rows (training, evaluation, prediction and function calls):
    a loop iteration that holds a step must not count twice. A run with only loop iterations
    counts those of its busiest loop (the innermost one, usually).
    """
    times = record.memory.get("time")
    if times is None:
        return record.memory.get("step")
    steps = record.steps
    is_loop = steps["kind"] == KINDS.index("loop")
    rows = ~is_loop
    if not rows.any() and is_loop.any():
        loops = steps["loop"][is_loop]
        busiest = np.bincount(loops[loops >= 0]).argmax() if (loops >= 0).any() else -1
        rows = is_loop & (steps["loop"] == busiest)
    starts = np.sort(steps["start"][rows])
    return np.searchsorted(starts, times, side="right").astype(np.int64)


def steady_growth(record: Record, values: np.ndarray) -> Growth | None:
    """Fit memory against the number of steps done, skipping the first tenth (warm-up
    allocations: the runtime, the first batches, a dataset's cache filling once)."""
    done = steps_done(record)
    if done is None or values.size < 8 or done.size != values.size:
        return None
    ok = values >= 0
    x = done[ok].astype(np.float64)
    y = values[ok].astype(np.float64)
    if x.size < 8 or x[-1] - x[0] < 20:
        return None
    begin = x[0] + 0.1 * (x[-1] - x[0])
    keep = x >= begin
    x, y = x[keep], y[keep]
    times = record.memory.get("time")
    kept_times = times[ok][keep] if times is not None and times.size == values.size else None
    if x.size < 6 or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    fitted = slope * x + intercept
    total_var = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - fitted) ** 2).sum()) / total_var if total_var > 0 else 0.0
    third = x >= x[0] + 2 * (x[-1] - x[0]) / 3
    late = (
        float(np.polyfit(x[third], y[third], 1)[0])
        if third.sum() >= 3 and np.ptp(x[third])
        else 0.0
    )
    return Growth(
        per_step=float(slope),
        total=float(y[-1] - y[0]),
        steps=int(x[-1] - x[0]),
        r2=r2,
        late_per_step=late,
        start_value=float(y[0]),
        end_value=float(y[-1]),
        start_time=float(kept_times[0]) if kept_times is not None else float("nan"),
        end_time=float(kept_times[-1]) if kept_times is not None else float("nan"),
    )


def is_steady_rise(growth: Growth | None, min_total: float, min_r2: float = 0.8) -> bool:
    """Growth that is large, explained by the number of steps, and still going at the end."""
    return (
        growth is not None
        and growth.total >= min_total
        and growth.per_step > 0
        and growth.r2 >= min_r2
        and growth.late_per_step >= 0.5 * growth.per_step
    )
