"""The numbers behind the dashboard: the plotted steps as arrays, and exact window statistics.

`StepSeries` is computed once per record (100 000 steps in a few milliseconds): which rows are
plotted, their step times, rolling medians, warm-up marks, epoch boundaries, data waits, and the
memory and NVML samples placed on the same step axis. `window_stats` recomputes the headline
statistics for any range of steps from the exact columns, never from a thinned series.
`WindowIndex` gives the same numbers for a range slider that follows the hand: each phase's
rows, step times and steady steps are laid out once, so a window is a slice of each, and the
median and p90 of a long window come from one sorted order instead of a partition per move.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record import PHASES, Phase, Record
from ..stats import (
    interrupted_gaps,
    pause_scale,
    paused_time,
    steady_rate,
    step_numbers,
    warmup_mask,
)


@dataclass
class StepSeries:
    """The rows the dashboard plots, in start order; `x` is the step number on the plot's axis."""

    rows: np.ndarray  # indices into record.steps
    start: np.ndarray
    duration: np.ndarray
    data_wait: np.ndarray  # NaN where not observable
    phase: np.ndarray  # codes into PHASES
    epoch: np.ndarray
    warm: np.ndarray  # warm-up rows: first of their phase, or a tf.function was traced
    traced: np.ndarray
    rolling: np.ndarray  # rolling median of each phase's own step times
    rolling_window: int
    phases: list[str]  # phases present, in PHASES order
    epoch_bounds: np.ndarray  # x where a new training epoch begins
    mem_x: np.ndarray  # memory samples on the step axis
    mem_time: np.ndarray
    mem_rss: np.ndarray  # bytes; -1 where unknown
    # bytes of tensors TensorFlow's CPU allocator holds; -1 where unknown
    mem_cpu_tensors: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    mem_gpu: dict[str, np.ndarray] = field(default_factory=dict)  # device -> bytes in use
    nvml: dict[str, np.ndarray] = field(default_factory=dict)  # time, <dev>:util, ...
    only_loops: bool = False  # nothing but loop iterations was recorded: those are plotted

    @property
    def count(self) -> int:
        return int(self.rows.size)

    def x_of_time(self, times: np.ndarray) -> np.ndarray:
        """Steps started by each time: places time-stamped samples on the step axis."""
        return np.searchsorted(self.start, times, side="right").astype(np.float64) - 0.5


def rolling_window(count: int) -> int:
    """An odd window: ~2 % of the steps, at least 5, at most 201."""
    window = int(np.clip(count // 50, 5, 201))
    return window | 1


def _rolling_median(values: np.ndarray, window: int) -> np.ndarray:
    import pandas as pd

    return (
        pd.Series(values)
        .rolling(window, center=True, min_periods=1)
        .median()
        .to_numpy(dtype=np.float64)
    )


def step_series(record: Record) -> StepSeries:
    steps = record.steps
    loop_code = Phase.LOOP
    phase_all = steps["phase"]
    plotted = phase_all != loop_code
    only_loops = not plotted.any() and bool(phase_all.size)
    if only_loops:
        plotted = phase_all == loop_code
    rows = np.flatnonzero(plotted)
    warm_all = warmup_mask(record) if steps["start"].size else np.zeros(0, dtype=bool)
    duration = steps["duration"][rows].astype(np.float64)
    phase = phase_all[rows]
    count = rows.size
    window = rolling_window(count)
    rolling = np.full(count, np.nan)
    phases = []
    for code, name in enumerate(PHASES):
        mine = np.flatnonzero(phase == code)
        if mine.size:
            phases.append(name)
            rolling[mine] = _rolling_median(duration[mine], rolling_window(mine.size))
    start = steps["start"][rows].astype(np.float64)
    epoch = steps["epoch"][rows]
    train = np.flatnonzero(phase == Phase.TRAIN)
    bounds = np.zeros(0)
    if train.size > 1:
        changed = np.flatnonzero(epoch[train][1:] != epoch[train][:-1]) + 1
        bounds = train[changed].astype(np.float64) - 0.5
    memory = record.memory
    mem_time = memory.get("time", np.zeros(0)).astype(np.float64)
    series = StepSeries(
        rows=rows,
        start=start,
        duration=duration,
        data_wait=steps["data_wait"][rows].astype(np.float64),
        phase=phase,
        epoch=epoch,
        warm=warm_all[rows],
        traced=steps["traced"][rows],
        rolling=rolling,
        rolling_window=window,
        phases=phases,
        epoch_bounds=bounds,
        mem_x=np.zeros(0),
        mem_time=mem_time,
        mem_rss=memory.get("rss", np.zeros(0, dtype=np.int64)),
        mem_cpu_tensors=memory.get("cpu_tensors", np.zeros(0, dtype=np.int64)),
        nvml=dict(record.nvml),
        only_loops=only_loops,
    )
    series.mem_x = series.x_of_time(mem_time)
    series.mem_gpu.update(record.gpu_memory())
    return series


def window_stats(series: StepSeries, lo: int, hi: int) -> dict[str, Any]:
    """Exact statistics of the plotted steps lo..hi (inclusive), per phase and overall."""
    lo = max(0, int(lo))
    hi = min(series.count - 1, int(hi))
    result: dict[str, Any] = {"lo": lo, "hi": hi, "phases": {}, "count": 0}
    if series.count == 0 or hi < lo:
        return result
    part = slice(lo, hi + 1)
    duration = series.duration[part]
    phase = series.phase[part]
    warm = series.warm[part]
    start = series.start[part]
    wait = series.data_wait[part]
    result["count"] = int(duration.size)
    result["time_from"] = float(start.min())
    result["time_to"] = float((start + duration).max())
    for code, name in enumerate(PHASES):
        mine = phase == code
        if mine.any():
            # Pauses are judged by the phase's scale over the whole run, not the window's.
            everywhere = np.flatnonzero(series.phase == code)
            scale = pause_scale(
                series.start[everywhere],
                series.duration[everywhere],
                interrupted_gaps(everywhere, series.start, series.start + series.duration),
            )
            interrupted = interrupted_gaps(np.flatnonzero(mine), start, start + duration)
            numbers = step_numbers(
                duration[mine], warm[mine], start[mine], wait[mine], interrupted, scale
            )
            numbers["max"] = float(duration[mine].max())
            result["phases"][name] = numbers
    result.update(_memory_peaks(series, lo, hi))
    return result


def _memory_peaks(series: StepSeries, lo: int, hi: int) -> dict[str, Any]:
    """Host RSS and device memory peaks among the memory samples of steps lo..hi."""
    in_window = (series.mem_x >= lo - 0.5) & (series.mem_x <= hi + 0.5)
    rss = series.mem_rss[in_window] if series.mem_rss.size == series.mem_x.size else np.zeros(0)
    rss = rss[rss >= 0]
    gpu_peaks = {}
    for device, values in series.mem_gpu.items():
        seen_values = values[in_window] if values.size == in_window.size else np.zeros(0)
        seen_values = seen_values[seen_values >= 0]
        if seen_values.size:
            gpu_peaks[device] = int(seen_values.max())
    return {"rss_peak": int(rss.max()) if rss.size else None, "gpu_peak": gpu_peaks}


# A phase with fewer steady steps than this gets its window medians from np.median on the slice:
# a partition of 65 536 values costs about what the sorted order's scan does.
ORDER_INDEX_MIN = 1 << 16


class _PhaseRows:
    """One phase's plotted rows laid out for window queries: a window is a slice of each array.

    Slicing keeps the rows in plot order, the order the straightforward computation selects them
    in, so sums and means are bit for bit the same; medians and percentiles depend only on the
    values in the window.
    """

    def __init__(self, series: StepSeries, code: int) -> None:
        self.pos = np.flatnonzero(series.phase == code)  # positions on the plot's axis
        self.duration = series.duration[self.pos]
        self.start = series.start[self.pos]
        self.end = self.start + self.duration
        self.gaps = np.diff(self.start)  # gaps[i]: from row i's start to row i + 1's
        # Whether another phase's step ran in gaps[i].
        self.interrupted = interrupted_gaps(self.pos, series.start, series.start + series.duration)
        self.scale = pause_scale(self.start, self.duration, self.interrupted)
        steady = ~series.warm[self.pos]
        self.steady_at = np.flatnonzero(steady)  # indices into this phase's arrays
        self.steady = self.duration[steady]
        waits = series.data_wait[self.pos]
        seen = ~np.isnan(waits)
        self.wait_at: np.ndarray | None = None if seen.all() else np.flatnonzero(seen)
        self.waits = waits if self.wait_at is None else waits[seen]
        # The steady step times in ascending order, and where each stands in `steady`: made
        # when a long window first asks for its median.
        self.sorted: np.ndarray | None = None
        self.order: np.ndarray | None = None
        self.sortable = self.steady.size >= ORDER_INDEX_MIN and not np.isnan(self.steady).any()

    def rows_in(self, lo: int, hi: int) -> tuple[int, int]:
        """This phase's rows among plot positions lo..hi: indices a..b-1 into its arrays."""
        return (
            int(np.searchsorted(self.pos, lo, side="left")),
            int(np.searchsorted(self.pos, hi, side="right")),
        )

    def numbers(self, a: int, b: int, first: float, last: float) -> dict[str, Any]:
        """`step_numbers` of this phase's rows a..b-1 (b > a), with their longest step; `first`
        and `last` are their earliest start and latest end."""
        sa, sb = (int(i) for i in np.searchsorted(self.steady_at, (a, b)))
        steady = self.steady[sa:sb]
        median, p90 = self._median_p90(sa, sb)
        durations = self.duration[a:b]
        span = last - first
        active = span - paused_time(
            self.gaps[a : b - 1], self.duration[a : b - 1], self.interrupted[a : b - 1], self.scale
        )
        if self.wait_at is None:
            waits = self.waits[a:b]
        else:
            wa, wb = np.searchsorted(self.wait_at, (a, b))
            waits = self.waits[wa:wb]
        count = b - a
        return {
            "count": count,
            "steady_count": int(steady.size),
            "median": median,
            "p90": p90,
            "mean": float(steady.mean()) if steady.size else None,
            "warmup_count": count - int(steady.size),
            "total_time": float(durations.sum()),
            "span": span,
            "steps_per_second": steady_rate(durations, steady, active),
            "data_wait": float(waits.sum()) if waits.size else None,
            "max": float(durations.max()),
        }

    def _median_p90(self, sa: int, sb: int) -> tuple[float | None, float | None]:
        n = sb - sa
        if n == 0:
            return None, None
        if not self.sortable or 4 * n < self.steady.size:
            steady = self.steady[sa:sb]
            return float(np.median(steady)), float(np.percentile(steady, 90))
        if self.order is None or self.sorted is None:
            order = np.argsort(self.steady)
            self.sorted = self.steady[order]
            self.order = order.astype(np.int32) if order.size < 2**31 else order
        # The window's values in ascending order are the sorted values whose place in `steady`
        # lies in sa..sb-1: one pass over the order, then a few lookups.
        if self.order.dtype == np.int32:  # one subtraction and one comparison, unsigned
            inside = np.flatnonzero((self.order - np.int32(sa)).view(np.uint32) < n)
        else:
            inside = np.flatnonzero((self.order >= sa) & (self.order < sb))

        def kth(k: int) -> float:
            return self.sorted[inside[k]]

        return _median_of_sorted(kth, n), _percentile_of_sorted(kth, n, 90)


def _median_of_sorted(kth: Any, n: int) -> float:
    """np.median of n values, given the k-th smallest of them: the same float, bit for bit."""
    if n % 2:
        return float(kth(n // 2))
    return float(np.mean(np.array([kth(n // 2 - 1), kth(n // 2)])))


def _percentile_of_sorted(kth: Any, n: int, q: float) -> float:
    """np.percentile(values, q) (its default, linear method) of n values, given the k-th
    smallest of them: NumPy's own arithmetic, so the same float, bit for bit."""
    virtual = (n - 1) * (q / 100)
    if virtual >= n - 1:
        return float(kth(n - 1))
    below = math.floor(virtual)
    gamma = virtual - below
    a, b = float(kth(below)), float(kth(below + 1))
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


class WindowIndex:
    """`window_stats` for a range slider: the same numbers, from slices of arrays laid out once.

    Building it costs a few passes over the series (and one sort of each long phase's steady
    step times); a window then costs a few binary searches and one pass over the rows inside
    it for sums and extremes, never a selection by mask over the whole run.
    """

    def __init__(self, series: StepSeries) -> None:
        self.series = series
        self.phases = {
            name: _PhaseRows(series, code)
            for code, name in enumerate(PHASES)
            if np.any(series.phase == code)
        }

    def stats(self, lo: int, hi: int) -> dict[str, Any]:
        """Exact statistics of the plotted steps lo..hi (inclusive): `window_stats`'s result."""
        series = self.series
        lo = max(0, int(lo))
        hi = min(series.count - 1, int(hi))
        result: dict[str, Any] = {"lo": lo, "hi": hi, "phases": {}, "count": 0}
        if series.count == 0 or hi < lo:
            return result
        result["count"] = hi - lo + 1
        time_from, time_to, counted = math.inf, -math.inf, 0
        for name, rows in self.phases.items():
            a, b = rows.rows_in(lo, hi)
            if b <= a:
                continue
            first, last = float(rows.start[a:b].min()), float(rows.end[a:b].max())
            result["phases"][name] = rows.numbers(a, b, first, last)
            counted += b - a
            time_from, time_to = min(time_from, first), max(time_to, last)
        if counted != result["count"]:  # rows of no phase: take the window's extremes directly
            part = slice(lo, hi + 1)
            time_from = float(series.start[part].min())
            time_to = float((series.start[part] + series.duration[part]).max())
        result["time_from"] = time_from
        result["time_to"] = time_to
        result.update(_memory_peaks(series, lo, hi))
        return result
