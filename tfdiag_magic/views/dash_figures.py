"""The dashboard's plots kept between windows, so that a range slider redraws them by parts.

Each plot (`StepsFigure`, `MemoryFigure`, `GpuFigure`) builds its figure, axes and artists once;
a window updates the artists in place and draws them on a cleared canvas, restores the legend's
pixels from a cache (a legend costs as much to draw as the data) and encodes the PNG with a fast
filter (`encode_png`). What a window shows does not depend on the windows before it:
`steps_png`, `memory_png` and `gpu_png` (the static report's plots) draw a window on a figure of
its own the same way, and the picture is the same, byte for byte.

The Steps plot reads each phase's rows as slices of the `WindowIndex`, thins long series per
pixel column by binary search (`column_extremes`) instead of a pass over every step, and draws
a dense series as a band per column, from the column's smallest to its largest value (joined
to the previous column's last value): what a line through every point rasterises to, for a
fraction of the cost of stroking thousands of segments. A window with fewer steps than the
plot has pixel columns draws its points as lines.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..record import PHASES, Phase
from .dash_model import StepSeries, WindowIndex
from .dash_plots import (
    COLUMNS,
    EPOCH_COLOR,
    MAX_EPOCH_LINES,
    MAX_MARKERS,
    PHASE_COLORS,
    SERIES_COLORS,
    WAIT_COLOR,
    WARMUP_COLOR,
    StepPlotOptions,
    add_legend,
    fix_layout,
    new_figure,
    use_log,
)
from .downsample import column_extremes, minmax_columns, thin_points
from .text_stamps import TextStamps

# Figures kept drawn between windows, the most recently used last. Each holds the RGBA buffer of
# its plot (3 to 5 MiB), so only a few stay warm; a plot whose figure was let go builds it again
# on its next window (the cost of one first render).
MAX_WARM_FIGURES = 4
MAX_LEGENDS = 4  # legends kept as pixels per figure
_warm_figures: OrderedDict[int, _KeptFigure] = OrderedDict()


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


def draw_axis(axis: Any, renderer: Any) -> None:
    """What matplotlib's `Axis.draw` draws, without measuring every tick label first.

    Matplotlib measures each tick label's extent on every draw, to move the axis label and the
    offset text ("1e6", "+5e5") clear of them: about a tenth of a window's redraw. A kept
    figure's axis labels sit at coordinates of their own (`_KeptFigure._place_labels`), so the
    measures only place an offset text: an axis that has one, or whose label matplotlib
    places, is drawn by matplotlib itself, and so is every axis of a matplotlib without the
    private parts this reads (`_update_ticks`, `_autolabelpos`, as in 3.11).
    """
    if not axis.get_visible():
        return
    update_ticks = getattr(axis, "_update_ticks", None)
    if update_ticks is None or getattr(axis, "_autolabelpos", True):
        axis.draw(renderer)
        return
    ticks = update_ticks()
    if axis.major.formatter.get_offset():
        axis.draw(renderer)  # measures and places them (its own `_update_ticks` again)
        return
    renderer.open_group("matplotlib.axis", gid=axis.get_gid())
    for tick in ticks:
        tick.draw(renderer)
    axis.label.draw(renderer)
    axis.offsetText.set_text("")
    renderer.close_group("matplotlib.axis")


class _KeptFigure:
    """A figure whose artists are made once and drawn by parts, window after window.

    Everything a window changes is marked animated and drawn, in Axes.draw's order, on a
    cleared canvas: ticks, tick labels, grid, spines, the data. The legend is drawn once per
    set of entries and kept as pixels. Axis labels stay at fixed places (matplotlib would
    measure every tick label of every window to place them).
    """

    def __init__(self, fig: Any, axes: list[Any]) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fix_layout(fig)
        self.fig = fig
        self.axes = axes
        self.canvas = FigureCanvasAgg(fig)
        TextStamps.install(self.canvas.get_renderer())  # labels repeat from window to window
        self.parts: dict[str, Any] = {}  # in the order they are drawn (equal zorder: as added)
        self.legends: OrderedDict[tuple, Any] = OrderedDict()
        self.widths: dict[str, float] = {}  # pixels of tick labels, by text
        self.released = False

    def keep(self, key: str, artist: Any) -> Any:
        artist.set_animated(True)
        self.parts[key] = artist
        return artist

    def finish(self) -> None:
        """Once the parts are made: the axes and spines are drawn per window too."""
        for ax in self.axes:
            for artist in (ax.xaxis, ax.yaxis, *ax.spines.values()):
                artist.set_animated(True)
        self._place_labels()

    def hide_all(self) -> None:
        for artist in self.parts.values():
            artist.set_visible(False)

    def show(self, key: str) -> Any:
        artist = self.parts[key]
        artist.set_visible(True)
        return artist

    def render(self, legend: list[Any]) -> bytes:
        """Draw the window: the legend's pixels (drawn once for these entries), then the rest."""
        renderer = self.canvas.get_renderer()
        region = self._legend(legend) if legend else None
        self._clear_y_labels()
        renderer.clear()
        if region is not None:
            self.canvas.restore_region(region)
        for ax in self.axes:
            # What Axes.draw does for these, in its order (by zorder, then as added).
            changing = [a for a in ax.get_children() if a.get_animated() and a.get_visible()]
            for artist in sorted(changing, key=lambda a: a.zorder):
                if artist is ax.xaxis or artist is ax.yaxis:
                    draw_axis(artist, renderer)
                else:
                    artist.draw(renderer)
        return encode_png(np.asarray(self.canvas.buffer_rgba()))

    def _legend(self, handles: list[Any]) -> Any:
        from matplotlib.transforms import Bbox

        key = tuple(_legend_key(h) for h in handles)
        region = self.legends.get(key)
        if region is not None:
            self.legends.move_to_end(key)
            return region
        ax = self.axes[0]
        old = ax.get_legend()
        if old is not None:
            old.remove()
        add_legend(ax, handles)
        renderer = self.canvas.get_renderer()
        renderer.clear()
        legend = ax.get_legend()
        legend.draw(renderer)
        box = Bbox.intersection(legend.get_window_extent(renderer).padded(2), self.fig.bbox)
        region = self.legends[key] = self.canvas.copy_from_bbox(box)
        while len(self.legends) > MAX_LEGENDS:
            self.legends.popitem(last=False)
        return region

    def _place_labels(self) -> None:
        """Put the x axis labels below one line of tick labels, the y labels clear of tick
        labels four characters wide (`_clear_y_labels` moves them for wider ones)."""
        renderer = self.canvas.get_renderer()
        for ax in self.axes:
            tick = ax.xaxis.get_major_ticks()[0]
            font = tick.label1.get_fontproperties()
            _w, height, _d = renderer.get_text_width_height_descent("lp", font, False)
            away = self._away(ax.xaxis) + height
            ax.xaxis.set_label_coords(0.5, -away / ax.get_window_extent(renderer).height)
        self._clear_y_labels()

    def _away(self, axis: Any) -> float:
        """Pixels from the spine past the tick marks, their pads and the label's pad."""
        tick = axis.get_major_ticks()[0]
        return (tick.get_tick_padding() + tick.get_pad() + axis.labelpad) * self.fig.dpi / 72

    def _clear_y_labels(self) -> None:
        renderer = self.canvas.get_renderer()
        for ax in self.axes:
            axis = ax.yaxis
            low, high = sorted(ax.get_ylim())
            shown = [v for v in axis.get_majorticklocs() if low <= v <= high]
            texts = axis.get_major_formatter().format_ticks(shown) if shown else []
            widest = max(["0.00", *texts], key=len)
            width = self.widths.get(widest)
            if width is None:
                font = axis.get_major_ticks()[0].label1.get_fontproperties()
                width, _h, _d = renderer.get_text_width_height_descent(widest, font, False)
                self.widths[widest] = width
            away = self._away(axis) + width
            coords = (-away / ax.get_window_extent(renderer).width, 0.5)
            if axis.label.get_position() != coords:
                axis.set_label_coords(*coords)

    def release(self) -> None:
        self.legends.clear()
        self.parts.clear()
        self.fig = self.canvas = None  # type: ignore[assignment]
        self.axes = []
        self.released = True


class _Plot:
    """A plot of one series kept between windows: its figures (one per layout), made when
    first needed and let go when the process keeps too many warm."""

    def __init__(self, keep_warm: bool) -> None:
        self.keep_warm = keep_warm
        self._figures: dict[Any, _KeptFigure] = {}

    def _build(self, layout: Any) -> _KeptFigure:
        raise NotImplementedError

    def _figure(self, layout: Any = None) -> _KeptFigure:
        figure = self._figures.get(layout)
        if figure is None or figure.released:
            figure = self._figures[layout] = self._build(layout)
        if self.keep_warm:
            _warm_figures.pop(id(figure), None)
            _warm_figures[id(figure)] = figure
            while len(_warm_figures) > MAX_WARM_FIGURES:
                _key, oldest = _warm_figures.popitem(last=False)
                oldest.release()
        return figure

    def release(self) -> None:
        """Let the figures go (a later window builds them again)."""
        for figure in self._figures.values():
            _warm_figures.pop(id(figure), None)
            figure.release()
        self._figures.clear()


# -- step time --------------------------------------------------------------------------------


class _StepsCanvas(_KeptFigure):
    """The Steps plot's figure, with or without the data-wait panel."""

    def __init__(self, phases: list[str], with_wait: bool) -> None:
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
        super().__init__(fig, axes)
        self.log = False
        for name in phases:
            for kind in ("raw", "median"):
                self.keep(f"{name}:{kind}:band", _band_patch(ax))
                self.keep(f"{name}:{kind}:line", ax.plot([], [])[0])
        marker = ax.plot([], [], ls="", marker="o", ms=2.6, color=WARMUP_COLOR)[0]
        self.keep("warm", marker)
        for i, axis in enumerate(axes):
            epochs = LineCollection(
                [],
                transform=axis.get_xaxis_transform(),
                colors=EPOCH_COLOR,
                linewidths=0.6,
                linestyles="--",
                alpha=0.6,
            )
            self.keep(f"epochs:{i}", axis.add_collection(epochs, autolim=False))
        if with_wait:
            ax_wait = axes[1]
            self.keep("wait:fill", _band_patch(ax_wait, WAIT_COLOR, 0.5))
            self.keep("wait:band", _band_patch(ax_wait, WAIT_COLOR, 1.0))
            self.keep("wait:steps", _band_patch(ax_wait, WAIT_COLOR, 0.5, data=True))
            self.keep("wait:line", ax_wait.plot([], [], color=WAIT_COLOR, lw=0.6)[0])
        self.finish()

    def set_log(self, log: bool) -> None:
        if log != self.log:
            if log:
                _log_ticks(self.axes[0])
            else:
                self.axes[0].set_yscale("linear")
            self.log = log


class StepsFigure(_Plot):
    """The Steps plot of one series, window after window: `png(lo, hi, options)`."""

    def __init__(self, index: WindowIndex, keep_warm: bool = True) -> None:
        super().__init__(keep_warm)
        series = index.series
        self.index = index
        self.series = series
        self.rolling = {name: series.rolling[rows.pos] for name, rows in index.phases.items()}
        self.warm_at = np.flatnonzero(series.warm)
        self.wait_at = np.flatnonzero(~np.isnan(series.data_wait))
        self.waits = series.data_wait[self.wait_at]

    def _build(self, layout: Any) -> _KeptFigure:
        return _StepsCanvas(self.series.phases, with_wait=bool(layout))

    def png(self, lo: int, hi: int, options: StepPlotOptions) -> bytes | None:
        """Step time over steps lo..hi: raw and rolling median per phase, warm-up, epochs,
        data waits."""
        series = self.series
        if series.count == 0:
            return None
        lo, hi = max(0, int(lo)), min(series.count - 1, int(hi))
        wa, wb = (int(i) for i in np.searchsorted(self.wait_at, (lo, hi + 1)))
        show_wait = options.data_wait and wb > wa
        live = self._figure(show_wait)
        assert isinstance(live, _StepsCanvas)
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
                style = {"ls": "", "marker": "o", "ms": 2.6, "color": WARMUP_COLOR}
                legend.append(_proxy("warm-up / traced", style))
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
        return live.render(legend)

    def _waits(
        self, live: _KeptFigure, ax: Any, wa: int, wb: int, lo: int, hi: int, gap: float
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


# -- memory and GPU ---------------------------------------------------------------------------


class _LinesCanvas(_KeptFigure):
    """A figure of line series, one artist per series that the run may show."""

    def line(self, key: str, ax: Any, **style: Any) -> None:
        self.keep(key, ax.plot([], [], **style)[0])

    def draw_lines(self, shown: list[tuple[str, np.ndarray, np.ndarray]]) -> list[Any]:
        """Show these series (key, x, y), the others hidden; their lines, in the order made."""
        self.hide_all()
        for key, x, y in shown:
            self.show(key).set_data(x, y)
        return [line for line in self.parts.values() if line.get_visible()]

    def autoscale(self) -> None:
        """What autoscaling does at draw time, from the series shown only."""
        for ax in self.axes:
            ax.relim(visible_only=True)
        for ax in self.axes:
            ax.autoscale_view()


class MemoryFigure(_Plot):
    """Host RSS and TensorFlow's device memory over a window of steps: `png(lo, hi)`."""

    def __init__(self, series: StepSeries, keep_warm: bool = True) -> None:
        super().__init__(keep_warm)
        self.series = series
        self.nvml_keys = [k for k in series.nvml if k.endswith(":mem_used")]

    def _build(self, layout: Any) -> _KeptFigure:
        series = self.series
        fig, (ax,) = new_figure(2.6)
        ax.set_xlabel("step")
        ax.set_ylabel("memory (MiB)")
        canvas = _LinesCanvas(fig, [ax])
        steps = {"drawstyle": "steps-post"}
        canvas.line("rss", ax, lw=1.2, color=SERIES_COLORS[0], label="host RSS", **steps)
        tensors = {"label": "CPU tensors (TensorFlow)", **steps}
        canvas.line("tensors", ax, lw=1.0, color=SERIES_COLORS[-1], **tensors)
        for i, device in enumerate(series.mem_gpu):
            color = SERIES_COLORS[(i + 1) % len(SERIES_COLORS)]
            canvas.line(f"gpu:{device}", ax, lw=1.2, color=color, label=f"{device} (TensorFlow)")
        for i, key in enumerate(self.nvml_keys):
            color = SERIES_COLORS[(i + 3) % len(SERIES_COLORS)]
            label = f"{key.split(':')[0]} used (NVML)"
            canvas.line(f"nvml:{key}", ax, lw=1.0, color=color, ls="--", label=label)
        canvas.finish()
        return canvas

    def png(self, lo: int, hi: int) -> bytes | None:
        """Memory over steps lo..hi (MiB); None: no samples to draw."""
        series = self.series
        x = series.mem_x
        if x.size == 0:
            return None
        inside = (x >= lo - 0.5) & (x <= hi + 0.5)
        if not inside.any():
            inside = np.zeros_like(x, dtype=bool)
            inside[np.argmin(np.abs(x - (lo + hi) / 2))] = True
        shown = []
        rss = series.mem_rss
        if rss.size == x.size and (rss[inside] >= 0).any():
            keep = inside & (rss >= 0)
            shown.append(("rss", *minmax_columns(x[keep], rss[keep] / 2**20, COLUMNS)))
        tensors = series.mem_cpu_tensors
        if tensors.size == x.size and (tensors[inside] > 0).any():
            keep = inside & (tensors >= 0)
            shown.append(("tensors", *minmax_columns(x[keep], tensors[keep] / 2**20, COLUMNS)))
        for device, values in series.mem_gpu.items():
            keep = inside & (values >= 0) if values.size == x.size else np.zeros(0, dtype=bool)
            if keep.any():
                px, py = minmax_columns(x[keep], values[keep] / 2**20, COLUMNS)
                shown.append((f"gpu:{device}", px, py))
        nvml = series.nvml
        if "time" in nvml and nvml["time"].size:
            nx = series.x_of_time(nvml["time"])
            nin = (nx >= lo - 0.5) & (nx <= hi + 0.5)
            for key in self.nvml_keys:
                values = nvml[key]
                keep = nin & ~np.isnan(values)
                if keep.any():
                    px, py = minmax_columns(nx[keep], values[keep] / 2**20, COLUMNS)
                    shown.append((f"nvml:{key}", px, py))
        if not shown:
            return None
        canvas = self._figure()
        assert isinstance(canvas, _LinesCanvas)
        lines = canvas.draw_lines(shown)
        canvas.axes[0].set_xlim(lo - 0.5, hi + 0.5)
        canvas.autoscale()
        return canvas.render(lines)


GPU_PANELS = (
    ("util", "utilization (%)", 1.0),
    ("mem_used", "memory (MiB)", 2**-20),
    ("power_w", "power (W)", 1.0),
)


class GpuFigure(_Plot):
    """NVML utilization, memory use and power over the time of a window: `png(lo, hi)`."""

    def __init__(self, series: StepSeries, keep_warm: bool = True) -> None:
        super().__init__(keep_warm)
        self.series = series
        self.devices = sorted({key.split(":")[0] for key in series.nvml if ":" in key})

    def _build(self, layout: Any) -> _KeptFigure:
        fig, axes = new_figure(4.2, rows=3, ratios=(1, 1, 1))
        canvas = _LinesCanvas(fig, axes)
        for ax, (field_name, label, _scale) in zip(axes, GPU_PANELS, strict=True):
            ax.set_ylabel(label)
            for i, device in enumerate(self.devices):
                color = SERIES_COLORS[i % len(SERIES_COLORS)]
                canvas.line(f"{field_name}:{device}", ax, lw=1.0, color=color, label=device)
        axes[-1].set_xlabel("time since the run started (s)")
        for ax in axes[:-1]:
            ax.tick_params(labelbottom=False)
        canvas.finish()
        return canvas

    def png(self, lo: int, hi: int) -> bytes | None:
        """The GPU's samples during steps lo..hi; None: no samples."""
        series = self.series
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
        shown = []
        for field_name, _label, scale in GPU_PANELS:
            for device in self.devices:
                values = nvml.get(f"{device}:{field_name}")
                if values is None:
                    continue
                keep = inside & ~np.isnan(values)
                if keep.any():
                    px, py = minmax_columns(times[keep], values[keep] * scale, COLUMNS)
                    shown.append((f"{field_name}:{device}", px, py))
        if not shown:
            return None
        canvas = self._figure()
        assert isinstance(canvas, _LinesCanvas)
        lines = canvas.draw_lines(shown)
        canvas.autoscale()
        return canvas.render([line for line in lines if line.axes is canvas.axes[0]])


# -- one window on a figure of its own (the static report's plots) ------------------------------


def steps_png(series: StepSeries, lo: int, hi: int, options: StepPlotOptions) -> bytes | None:
    """Step time over steps lo..hi: raw and rolling median per phase, warm-up, epochs, waits."""
    return _once(StepsFigure(WindowIndex(series), keep_warm=False), lo, hi, options)


def memory_png(series: StepSeries, lo: int, hi: int) -> bytes | None:
    """Host RSS and TensorFlow's device memory over steps lo..hi (MiB); None: no samples."""
    return _once(MemoryFigure(series, keep_warm=False), lo, hi)


def gpu_png(series: StepSeries, lo: int, hi: int) -> bytes | None:
    """NVML utilization, memory use and power over time for the steps lo..hi; None: no data."""
    return _once(GpuFigure(series, keep_warm=False), lo, hi)


def _once(plot: Any, lo: int, hi: int, *options: Any) -> bytes | None:
    try:
        return plot.png(lo, hi, *options)
    finally:
        plot.release()


# -- helpers ----------------------------------------------------------------------------------


def _log_ticks(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _codes(phases: set[str]) -> list[int]:
    return [Phase.of(p) for p in phases if p in PHASES]


def _broken(x: np.ndarray, y: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN where x jumps by more than `gap`, so a line is not drawn across the jump."""
    jumps = np.flatnonzero(np.diff(x) > gap) + 1
    if not jumps.size:
        return x, y
    return np.insert(x, jumps, np.nan), np.insert(y, jumps, np.nan)


def _pad(ax: Any, lw: float) -> float:
    """Half a line's width, in pixels."""
    return lw * ax.get_figure().dpi / 72.0 / 2.0


@functools.lru_cache(maxsize=64)
def _proxy_of(label: str, style: tuple[tuple[str, Any], ...]) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], label=label, **dict(style))


def _proxy(label: str, style: dict[str, Any]) -> Any:
    """A legend entry drawn like a series (the series itself may be a band)."""
    return _proxy_of(label, tuple(sorted(style.items())))


def _legend_key(handle: Any) -> tuple:
    return (
        handle.get_label(),
        handle.get_color(),
        handle.get_linewidth(),
        handle.get_alpha(),
        handle.get_marker(),
        handle.get_linestyle(),
        handle.get_drawstyle(),
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
        ax.dataLim.update_from_data_xy(np.array(points), ignore=True, updatex=False)
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
        joined_at = np.flatnonzero(~starts_band)
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
