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
- ``host-memory-growth`` → ``progressive-slowdown``: what the run keeps per step is also what
  it works on per step (a tensor concatenated onto, a list of tensors stacked or walked), so
  the steps take longer as it grows. Linked when the slowed steps and the growth are in the
  same place (the loop, or the line, the growth was measured in) and the windows' step times
  rise with the memory sampled in them (rank correlation at least
  `MIN_MEMORY_RANK_CORRELATION`), and nothing else found explains both (retracing, models
  built in a loop).
"""

from __future__ import annotations

import ast

from ..findings import Finding
from ..record import Record
from ..units import size
from .evidence import rounded

MIN_TRACES_PER_STEP = 0.5
MAX_BYTES_PER_TRACE = 64 * 1024 * 1024  # a graph with its function: kilobytes to megabytes
MIN_MEMORY_RANK_CORRELATION = 0.8
# Findings that would explain a slowdown and a memory growth together, linked first if at all.
BOTH_EXPLAINED_BY = ("retracing", "model-rebuilt-in-loop")


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
    slowdown = by_code.get("progressive-slowdown")
    memory = by_code.get("host-memory-growth")
    if (
        slowdown is not None
        and memory is not None
        and slowdown.caused_by is None
        and memory.caused_by is None
        and not any(code in by_code for code in BOTH_EXPLAINED_BY)
    ):
        _link_slowdown_to_memory(slowdown, memory, record.source)
    return _after_their_causes(findings)


def _link_slowdown_to_memory(slowdown: Finding, memory: Finding, source: str | None) -> None:
    rho = slowdown.evidence.get("memory_rank_correlation")
    where = slowdown.evidence.get("where")
    if not isinstance(rho, (int, float)) or rho < MIN_MEMORY_RANK_CORRELATION or where is None:
        return
    if where not in (memory.evidence.get("where"), memory.evidence.get("where_line")):
        return
    grown = growing_in_loops(source)
    if not grown:
        return  # two trends side by side; nothing shows the steps work on what is kept
    _link(slowdown, memory, {"grown_each_iteration": grown})
    names = ", ".join(f"`{name}`" for name in grown)
    slowdown.detail += (
        f" It slowed as the memory grew, in the same place ({where}; rank correlation"
        f" {rho:.2f} of the step times with the memory over the run), and the loop works on"
        f" what it keeps: {names} grows on every iteration and is copied or walked whole"
        " each time. Keep less per step (or collect once, after the loop) and both go."
    )
    slowdown.fix = "Keep less per step (see `host-memory-growth`): " + slowdown.fix


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


# Calls that return their input with more appended: `x = tf.concat([x, y], 0)` copies all of x.
GROWING_CALLS = frozenset({"concat", "concatenate", "append", "vstack", "hstack", "stack"})
# Calls that read a list without walking it.
CONSTANT_TIME_CALLS = frozenset({"len", "print", "id", "type", "isinstance", "bool"})


def growing_in_loops(source: str | None) -> list[str]:
    """Names a loop of `source` grows on every iteration and works on whole each time: a
    tensor or array rebuilt from itself (``x = tf.concat([x, y], 0)``, ``np.append(x, y)``),
    or a list appended to and also passed whole to a call in the same loop
    (``kept.append(t); tf.stack(kept)``)."""
    if not source:
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[str] = []
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.While, ast.AsyncFor)):
            continue
        appended: set[str] = set()
        walked: set[str] = set()
        for node in ast.walk(loop):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                call = node.value
                targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if _call_name(call) in GROWING_CALLS:
                    used = {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
                    found.extend(sorted(targets & used))
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr == "append":
                    if isinstance(func.value, ast.Name):
                        appended.add(func.value.id)
                    continue
                if _call_name(node) not in CONSTANT_TIME_CALLS:
                    walked.update(a.id for a in node.args if isinstance(a, ast.Name))
        found.extend(sorted(appended & walked))
    return list(dict.fromkeys(found))


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


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
