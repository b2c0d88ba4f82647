"""The dashboard's plots as PNG bytes: step time, memory, GPU, in one style for light and dark.

Figures use matplotlib's object API (never pyplot's global state), a transparent background,
mid-grey text and colours that read on white and on a dark theme alike. They are drawn at twice
their displayed size, so they stay crisp on high-density screens. Long series are thinned per
pixel column first (`downsample.minmax_columns`): what is drawn is what the full series would
draw, at a fraction of the cost.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record import PHASES, Phase
from .dash_model import StepSeries, WindowIndex
from .downsample import column_extremes, minmax_columns, thin_points

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


def add_legend(ax: Any, handles: list[Any] | None = None) -> None:
    if handles is None:
        handles, _labels = ax.get_legend_handles_labels()
    if handles:
        legend = ax.legend(
            handles=handles,
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
    figure = StepsFigure(WindowIndex(series), keep_warm=False)
    try:
        return figure.png(lo, hi, options)
    finally:
        figure.release()


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


# -- the Steps plot, kept between windows ---------------------------------------------------------

# Figures kept drawn between windows, the most recently used last: each holds an RGBA buffer of
# the plot (about 4 MiB) and a copy of its frame, so only a few dashboards keep theirs warm; a
# dashboard whose figure was let go builds it again on its next window (about one render).
MAX_WARM_FIGURES = 2
MAX_BACKGROUNDS = 2  # frames (legends) kept per figure
_warm_figures: OrderedDict[int, _LiveFigure] = OrderedDict()


def encode_png(rgba: np.ndarray, level: int = 1) -> bytes:
    """RGBA pixels (rows, columns, 4 bytes) as a PNG, quickly: every row filtered as the
    difference from the row above (PNG's "Up"), then fast zlib.

    Pillow chooses a filter for every row, which costs as much as drawing the plot; a plot's
    rows mostly repeat the row above (background, bands, vertical lines), so "Up" alone packs
    it well.
    """
    height, width, _ = rgba.shape
    pixels = rgba.reshape(height, width * 4)
    rows = np.empty((height, width * 4 + 1), dtype=np.uint8)
    rows[:, 0] = 2  # filter type: Up
    rows[0, 1:] = pixels[0]
    np.subtract(pixels[1:], pixels[:-1], out=rows[1:, 1:])

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, level))
        + chunk(b"IEND", b"")
    )


class _LiveFigure:
    """One figure of the Steps plot (with or without the data-wait panel), drawn by parts.

    Every artist is made once and updated in place. The frame and legend are drawn once per
    legend and kept as pixels; a window restores them and draws what changes (the artists
    marked animated): ticks, tick labels, grid and the data.
    """

    def __init__(self, phases: list[str], with_wait: bool) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection

        if with_wait:
            fig, axes = new_figure(3.4, rows=2, ratios=(3, 1))
            axes[0].tick_params(labelbottom=False)
            axes[1].set_ylabel("data wait (ms)")
            axes[1].set_xlabel("step")
        else:
            fig, axes = new_figure(2.8)
            axes[0].set_xlabel("step")
        ax = axes[0]
        ax.set_ylabel("step time (ms)")
        fix_layout(fig)
        self.fig = fig
        self.axes = axes
        self.canvas = FigureCanvasAgg(fig)
        self.log = False
        self.backgrounds: OrderedDict[tuple, Any] = OrderedDict()
        self.released = False
        # The artists, in the order they are drawn (equal zorder: as added).
        self.parts: dict[str, Any] = {}
        for name in phases:
            for kind in ("raw", "median"):
                self.parts[f"{name}:{kind}:band"] = _band_patch(ax)
                self.parts[f"{name}:{kind}:line"] = ax.plot([], [])[0]
        self.parts["warm"] = ax.plot([], [], ls="", marker="o", ms=2.6, color=WARMUP_COLOR)[0]
        for i, axis in enumerate(axes):
            epochs = LineCollection(
                [],
                transform=axis.get_xaxis_transform(),
                colors=EPOCH_COLOR,
                linewidths=0.6,
                linestyles="--",
                alpha=0.6,
            )
            self.parts[f"epochs:{i}"] = axis.add_collection(epochs, autolim=False)
        if with_wait:
            ax_wait = axes[1]
            self.parts["wait:fill"] = _band_patch(ax_wait, WAIT_COLOR, 0.5)
            self.parts["wait:band"] = _band_patch(ax_wait, WAIT_COLOR, 1.0)
            self.parts["wait:steps"] = _band_patch(ax_wait, WAIT_COLOR, 0.5, data=True)
            self.parts["wait:line"] = ax_wait.plot([], [], color=WAIT_COLOR, lw=0.6)[0]
        for artist in self.parts.values():
            artist.set_animated(True)
        for axis in axes:
            axis.xaxis.set_animated(True)
            axis.yaxis.set_animated(True)
        self._place_labels()

    def hide_all(self) -> None:
        for artist in self.parts.values():
            artist.set_visible(False)

    def show(self, key: str) -> Any:
        artist = self.parts[key]
        artist.set_visible(True)
        return artist

    def set_log(self, log: bool) -> None:
        if log != self.log:
            if log:
                _log_ticks(self.axes[0])
            else:
                self.axes[0].set_yscale("linear")
            self.log = log

    def render(self, legend: list[Any], key: tuple) -> bytes:
        """Restore the frame with this legend (drawing it once), draw the animated parts."""
        background = self.backgrounds.get(key)
        if background is None:
            old = self.axes[0].get_legend()
            if old is not None:
                old.remove()
            add_legend(self.axes[0], legend)
            self.canvas.draw()  # animated artists are left out: this is the frame alone
            background = self.canvas.copy_from_bbox(self.fig.bbox)
            self.backgrounds[key] = background
            while len(self.backgrounds) > MAX_BACKGROUNDS:
                self.backgrounds.popitem(last=False)
        else:
            self.backgrounds.move_to_end(key)
            self.canvas.restore_region(background)
        self._clear_y_labels()
        renderer = self.canvas.get_renderer()
        for ax in self.axes:
            # What Axes.draw does for these, in its order (by zorder, then as added).
            changing = [a for a in ax.get_children() if a.get_animated() and a.get_visible()]
            for artist in sorted(changing, key=lambda a: a.zorder):
                artist.draw(renderer)
        return encode_png(np.asarray(self.canvas.buffer_rgba()))

    def _place_labels(self) -> None:
        """Put the x axis labels below one line of tick labels, the y labels clear of tick
        labels four characters wide (`_clear_y_labels` moves them for wider ones). Left to
        itself, matplotlib measures every tick label of every window to place them."""
        renderer = self.canvas.get_renderer()
        for ax in self.axes:
            tick = ax.xaxis.get_major_ticks()[0]
            font = tick.label1.get_fontproperties()
            _w, height, _d = renderer.get_text_width_height_descent("lp", font, False)
            away = self._away(ax.xaxis) + height
            ax.xaxis.set_label_coords(0.5, -away / ax.get_window_extent(renderer).height)
        self._clear_y_labels()

    def _away(self, axis: Any) -> float:
        """Pixels from the spine to the far side of the tick marks, the pads and the label pad."""
        tick = axis.get_major_ticks()[0]
        return (tick.get_tick_padding() + tick.get_pad() + axis.labelpad) * self.fig.dpi / 72

    def _clear_y_labels(self) -> None:
        renderer = self.canvas.get_renderer()
        for ax in self.axes:
            axis = ax.yaxis
            widest = "0.00"
            locs = axis.get_majorticklocs()
            lo, hi = sorted(ax.get_ylim())
            shown = [v for v in locs if lo <= v <= hi]
            texts = axis.get_major_formatter().format_ticks(shown) if shown else []
            widest = max([widest, *texts], key=len)
            font = axis.get_major_ticks()[0].label1.get_fontproperties()
            width, _h, _d = renderer.get_text_width_height_descent(widest, font, False)
            away = self._away(axis) + width
            axis.set_label_coords(-away / ax.get_window_extent(renderer).width, 0.5)

    def release(self) -> None:
        self.backgrounds.clear()
        self.parts.clear()
        self.fig = self.canvas = None  # type: ignore[assignment]
        self.axes = []
        self.released = True


class StepsFigure:
    """The Steps plot of one series, for window after window: `png(lo, hi, options)`.

    The figure stays between windows (its axes, ticks, artists and legend are not built
    again), each phase's rows come from the `WindowIndex` as slices, long series are thinned
    per pixel column by binary search (`column_extremes`) rather than a pass over every step,
    and dense series are drawn as a band per column: from the column's smallest to its largest
    value (joined to the previous column's last), which is what a line through every point
    rasterises to, at a fraction of the cost of stroking thousands of segments. Windows with
    fewer steps than the plot has pixel columns draw their points as lines.
    """

    def __init__(self, index: WindowIndex, keep_warm: bool = True) -> None:
        series = index.series
        self.index = index
        self.series = series
        self.keep_warm = keep_warm
        self.rolling = {name: series.rolling[rows.pos] for name, rows in index.phases.items()}
        self.warm_at = np.flatnonzero(series.warm)
        self.wait_at = np.flatnonzero(~np.isnan(series.data_wait))
        self.waits = series.data_wait[self.wait_at]
        self._figures: dict[bool, _LiveFigure] = {}

    def _live(self, with_wait: bool) -> _LiveFigure:
        live = self._figures.get(with_wait)
        if live is None or live.released:
            live = self._figures[with_wait] = _LiveFigure(self.series.phases, with_wait)
        if self.keep_warm:
            _warm_figures.pop(id(live), None)
            _warm_figures[id(live)] = live
            while len(_warm_figures) > MAX_WARM_FIGURES:
                _key, oldest = _warm_figures.popitem(last=False)
                oldest.release()
        return live

    def release(self) -> None:
        """Let the figures go (a later `png` builds them again)."""
        for live in self._figures.values():
            _warm_figures.pop(id(live), None)
            live.release()
        self._figures.clear()

    def png(self, lo: int, hi: int, options: StepPlotOptions) -> bytes | None:
        series = self.series
        if series.count == 0:
            return None
        lo, hi = max(0, int(lo)), min(series.count - 1, int(hi))
        wa, wb = (int(i) for i in np.searchsorted(self.wait_at, (lo, hi + 1)))
        show_wait = options.data_wait and wb > wa
        live = self._live(show_wait)
        live.hide_all()
        ax = live.axes[0]
        ax.set_xlim(lo - 0.5, hi + 0.5)
        gap = max(1.5, 3.0 * (hi - lo + 1) / COLUMNS)
        log = options.log
        if log is None:  # chosen from the data in the window (the static report's plot)
            log = use_log(None, series.duration[lo : hi + 1] * 1e3)
        live.set_log(log)
        legend: list[Any] = []
        bands: list[tuple[Any, _Columns, float]] = []
        extent = _Extent()
        for name in series.phases:
            if name not in options.phases:
                continue
            rows = self.index.phases[name]
            a, b = rows.rows_in(lo, hi)
            if b <= a:
                continue
            x = rows.pos[a:b]
            drawn = []
            if options.raw:
                alpha = 0.55 if options.median else 0.9
                drawn.append(("raw", rows.duration[a:b], 0.6, alpha, name))
            if options.median:
                label = f"{name} median"
                if options.raw:
                    label += f" ({series.rolling_window})"
                drawn.append(("median", self.rolling[name][a:b], 1.5, 1.0, label))
            for kind, values, lw, alpha, label in drawn:
                style = {"lw": lw, "color": PHASE_COLORS[name], "alpha": alpha}
                if x.size > COLUMNS:
                    columns = _Columns.of(x, values, lo, hi, gap, scale=1e3)
                    extent.add(columns.low, columns.high)
                    band = live.show(f"{name}:{kind}:band")
                    band.set_facecolor(style["color"])
                    band.set_alpha(alpha)
                    bands.append((band, columns, lw))
                else:
                    y = values * 1e3
                    line = live.show(f"{name}:{kind}:line")
                    line.set_data(*_broken(x.astype(np.float64), y, gap))
                    line.set(**style)
                    extent.add(y, y)
                legend.append(_proxy(label, style))
        if options.warmup:
            a, b = np.searchsorted(self.warm_at, (lo, hi + 1))
            warm = self.warm_at[a:b]
            warm = warm[np.isin(series.phase[warm], _codes(options.phases))]
            if warm.size:
                keep = warm[thin_points(warm, MAX_MARKERS)]
                y = series.duration[keep] * 1e3
                live.show("warm").set_data(keep.astype(np.float64), y)
                extent.add(y, y)
                legend.append(
                    _proxy(
                        "warm-up / traced",
                        {"ls": "", "marker": "o", "ms": 2.6, "color": WARMUP_COLOR},
                    )
                )
        if options.epochs:
            bounds = series.epoch_bounds
            bounds = bounds[(bounds >= lo) & (bounds <= hi)]
            if 0 < bounds.size <= MAX_EPOCH_LINES:
                segments = np.zeros((bounds.size, 2, 2))
                segments[:, :, 0] = bounds[:, None]
                segments[:, 1, 1] = 1.0
                for i in range(len(live.axes)):
                    live.show(f"epochs:{i}").set_segments(segments)
        extent.apply(ax, log)
        if show_wait:
            self._waits(live, live.axes[1], wa, wb, lo, hi, gap)
        for patch, columns, lw in bands:
            patch.set_path(columns.path(ax, lo, hi, pad=_pad(ax, lw)))
        return live.render(legend, tuple(_legend_key(h) for h in legend))

    def _waits(
        self, live: _LiveFigure, ax: Any, wa: int, wb: int, lo: int, hi: int, gap: float
    ) -> None:
        """The data-wait panel: the waits filled from zero, with their line on top."""
        from matplotlib.path import Path

        x = self.wait_at[wa:wb]
        waits = self.waits[wa:wb]
        extent = _Extent()
        if x.size > COLUMNS:
            columns = _Columns.of(x, waits, lo, hi, gap, scale=1e3)
            extent.add(np.zeros(1), columns.high)
            extent.apply(ax, False, bottom=0.0)
            live.show("wait:fill").set_path(columns.path(ax, lo, hi, pad=0.0, floor=0.0))
            band = live.show("wait:band")
            band.set_path(columns.path(ax, lo, hi, pad=_pad(ax, 0.6)))
        else:
            px, py = x.astype(np.float64), waits * 1e3
            extent.add(np.zeros(1), py)
            extent.apply(ax, False, bottom=0.0)
            # fill_between(px, 0, py, step="mid"): steps at the midpoints, down to zero.
            sx = np.empty(2 * px.size)
            sx[0], sx[-1] = px[0], px[-1]
            sx[1:-1:2] = sx[2::2] = (px[:-1] + px[1:]) / 2
            sy = np.repeat(py, 2)
            outline = np.concatenate(
                (np.column_stack((sx, sy)), [[sx[-1], 0.0], [sx[0], 0.0], [sx[0], sy[0]]])
            )
            live.show("wait:steps").set_path(Path(outline, closed=True))
            live.show("wait:line").set_data(px, py)


def _pad(ax: Any, lw: float) -> float:
    """Half a line's width, in pixels."""
    return lw * ax.get_figure().dpi / 72.0 / 2.0


def _proxy(label: str, style: dict[str, Any]) -> Any:
    """A legend entry drawn like a series (the series itself may be a band)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], label=label, **style)


def _legend_key(handle: Any) -> tuple:
    return (
        handle.get_label(),
        handle.get_color(),
        handle.get_linewidth(),
        handle.get_alpha(),
        handle.get_marker(),
        handle.get_linestyle(),
    )


def _band_patch(ax: Any, color: str = "none", alpha: float = 1.0, data: bool = False) -> Any:
    """A filled path for a band: in pixels (made once the limits are known), or in data."""
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path
    from matplotlib.transforms import IdentityTransform

    patch = PathPatch(
        Path(np.zeros((0, 2))),
        transform=ax.transData if data else IdentityTransform(),
        facecolor=color,
        edgecolor="none",
        alpha=alpha,
        lw=0,
        zorder=2,  # a line's: the bands stack with lines and markers in the order drawn
    )
    ax.add_artist(patch)  # not add_patch: a band's vertices are no data limits
    return patch


class _Extent:
    """The y range of what a window draws, to scale the axis as autoscaling would."""

    def __init__(self) -> None:
        self.low = np.inf
        self.high = -np.inf
        self.positive = np.inf  # smallest positive value: a log axis starts there

    def add(self, lows: np.ndarray, highs: np.ndarray) -> None:
        if lows.size:
            self.low = min(self.low, float(lows.min()))
            positive = lows[lows > 0]
            if positive.size:
                self.positive = min(self.positive, float(positive.min()))
        if highs.size:
            self.high = max(self.high, float(highs.max()))
            if self.high > 0:
                self.positive = min(self.positive, float(highs[highs > 0].min()))

    def apply(self, ax: Any, log: bool, bottom: float | None = None) -> None:
        """Matplotlib's autoscaling (margins, log axis) from these limits; then fixed."""
        if not np.isfinite(self.low):
            ax.set_ylim((1.0, 10.0) if log else (0.0, 1.0))
            return
        points = [[0.0, self.low], [0.0, self.high]]
        if np.isfinite(self.positive):
            points.append([0.0, self.positive])
        ax.ignore_existing_data_limits = True
        ax.update_datalim(points, updatex=False)
        ax.set_autoscaley_on(True)
        ax.autoscale_view(scalex=False)
        ax.set_ylim(ax.get_ylim() if bottom is None else (bottom, ax.get_ylim()[1]))


@dataclass
class _Columns:
    """A dense series per pixel column: where each column begins and ends, its extremes, and
    where a gap in the steps breaks the band."""

    first_x: np.ndarray
    last_x: np.ndarray
    low: np.ndarray  # the column's extremes, joined to the previous column's last value
    high: np.ndarray
    starts_band: np.ndarray  # bool: a new band begins at this column

    @classmethod
    def of(
        cls, x: np.ndarray, y: np.ndarray, lo: int, hi: int, gap: float, scale: float
    ) -> _Columns:
        """The columns of (x, y * scale), scaled after thinning: scaling keeps the order."""
        first_x, _first_y, last_x, last_y, low, high = column_extremes(x, y, COLUMNS, lo, hi)
        last_y, low, high = last_y * scale, low * scale, high * scale
        starts_band = np.ones(first_x.size, dtype=bool)
        starts_band[1:] = (first_x[1:] - last_x[:-1]) > gap
        joined = ~starts_band
        joined_at = np.flatnonzero(joined)
        low[joined_at] = np.minimum(low[joined_at], last_y[joined_at - 1])
        high[joined_at] = np.maximum(high[joined_at], last_y[joined_at - 1])
        return cls(first_x, last_x, low, high, starts_band)

    def path(self, ax: Any, lo: int, hi: int, pad: float, floor: float | None = None) -> Any:
        """The bands as one path in pixels: each column a step from its left to its right edge,
        `pad` pixels beyond its extremes (half a line's width); from `floor` up, if given."""
        from matplotlib.path import Path

        n = self.first_x.size
        if n == 0:
            return Path(np.zeros((0, 2)))
        scale = COLUMNS / max(hi - lo, 1e-12)  # the columns of `column_extremes`
        column = np.clip(((self.first_x - lo) * scale).astype(np.int64), 0, COLUMNS - 1)
        left = np.minimum(lo + column / scale, self.first_x)
        right = np.maximum(lo + (column + 1) / scale, self.last_x)
        to_pixels = ax.transData.transform
        top_left = to_pixels(np.column_stack((left, self.high)))
        bottom_right = to_pixels(
            np.column_stack((right, np.full(n, floor) if floor is not None else self.low))
        )
        x0, x1 = top_left[:, 0], bottom_right[:, 0]
        top, bottom = top_left[:, 1] + pad, bottom_right[:, 1] - pad
        # Band b holds columns s..e-1: its outline is the tops left to right, the bottoms right to
        # left, closed: 4 vertices a column and one to close.
        band = np.cumsum(self.starts_band) - 1
        band_start = np.flatnonzero(self.starts_band)
        band_len = np.diff(np.append(band_start, n))
        base = np.concatenate(([0], np.cumsum(4 * band_len + 1)[:-1]))
        k = np.arange(n) - band_start[band]  # place within its band
        m = band_len[band]
        b0 = base[band]
        vertices = np.empty((int(base[-1] + 4 * band_len[-1] + 1), 2))
        codes = np.full(vertices.shape[0], Path.LINETO, dtype=Path.code_type)
        vertices[b0 + 2 * k] = np.column_stack((x0, top))
        vertices[b0 + 2 * k + 1] = np.column_stack((x1, top))
        back = b0 + 2 * m + 2 * (m - 1 - k)
        vertices[back] = np.column_stack((x1, bottom))
        vertices[back + 1] = np.column_stack((x0, bottom))
        ends = base + 4 * band_len
        vertices[ends] = vertices[base]
        codes[base] = Path.MOVETO
        codes[ends] = Path.CLOSEPOLY
        return Path(vertices, codes)
