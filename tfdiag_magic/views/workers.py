"""The merged report of a multi-worker job (`jobs.merged.MergedResult`): a line per worker and
the job's findings as text; as HTML, a Workers table, each worker's input wait along its steps
(an inline SVG, a line per worker), and the findings."""

from __future__ import annotations

import html
import textwrap
from typing import Any

from ..units import seconds, share, size
from .html import PANEL_STYLE, STYLE, findings_html
from .text import finding_lines

WORKER_COLORS = ("#3b82f6", "#ef4444", "#10b981", "#f59e0b", "#8b5cf6", "#ec4899", "#14b8a6")


def _cells(worker: dict[str, Any]) -> list[str]:
    wait = worker.get("input_wait_share")
    peak = worker.get("host_peak_bytes")
    step = worker.get("median_step_s")
    beyond = worker.get("compute_and_collective_s")
    collective = worker.get("collective_s")
    return [
        worker["name"],
        f"{worker['steps']:,}",
        seconds(step) if step is not None else "–",
        share(wait, 1) if wait is not None else "–",
        seconds(beyond) if beyond is not None else "–",
        seconds(collective) if collective is not None else "– (no --ops)",
        size(peak) if peak is not None else "–",
        ", ".join(worker["findings"]) or "none",
    ]


HEADER = [
    "worker",
    "steps",
    "median step",
    "input wait",
    "compute + collective",
    "collective",
    "host peak",
    "its findings",
]
COLUMNS_NOTE = (
    "input wait: share of the worker's measured training time spent waiting for its next batch;"
    " compute + collective: the median step less its input wait, the worker's own work and its"
    " wait for the others together (told apart only by the ops window: --ops gives collective)"
)


def workers_text(report: dict[str, Any]) -> str:
    workers = report["workers"]
    rows = [HEADER, *(_cells(w) for w in workers)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    lines = [f"tfdiag_magic: {len(workers)} workers merged, steps aligned by index", ""]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]))
    lines.extend("  " + line for line in textwrap.wrap(f"({COLUMNS_NOTE})", 96))
    lines.append("")
    findings = report["findings"]
    if not findings:
        lines.append("No job findings: no worker held the others back.")
    for index, finding in enumerate(findings):
        lines.extend(finding_lines(index, finding, report))
    return "\n".join(lines)


def workers_html(report: dict[str, Any], full_page: bool) -> str:
    workers = report["workers"]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(w)) + "</tr>" for w in workers
    )
    findings = findings_html(report, buttons=False) or (
        "<p>No job findings: no worker held the others back.</p>"
    )
    fragment = (
        f'<div class="tfdiag tfdiag-workers"><h4>Workers ({len(workers)})</h4>'
        f'<table class="tfdiag-steps"><tr>{head}</tr>{body}</table>'
        f'<p class="muted">{html.escape(COLUMNS_NOTE[0].upper() + COLUMNS_NOTE[1:])}.</p>'
        f"{workers_plots(report)}<h4>Findings</h4>{findings}</div>"
    )
    style = f"<style>{STYLE}{PANEL_STYLE}</style>"
    if not full_page:
        return style + fragment
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>tfdiag_magic: workers</title>'
        f"{style}</head><body>{fragment}</body></html>"
    )


def workers_plots(report: dict[str, Any]) -> str:
    """The Workers plots: each worker's step time along the steps, then its input wait."""
    return _step_plot(report) + _wait_plot(report)


def _step_plot(report: dict[str, Any], width: int = 560, height: int = 180) -> str:
    """Each worker's time per step (start to start, a 9-point running median) along its steps,
    aligned by step index: a polyline per worker."""
    series = {
        w["name"]: w["step_series"]
        for w in report["workers"]
        if w.get("step_series") and len(w["step_series"]["step"]) >= 2
    }
    if not series:
        missing = ", ".join(w["name"] for w in report["workers"])
        return (
            '<h4>Time per step along the steps</h4><p class="muted">The reports of '
            f"{html.escape(missing)} carry no per-step series (written by a version of "
            "tfdiag_magic before it kept one): run the workers again to see it.</p>"
        )
    smoothed = {name: _running_median(s) for name, s in series.items()}
    last = max(s["step"][-1] for s in series.values()) or 1
    top = max((max(v for _, v in points) for points in smoothed.values() if points), default=0)
    top = top * 1.1 or 1.0
    lines, legend = [], []
    for i, (name, points) in enumerate(smoothed.items()):
        color = WORKER_COLORS[i % len(WORKER_COLORS)]
        xy = " ".join(
            f"{50 + (width - 60) * step / last:.1f},{height - 20 - (height - 30) * v / top:.1f}"
            for step, v in points
        )
        lines.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{xy}"/>')
        legend.append(f'<span style="color:{color}">■ {html.escape(name)}</span>')
    axes = (
        f'<line x1="50" y1="{height - 20}" x2="{width - 10}" y2="{height - 20}" stroke="#888"/>'
        f'<line x1="50" y1="10" x2="50" y2="{height - 20}" stroke="#888"/>'
        f'<text x="2" y="16" font-size="10" fill="#888">{html.escape(seconds(top))}</text>'
        f'<text x="40" y="{height - 20}" font-size="10" fill="#888">0</text>'
        f'<text x="{width - 60}" y="{height - 4}" font-size="10" fill="#888">step {last}</text>'
    )
    return (
        "<h4>Time per step along the steps</h4>"
        f'<svg class="tfdiag-worker-steps" width="{width}" height="{height}" role="img"'
        ' aria-label="time per step of each worker over steps">'
        f"{axes}{''.join(lines)}</svg><div>{' '.join(legend)}</div>"
        '<p class="muted">Start to start, waits included; aligned by step index, never by clock'
        " (the workers' clocks are not compared). In a synchronous job every worker takes the"
        " slowest one's time.</p>"
    )


def _running_median(series: dict[str, Any], window: int = 9) -> list[tuple[int, float]]:
    steps, values = series["step"], series["interval"]
    known = [(s, v) for s, v in zip(steps, values, strict=True) if v is not None]
    out = []
    for i in range(len(known)):
        part = sorted(v for _, v in known[max(0, i - window // 2) : i + window // 2 + 1])
        out.append((known[i][0], part[len(part) // 2]))
    return out


def _wait_plot(report: dict[str, Any], width: int = 560, height: int = 160) -> str:
    """Each worker's input wait share along its steps, a polyline per worker."""
    series = {k: v for k, v in (report.get("input_wait_windows") or {}).items() if len(v) >= 2}
    if not series:
        return ""
    last = max(point[0] for points in series.values() for point in points) or 1.0
    lines, legend = [], []
    for i, (name, points) in enumerate(series.items()):
        color = WORKER_COLORS[i % len(WORKER_COLORS)]
        xy = " ".join(
            f"{40 + (width - 50) * step / last:.1f},"
            f"{height - 20 - (height - 30) * min(max(v, 0), 1):.1f}"
            for step, v in points
        )
        lines.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{xy}"/>')
        legend.append(f'<span style="color:{color}">■ {html.escape(name)}</span>')
    axes = (
        f'<line x1="40" y1="{height - 20}" x2="{width - 10}" y2="{height - 20}" stroke="#888"/>'
        f'<line x1="40" y1="10" x2="40" y2="{height - 20}" stroke="#888"/>'
        f'<text x="2" y="16" font-size="10" fill="#888">100%</text>'
        f'<text x="12" y="{height - 20}" font-size="10" fill="#888">0%</text>'
        f'<text x="{width - 60}" y="{height - 4}" font-size="10" fill="#888">'
        f"step {int(last)}</text>"
    )
    return (
        "<h4>Input wait along the steps</h4>"
        f'<svg class="tfdiag-worker-waits" width="{width}" height="{height}" role="img"'
        ' aria-label="input wait share per worker over steps">'
        f"{axes}{''.join(lines)}</svg><div>{' '.join(legend)}</div>"
    )
