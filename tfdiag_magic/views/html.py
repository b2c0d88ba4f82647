"""The static HTML report: a fragment for notebooks, or a self-contained page with tabs.

The fragment is what a notebook shows where widgets cannot render (nbconvert, a frontend
without the widget manager, widgets switched off): the sections one after another, with the
plots as images. The page is the exported report: the dashboard's tabs (Overview, Steps,
Memory, GPU, Findings, Data; Compare or Sweep first for a run made with ``--compare`` or
``--sweep``) switch with CSS alone, so it needs no kernel and no script.
Everything that comes from the user (code, names, messages) is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..record import Record
from ..report import busy_machine_note, table_note
from ..units import rate, seconds, share, size
from .dash_findings import finding_html, findings_to_show, sorted_findings
from .dash_plots import png_data_uri
from .dash_table import csv_text, data_link, table_html
from .experiments import comparison_html, insert_cell, sweep_html, sweep_png
from .ops import has_window, ops_html
from .text import (
    KERAS_FUNCTIONS_NOTE,
    LIBRARY_FUNCTIONS,
    headline,
    short_name,
    split_functions,
    split_parts,
    traced_on_most_calls,
)
from .timeline import timeline_html

STYLE = """
.tfdiag{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:13px;
  line-height:1.4;max-width:900px}
.tfdiag h3{margin:.2em 0 .4em;font-size:15px}
.tfdiag table{border-collapse:collapse;margin:.3em 0 .8em}
.tfdiag th,.tfdiag td{padding:2px 10px;text-align:right;border-bottom:1px solid #8884}
.tfdiag th:first-child,.tfdiag td:first-child{text-align:left}
.tfdiag .err{color:#c62828;font-weight:600}
.tfdiag code,.tfdiag pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.tfdiag pre{white-space:pre-wrap;background:#8881;padding:6px}
.tfdiag img{max-width:100%}
.tfdiag .muted{opacity:.7}
"""


def _row(cells: list[str], header: bool = False) -> str:
    tag = "th" if header else "td"
    return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"


def _phase_row(label: str, p: dict[str, Any]) -> str:
    """One row of the steps table: a phase's numbers, or one model's within a phase."""
    return _row(
        [
            label,
            str(p["count"]),
            seconds(p["median"])
            if p["steady_count"]
            else seconds(p["median_all"]) + " (all warm-up)",
            seconds(p["p90"]),
            rate(p["steps_per_second"]),
            f"{p['warmup_count']} ({seconds(p['warmup_time'])})",
            seconds(p["data_wait"]) if p["data_wait"] is not None else "in step",
        ]
    )


PANEL_STYLE = """
.tfdiag h4{margin:1em 0 .3em;font-size:14px;border-bottom:1px solid #8884}
.tfdiag .tfdiag-finding{border-left:3px solid #8886;padding:2px 10px;margin:.6em 0}
.tfdiag .tfdiag-badge{color:#fff;border-radius:3px;padding:0 5px;font-size:11px}
.tfdiag .tfdiag-diff .add{color:#16a34a}.tfdiag .tfdiag-diff .del{color:#dc2626}
.tfdiag .tfdiag-diff .hunk,.tfdiag .tfdiag-diff .hd{opacity:.7}
.tfdiag .tfdiag-split{display:flex;height:14px;max-width:600px;border-radius:3px;overflow:hidden}
.tfdiag .tfdiag-split span{display:block;height:100%}
.tfdiag table.tfdiag-steps td,.tfdiag table.tfdiag-steps th{font-size:11px;padding:1px 6px}
.tfdiag button{font:inherit;padding:2px 10px;cursor:pointer}
"""
TAB_STYLE = """
.tfdiag-tabs>input{position:absolute;opacity:0;pointer-events:none}
.tfdiag-tabs>label{display:inline-block;padding:5px 14px;cursor:pointer;
  border-bottom:2px solid transparent;opacity:.75}
.tfdiag-tabs>.tfdiag-panel{display:none;border-top:1px solid #8884;padding-top:.5em}
@media (prefers-color-scheme: dark){body{background:#111418;color:#e5e7eb}}
"""
TABS = ("Overview", "Steps", "Memory", "GPU", "Findings", "Data")
SPLIT_COLORS = {
    "compute": "#3b82f6",
    "tracing": "#ef4444",
    "data wait": "#f59e0b",
    "callbacks": "#10b981",
    "epoch set-up": "#8b5cf6",
    "other": "#9ca3af",
}
STATIC_TABLE_ROWS = 10  # first and last rows of the per-step table in the notebook view
PAGE_TABLE_ROWS = 50  # ... and in the report file
PAGE_CSV_LIMIT = 50_000  # steps up to which the report file carries its CSV


def tabs_of(report: dict[str, Any]) -> tuple[str, ...]:
    """The tabs of a run's report: a Compare or Sweep tab first when the run has one, an Ops
    tab last when it has an ops window (``--ops``)."""
    first: tuple[str, ...] = ()
    if report.get("sweep"):
        first = ("Sweep",)
    elif report.get("comparison"):
        first = ("Compare",)
    last = ("Ops",) if has_window(report.get("ops")) else ()
    return first + TABS + last


def findings_html(report: dict[str, Any], buttons: bool) -> str:
    """Every finding, most important first; rewrites inserted as `insert_cell` makes them."""
    return "".join(
        finding_html(f, buttons=buttons, insert_as=insert_cell(report, str(f["rewrite"])))
        if f.get("rewrite")
        else finding_html(f, buttons=buttons)
        for f in findings_to_show(report)
    )


def _tab_style(count: int = len(TABS)) -> str:
    rules = [TAB_STYLE]
    for i in range(count):
        rules.append(
            f"#tfdiag-tab{i}:checked~#tfdiag-panel{i}{{display:block}}"
            f"#tfdiag-tab{i}:checked+label{{border-bottom-color:#3b82f6;opacity:1}}"
        )
    return "\n".join(rules)


def split_bar(split: dict[str, Any]) -> str:
    """The time split as a bar, largest part first: compute, tracing, data wait, callbacks,
    other."""
    wall = split["wall"]
    if wall <= 0:
        return ""
    parts = [(name, value or 0.0) for name, value in split_parts(split)]
    spans = "".join(
        f'<span title="{name}: {share(value, wall)}" '
        f'style="width:{100 * value / wall:.2f}%;background:{SPLIT_COLORS[name]}"></span>'
        for name, value in parts
        if value > 0
    )
    legend = ", ".join(
        f'<span style="color:{SPLIT_COLORS[name]}">■</span> {name} {share(value, wall)}'
        for name, value in parts
    )
    return f'<div class="tfdiag-split">{spans}</div><p class="muted">{legend}</p>'


def overview_html(report: dict[str, Any]) -> str:
    """The headline numbers: steps per phase, steady-state times, time split, memory, findings."""
    e = escape
    parts: list[str] = []
    phases = report["steps"]["phases"]
    if phases:
        parts.append("<table>")
        parts.append(
            _row(
                ["phase", "steps", "median", "p90", "steps/s", "warm-up", "data wait"], header=True
            )
        )
        by_model = report["steps"].get("phase_models") or {}
        for name, p in phases.items():
            parts.append(_phase_row(e(name), p))
            split = by_model.get(name)
            for m in split["models"] if split else []:
                parts.append(_phase_row(f"&nbsp;&nbsp;· model {e(m['model'])}", m))
            if split and split["count"] > len(split["models"]):
                more = split["count"] - len(split["models"])
                parts.append(_row([f"&nbsp;&nbsp;· and {more} more models"]))
            loops = report["steps"].get("phase_loops") if name == "loop" else None
            for m in loops["loops"] if loops else []:
                parts.append(_phase_row(f"&nbsp;&nbsp;· {e(m['loop'])}", m))
        parts.append("</table>")
        parts.append(
            '<p class="muted">Median and p90 are steady state: warm-up steps '
            "(first of a phase, or tracing) are excluded.</p>"
        )
        note = table_note(report)
        if note:
            parts.append(f'<p class="muted">{e(note[0].upper() + note[1:])}.</p>')
    else:
        parts.append("<p>No steps were recorded.</p>")
    split = report["time_split"]
    wall = split["wall"]
    listed = ", ".join(
        f"{name} {share(value, wall)} ({seconds(value)})" if value is not None else f"{name} –"
        for name, value in split_parts(split)
    )
    note = (
        f' <span class="muted">(data wait: {e(split["data_wait_note"])})</span>'
        if split.get("data_wait_note")
        else ""
    )
    busy = busy_machine_note(report)
    if busy:
        note += f' <span class="muted">({e(busy[0].upper() + busy[1:])}.)</span>'
    parts.append(f"<p><b>Time</b>: {e(listed)}.{note}</p>")
    parts.append(split_bar(split))
    parts.append(timeline_html([("this run", report.get("timeline"))]))
    parts.append(memory_table(report))
    findings = sorted_findings(report["findings"])
    if findings:
        items = "".join(
            f"<li><b>{e(str(f['severity']))}</b> <code>{e(str(f['code']))}</code>: "
            f"{e(str(f['title']))}</li>"
            for f in findings
        )
        parts.append(f"<p><b>Findings</b>, most important first</p><ul>{items}</ul>")
    return "".join(parts)


def memory_table(report: dict[str, Any]) -> str:
    e = escape
    memory = report["memory"]
    rows = []
    if memory["host_rss"]:
        m = memory["host_rss"]
        rows.append(_row(["host RSS", size(m["start"]), size(m["peak"]), size(m["end"])]))
    for device, m in memory["gpu"].items():
        rows.append(_row([e(device), size(m["start"]), size(m["peak"]), size(m["end"])]))
    if not rows:
        return ""
    return (
        "<table>"
        + _row(["memory", "start", "peak", "end"], header=True)
        + "".join(rows)
        + "</table>"
    )


def details_html(report: dict[str, Any], record: Record, full_page: bool) -> str:
    """tf.functions, GC, the cell's loops, warnings, and (in a file) the profiled code."""
    e = escape
    parts: list[str] = []
    mine, keras_own = split_functions(report)
    if mine:
        parts.append(
            "<table><caption>tf.functions of the code</caption>"
            + _row(["tf.function", "calls", "traces", "objects"], True)
        )
        for f in mine[:12]:
            name = e(f["name"]) + (
                " <span class='muted'>traced again on most calls</span>"
                if traced_on_most_calls(f)
                else ""
            )
            parts.append(_row([name, str(f["calls"]), str(f["traces"]), str(f["objects"])]))
        parts.append("</table>")
    if keras_own:
        parts.append(
            f"<table><caption>{e(LIBRARY_FUNCTIONS)}</caption>"
            + _row(["function", "calls", "traces", "objects"], True)
        )
        for f in keras_own[:8]:
            name = f"<span title='{e(f['name'], quote=True)}'>{e(short_name(f['name']))}</span>"
            parts.append(_row([name, str(f["calls"]), str(f["traces"]), str(f["objects"])]))
        parts.append(f"</table><p class='muted'>{e(KERAS_FUNCTIONS_NOTE)}</p>")
    gc = report["gc"]
    if gc["collections"]:
        parts.append(
            f"<p><b>Python GC</b>: {gc['collections']} collections, "
            f"{seconds(gc['pause_time'])} paused ({100 * gc['share']:.1f}%).</p>"
        )
    if report["loops"]:
        items = "".join(
            f"<li>line {loop['lineno']}: <code>{e(loop['source'])}</code></li>"
            for loop in report["loops"]
        )
        parts.append(f"<p><b>Loops of the code</b></p><ul>{items}</ul>")
    if report["warnings"]:
        items = "".join(
            f"<li>[{e(w['source'])}] {e(w['message'].strip()[:300])}"
            f"{' ×' + str(w['count']) if w['count'] > 1 else ''}</li>"
            for w in report["warnings"][:10]
        )
        parts.append(f"<p><b>Warnings</b> ({report['warnings_total']})</p><ul>{items}</ul>")
    if full_page and record.source:
        parts.append(
            f"<details><summary>Profiled code</summary><pre>{e(record.source)}</pre></details>"
        )
    return "".join(parts)


def gpu_sentence(report: dict[str, Any]) -> str:
    gpu = report["gpu"]
    seen = ", ".join(gpu["tensorflow_gpus"]) or "none"
    return (
        f"<p>No NVML samples in this run: {escape(str(gpu.get('nvml') or 'NVML was off'))}. "
        f"GPUs TensorFlow sees: {escape(seen)}.</p>"
    )


def _image(png: bytes | None, alt: str) -> str:
    if not png:
        return ""
    return f'<img alt="{escape(alt, quote=True)}" src="{png_data_uri(png)}">'


def static_plots(record: Record) -> dict[str, bytes | None]:
    """The plots of the static view, drawn once over the whole run."""
    from .dash_figures import gpu_png, memory_png, steps_png
    from .dash_model import step_series
    from .dash_plots import StepPlotOptions

    series = step_series(record)
    last = max(series.count - 1, 0)
    return {
        "steps": steps_png(series, 0, last, StepPlotOptions()),
        "memory": memory_png(series, 0, last),
        "gpu": gpu_png(series, 0, last),
    }


def data_html(report: dict[str, Any], record: Record, full_page: bool) -> str:
    import json

    import numpy as np

    n = record.step_count
    if n == 0:
        return "<p>No steps were recorded.</p>"
    limit = PAGE_TABLE_ROWS if full_page else STATIC_TABLE_ROWS
    if n <= 2 * limit:
        rows = np.arange(n)
        caption = f"all {n} steps"
    else:
        rows = np.concatenate((np.arange(limit), np.arange(n - limit, n)))
        caption = f"the first and last {limit} of {n} steps"
    parts = [table_html(record, rows, caption)]
    if full_page:
        links = [
            data_link(
                json.dumps(report, indent=1),
                "tfdiag-report.json",
                "application/json",
                "JSON report",
            )
        ]
        if n <= PAGE_CSV_LIMIT:
            links.append(
                data_link(csv_text(record), "tfdiag-steps.csv", "text/csv", "steps as CSV")
            )
        parts.append("<p>Download: " + " · ".join(links) + "</p>")
    parts.append(
        '<p class="muted">Every step: <code>run.steps</code> (a DataFrame) of '
        "<code>%%tfprofile -o run</code>; <code>run.to_json()</code> for the report.</p>"
    )
    return "".join(parts)


def render_html(
    report: dict[str, Any],
    record: Record,
    full_page: bool = False,
    plots: dict[str, bytes | None] | None = None,
) -> str:
    """The static view: a notebook fragment (sections one after another) or a page with tabs.

    `plots` are PNGs already drawn (the dashboard passes its own); drawn here when None.
    """
    e = escape
    if plots is None:
        plots = static_plots(record)
    header = [f"<h3>tfdiag_magic: {e(headline(report))}</h3>"]
    error = report.get("error")
    if error:
        header.append(
            f'<p class="err">{e(error["type"])}: {e(error["message"].strip()[:600])}</p>'
            '<p class="muted">The record below holds everything up to the error.</p>'
        )
    findings = sorted_findings(report["findings"])
    tabs = tabs_of(report)
    if report.get("sweep") and "sweep" not in plots:
        plots = {**plots, "sweep": sweep_png(report["sweep"])}
    panels = {
        "Overview": overview_html(report) + details_html(report, record, full_page),
        "Steps": _image(plots.get("steps"), "step time over steps")
        or "<p>No steps were recorded.</p>",
        "Memory": (_image(plots.get("memory"), "memory over steps") or "<p>No memory samples.</p>")
        + memory_table(report),
        "GPU": _image(plots.get("gpu"), "GPU utilization, memory and power over time")
        or gpu_sentence(report),
        "Findings": findings_html(report, buttons=full_page) or "<p>No findings.</p>",
        "Data": data_html(report, record, full_page),
    }
    if report.get("comparison"):
        panels["Compare"] = comparison_html(report["comparison"])
    if report.get("sweep"):
        panels["Sweep"] = sweep_html(report["sweep"], plots.get("sweep"))
    if report.get("ops"):
        panels["Ops"] = ops_html(report["ops"])
    parts: list[str] = ['<div class="tfdiag">', *header]
    if full_page:
        parts.append('<div class="tfdiag-tabs">')
        for i, name in enumerate(tabs):
            checked = " checked" if i == 0 else ""
            parts.append(
                f'<input type="radio" name="tfdiag-tabs" id="tfdiag-tab{i}"{checked}>'
                f'<label for="tfdiag-tab{i}">{name}</label>'
            )
        for i, name in enumerate(tabs):
            parts.append(f'<div class="tfdiag-panel" id="tfdiag-panel{i}">{panels[name]}</div>')
        parts.append("</div>")
    else:
        for name in tabs[: tabs.index("Overview")]:
            parts.append(f"<h4>{name}</h4>{panels[name]}")
        parts.append(panels["Overview"])
        parts.append(panels["Steps"])
        if plots.get("memory"):
            parts.append(f"<h4>Memory</h4>{_image(plots['memory'], 'memory over steps')}")
        if plots.get("gpu"):
            parts.append(f"<h4>GPU</h4>{_image(plots['gpu'], 'GPU over time')}")
        if findings:
            parts.append("<h4>Findings</h4>" + panels["Findings"])
        if "Ops" in panels:
            parts.append("<h4>Ops</h4>" + panels["Ops"])
        parts.append(f"<details><summary>Steps table</summary>{panels['Data']}</details>")
    parts.append("</div>")
    body = "\n".join(parts)
    style = STYLE + PANEL_STYLE
    if not full_page:
        return f"<style>{style}</style>\n{body}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>tfdiag_magic report</title>"
        f"<style>body{{margin:2em}}{style}{_tab_style(len(tabs))}</style></head><body>\n{body}\n"
        "</body></html>\n"
    )
