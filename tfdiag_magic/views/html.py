"""The HTML report: a fragment for notebooks, or a self-contained page for a file.

Everything that comes from the user (code, names, messages) is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..record import Record
from .plots import png_data_uri, step_time_png
from .text import headline
from .units import rate, seconds, share, size

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


def render_html(report: dict[str, Any], record: Record, full_page: bool = False) -> str:
    e = escape
    parts: list[str] = ['<div class="tfdiag">', f"<h3>tfdiag_magic: {e(headline(report))}</h3>"]
    error = report.get("error")
    if error:
        parts.append(
            f'<p class="err">{e(error["type"])}: {e(error["message"].strip()[:600])}</p>'
            '<p class="muted">The record below holds everything up to the error.</p>'
        )
    phases = report["steps"]["phases"]
    if phases:
        parts.append("<table>")
        parts.append(
            _row(
                ["phase", "steps", "median", "p90", "steps/s", "warm-up", "data wait"], header=True
            )
        )
        for name, p in phases.items():
            parts.append(
                _row(
                    [
                        e(name),
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
            )
        parts.append("</table>")
        parts.append(
            '<p class="muted">Median and p90 are steady state: warm-up steps '
            "(first of a phase, or tracing) are excluded.</p>"
        )
    else:
        parts.append("<p>No steps were recorded.</p>")
    png = step_time_png(record)
    if png:
        parts.append(f'<img alt="step time over steps" src="{png_data_uri(png)}">')
    split = report["time_split"]
    wall = split["wall"]
    wait = (
        f"{share(split['data_wait'], wall)} ({seconds(split['data_wait'])})"
        if split["data_wait_observable"]
        else "–"
    )
    note = (
        f' <span class="muted">(data wait: {e(split["data_wait_note"])})</span>'
        if split.get("data_wait_note")
        else ""
    )
    parts.append(
        "<p><b>Time</b>: compute "
        f"{share(split['compute'], wall)} ({seconds(split['compute'])}), data wait {wait}, "
        f"other {share(split['other'], wall)} ({seconds(split['other'])}).{note}</p>"
    )
    memory = report["memory"]
    rows = []
    if memory["host_rss"]:
        m = memory["host_rss"]
        rows.append(_row(["host RSS", size(m["start"]), size(m["peak"]), size(m["end"])]))
    for device, m in memory["gpu"].items():
        rows.append(_row([e(device), size(m["start"]), size(m["peak"]), size(m["end"])]))
    if rows:
        parts.append(
            "<table>"
            + _row(["memory", "start", "peak", "end"], header=True)
            + "".join(rows)
            + "</table>"
        )
    functions = [f for f in report["functions"] if f["calls"]]
    if functions:
        parts.append("<table>" + _row(["tf.function", "calls", "traces", "objects"], True))
        for f in functions[:12]:
            name = e(f["name"]) + (
                " <span class='muted'>[Keras]</span>" if f["keras_internal"] else ""
            )
            parts.append(_row([name, str(f["calls"]), str(f["traces"]), str(f["objects"])]))
        parts.append("</table>")
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
        parts.append(f"<p><b>Loops of the cell</b></p><ul>{items}</ul>")
    if report["warnings"]:
        items = "".join(
            f"<li>[{e(w['source'])}] {e(w['message'].strip()[:300])}"
            f"{' ×' + str(w['count']) if w['count'] > 1 else ''}</li>"
            for w in report["warnings"][:10]
        )
        parts.append(f"<p><b>Warnings</b> ({report['warnings_total']})</p><ul>{items}</ul>")
    if report["findings"]:
        items = "".join(
            f"<li><b>{e(f['code'])}</b>: {e(f['title'])}</li>" for f in report["findings"]
        )
        parts.append(f"<p><b>Findings</b></p><ul>{items}</ul>")
    if full_page and record.source:
        parts.append(
            f"<details><summary>Profiled code</summary><pre>{e(record.source)}</pre></details>"
        )
    parts.append("</div>")
    body = "\n".join(parts)
    if not full_page:
        return f"<style>{STYLE}</style>\n{body}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>tfdiag_magic report</title>"
        f"<style>body{{margin:2em}}{STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )
