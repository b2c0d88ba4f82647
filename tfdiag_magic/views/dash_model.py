"""The numbers behind the dashboard: the plotted steps as arrays, and exact window statistics.

`StepSeries` is computed once per record (100 000 steps in a few milliseconds): which rows are
plotted, their step times, rolling medians, warm-up marks, epoch boundaries, data waits, and the
memory and NVML samples placed on the same step axis. `window_stats` recomputes the headline
statistics for any range of steps from the exact columns, never from a thinned series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record import PHASES, Phase, Record
from ..stats import step_numbers, warmup_mask


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
            numbers = step_numbers(duration[mine], warm[mine], start[mine], wait[mine])
            numbers["max"] = float(duration[mine].max())
            result["phases"][name] = numbers
    in_window = (series.mem_x >= lo - 0.5) & (series.mem_x <= hi + 0.5)
    rss = series.mem_rss[in_window] if series.mem_rss.size == series.mem_x.size else np.zeros(0)
    rss = rss[rss >= 0]
    result["rss_peak"] = int(rss.max()) if rss.size else None
    gpu_peaks = {}
    for device, values in series.mem_gpu.items():
        seen_values = values[in_window] if values.size == in_window.size else np.zeros(0)
        seen_values = seen_values[seen_values >= 0]
        if seen_values.size:
            gpu_peaks[device] = int(seen_values.max())
    result["gpu_peak"] = gpu_peaks
    return result
