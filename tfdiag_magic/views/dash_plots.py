"""The dashboard's plots as PNG bytes: step time, memory, GPU, in one style for light and dark.

Figures use matplotlib's object API (never pyplot's global state), a transparent background,
mid-grey text and colours that read on white and on a dark theme alike. They are drawn at twice
their displayed size, so they stay crisp on high-density screens. Long series are thinned per
pixel column first (`downsample.minmax_columns`): what is drawn is what the full series would
draw, at a fraction of the cost.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record import PHASES, Phase
from .dash_model import StepSeries
from .downsample import minmax_columns, thin_points

FOREGROUND = "#8a8a8a"  # text, ticks and frames: readable on white and on near-black
GRID = "#8a8a8a"
PHASE_COLORS = {
    "train": "#3b82f6",
    "eval": "#f59e0b",
    "predict": "#10b981",
    "loop": "#a855f7",
    "function": "#ec4899",
}
WARMUP_COLOR = "#ef4444"
WAIT_COLOR = "#f59e0b"
EPOCH_COLOR = "#8a8a8a"
SERIES_COLORS = ("#3b82f6", "#10b981", "#f59e0b", "#a855f7", "#ec4899", "#14b8a6")
WIDTH_IN = 7.6  # displayed at ~760 CSS pixels
DPI = 200  # twice the displayed resolution
COLUMNS = int(WIDTH_IN * DPI * 0.85)  # pixel columns of the plotting area, about
MAX_MARKERS = 1500
MAX_EPOCH_LINES = 200


@dataclass
class StepPlotOptions:
    """What the Steps plot shows; the dashboard's toggles set these."""

    phases: set[str] = field(default_factory=lambda: set(PHASES))
    raw: bool = True
    median: bool = True
    warmup: bool = True
    epochs: bool = True
    data_wait: bool = True
    log: bool | None = None  # None: chosen from the data (see use_log)


def new_figure(height: float, rows: int = 1, ratios: tuple[int, ...] | None = None) -> tuple:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI)
    fig.patch.set_alpha(0.0)
    if rows == 1:
        axes = [fig.add_subplot()]
    else:
        grid = fig.add_gridspec(rows, 1, height_ratios=ratios, hspace=0.08)
        first = fig.add_subplot(grid[0])
        axes = [first] + [fig.add_subplot(grid[i], sharex=first) for i in range(1, rows)]
    for ax in axes:
        ax.patch.set_alpha(0.0)
        ax.tick_params(which="both", colors=FOREGROUND, labelsize=7.5, width=0.6, length=3)
        for spine in ax.spines.values():
            spine.set_color(FOREGROUND)
            spine.set_linewidth(0.6)
        ax.spines["top"].set_visible(False)
        ax.spines["right"].set_visible(False)
        ax.grid(color=GRID, alpha=0.25, linewidth=0.5)
        ax.xaxis.label.set_color(FOREGROUND)
        ax.yaxis.label.set_color(FOREGROUND)
        ax.xaxis.label.set_size(8)
        ax.yaxis.label.set_size(8)
    return fig, axes


def add_legend(ax: Any) -> None:
    handles, _labels = ax.get_legend_handles_labels()
    if handles:
        legend = ax.legend(
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            fontsize=7,
            frameon=False,
            ncol=min(len(handles), 5),
            borderaxespad=0.1,
            handlelength=1.6,
        )
        for text in legend.get_texts():
            text.set_color(FOREGROUND)


def fix_layout(fig: Any) -> None:
    """Fixed margins: `tight_layout` would draw the figure twice."""
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.085, right=0.975, top=1 - 0.3 / height, bottom=0.42 / height)


def _broken(x: np.ndarray, y: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN where x jumps by more than `gap`, so a line is not drawn across the jump."""
    jumps = np.flatnonzero(np.diff(x) > gap) + 1
    if not jumps.size:
        return x, y
    return np.insert(x, jumps, np.nan), np.insert(y, jumps, np.nan)


def png_bytes(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", transparent=True, pil_kwargs={"compress_level": 3})
    return buffer.getvalue()


def _log_ticks(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def steps_png(series: StepSeries, lo: int, hi: int, options: StepPlotOptions) -> bytes | None:
    """Step time over steps lo..hi: raw and rolling median per phase, warm-up, epochs, waits."""
    if series.count == 0:
        return None
    lo, hi = max(0, lo), min(series.count - 1, hi)
    part = slice(lo, hi + 1)
    x_all = np.arange(lo, hi + 1, dtype=np.float64)
    waits = series.data_wait[part]
    show_wait = options.data_wait and bool(np.any(~np.isnan(waits)))
    if show_wait:
        fig, (ax, ax_wait) = new_figure(3.4, rows=2, ratios=(3, 1))
    else:
        fig, (ax,) = new_figure(2.8)
        ax_wait = None
    phase = series.phase[part]
    duration_ms = series.duration[part] * 1e3
    rolling_ms = series.rolling[part] * 1e3
    for name in series.phases:
        if name not in options.phases:
            continue
        mine = np.flatnonzero(phase == Phase.of(name))
        if not mine.size:
            continue
        color = PHASE_COLORS[name]
        x = x_all[mine]
        gap = max(1.5, 3.0 * (hi - lo + 1) / COLUMNS)
        if options.raw:
            px, py = _broken(*minmax_columns(x, duration_ms[mine], COLUMNS, lo, hi), gap)
            ax.plot(
                px,
                py,
                lw=0.6,
                color=color,
                alpha=0.55 if options.median else 0.9,
                label=name,
            )
        if options.median:
            px, py = _broken(*minmax_columns(x, rolling_ms[mine], COLUMNS, lo, hi), gap)
            ax.plot(
                px,
                py,
                lw=1.5,
                color=color,
                label=f"{name} median ({series.rolling_window})"
                if options.raw
                else f"{name} median",
            )
    if options.warmup:
        warm = np.flatnonzero(series.warm[part] & np.isin(phase, _codes(options.phases)))
        if warm.size:
            keep = warm[thin_points(warm, MAX_MARKERS)]
            ax.plot(
                x_all[keep],
                duration_ms[keep],
                "o",
                ms=2.6,
                color=WARMUP_COLOR,
                label="warm-up / traced",
            )
    if options.epochs:
        bounds = series.epoch_bounds
        bounds = bounds[(bounds >= lo) & (bounds <= hi)]
        if 0 < bounds.size <= MAX_EPOCH_LINES:
            for axis in (ax, ax_wait):
                if axis is not None:
                    axis.vlines(
                        bounds,
                        0,
                        1,
                        transform=axis.get_xaxis_transform(),
                        color=EPOCH_COLOR,
                        lw=0.6,
                        ls="--",
                        alpha=0.6,
                    )
    if use_log(options.log, duration_ms):
        _log_ticks(ax)
    ax.set_ylabel("step time (ms)")
    ax.set_xlim(lo - 0.5, hi + 0.5)
    if ax_wait is not None:
        px, py = minmax_columns(x_all, waits * 1e3, COLUMNS, lo, hi)
        ax_wait.fill_between(px, 0, py, color=WAIT_COLOR, alpha=0.5, lw=0, step="mid")
        ax_wait.plot(px, py, color=WAIT_COLOR, lw=0.6)
        ax_wait.set_ylabel("data wait (ms)")
        ax_wait.set_ylim(bottom=0)
        ax_wait.set_xlabel("step")
        for label in ax.get_xticklabels():
            label.set_visible(False)
    else:
        ax.set_xlabel("step")
    add_legend(ax)
    fix_layout(fig)
    return png_bytes(fig)


def use_log(log: bool | None, values: np.ndarray) -> bool:
    """None: log scale when the largest step is over 20 times the median (a tracing spike)."""
    if log is not None:
        return log
    positive = values[values > 0]
    return bool(positive.size and positive.max() > 20 * np.median(positive))


def _codes(phases: set[str]) -> list[int]:
    return [Phase.of(p) for p in phases if p in PHASES]


def memory_png(series: StepSeries, lo: int, hi: int) -> bytes | None:
    """Host RSS and TensorFlow's device memory over steps lo..hi (MiB)."""
    x = series.mem_x
    if x.size == 0:
        return None
    inside = (x >= lo - 0.5) & (x <= hi + 0.5)
    if not inside.any():
        inside = np.zeros_like(x, dtype=bool)
        inside[np.argmin(np.abs(x - (lo + hi) / 2))] = True
    fig, (ax,) = new_figure(2.6)
    drew = False
    rss = series.mem_rss
    if rss.size == x.size and (rss[inside] >= 0).any():
        keep = inside & (rss >= 0)
        px, py = minmax_columns(x[keep], rss[keep] / 2**20, COLUMNS)
        ax.plot(px, py, lw=1.2, color=SERIES_COLORS[0], label="host RSS", drawstyle="steps-post")
        drew = True
    tensors = series.mem_cpu_tensors
    if tensors.size == x.size and (tensors[inside] > 0).any():
        keep = inside & (tensors >= 0)
        px, py = minmax_columns(x[keep], tensors[keep] / 2**20, COLUMNS)
        ax.plot(
            px,
            py,
            lw=1.0,
            color=SERIES_COLORS[-1],
            label="CPU tensors (TensorFlow)",
            drawstyle="steps-post",
        )
        drew = True
    for i, (device, values) in enumerate(series.mem_gpu.items()):
        keep = inside & (values >= 0) if values.size == x.size else np.zeros(0, dtype=bool)
        if keep.any():
            px, py = minmax_columns(x[keep], values[keep] / 2**20, COLUMNS)
            color = SERIES_COLORS[(i + 1) % len(SERIES_COLORS)]
            ax.plot(px, py, lw=1.2, color=color, label=f"{device} (TensorFlow)")
            drew = True
    nvml = series.nvml
    if "time" in nvml and nvml["time"].size:
        nx = series.x_of_time(nvml["time"])
        nin = (nx >= lo - 0.5) & (nx <= hi + 0.5)
        for i, key in enumerate(k for k in nvml if k.endswith(":mem_used")):
            values = nvml[key]
            keep = nin & ~np.isnan(values)
            if keep.any():
                px, py = minmax_columns(nx[keep], values[keep] / 2**20, COLUMNS)
                color = SERIES_COLORS[(i + 3) % len(SERIES_COLORS)]
                label = f"{key.split(':')[0]} used (NVML)"
                ax.plot(px, py, lw=1.0, color=color, ls="--", label=label)
                drew = True
    if not drew:
        return None
    ax.set_xlim(lo - 0.5, hi + 0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("memory (MiB)")
    add_legend(ax)
    fix_layout(fig)
    return png_bytes(fig)


def gpu_png(series: StepSeries, lo: int, hi: int) -> bytes | None:
    """NVML utilization, memory use and power over time for the steps lo..hi; None: no data."""
    nvml = series.nvml
    times = nvml.get("time")
    if times is None or times.size == 0:
        return None
    if series.count:
        lo, hi = max(0, lo), min(series.count - 1, hi)
        t0 = float(series.start[lo])
        t1 = float(series.start[hi] + series.duration[hi])
    else:
        t0, t1 = float(times[0]), float(times[-1])
    inside = (times >= t0) & (times <= t1)
    if inside.sum() < 2:
        inside = np.ones_like(times, dtype=bool)
    devices = sorted({key.split(":")[0] for key in nvml if ":" in key})
    fig, axes = new_figure(4.2, rows=3, ratios=(1, 1, 1))
    panels = (("util", "utilization (%)", 1.0), ("mem_used", "memory (MiB)", 2**-20))
    panels += (("power_w", "power (W)", 1.0),)
    drew = False
    for ax, (field_name, label, scale) in zip(axes, panels, strict=True):
        for i, device in enumerate(devices):
            values = nvml.get(f"{device}:{field_name}")
            if values is None:
                continue
            keep = inside & ~np.isnan(values)
            if keep.any():
                px, py = minmax_columns(times[keep], values[keep] * scale, COLUMNS)
                ax.plot(px, py, lw=1.0, color=SERIES_COLORS[i % len(SERIES_COLORS)], label=device)
                drew = True
        ax.set_ylabel(label)
    if not drew:
        return None
    axes[-1].set_xlabel("time since the run started (s)")
    for ax in axes[:-1]:
        for tick in ax.get_xticklabels():
            tick.set_visible(False)
    add_legend(axes[0])
    fix_layout(fig)
    return png_bytes(fig)


def png_data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI, for an ``<img>`` in a self-contained HTML report."""
    import base64

    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
