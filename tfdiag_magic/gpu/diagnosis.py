"""The GPU doctor's diagnosis: the problems and the verdict ``%tfgpu`` shows, from the facts.

The checks are rule modules (`diagnose.gpu_rules.DOCTOR_RULES`), three of them the very rules
``%%tfprofile`` runs, so both give the same advice. Each problem is a finding as a dict:
``{"code", "severity" ("error" | "warning" | "info"), "title", "message", "fix", "evidence"}``.
"""

from __future__ import annotations

from typing import Any

from ..diagnose.gpu_facts import facts_record, gib, gpu_capability, gpu_memory_total, join_phrases
from ..diagnose.gpu_rules import doctor_rules
from ..diagnose.gpu_rules.reasons import no_gpu_reasons
from ..findings import SEVERITY_ORDER

Facts = dict[str, Any]
Problem = dict[str, Any]


def problems(facts: Facts) -> list[Problem]:
    """Every problem the facts show, errors first."""
    record = facts_record(facts)
    found = [f for f in (rule.check(record, None) for rule in doctor_rules()) if f is not None]
    found.sort(key=lambda f: SEVERITY_ORDER.get(f.severity, 3))
    return [
        {
            "code": f.code,
            "severity": f.severity,
            "title": f.title,
            "message": f.detail,
            "fix": f.fix,
            "evidence": f.evidence,
        }
        for f in found
    ]


def _describe_gpus(facts: Facts, gpus: list[dict[str, Any]]) -> str:
    record = facts_record(facts)
    groups: dict[tuple[str, str], int] = {}
    for index, gpu in enumerate(gpus):
        cc = gpu_capability(record, index, gpu)
        key = (
            gpu.get("device_name") or "name unknown",
            f", compute capability {cc[0]}.{cc[1]}" if cc else "",
        )
        groups[key] = groups.get(key, 0) + 1
    return "; ".join((f"{n} × " if n > 1 else "") + name + cc for (name, cc), n in groups.items())


def verdict(facts: Facts, found: list[Problem] | None = None) -> str:
    """One or two sentences: what TensorFlow can use, and the most important thing to fix."""
    tf = facts.get("tensorflow") or {}
    found = problems(facts) if found is None else found
    if not tf.get("available", True):
        return f"TensorFlow cannot be imported in this Python ({tf.get('error')})."
    gpus = [g for g in tf.get("gpus") or [] if g.get("visible", True)]
    codes = {p["code"] for p in found}
    if not gpus:
        reasons = join_phrases([r["reason"] for r in no_gpu_reasons(facts)])
        first = f"No GPU is visible to TensorFlow{': ' + reasons if reasons else ''}."
    else:
        count = len(gpus)
        first = (
            f"TensorFlow sees {count} GPU{'s' if count > 1 else ''} ({_describe_gpus(facts, gpus)})"
        )
        off = [g for g in gpus if g.get("memory_growth") is not True]
        env = facts.get("env") or {}
        if "memory-growth-disabled" not in codes:
            forced = str(env.get("TF_FORCE_GPU_ALLOW_GROWTH") or "").lower() == "true"
            first += (
                "; memory growth is on."
                if not off or forced
                else "; the cuda_malloc_async allocator takes GPU memory as it needs it."
            )
        else:
            totals = {gpu_memory_total(facts_record(facts), g) for g in off}
            amount = "their memory" if count > 1 else "its memory"
            if len(totals) == 1 and None not in totals and count == 1:
                amount = f"its {gib(totals.pop())}"
            reserve = "has reserved" if tf.get("initialized") else "will reserve"
            first += f"; memory growth is off, so TensorFlow {reserve} almost all of {amount}."
    skip = {"gpu-not-used", "no-gpu", "memory-growth-disabled"}
    urgent = [p["title"] for p in found if p["severity"] != "info" and p["code"] not in skip]
    return f"{first} Also: {'; '.join(urgent)}." if urgent else first
