"""Where inside the step the time went, from the ops window's trace (``--ops``).

The trace's events (`xplane.read_events`) are mapped onto the run's steps by the clock pair
the window took when it started, then summarised: per step, its wall time split into input
wait, collective communication, device ops, host ops and the rest; the ops and the Keras layer
scopes that took the most self time. The summary is a plain dict (the JSON report's ``ops``).
"""

from __future__ import annotations

import gzip
import re
from collections import defaultdict
from time import perf_counter
from typing import Any

import numpy as np

from .record import KEPT_TRACE_BYTES, Kind, OpsCapture, Record
from .xplane import Category, OpEvents, parse_xspace, read_events

TOP_OPS = 15
TOP_LAYERS = 10
PER_STEP_ROWS = 20
# Each instant of a step is counted once, in the first of these that was busy then; "other"
# is the rest (Python, the framework between ops, idle).
SPLIT = (
    ("input", (Category.INPUT,)),
    ("collective", (Category.COLLECTIVE,)),
    ("device_ops", (Category.DEVICE_OP, Category.MEMCPY)),
    ("host_ops", (Category.HOST_OP,)),
)
PARTS = (*(name for name, _ in SPLIT), "other")
WHERE = {
    Category.INPUT: "input",
    Category.HOST_OP: "host",
    Category.DEVICE_OP: "device",
    Category.MEMCPY: "device",
    Category.COLLECTIVE: "collective",
    Category.PIPELINE: "input pipeline",
}
# Scopes that wrap a function's body, not a model's: left out of a layer's path.
WRAPPER_SCOPES = ("StatefulPartitionedCall", "PartitionedCall", "gradient_tape", "while", "cond")
# Scopes of a control-flow branch or loop body (`steps_per_execution` > 1 runs the step inside
# ``while/body/_1/while/cond/then/_131/...``), and their numbered parts.
BRANCH_SCOPES = frozenset({"body", "then", "else"})
_BRANCH_NUMBER = re.compile(r"_\d+")
NON_MODEL_SCOPES = ("compile_loss", "compile_metrics")
_NUMBERED = re.compile(r"_\d+$")


def keep_compressed(capture: OpsCapture) -> None:
    """Keep the window's trace gzip-compressed (`OpsCapture.trace_gz`) for the TensorBoard
    export, where it compresses to `KEPT_TRACE_BYTES` or less."""
    if not capture.xspace:
        return
    packed = gzip.compress(capture.xspace, compresslevel=1)
    if len(packed) <= KEPT_TRACE_BYTES:
        capture.trace_gz = packed


def summarise_ops(record: Record) -> None:
    """Read the window's trace into its summary (`OpsCapture.summary`), and drop the trace."""
    capture = record.ops_window
    if capture is None or not capture.xspace:
        return
    began = perf_counter()
    data, capture.xspace = capture.xspace, b""
    events = read_events(parse_xspace(data))
    capture.summary = ops_summary(events, capture, record)
    capture.summary["cost"]["parse_s"] = perf_counter() - began


def _covered(starts: np.ndarray, ends: np.ndarray) -> int:
    """Nanoseconds covered by the union of the intervals."""
    if starts.size == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # An interval starts a new run where it begins after everything before it has ended.
    new_run = np.empty(starts.size, dtype=bool)
    new_run[0] = True
    new_run[1:] = starts[1:] > reach[:-1]
    run_id = np.cumsum(new_run) - 1
    run_start = starts[new_run]
    run_end = np.zeros(run_start.size, dtype=np.int64)
    np.maximum.at(run_end, run_id, reach)
    return int((run_end - run_start).sum())


def step_split(events: OpEvents, lo: int, hi: int) -> dict[str, float]:
    """The seconds of [lo, hi) (wall-clock ns) in each part of `PARTS`; they sum to the span."""
    starts = np.clip(events.start, lo, hi)
    ends = np.clip(events.end, lo, hi)
    inside = ends > starts
    parts: dict[str, float] = {}
    done = 0
    higher = np.zeros(events.category.shape, dtype=bool)
    for name, categories in SPLIT:
        higher |= np.isin(events.category, [int(c) for c in categories])
        rows = inside & higher
        covered = _covered(starts[rows], ends[rows])
        parts[name] = (covered - done) / 1e9
        done = covered
    parts["other"] = (hi - lo - done) / 1e9
    return parts


def layer_scope(name: str, op_types: set[str]) -> str | None:
    """The Keras layer an op belongs to, by its name's scopes: ``model/layer_N/.../Op`` (after
    function-call and gradient scopes) -> ``layer``; None for ops outside a model's layers
    (the loss, the optimizer's updates, a loop's own ops).

    A graph's name scopes are not the layers' names: Keras 3 enters a layer's scope twice per
    call, once to build it (no op) and once to call it, and TensorFlow makes each scope's name
    unique in its graph by a suffix. Layers ``dense`` and ``dense_1`` run their ops in scopes
    ``dense_1`` and ``dense_1_2`` (their build scopes, ``dense`` and ``dense_1_1``, hold
    none): the call's scope is always the layer's name and one ``_N``, which is taken off."""
    parts = [
        part
        for part in name.split("/")
        if not part.startswith(WRAPPER_SCOPES)
        and not part.startswith("__inference")
        and part not in BRANCH_SCOPES
        and not _BRANCH_NUMBER.fullmatch(part)
    ]
    if len(parts) < 3 or parts[0] in NON_MODEL_SCOPES:
        return None
    layer = parts[1]
    # "adam/Sub_6/ReadVariableOp", "adam/Add_4/ReadVariableOp": an op's input, not a layer
    if _NUMBERED.sub("", layer) in op_types:
        return None
    if len(parts) == 3 and parts[2].startswith("ReadVariableOp"):
        return None
    return _NUMBERED.sub("", layer, count=1)


def short_name(name: str) -> str:
    """An op's name without the function-call scopes in front (Keras' train function runs
    the model inside ``StatefulPartitionedCall/``)."""
    while True:
        head, slash, rest = name.partition("/")
        if not slash or not head.startswith(("StatefulPartitionedCall", "PartitionedCall")):
            return name
        name = rest


def _window_steps(record: Record, lo: float, hi: float) -> np.ndarray:
    """Rows of the step table that ran wholly inside [lo, hi] (seconds since the run began):
    steps, or the cell's loop iterations where no step ran inside."""
    steps = record.steps
    start = steps["start"]
    inside = (start >= lo) & (start + steps["duration"] <= hi)
    is_loop = steps["kind"] == Kind.LOOP
    rows = np.flatnonzero(inside & ~is_loop)
    return rows if rows.size else np.flatnonzero(inside & is_loop)


def ops_summary(events: OpEvents, capture: OpsCapture, record: Record) -> dict[str, Any]:
    """The window's summary (the JSON report's ``ops``; see the module's docstring)."""

    def to_ns(seconds: float) -> int:
        return capture.anchor_ns + round((seconds - capture.anchor_s) * 1e9)

    def to_seconds(ns: int) -> float:
        return capture.anchor_s + (ns - capture.anchor_ns) / 1e9

    # Steps wholly traced: begun after the profiler's start returned, ended before its stop
    # was called (the trace's own start and stop stamps can lie outside the tracing).
    begin, end = capture.start, capture.stop
    if events.profile_start:
        begin = max(begin, to_seconds(events.profile_start))
    if events.profile_stop:
        end = min(end, to_seconds(events.profile_stop))
    rows = _window_steps(record, begin, end)
    per_step = []
    for row in rows:
        start = float(record.steps["start"][row])
        duration = float(record.steps["duration"][row])
        split = step_split(events, to_ns(start), to_ns(start + duration))
        per_step.append({"step": int(row), "start": start, "duration": duration, **split})
    step_time = sum(step["duration"] for step in per_step)
    if per_step:
        spans = [(to_ns(s["start"]), to_ns(s["start"] + s["duration"])) for s in per_step]
    else:  # no step ended inside the window: the window itself is the span
        spans = [(to_ns(begin), to_ns(end))]
    span_seconds = sum(b - a for a, b in spans) / 1e9
    return {
        "status": capture.status,
        "note": capture.note,
        "window": {
            "start": begin,
            "end": end,
            "steps": len(per_step),
            "first_step": int(rows[0]) if rows.size else None,
            "last_step": int(rows[-1]) if rows.size else None,
            "step_time": step_time,
            "events": len(events),
        },
        "split": {
            name: (sum(s[name] for s in per_step) / len(per_step) if per_step else None)
            for name in ("duration", *PARTS)
        },
        "per_step": per_step[:PER_STEP_ROWS],
        "top_ops": _top_ops(events, spans, span_seconds, len(per_step)),
        "top_layers": _top_layers(events, spans, span_seconds),
        "cost": {
            "start_s": capture.start_cost,
            "stop_s": capture.stop_cost,
            "trace_bytes": capture.trace_bytes,
            "step_slowdown": _slowdown(record, rows),
        },
    }


def _slowdown(record: Record, rows: np.ndarray) -> float | None:
    """The window's median step over the median of the same kind of steps after it (the
    profiler's own cost per step while it traces); None without steps on both sides."""
    if rows.size == 0:
        return None
    steps = record.steps
    same = (steps["phase"] == steps["phase"][rows[0]]) & (steps["kind"] == steps["kind"][rows[0]])
    after = np.flatnonzero(same)
    after = after[after > rows[-1]]
    if after.size < 3:
        return None
    inside = float(np.median(steps["duration"][rows]))
    outside = float(np.median(steps["duration"][after]))
    return inside / outside if outside > 0 else None


def _in_spans(events: OpEvents, spans: list[tuple[int, int]]) -> np.ndarray:
    """Events that began inside one of the spans."""
    mask = np.zeros(len(events), dtype=bool)
    for lo, hi in spans:
        mask |= (events.start >= lo) & (events.start < hi)
    return mask


def _busy(events: OpEvents, rows: list[int], spans: list[tuple[int, int]]) -> float:
    """Seconds of the spans during which at least one of the events `rows` ran."""
    starts, ends = events.start[rows], events.end[rows]
    total = 0
    for lo, hi in spans:
        a, b = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
        keep = b > a
        total += _covered(a[keep], b[keep])
    return total / 1e9


def _top_ops(
    events: OpEvents, spans: list[tuple[int, int]], span_seconds: float, steps: int
) -> list[dict[str, Any]]:
    """The ops with the most self time in the steps: name, type, where, count, self time,
    self time per step, and share (the part of the steps' wall time it was running)."""
    keep = _in_spans(events, spans) & (events.category != Category.CONTAINER)
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i in np.flatnonzero(keep):
        where = WHERE[Category(int(events.category[i]))]
        groups[(short_name(events.name[i]), events.op_type[i], where)].append(int(i))
    ranked = sorted(groups.items(), key=lambda item: -int(events.self_ns[item[1]].sum()))
    top = []
    for (name, op_type, where), rows in ranked[:TOP_OPS]:
        self_time = float(events.self_ns[rows].sum()) / 1e9
        top.append(
            {
                "name": name,
                "type": op_type,
                "where": where,
                "count": len(rows),
                "self_time": self_time,
                "per_step": self_time / steps if steps else None,
                "share": _busy(events, rows, spans) / span_seconds if span_seconds else None,
            }
        )
    return top


def _top_layers(
    events: OpEvents, spans: list[tuple[int, int]], span_seconds: float
) -> list[dict[str, Any]]:
    """Keras layer scopes by the self time of their ops (host and device) in the steps."""
    keep = _in_spans(events, spans) & np.isin(
        events.category, [int(Category.HOST_OP), int(Category.DEVICE_OP), int(Category.MEMCPY)]
    )
    op_types = set(events.op_type)
    layers: dict[str, list[int]] = defaultdict(list)
    for i in np.flatnonzero(keep):
        layer = layer_scope(events.name[i], op_types)
        if layer is not None:
            layers[layer].append(int(i))
    ranked = sorted(layers.items(), key=lambda item: -int(events.self_ns[item[1]].sum()))
    return [
        {
            "layer": layer,
            "ops": len(rows),
            "self_time": float(events.self_ns[rows].sum()) / 1e9,
            "share": _busy(events, rows, spans) / span_seconds if span_seconds else None,
        }
        for layer, rows in ranked[:TOP_LAYERS]
    ]
