"""A steady rise of a memory series against steps: the slope, its fit and where it ran."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..record import Kind, Record


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
    is_loop = steps["kind"] == Kind.LOOP
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
    return growth_within(record, values, [(-np.inf, np.inf)])


# A span shorter than this many steps, or with fewer samples, is not judged on its own.
MIN_SPAN_STEPS = 20
MIN_SPAN_SAMPLES = 8
LATE_SAMPLES = 3  # the fewest samples a late slope is fitted through


def growth_within(
    record: Record, values: np.ndarray, spans: list[tuple[float, float]]
) -> Growth | None:
    """One slope of memory against steps done, fitted within each span of time at once, each
    span with its own level (so a jump between spans, such as a model built or a cache
    filled between them, is not read as growth per step); the first tenth of each span is
    skipped as its warm-up. With one span covering the run this is a plain least-squares fit.

    `total` and `steps` add up the spans' own rises and lengths; `late_per_step` is the slope
    over the last third of each span (its last three samples where the third holds fewer).
    Spans too short to judge are left out; None when none is left.
    """
    done = steps_done(record)
    if done is None or values.size < 8 or done.size != values.size:
        return None
    times = record.memory.get("time")
    has_times = times is not None and times.size == values.size
    if not has_times:  # samples without times: the whole run is one span
        times = np.zeros(values.size)
        spans = [(-np.inf, np.inf)]
    ok = values >= 0
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for start, end in spans:
        inside = ok & (times >= start) & (times <= end)
        x = done[inside].astype(np.float64)
        y = values[inside].astype(np.float64)
        if x.size < MIN_SPAN_SAMPLES or x[-1] - x[0] < MIN_SPAN_STEPS:
            continue
        keep = x >= x[0] + 0.1 * (x[-1] - x[0])
        if keep.sum() < 6 or np.ptp(x[keep]) == 0:
            continue
        parts.append((x[keep], y[keep], times[inside][keep]))
    if not parts:
        return None
    slope, r2 = _pooled_fit([(x, y) for x, y, _ in parts])
    late_parts = []
    for x, y, _ in parts:
        third = x >= x[0] + 2 * (x[-1] - x[0]) / 3
        if third.sum() < LATE_SAMPLES:
            # Samples come by time, not by steps: a short span may hold two in its last third
            # of steps. Its last three samples (all in its second half: a part holds six or
            # more) say whether it still rose at the end; too few would read as a stop.
            third = np.arange(x.size) >= x.size - LATE_SAMPLES
        if np.ptp(x[third]):
            late_parts.append((x[third], y[third]))
    late = _pooled_fit(late_parts)[0] if late_parts else 0.0
    first, last = parts[0], parts[-1]
    return Growth(
        per_step=slope,
        total=float(sum(y[-1] - y[0] for _, y, _ in parts)),
        steps=int(sum(x[-1] - x[0] for x, _, _ in parts)),
        r2=r2,
        late_per_step=late,
        start_value=float(first[1][0]),
        end_value=float(last[1][-1]),
        start_time=float(first[2][0]) if has_times else float("nan"),
        end_time=float(last[2][-1]) if has_times else float("nan"),
    )


def rise_between_reads(
    record: Record, values: np.ndarray, spans: list[tuple[float, float]]
) -> float | None:
    """What a series read at only a few of its samples (a paced read skips the others: -1,
    `probes/paced_read.py`) rose within `spans`: in each span, from its first read sample past
    the span's first tenth to its last one, scaled to the steps `growth_within` would fit
    there. Too few points for a fit, enough to compare its rise with another series'. None
    where no span has two read samples a half of its steps apart."""
    done = steps_done(record)
    times = record.memory.get("time")
    if done is None or times is None or not done.size == times.size == values.size:
        return None
    total, judged = 0.0, False
    for start, end in spans:
        inside = (times >= start) & (times <= end)
        x = done[inside].astype(np.float64)
        if x.size < MIN_SPAN_SAMPLES or x[-1] - x[0] < MIN_SPAN_STEPS:
            continue
        fitted = x >= x[0] + 0.1 * (x[-1] - x[0])
        read = fitted & (values[inside] >= 0)
        steps = x[fitted][-1] - x[fitted][0]
        if read.sum() < 2 or x[read][-1] - x[read][0] < 0.5 * steps:
            continue
        y = values[inside][read].astype(np.float64)
        total += (y[-1] - y[0]) * steps / (x[read][-1] - x[read][0])
        judged = True
    return total if judged else None


def _pooled_fit(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """The least-squares slope shared by every part, each part with its own intercept, and
    the share of the variance within the parts it explains (R²)."""
    xx = xy = yy = 0.0
    for x, y in parts:
        dx, dy = x - x.mean(), y - y.mean()
        xx += float((dx * dx).sum())
        xy += float((dx * dy).sum())
        yy += float((dy * dy).sum())
    if xx == 0:
        return 0.0, 0.0
    slope = xy / xx
    residual = yy - slope * xy  # sum of squared residuals of the pooled fit
    return slope, (1.0 - residual / yy if yy > 0 else 0.0)


def is_steady_rise(growth: Growth | None, min_total: float, min_r2: float = 0.8) -> bool:
    """Growth that is large, explained by the number of steps, and still going at the end."""
    return (
        growth is not None
        and growth.total >= min_total
        and growth.per_step > 0
        and growth.r2 >= min_r2
        and growth.late_per_step >= 0.5 * growth.per_step
    )
