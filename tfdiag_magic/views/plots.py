"""Static plots of a run as PNG bytes (matplotlib's object API, never pyplot's global state)."""

from __future__ import annotations

import base64
import io

import numpy as np

from ..record import PHASES, Record

PHASE_COLORS = {
    "train": "#1f77b4",
    "eval": "#ff7f0e",
    "predict": "#2ca02c",
    "loop": "#9467bd",
    "function": "#8c564b",
}
MAX_POINTS = 4000


def _thin(x: np.ndarray, y: np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Keep the min and max of each of `limit/2` buckets, so spikes stay visible."""
    if x.size <= limit:
        return x, y
    buckets = np.array_split(np.arange(x.size), limit // 2)
    keep = np.unique(
        np.concatenate([[b[np.argmin(y[b])], b[np.argmax(y[b])]] for b in buckets if b.size])
    )
    return x[keep], y[keep]


def step_time_png(record: Record) -> bytes | None:
    """Step time over steps, one series per phase (loop iterations only when nothing else)."""
    from matplotlib.figure import Figure

    steps = record.steps
    phases = [p for p in PHASES if p != "loop" and record.phase_mask(p).any()]
    if not phases and record.phase_mask("loop").any():
        phases = ["loop"]
    if not phases:
        return None
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig = Figure(figsize=(7.5, 2.6), dpi=110)
    ax = fig.add_subplot()
    traced_label = "traced (warm-up)"
    for phase in phases:
        rows = np.flatnonzero(record.phase_mask(phase))
        index = np.arange(rows.size)
        times = steps["duration"][rows] * 1e3
        x, y = _thin(index, times)
        ax.plot(x, y, lw=0.8, color=PHASE_COLORS[phase], label=phase)
        traced = steps["traced"][rows]
        if traced.any() and traced.sum() <= MAX_POINTS:
            ax.plot(index[traced], times[traced], "o", ms=2.5, color="#d62728", label=traced_label)
            traced_label = "_nolegend_"
    ax.set_xlabel("step (within phase)")
    ax.set_ylabel("step time (ms)")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.get_major_formatter().set_scientific(False)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
