"""Root causes: when one finding explains another, the consequence names its cause.

Each link rests on a measured relation between the two, added to the consequence's evidence;
without it the findings stay side by side. Links known:

- ``retracing`` → ``host-memory-growth``: every tracing keeps a new concrete function and its
  graph. Linked when the retraced function traced on at least half of the training steps
  (so tracings and steps rise together, as memory does) and the memory kept per tracing is
  what a graph costs (under `MAX_BYTES_PER_TRACE`); the evidence gains ``traces_per_step``
  and ``bytes_per_trace``, and the consequence's own rewrite (keep numbers, not tensors) is
  withdrawn: the cause's fixes it.
- ``retracing`` → ``progressive-slowdown``: the steps get slower while the function keeps
  tracing at the same rate (a growing cache of graphs to look up, tracing inside steps).
"""

from __future__ import annotations

from ..findings import Finding
from ..record import Record
from ..units import size
from .evidence import rounded

MIN_TRACES_PER_STEP = 0.5
MAX_BYTES_PER_TRACE = 64 * 1024 * 1024  # a graph with its function: kilobytes to megabytes


def link_causes(record: Record, findings: list[Finding]) -> list[Finding]:
    """Set `caused_by` where a finding explains another; returns the findings with each
    consequence placed right after its cause (the order otherwise kept)."""
    by_code = {finding.code: finding for finding in findings}
    retracing = by_code.get("retracing")
    if retracing is not None:
        per_step = _traces_per_step(record, retracing)
        if per_step is not None and per_step >= MIN_TRACES_PER_STEP:
            memory = by_code.get("host-memory-growth")
            if memory is not None:
                _link_memory(memory, retracing, per_step)
            slowdown = by_code.get("progressive-slowdown")
            if slowdown is not None:
                _link(slowdown, retracing, {"traces_per_step": rounded(per_step, 3)})
    return _after_their_causes(findings)


def _traces_per_step(record: Record, retracing: Finding) -> float | None:
    """Tracings of the retraced function per training step of the run."""
    traces = retracing.evidence.get("traces")
    steps = int(record.phase_total("count", "train"))
    if not isinstance(traces, int) or steps <= 0:
        return None
    return traces / steps


def _link_memory(memory: Finding, retracing: Finding, per_step: float) -> None:
    per_step_bytes = memory.evidence.get("bytes_per_step")
    if not isinstance(per_step_bytes, (int, float)) or per_step_bytes <= 0:
        return
    per_trace = per_step_bytes / per_step
    if per_trace > MAX_BYTES_PER_TRACE:
        return  # more than graphs: something else is kept per step
    _link(
        memory,
        retracing,
        {"traces_per_step": rounded(per_step, 3), "bytes_per_trace": rounded(per_trace)},
    )
    function = retracing.evidence.get("function")
    memory.detail += (
        f" The growth is the retracing's: `{function}` traced on {per_step:.0%} of the steps,"
        f" and each tracing keeps a new graph ({size(per_trace)} per tracing here). Fix the"
        " retracing and this growth goes with it."
    )
    memory.fix = f"Fix the retracing of `{function}` (see `retracing`)."
    memory.rewrite = memory.diff = None  # the cause's rewrite is the fix
    memory.severity = "info"


def _link(consequence: Finding, cause: Finding, evidence: dict[str, object]) -> None:
    consequence.caused_by = cause.code
    consequence.evidence.update(evidence)


def _after_their_causes(findings: list[Finding]) -> list[Finding]:
    placed: list[Finding] = []
    for finding in findings:
        if finding.caused_by is None or all(f.code != finding.caused_by for f in findings):
            placed.append(finding)
            placed.extend(f for f in findings if f.caused_by == finding.code)
    seen = {id(f) for f in placed}
    return placed + [f for f in findings if id(f) not in seen]
