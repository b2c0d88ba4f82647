"""The ops window (``--ops``) shown: where inside the step the time went, the top ops and the
top Keras layer scopes, as lines of the text report and as an HTML section (the HTML report's
and the dashboard's Ops tab). Rendered from the JSON report's ``ops``.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..units import seconds, share

PART_LABELS = {
    "input": "input",
    "collective": "collective",
    "device_ops": "device ops",
    "host_ops": "host ops",
    "other": "other",
}
PART_COLORS = {
    "input": "#f59e0b",
    "collective": "#8b5cf6",
    "device_ops": "#10b981",
    "host_ops": "#3b82f6",
    "other": "#9ca3af",
}
SPLIT_NOTE = (
    "Each instant of a step counts once, in the first of input, collective, device ops, host "
    "ops that was busy then; other is the rest (Python, the framework between ops, idle)."
)
NAME_WIDTH = 60
STYLE = (
    "<style>.tfdiag table.tfdiag-ops td,.tfdiag table.tfdiag-layers td{white-space:nowrap}"
    ".tfdiag table.tfdiag-ops td:nth-child(2),.tfdiag table.tfdiag-ops td:nth-child(3)"
    "{text-align:left}</style>"
)


def has_window(ops: dict[str, Any] | None) -> bool:
    """Whether the report's ``ops`` holds a captured and summarised window."""
    return bool(ops) and ops.get("status") == "captured" and "top_ops" in ops


def _window_line(ops: dict[str, Any]) -> str:
    window, cost = ops["window"], ops["cost"]
    steps = window["steps"]
    span = f"{steps} step{'s' if steps != 1 else ''} (rows {window['first_step']}-"
    span += f"{window['last_step']})" if steps else "no step ended inside it"
    slower = cost.get("step_slowdown")
    traced = f", its steps {slower:.2f}× the later steps' median" if slower else ""
    return (
        f"window of {span}, {seconds(window['end'] - window['start'])} traced; the profiler's "
        f"start took {seconds(cost['start_s'])}, its stop {seconds(cost['stop_s'])}{traced}"
    )


def _split_items(ops: dict[str, Any]) -> list[tuple[str, float]]:
    split = ops["split"]
    return [(part, split[part] or 0.0) for part in PART_LABELS]


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else "…" + name[-(NAME_WIDTH - 1) :]


def ops_text(ops: dict[str, Any] | None) -> list[str]:
    """The text report's lines for the ops window (none without ``--ops``)."""
    if not ops:
        return []
    if not has_window(ops):
        return ["", f"Ops window: not captured ({ops.get('note') or ops.get('status')})."]
    out = ["", f"Ops window: {_window_line(ops)}"]
    if ops.get("note"):
        out.append(f"  ({ops['note']})")
    duration = ops["split"].get("duration")
    if duration:
        parts = ", ".join(
            f"{PART_LABELS[p]} {share(v, duration)} ({seconds(v)})" for p, v in _split_items(ops)
        )
        out.append(f"  per step ({seconds(duration)}): {parts}")
    if ops["top_ops"]:
        out.append(f"  {'op':<{NAME_WIDTH}} {'type':<22}{'where':>9}{'count':>7}{'self':>10}")
        for op in ops["top_ops"][:10]:
            out.append(
                f"  {_short(op['name']):<{NAME_WIDTH}} {op['type'][:21]:<22}{op['where'][:9]:>9}"
                f"{op['count']:>7}{seconds(op['self_time']):>10}"
            )
    if ops["top_layers"]:
        layers = ", ".join(
            f"{layer['layer']} {seconds(layer['self_time'])}" for layer in ops["top_layers"][:5]
        )
        out.append(f"  layers by self time: {layers}")
    return out


def ops_html(ops: dict[str, Any] | None) -> str:
    """The Ops section: the window, the per-step split as a bar, the top ops, the top layers."""
    if not ops:
        return ""
    e = escape
    if not has_window(ops):
        return f"<p>Ops window: not captured ({e(str(ops.get('note') or ops.get('status')))}).</p>"
    parts = [STYLE, f'<p class="tfdiag-ops-window">Ops window: {e(_window_line(ops))}</p>']
    if ops.get("note"):
        parts.append(f'<p class="muted">{e(ops["note"])}</p>')
    duration = ops["split"].get("duration")
    if duration:
        items = _split_items(ops)
        spans = "".join(
            f'<span title="{PART_LABELS[p]}: {share(v, duration)}" '
            f'style="width:{100 * v / duration:.2f}%;background:{PART_COLORS[p]}"></span>'
            for p, v in items
            if v > 0
        )
        legend = ", ".join(
            f'<span style="color:{PART_COLORS[p]}">■</span> {PART_LABELS[p]} '
            f"{share(v, duration)} ({seconds(v)})"
            for p, v in items
        )
        parts.append(
            f"<p>Where a step's {seconds(duration)} went (mean of the window's steps):</p>"
            f'<div class="tfdiag-split">{spans}</div><p class="muted">{legend}. '
            f"{e(SPLIT_NOTE)}</p>"
        )
    if ops["top_ops"]:
        rows = "".join(
            f"<tr><td><code>{e(op['name'])}</code></td><td>{e(op['type'])}</td>"
            f"<td>{e(op['where'])}</td><td>{op['count']}</td><td>{seconds(op['self_time'])}</td>"
            f"<td>{share(op['share'], 1.0) if op['share'] is not None else '–'}</td></tr>"
            for op in ops["top_ops"]
        )
        parts.append(
            '<table class="tfdiag-ops"><caption>Top ops by self time</caption>'
            "<tr><th>op</th><th>type</th><th>where</th><th>count</th><th>self time</th>"
            "<th>share of the steps</th></tr>" + rows + "</table>"
        )
    if ops["top_layers"]:
        rows = "".join(
            f"<tr><td><code>{e(layer['layer'])}</code></td><td>{layer['ops']}</td>"
            f"<td>{seconds(layer['self_time'])}</td>"
            f"<td>{share(layer['share'], 1.0) if layer['share'] is not None else '–'}</td></tr>"
            for layer in ops["top_layers"]
        )
        parts.append(
            '<table class="tfdiag-layers"><caption>Keras layers by self time (scopes as '
            "TensorFlow names them: a scope used again in one graph gets _1, _2)</caption>"
            "<tr><th>layer</th><th>ops</th><th>self time</th><th>share of the steps</th></tr>"
            + rows
            + "</table>"
        )
    return "".join(parts)
