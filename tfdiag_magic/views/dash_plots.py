"""The dashboard's plots as PNG bytes: step time, memory, GPU, in one style for light and dark.

Figures use matplotlib's object API (never pyplot's global state), a transparent background,
mid-grey text and colours that read on white and on a dark theme alike. They are drawn at twice
their displayed size, so they stay crisp on high-density screens. Long series are thinned per
pixel column first (`downsample`): what is drawn is what the full series would draw, at a
fraction of the cost. The step, memory and GPU plots themselves are in `dash_figures`, which
keeps their figures between the windows of a range slider; this module holds their style.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record import PHASES

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


def png_bytes(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", transparent=True, pil_kwargs={"compress_level": 3})
    return buffer.getvalue()


def compact_png(png: bytes, colors: int = 16) -> bytes:
    """`png` at half its width and height (the plots are drawn for high-density screens), on
    white, in `colors` colors (they use a handful): the copy a notebook saves in its output.

    Measured on a run's step-time plot: 103 KB drawn, 14.3 KB kept transparent in 32 colors,
    8.7 KB on white in 16 (a palette without an alpha channel compresses far better, the
    antialiased edges against a transparent background being colours of their own).
    """
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGBA")
    half = image.resize((max(image.width // 2, 1), max(image.height // 2, 1)), Image.LANCZOS)
    flat = Image.new("RGB", half.size, "white")
    flat.paste(half, mask=half.getchannel("A"))
    small = flat.quantize(colors=colors, method=Image.Quantize.FASTOCTREE)
    buffer = io.BytesIO()
    small.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def use_log(log: bool | None, values: np.ndarray) -> bool:
    """None: log scale when the largest step is over 20 times the median (a tracing spike)."""
    if log is not None:
        return log
    positive = values[values > 0]
    return bool(positive.size and positive.max() > 20 * np.median(positive))


def png_data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI, for an ``<img>`` in a self-contained HTML report."""
    import base64

    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
