"""The step timeline (`timeline.step_timeline`) drawn: an inline SVG of a few steady steps as bars
on a time axis, runs one above the other on one scale (before and after a fix), and a line of
characters for the text report.

Colours are the time split's: compute blue, data wait amber, callbacks green, the Python between
steps grey.
"""

from __future__ import annotations

import html
import math
from typing import Any

from ..units import and_list, seconds

COLORS = {"compute": "#3b82f6", "wait": "#f59e0b", "callbacks": "#10b981"}
BETWEEN_COLOR = "#d1d5db"
LABELS = {
    "wait": "waiting for input",
    "compute": "in the step",
    "callbacks": "Keras callbacks",
}
CHARS = {"wait": "w", "compute": "#", "callbacks": "c"}
SEGMENT_ORDER = ("wait", "compute", "callbacks")
WIDTH = 640
LABEL_WIDTH = 64
BAR_HEIGHT = 18
ROW_GAP = 10
TEXT_WIDTH = 60


def timeline_svg(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """An SVG of the timelines in `rows` ((label, timeline) pairs), on one time scale."""
    rows = [(label, t) for label, t in rows if t]
    if not rows:
        return ""
    longest = max(t["span"] for _, t in rows)
    plot = WIDTH - LABEL_WIDTH - 8
    scale = plot / longest
    parts: list[str] = []
    y = 4
    for label, timeline in rows:
        parts.append(
            f'<text x="0" y="{y + 13}" font-size="11" fill="#374151">{html.escape(label)}</text>'
        )
        parts.append(
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{timeline["span"] * scale:.1f}" '
            f'height="{BAR_HEIGHT}" fill="{BETWEEN_COLOR}"/>'
        )
        for kind in SEGMENT_ORDER:
            spans = [(a, b) for k, a, b in timeline["segments"] if k == kind]
            if not spans:
                continue
            # One path per kind: a bar of many segments in a few hundred bytes.
            d = "".join(
                f"M{LABEL_WIDTH + a * scale:.1f} {y}h{max((b - a) * scale, 0.6):.1f}"
                f"v{BAR_HEIGHT}h-{max((b - a) * scale, 0.6):.1f}z"
                for a, b in spans
            )
            total = sum(b - a for a, b in spans)
            parts.append(
                f'<path fill="{COLORS[kind]}" d="{d}"><title>{LABELS[kind]}: '
                f"{html.escape(seconds(total))} in the window</title></path>"
            )
        marks = "".join(
            f"M{LABEL_WIDTH + start * scale:.1f} {y + BAR_HEIGHT}v3"
            for start in timeline.get("step_starts", [])
        )
        parts.append(f'<path stroke="#111827" d="{marks}"/>')
        y += BAR_HEIGHT + ROW_GAP
    ticks = _ticks(longest)
    axis = "".join(f"M{LABEL_WIDTH + tick * scale:.1f} {y - 6}v4" for tick in ticks)
    parts.append(f'<path stroke="#6b7280" d="{axis}"/>')
    parts.append('<g font-size="10" fill="#6b7280" text-anchor="middle">')
    parts.extend(
        f'<text x="{x:.1f}" y="{y + 9}">{_tick_label(tick, longest)}</text>'
        for tick, x in ((t, LABEL_WIDTH + t * scale) for t in ticks)
    )
    parts.append("</g>")
    height = y + 14
    return (
        f'<svg class="tfdiag-timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="step timeline">{"".join(parts)}</svg>'
    )


def timeline_legend(kinds: set[str]) -> str:
    """The colours of the segment kinds drawn, and of the background."""
    items = [(COLORS[k], LABELS[k]) for k in ("wait", "compute", "callbacks") if k in kinds]
    items.append((BETWEEN_COLOR, "Python between steps"))
    return ", ".join(f'<span style="color:{c}">■</span> {html.escape(t)}' for c, t in items)


def timeline_html(
    rows: list[tuple[str, dict[str, Any]]], caption: str = "A few steady steps, as they ran"
) -> str:
    """The SVG with a caption, the legend, and what the window holds."""
    shown = [(label, t) for label, t in rows if t]
    if not shown:
        return ""
    notes = [f"{html.escape(label)}: {html.escape(window_words(t))}" for label, t in shown]
    drawn = {kind for _, t in shown for kind, _, _ in t["segments"]}
    inside = any(t.get("fit_input_inside") for _, t in shown)
    if inside:
        notes.append(
            "Keras reads fit's input inside its step, so a wait for the input is in the blue bar"
        )
    return (
        f"<p><b>Step timeline</b>: {html.escape(caption)} (ticks mark each step's start).</p>"
        f"{timeline_svg(shown)}"
        f'<p class="muted">{timeline_legend(drawn)}<br>{"<br>".join(notes)}.</p>'
    )


def window_words(timeline: dict[str, Any]) -> str:
    """Where the window lies and how its time divides, in words."""
    first = timeline["first_step"] + 1
    shares = timeline["shares"]
    parts = [
        f"{LABELS[kind]} {100 * shares[kind]:.0f}%" for kind in LABELS if shares.get(kind, 0) > 0
    ]
    parts.append(f"between steps {100 * timeline['between_share']:.0f}%")
    model = timeline.get("model")
    words = (
        f"{timeline['phase']} steps {first}-{first + timeline['steps'] - 1}"
        + (f" of model {model}" if model else "")
        + f" ({seconds(timeline['span'])}): "
        + ", ".join(parts)
    )
    unsteady = timeline.get("unsteady")
    if unsteady:  # reports written before the key have none: their windows were called steady
        words += (
            "; not steady: no window of three steps or more in this run is free of tracing,"
            f" epoch ends and pauses, and this one holds {and_list(unsteady)}"
        )
    return words


def timeline_text(timeline: dict[str, Any] | None) -> list[str]:
    """The window as a line of characters (w waiting, # in the step, c callbacks, . between),
    and its words."""
    if not timeline:
        return []
    cells = ["."] * TEXT_WIDTH
    scale = TEXT_WIDTH / timeline["span"]
    for kind, a, b in timeline["segments"]:
        if kind == "compute":  # a step is drawn however short, in the cell it starts in
            lo = min(int(a * scale), TEXT_WIDTH - 1)
            hi = max(lo + 1, min(math.ceil(b * scale), TEXT_WIDTH))
        else:  # a wait or callbacks only over the cells it covers half of or more
            lo, hi = round(a * scale), min(round(b * scale), TEXT_WIDTH)
        for i in range(lo, hi):
            cells[i] = CHARS[kind]
    return [
        f"Step timeline: |{''.join(cells)}|",
        f"  {window_words(timeline)}",
        "  (w waiting for input, # in the step, c Keras callbacks, . Python between steps)",
    ]


def _tick_label(tick: float, span: float) -> str:
    if tick == 0:
        return "0"
    if span < 2e-3:
        return f"{tick * 1e6:.4g} µs"
    if span < 2.0:
        return f"{tick * 1e3:.4g} ms"
    return f"{tick:.4g} s"


def _ticks(span: float) -> list[float]:
    """Round tick values from 0 to `span`, four to eight of them."""
    raw = span / 5
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10) if m * power >= raw), default=10 * power)
    count = int(span / step + 1e-9)
    return [i * step for i in range(count + 1)]


class Timelines:
    """Runs' step timelines on one time scale, as a notebook shows them (SVG) and as text:
    ``tfdiag_magic.timelines(serial, parallel)``."""

    def __init__(self, rows: list[tuple[str, dict[str, Any] | None]]) -> None:
        self.rows = rows

    def _repr_html_(self) -> str:
        missing = [label for label, t in self.rows if not t]
        note = (
            f'<p class="muted">No timeline for {html.escape(", ".join(missing))}: fewer than '
            "three steps of one phase.</p>"
            if missing
            else ""
        )
        return timeline_html(self.rows, "a few steady steps of each run, on one time scale") + note

    def __repr__(self) -> str:
        lines: list[str] = []
        for label, timeline in self.rows:
            lines.append(f"{label}:")
            lines.extend(timeline_text(timeline) or ["  no timeline (fewer than three steps)"])
        return "\n".join(lines)
