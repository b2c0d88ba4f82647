"""The JSON report (schema 1), built from a Record; the text and HTML views render this dict.

Later versions add fields to schema 1; they never rename or remove one. Added since: ``comparison``
(a run made with ``--compare NAME``), ``sweep`` (``--sweep NAME=V1,V2,...``), both null when
absent, ``stored_as`` (the variable holding the result, null when none), ``steps.recorded``
(rows recorded, ``steps.rows`` being those the table holds) and ``steps.reduced`` (how a long
run's table was thinned, null when it holds every row), ``timeline`` (a few steady steps laid
out in time, `timeline.py`; null for a run with fewer than three steps), ``ops`` (the ops
window of a run made with ``--ops``, `ops_summary.py`: its status, steps, per-step split, top
ops and layers, and its cost; null without ``--ops``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from .diagnose.machine_load import machine_during_run
from .diagnose.retracing import traced_from
from .findings import Finding
from .phase_split import loop_split, phase_models
from .record import FunctionStats, Record
from .stats import gc_stats, memory_stats, phase_stats, time_split, training_step_count
from .timeline import step_timeline, training_series

SCHEMA = 1
MAX_WARNINGS_IN_REPORT = 50


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null, NumPy scalars plain numbers."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _warning_key(source: str, message: str) -> tuple[str, str]:
    """Warnings that differ only in numbers or addresses ("5 out of the last 5 calls to
    <function f at 0x7f...>") are one warning repeated."""
    return source, re.sub(r"0x[0-9a-fA-F]+|\d+", "#", message)


def _grouped_warnings(record: Record) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for w in record.warnings:
        key = _warning_key(w.source, w.message)
        group = groups.get(key)
        if group is None:
            groups[key] = {
                "source": w.source,
                "category": w.category,
                "message": w.message,
                "count": 1,
                "first_step": w.step,
            }
        else:
            group["count"] += 1
    ordered = sorted(groups.values(), key=lambda g: (-g["count"], g["first_step"]))
    return ordered[:MAX_WARNINGS_IN_REPORT]


def _reduced(record: Record) -> dict[str, int] | None:
    dropped = record.dropped
    if dropped is None or not record.reduced:
        return None
    return {"full_rows": dropped.full_rows, "stride": dropped.stride, "left_out": dropped.count}


def busy_machine_note(report: dict[str, Any]) -> str | None:
    """The line that says other programs kept the machine busy during the run, or None."""
    machine = report.get("machine")
    if not machine or not machine["busy"]:
        return None
    return (
        f"a busy machine: other programs kept {machine['other_programs_cpus']:.1f} of the"
        f" {machine['usable_cpus']} CPUs this process may use busy during the run; its times"
        " are slower than on a quiet machine and vary with them"
    )


def table_note(report: dict[str, Any]) -> str | None:
    """The line that says a long run's step table was reduced, and what stays exact."""
    reduced = report["steps"].get("reduced")
    if not reduced:
        return None
    return (
        f"steps past {reduced['full_rows']:,} are kept one in {reduced['stride']:,} in the "
        f"step table ({report['steps']['rows']:,} of {report['steps']['recorded']:,} rows); "
        "counts and totals are exact, medians and percentiles come from the kept rows"
    )


def build_report(
    record: Record,
    findings: list[Finding],
    *,
    comparison: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
    stored_as: str | None = None,
) -> dict[str, Any]:
    phases = phase_stats(record)
    split = time_split(record)
    memory = memory_stats(record)
    warnings = _grouped_warnings(record)
    traces = record.traces
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": {"name": "tfdiag_magic", "version": record.facts.get("tfdiag_magic")},
        "started_at": record.started_at,
        "wall_time": record.wall_time,
        "steps": {
            "count": training_step_count(record),
            "rows": record.step_count,
            "recorded": record.steps_recorded,
            "reduced": _reduced(record),
            "phases": {name: stats.to_dict() for name, stats in phases.items()},
            "phase_models": phase_models(record),
            "phase_loops": loop_split(record),
            "eager": sum(stats.eager_steps for stats in phases.values()),
        },
        "time_split": split.to_dict(),
        "timeline": step_timeline(record),
        "step_series": training_series(record),
        "memory": memory.to_dict(),
        "functions": [
            {
                **vars(f),
                "input_stages": [vars(stage).copy() for stage in f.input_stages],
                "nested_traces": _nested_traces(record, f),
            }
            for f in record.functions
        ],
        "tracing": {
            "count": sum(1 for t in traces if not t.nested),
            "nested": sum(1 for t in traces if t.nested),
            "time": sum(t.duration for t in traces if not t.nested),
            **_tracing_by_whose(traces),
            "events": [vars(t).copy() for t in traces[:200]],
        },
        "gc": gc_stats(record),
        "warnings": warnings,
        "warnings_total": len(record.warnings) + record.warnings_dropped,
        "loops": [
            {**vars(loop), "input_stages": [vars(stage).copy() for stage in loop.input_stages]}
            for loop in record.loops
        ],
        "gpu": {
            "tensorflow_gpus": record.facts.get("gpus", []),
            "nvml": record.facts.get("nvml"),
            "nvml_samples": int(record.nvml["time"].size) if "time" in record.nvml else 0,
        },
        "environment": record.facts,
        "machine": machine_during_run(record),
        "findings": [f.to_dict() for f in findings],
        "error": vars(record.error).copy() if record.error else None,
        "comparison": comparison,
        "sweep": sweep,
        "stored_as": stored_as,
        "ops": _ops(record),
    }
    return json_safe(report)


def _nested_traces(record: Record, function: FunctionStats) -> int:
    """Tracings of `function` that ran inside another tracing (a recursive function's levels,
    a helper traced with its caller): they build its caller's graph, not one a call of its own
    asked for."""
    return sum(t.nested and traced_from(t, function) for t in record.traces)


def _ops(record: Record) -> dict[str, Any] | None:
    """The ops window's summary; a window that was skipped or not read is its status alone."""
    capture = record.ops_window
    if capture is None:
        return None
    if capture.summary is not None:
        return capture.summary
    if capture.status == "captured":  # reading the trace failed: the problems say how
        return {"status": "unread", "note": "the trace could not be read (see problems)"}
    return {"status": capture.status, "note": capture.note}


def _tracing_by_whose(traces: list) -> dict[str, float | int]:
    """How many of the top-level tracings, and their seconds, were of functions TensorFlow or
    Keras defines (Keras' train functions, a distributed dataset's iterator functions, traced at
    each epoch) and of the functions the code gave tf.data transformations (traced once per
    pipeline built): the rest are the code's own tf.functions."""
    top = [t for t in traces if not t.nested]
    library = [t for t in top if t.library]
    datasets = [t for t in top if not t.library and t.of_a_pipeline]
    return {
        "library_count": len(library),
        "library_time": sum(t.duration for t in library),
        "dataset_count": len(datasets),
        "dataset_time": sum(t.duration for t in datasets),
    }
