"""The text report, for terminals and plain IPython: rendered from the JSON report dict.

A comparison (``--compare``) or a sweep (``--sweep``) comes first, under the headline.
"""

from __future__ import annotations

import textwrap
from typing import Any

from ..report import busy_machine_note, table_note
from ..units import evidence_text, failed_step, rate, seconds, share, size
from .experiments import comparison_text, insert_cell, sweep_text
from .ops import ops_text
from .timeline import timeline_text

# Measured (Keras 3.15): per model, fit/evaluate/predict reuse one train, test and predict
# function until the next compile(); one_step_on_data traces twice on its one call in a first
# fit, its first trace creating the optimizer's variables (TensorFlow's initialize_variables).
LIBRARY_FUNCTIONS = "Keras' and TensorFlow's own functions"
KERAS_FUNCTIONS_NOTE = (
    "Keras makes these itself: a train, a test and a predict function for each model, made"
    " again after each compile(), each traced on its first call and again for a new input"
    " shape (a last, smaller batch). The inner one_step_on_data is called only while its outer"
    " function traces, and traces once or twice then (twice when the call creates the"
    " optimizer's variables), so its traces match or pass its calls. These tracings are"
    " expected: they are not retracing of your code. TensorFlow's own (a saver's"
    " _traced_save and _traced_restore) trace when a model is saved or exported."
)


def split_functions(
    report: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The called tf.functions of the report: the code's own, then those Keras or TensorFlow
    made itself."""
    called = [f for f in report["functions"] if f["calls"]]
    return (
        [f for f in called if not f["keras_internal"]],
        [f for f in called if f["keras_internal"]],
    )


def traced_on_most_calls(function: dict[str, Any]) -> bool:
    """A function of the code that traced on most (more than half) of five or more calls, its
    tracings inside another tracing (a recursive function's levels) left out."""
    own = function["traces"] - function.get("nested_traces", 0)
    return function["calls"] >= 5 and own * 2 > function["calls"]


def short_name(qualname: str) -> str:
    """``TensorFlowTrainer._make_function.<locals>.one_step_on_data`` -> its last part."""
    return qualname.rsplit(".", 1)[-1]


def headline(report: dict[str, Any]) -> str:
    steps = report["steps"]
    phases = steps["phases"]
    parts = [f"{steps['count']} training step{'s' if steps['count'] != 1 else ''}"]
    for name in ("eval", "predict", "function", "loop"):
        if name in phases:
            label = {"loop": "loop iterations", "function": "function calls"}.get(name, name)
            parts.append(f"{phases[name]['count']} {label}")
    line = f"{', '.join(parts)} in {seconds(report['wall_time'])}"
    sweep = report.get("sweep")
    if sweep and sweep.get("shown"):
        line = (
            f"sweep of {sweep['variable']} over {len(sweep['rows'])} values; "
            f"{sweep['variable']}={sweep['shown']}: {line}"
        )
    error = report.get("error")
    if error:
        where = f" in {failed_step(error['phase'], error['step'])}" if error.get("phase") else ""
        line += f"; stopped by {error['type']}{where}"
    worker = (report.get("environment") or {}).get("worker")
    if worker:
        line = f"{worker_name(worker)} of a {worker['workers']}-worker job: {line}"
    return line


def worker_name(worker: dict[str, Any]) -> str:
    """``worker 1``, ``chief 0``: a worker of a multi-worker job by its task type and index."""
    return f"{worker['task_type']} {worker['task_index']}"


def _split_rows(
    split: dict[str, Any] | None, part: str = "models", key: str = "model"
) -> list[str]:
    """A phase's rows per Keras model (`phase_models`) or per loop (`loop_split`), under the
    phase's own."""
    if not split:
        return []
    lines = []
    for m in split[part]:
        median = seconds(m["median"]) if m["steady_count"] else seconds(m["median_all"]) + "*"
        warm = f"{m['warmup_count']} ({seconds(m['warmup_time'])})"
        label = f"model {m['model']}" if key == "model" else m[key]
        lines.append(
            f"{'  ·':<9}{m['count']:>8}{median:>11}{seconds(m['p90']):>11}"
            f"{rate(m['steps_per_second']):>10}  {warm:<15} {label}"
        )
    more = split["count"] - len(split[part])
    if more > 0:
        lines.append(f"  · and {more} more {part}")
    return lines


def whose_traces(tracing: dict[str, Any]) -> str:
    """`` (12 of functions TensorFlow or Keras defines, 1.20 s; 3 of functions given to tf.data
    transformations, 40.00 ms)``:
    whose functions the traces were, where some were not the code's own tf.functions (reports
    written before the counts have none)."""
    parts = []
    if tracing.get("library_count"):
        parts.append(
            f"{tracing['library_count']} of functions TensorFlow or Keras defines,"
            f" {seconds(tracing['library_time'])}"
        )
    if tracing.get("dataset_count"):
        parts.append(
            f"{tracing['dataset_count']} of functions given to tf.data transformations,"
            f" {seconds(tracing['dataset_time'])}"
        )
    return f" ({'; '.join(parts)})" if parts else ""


def render_text(report: dict[str, Any]) -> str:
    out: list[str] = [f"tfdiag_magic: {headline(report)}", ""]
    if report.get("comparison"):
        out.extend(comparison_text(report["comparison"]))
        out.append("")
    if report.get("sweep"):
        out.extend(sweep_text(report["sweep"]))
        out.append("")
    phases = report["steps"]["phases"]
    if phases:
        out.append(f"{'phase':<9}{'steps':>8}{'median':>11}{'p90':>11}{'steps/s':>10}  warm-up")
        by_model = report["steps"].get("phase_models") or {}
        for name, p in phases.items():
            warm = f"{p['warmup_count']} ({seconds(p['warmup_time'])})"
            fused = f"  [{p['fused']} steps per call]" if p["fused"] > 1 else ""
            median = seconds(p["median"]) if p["steady_count"] else seconds(p["median_all"]) + "*"
            out.append(
                f"{name:<9}{p['count']:>8}{median:>11}{seconds(p['p90']):>11}"
                f"{rate(p['steps_per_second']):>10}  {warm}{fused}"
            )
            out.extend(_split_rows(by_model.get(name)))
            if name == "loop":
                out.extend(_split_rows(report["steps"].get("phase_loops"), "loops", "loop"))
        out.append("  (median and p90: steady state, warm-up steps excluded)")
        note = table_note(report)
        if note:
            out.append(f"  ({note})")
        if any(not p["steady_count"] for p in phases.values()):
            out.append("  * every step of the phase was warm-up (it traced): median of all steps")
    else:
        out.append("No steps were recorded.")
    split = report["time_split"]
    wall = split["wall"]
    parts = ", ".join(
        f"{name} {share(value, wall)} ({seconds(value)})" if value is not None else f"{name} –"
        for name, value in split_parts(split)
    )
    out.append("")
    out.append(f"Time: {parts}")
    if split.get("data_wait_note"):
        out.append(f"  (data wait: {split['data_wait_note']})")
    busy = busy_machine_note(report)
    if busy:
        out.append(f"  ({busy})")
    out.extend(timeline_text(report.get("timeline")))
    out.extend(ops_text(report.get("ops")))
    memory = report["memory"]
    if memory["host_rss"]:
        m = memory["host_rss"]
        out.append(
            f"Host memory (RSS): start {size(m['start'])}, peak {size(m['peak'])}, "
            f"end {size(m['end'])}"
        )
    for device, m in memory["gpu"].items():
        out.append(
            f"{device} memory (TensorFlow): start {size(m['start'])}, peak {size(m['peak'])}, "
            f"end {size(m['end'])}"
        )
    gpu = report["gpu"]
    if not gpu["tensorflow_gpus"]:
        out.append(f"GPU: TensorFlow sees none ({gpu['nvml']}).")
    mine, keras_own = split_functions(report)
    if mine:
        out.append("")
        out.append("tf.functions of the code (calls, traces in this run):")
        for f in mine[:8]:
            objects = f", {f['objects']} function objects" if f["objects"] > 1 else ""
            again = "  <- traced again on most calls" if traced_on_most_calls(f) else ""
            out.append(f"  {f['name']}: {f['calls']} calls, {f['traces']} traces{objects}{again}")
    if keras_own:
        out.append("")
        out.append(f"{LIBRARY_FUNCTIONS} (calls, traces in this run):")
        for f in keras_own[:6]:
            objects = f", {f['objects']} function objects" if f["objects"] > 1 else ""
            out.append(
                f"  {short_name(f['name'])}: {f['calls']} calls, {f['traces']} traces{objects}"
            )
        out.extend(
            textwrap.wrap(KERAS_FUNCTIONS_NOTE, 96, initial_indent="  (", subsequent_indent="   ")
        )
        out[-1] += ")"
    tracing = report["tracing"]
    if tracing["count"]:
        out.append(
            f"Tracing: {tracing['count']} traces took {seconds(tracing['time'])}"
            + whose_traces(tracing)
        )
    gc = report["gc"]
    if gc["collections"]:
        out.append(
            f"Python GC: {gc['collections']} collections, {seconds(gc['pause_time'])} paused "
            f"({100 * gc['share']:.1f}% of the run)"
        )
    ran = [loop for loop in report["loops"] if loop.get("iterations", 1)]
    if ran:  # a loop that never ran (the cell stopped before it) is no loop of this run
        out.append("")
        out.append("Loops of the code:")
        out.extend(f"  line {loop['lineno']}: {loop['source']}{_loop_times(loop)}" for loop in ran)
    if report["warnings"]:
        out.append("")
        out.append(f"Warnings ({report['warnings_total']}):")
        for w in report["warnings"][:SHOWN_WARNINGS]:
            first = w["message"].strip().splitlines()[0] if w["message"].strip() else ""
            count = f" ×{w['count']}" if w["count"] > 1 else ""
            out.append(f"  [{w['source']}] {first[:160]}{count}")
        hidden = report["warnings"][SHOWN_WARNINGS:]
        if hidden:
            kinds = "kind" if len(hidden) == 1 else "kinds"
            out.append(f"  … {len(hidden)} more {kinds} (the report's `warnings`)")
    if report["findings"]:
        out.append("")
        out.append(f"Findings ({len(report['findings'])}), most important first:")
        for index, f in enumerate(report["findings"]):
            out.extend(finding_lines(index, f, report))
        if report.get("combined_rewrite"):
            out.append("")
            out.append("Every fix in one cell (result.combined_rewrite), root causes first:")
            diff = (report.get("combined_diff") or "").rstrip("\n").splitlines()
            out.extend("      " + line for line in diff[:MAX_DIFF_LINES])
            if len(diff) > MAX_DIFF_LINES:
                out.append(f"      … {len(diff) - MAX_DIFF_LINES} more lines")
    error = report.get("error")
    if error:
        out.append("")
        out.append(f"Error: {error['type']}: {error['message'].strip()[:400]}")
        out.append("  (the record above holds everything up to it)")
    return "\n".join(out)


MAX_DIFF_LINES = 60
SHOWN_WARNINGS = 5  # kinds of warning listed; the report holds them all


def _evidence_text(evidence: dict[str, Any]) -> str:
    parts = []
    for key, value in evidence.items():
        if value is None or value == [] or value == {}:
            continue
        parts.append(f"{key} {evidence_text(key, value)}")
    return "; ".join(parts)


def finding_lines(index: int, finding: dict[str, Any], report: dict[str, Any]) -> list[str]:
    cause = finding.get("caused_by")
    if cause:  # a consequence, shown under its cause
        lines = [
            f"    ↳ {finding['severity'].upper()} {finding['code']}: {finding['title']}",
            f"      caused by {cause}: fixing that fixes this",
        ]
        wrap = textwrap.TextWrapper(width=96, initial_indent="      ", subsequent_indent="      ")
    else:
        lines = [f"  {finding['severity'].upper()} {finding['code']}: {finding['title']}"]
        wrap = textwrap.TextWrapper(width=96, initial_indent="    ", subsequent_indent="    ")
    if finding.get("detail"):
        lines.extend(wrap.wrap(finding["detail"]))
    evidence = _evidence_text(finding.get("evidence") or {})
    if evidence:
        lines.extend(wrap.wrap("Evidence: " + evidence))
    if finding.get("fix"):
        lines.extend(wrap.wrap("Fix: " + finding["fix"]))
    if finding.get("diff"):
        lines.append(f"    Rewritten cell (result.findings[{index}].rewrite):")
        diff = finding["diff"].rstrip("\n").splitlines()
        lines.extend("      " + line for line in diff[:MAX_DIFF_LINES])
        if len(diff) > MAX_DIFF_LINES:
            lines.append(f"      … {len(diff) - MAX_DIFF_LINES} more lines")
    elif finding.get("rewrite"):
        lines.append(f"    Cell to run (result.findings[{index}].rewrite):")
        lines.extend("      " + line for line in finding["rewrite"].splitlines()[:MAX_DIFF_LINES])
    if finding.get("rewrite"):
        first = insert_cell(report, "").splitlines()
        if first:
            lines.append(f"    Measure the fix: run the rewritten cell under `{first[0]}`.")
    lines.append(f"    More: %tfprofile --explain {finding['code']}")
    return lines


# The time split's parts shown only where there were any: (key in the report, label).
OPTIONAL_PARTS = (
    ("tracing", "tracing"),
    ("callbacks", "callbacks"),
    ("epoch_setup", "epoch set-up"),  # Keras' own work between a fit's epochs
)


def split_parts(split: dict[str, Any]) -> list[tuple[str, float | None]]:
    """The time split's parts, largest first, as (label, seconds): compute, tracing, data
    wait, callbacks, Keras' epoch set-up, other; data wait is None (last) where it was not
    measured. Tracing, callbacks and epoch set-up are left out where there were none (and in
    reports written before them)."""
    parts: list[tuple[str, float | None]] = [("compute", split["compute"])]
    for key, label in OPTIONAL_PARTS:
        if split.get(key):
            parts.append((label, split[key]))
    parts.append(("other", split["other"]))
    parts.append(("data wait", split["data_wait"] if split["data_wait_observable"] else None))
    measured = [(name, value) for name, value in parts if value is not None]
    measured.sort(key=lambda part: -(part[1] or 0.0))
    return measured + [(name, value) for name, value in parts if value is None]


# A loop's iterator released in this long, over its runs, is shown: a tf.data iterator's
# destructor that waits for its autotune thread took 4.6-5 s an epoch in a guide's eager loop.
RELEASE_SHOWN_S = 0.05


def _loop_times(loop: dict[str, Any]) -> str:
    """A loop's iterations, the time in its bodies and in waits for its items, and how much
    of that its thread was on the CPU: ``" (100 iterations; bodies 1.50 s, waits 5.79 s; its
    thread on the CPU 2%)"`` ("" when the report has none of them)."""
    count = loop.get("iterations")
    parts = []
    if isinstance(count, int):
        parts.append(f"{count:,} {'iteration' if count == 1 else 'iterations'}")
    body, wait = loop.get("seconds"), loop.get("wait")
    if isinstance(body, float) and isinstance(wait, float):
        parts.append(f"bodies {seconds(body)}, waits {seconds(wait)}")
        cpu = loop.get("cpu_seconds", -1.0)
        if isinstance(cpu, float) and cpu >= 0 and body + wait > 0:
            parts.append(f"its thread on the CPU {share(min(cpu, body + wait), body + wait)}")
    release = loop.get("release_seconds")
    if isinstance(release, float) and release >= RELEASE_SHOWN_S:
        parts.append(f"releasing its iterator after the last item {seconds(release)}")
    return f" ({'; '.join(parts)})" if parts else ""
