"""Compare and sweep as text, HTML and a plot, rendered from the JSON report's dicts.

``report["comparison"]`` (a run made with ``--compare NAME``) and ``report["sweep"]``
(``--sweep NAME=V1,V2,...``) are rendered here for the text report, the static HTML and the
dashboard alike. Everything that comes from the user (names, values, messages) is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from ..units import seconds, size
from .timeline import timeline_html

SHARE_METRICS = {"compute share", "data wait share", "other share"}
FAILED_COLOR = "#ef4444"
THROUGHPUT_COLOR = "#3b82f6"
HOST_COLOR = "#10b981"
DEVICE_COLOR = "#a855f7"


# -- numbers ----------------------------------------------------------------------------------


def metric_value(row: dict[str, Any], which: str) -> str:
    """A comparison row's before/after value with its unit."""
    value = row[which]
    if value is None:
        return "–"
    unit = row.get("unit", "")
    if row["metric"] in SHARE_METRICS:
        return f"{100 * value:.0f}%"
    if unit == "s":
        return seconds(value)
    if unit == "bytes":
        return size(value)
    if isinstance(value, float):
        return f"{value:,.1f} {unit}".strip()
    return f"{value} {unit}".strip()


def change_text(row: dict[str, Any]) -> str:
    """The change as it reads best: points for shares, percent, or a factor when large."""
    change = row.get("change")
    if change is None or row["before"] is None or row["after"] is None:
        return "–"
    if row["metric"] in SHARE_METRICS:
        points = 100 * (row["after"] - row["before"])
        return f"{_sign(points)}{abs(points):.0f} pts"
    if row["metric"] in ("steps", "findings"):
        delta = row["after"] - row["before"]
        return "same" if delta == 0 else f"{_sign(delta)}{abs(delta)}"
    if change > 1:
        return f"×{change + 1:.1f}"
    return f"{_sign(change)}{abs(100 * change):.0f}%"


def _sign(value: float) -> str:
    return "+" if value > 0 else ("−" if value < 0 else "±")


def sweep_cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if column in ("step_time", "step_interval", "wall_time"):
        return seconds(value)
    if column in ("peak_host", "peak_device"):
        return size(value)
    if column == "throughput":
        return f"{value:,.0f} {row.get('throughput_unit', '')}".strip()
    if column == "findings":
        return ", ".join(value) or "–"
    return str(value)


SWEEP_COLUMNS = (
    ("status", "status"),
    ("steps", "steps"),
    ("step_time", "step time"),
    ("throughput", "throughput"),
    ("peak_host", "peak host"),
    ("peak_device", "peak device"),
    ("wall_time", "wall time"),
    ("findings", "findings"),
)


def insert_cell(report: dict[str, Any], rewrite: str) -> str:
    """The cell a finding's rewrite is inserted as: under ``%%tfprofile --compare NAME``, so
    that one run measures the fix against the run it came from (when that run is stored)."""
    name = report.get("stored_as")
    if not name or report.get("sweep") is not None or rewrite.lstrip().startswith("%%"):
        return rewrite
    return f"%%tfprofile --compare {name}\n{rewrite}"


# -- text -------------------------------------------------------------------------------------


def comparison_text(comparison: dict[str, Any]) -> list[str]:
    out = [f"Compared with {comparison['baseline']}: {comparison['verdict']}"]
    table = [["", "before", "after", "change"]]
    for row in comparison["rows"]:
        if row["before"] is None and row["after"] is None:
            continue
        table.append(
            [
                row["metric"],
                metric_value(row, "before"),
                metric_value(row, "after"),
                change_text(row),
            ]
        )
    out.extend(_columns(table))
    resolved = ", ".join(comparison["resolved"]) or "none"
    new = ", ".join(comparison["new"]) or "none"
    out.append(f"  Findings resolved: {resolved}; new: {new}")
    return out


def _columns(table: list[list[str]]) -> list[str]:
    """Rows of cells as aligned text: the first column left, the others right."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [row[0].ljust(widths[0])]
        cells.extend(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def sweep_text(sweep: dict[str, Any]) -> list[str]:
    name = sweep["variable"]
    out = [
        f"Sweep of {name} over {len(sweep['values'])} values"
        + (f"; the report below is the run of {name}={sweep['shown']}" if sweep["shown"] else "")
    ]
    table = [[name, *(title for _, title in SWEEP_COLUMNS[:-1])]]
    errors: dict[int, str] = {}
    for row in sweep["rows"]:
        table.append([str(row["value"]), *(sweep_cell(row, key) for key, _ in SWEEP_COLUMNS[:-1])])
        if row["error"]:
            errors[len(table) - 1] = _last_line(row["error"])[:200]
    lines = _columns(table)
    for index, line in enumerate(lines):
        findings = "findings" if index == 0 else sweep_cell(sweep["rows"][index - 1], "findings")
        out.append(f"{line}  {findings}")
        if index in errors:
            out.append(f"    {errors[index]}")
    out.extend(_sweep_notes(sweep))
    return out


def _last_line(message: str) -> str:
    lines = [line for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"


def _sweep_notes(sweep: dict[str, Any]) -> list[str]:
    notes = []
    best = sweep["recommendation"]
    if best is not None:
        notes.append(f"Recommendation: {best['text']}")
    else:
        notes.append("No value completed: nothing to recommend.")
    if sweep["interrupted"]:
        notes.append("The sweep was interrupted; the rows above are the runs that ran.")
    for line in sweep["overridden_lines"]:
        notes.append(
            f"The cell's own assignment to {sweep['variable']} (line {line}) was overridden."
        )
    return notes


# -- HTML -------------------------------------------------------------------------------------


def comparison_html(comparison: dict[str, Any]) -> str:
    e = escape
    rows = [
        "<tr><th>metric</th><th>before</th><th>after</th><th>change</th></tr>",
        *(
            f"<tr><td>{e(row['metric'])}</td><td>{e(metric_value(row, 'before'))}</td>"
            f"<td>{e(metric_value(row, 'after'))}</td><td>{e(change_text(row))}</td></tr>"
            for row in comparison["rows"]
            if row["before"] is not None or row["after"] is not None
        ),
    ]
    resolved = ", ".join(f"<code>{e(c)}</code>" for c in comparison["resolved"]) or "none"
    new = ", ".join(f"<code>{e(c)}</code>" for c in comparison["new"]) or "none"
    measure = comparison.get("measure_text")
    return (
        '<div class="tfdiag-compare">'
        f"<p><b>Compared with <code>{e(comparison['baseline'])}</code></b>: "
        f"{e(comparison['verdict'])}</p>"
        + (f'<p class="muted">Speed measured by {e(measure)}.</p>' if measure else "")
        + f"<table>{''.join(rows)}</table>"
        f"<p>Findings resolved: {resolved}. New: {new}.</p>"
        + timeline_html(
            [
                ("before", comparison["before"].get("timeline")),
                ("after", comparison["after"].get("timeline")),
            ],
            "a few steady steps of each run, on one time scale",
        )
        + "</div>"
    )


def sweep_html(sweep: dict[str, Any], png: bytes | None = None) -> str:
    from .dash_plots import png_data_uri

    e = escape
    name = sweep["variable"]
    parts = ['<div class="tfdiag-sweep">']
    best = sweep["recommendation"]
    if best is not None:
        parts.append(f"<p><b>Recommendation</b>: {e(best['text'])}</p>")
    else:
        parts.append('<p class="err">No value completed: nothing to recommend.</p>')
    if png:
        parts.append(
            f'<img alt="{e("throughput and peak memory against " + name, quote=True)}" '
            f'src="{png_data_uri(png)}">'
        )
    head = f"<th>{e(name)}</th>" + "".join(f"<th>{e(t)}</th>" for _, t in SWEEP_COLUMNS)
    rows = [f"<tr>{head}</tr>"]
    for row in sweep["rows"]:
        style = ' class="err"' if row["failed"] else ""
        cells = "".join(f"<td>{e(sweep_cell(row, key))}</td>" for key, _ in SWEEP_COLUMNS)
        rows.append(f"<tr{style}><td><code>{e(row['value'])}</code></td>{cells}</tr>")
        if row["error"]:
            rows.append(
                f'<tr><td></td><td colspan="{len(SWEEP_COLUMNS)}" class="muted">'
                f"{e(_last_line(row['error'])[:300])}</td></tr>"
            )
    parts.append(f"<table>{''.join(rows)}</table>")
    notes = _sweep_notes(sweep)[1:]
    if sweep["shown"]:
        notes.append(f"The other tabs show the run of {name}={sweep['shown']}.")
    parts.extend(f'<p class="muted">{e(note)}</p>' for note in notes)
    parts.append("</div>")
    return "".join(parts)


# -- plot -------------------------------------------------------------------------------------


def sweep_png(sweep: dict[str, Any]) -> bytes | None:
    """Throughput and peak memory against the swept value (one point per value, in order)."""
    rows = sweep["rows"]
    if not rows:
        return None
    from .dash_plots import add_legend, fix_layout, new_figure, png_bytes

    labels = [str(row["value"]) for row in rows]
    x = np.arange(len(rows), dtype=np.float64)
    throughput = np.array([_number(row["throughput"]) for row in rows])
    failed = np.array([bool(row["failed"]) for row in rows])
    fig, (ax_speed, ax_memory) = new_figure(3.8, rows=2, ratios=(1, 1))
    units = {row["throughput_unit"] for row in rows if row["throughput_unit"]}
    ax_speed.plot(x, throughput, "o-", color=THROUGHPUT_COLOR, lw=1.2, ms=4, label="throughput")
    ax_speed.set_ylabel(" / ".join(sorted(units)) or "throughput")
    host = np.array([_number(row["peak_host"]) for row in rows]) / 2**20
    device = np.array([_number(row["peak_device"]) for row in rows]) / 2**20
    if np.any(~np.isnan(host)):
        ax_memory.plot(x, host, "o-", color=HOST_COLOR, lw=1.2, ms=4, label="peak host")
    if np.any(~np.isnan(device)):
        ax_memory.plot(x, device, "s-", color=DEVICE_COLOR, lw=1.2, ms=4, label="peak device")
    ax_memory.set_ylabel("peak memory (MiB)")
    if failed.any():
        for ax in (ax_speed, ax_memory):
            ax.plot(x[failed], np.zeros(int(failed.sum())), "x", color=FAILED_COLOR, ms=8, mew=2)
        ax_speed.plot([], [], "x", color=FAILED_COLOR, label="did not complete")
    best = sweep.get("recommendation")
    if best is not None and best["value"] in labels:
        index = labels.index(best["value"])
        ax_speed.plot(
            [x[index]], [throughput[index]], "*", color="#f59e0b", ms=12, label="recommended"
        )
    for ax in (ax_speed, ax_memory):
        ax.set_ylim(bottom=0)
        ax.set_xlim(-0.5, len(rows) - 0.5)
    ax_memory.set_xticks(x, labels=[_short(label) for label in labels])
    ax_memory.set_xlabel(str(sweep["variable"]))
    ax_speed.tick_params(labelbottom=False)
    add_legend(ax_speed)
    add_legend(ax_memory)
    fix_layout(fig)
    ax_speed.get_gridspec().update(hspace=0.5, top=0.9, bottom=0.14)  # room for the legends
    for ax in (ax_speed, ax_memory):
        ax.set_position(ax.get_subplotspec().get_position(fig))
    return png_bytes(fig)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value is not None else np.nan


def _short(label: str) -> str:
    return label if len(label) <= 16 else label[:15] + "…"
