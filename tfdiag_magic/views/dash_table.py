"""The per-step table as HTML pages, and the CSV / JSON downloads as data links."""

from __future__ import annotations

import base64
import math
from html import escape

import numpy as np

from ..record import KINDS, PHASES, Record

TABLE_COLUMNS = (
    "start",
    "duration",
    "data_wait",
    "phase",
    "kind",
    "epoch",
    "loss",
    "traced",
    "fused",
    "callback_time",
    "gc_time",
)
_SECONDS = {"start", "duration", "data_wait", "callback_time", "gc_time"}


def _cell(name: str, value: object) -> str:
    if name == "phase":
        return PHASES[int(value)]  # type: ignore[arg-type]
    if name == "kind":
        return KINDS[int(value)]  # type: ignore[arg-type]
    if name == "loss":  # reported: NaN and Inf are the loss's own values
        return f"{float(value):.5g}"  # type: ignore[arg-type]
    if name in _SECONDS:
        number = float(value)  # type: ignore[arg-type]
        if math.isnan(number):
            return "–"
        if name == "start":
            return f"{number:.4f}"
        return f"{number * 1e3:.3f}"
    if name == "traced":
        return "yes" if value else ""
    return str(value)


def table_html(record: Record, rows: np.ndarray, caption: str = "") -> str:
    """An HTML table of the given step rows (indices into record.steps)."""
    steps = record.steps
    head = "".join(
        f"<th>{escape(name)}{' (ms)' if name in _SECONDS - {'start'} else ''}"
        f"{' (s)' if name == 'start' else ''}</th>"
        for name in TABLE_COLUMNS
    )
    no_loss = steps.get("no_loss")
    body = []
    for row in rows:
        # A step that reported no loss shows a dash; a NaN loss the code computed shows "nan".
        missing = bool(no_loss[row]) if no_loss is not None else False
        cells = "".join(
            f"<td>{escape('–' if name == 'loss' and missing else _cell(name, steps[name][row]))}"
            "</td>"
            for name in TABLE_COLUMNS
        )
        body.append(f"<tr><td>{int(row)}</td>{cells}</tr>")
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f'<table class="tfdiag-steps">{cap}<tr><th>step</th>{head}</tr>{"".join(body)}</table>'


def csv_text(record: Record) -> str:
    return record.to_dataframe().to_csv(float_format="%.9g")


def data_link(text: str, filename: str, mime: str, label: str) -> str:
    """A download link that carries its data: works without a kernel or a server."""
    payload = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return (
        f'<a download="{escape(filename, quote=True)}" '
        f'href="data:{mime};charset=utf-8;base64,{payload}">{escape(label)}</a>'
    )
