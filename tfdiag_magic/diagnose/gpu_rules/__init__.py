"""The GPU doctor (``%tfgpu``): its rules, one module per code shaped like those of `diagnose`,
and `problems` and `verdict`, what ``%tfgpu`` shows.

`DOCTOR_RULES` lists every check ``%tfgpu`` runs, in order. Three of them are the run's rules
(``gpu_not_used``, ``memory_growth_disabled``, ``mixed_precision_available`` in `diagnose`), so
``%tfgpu`` and ``%%tfprofile`` give their advice from the same code; the others need only the
machine's facts and live here. Each rule's `check(record, source)` reads the facts through
`diagnose.gpu_facts`; ``%tfgpu`` hands it `gpu_facts.facts_record(facts)`. A problem is a
finding as a dict: ``{"code", "severity", "title", "message", "fix", "evidence"}``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ...findings import SEVERITY_ORDER, Finding
from ..gpu_facts import facts_record, gib, gpu_capability, gpu_memory_total, join_phrases

Facts = dict[str, Any]
Problem = dict[str, Any]

DOCTOR_RULES: tuple[str, ...] = (
    "gpu_rules.tensorflow_missing",
    "gpu_rules.tensorflow_facts_unreadable",
    "gpu_not_used",
    "gpu_rules.no_gpu",
    "gpu_rules.driver_older_than_build",
    "gpu_rules.several_tensorflow_builds",
    "memory_growth_disabled",
    "mixed_precision_available",
    "gpu_rules.mixed_precision_without_tensor_cores",
    "gpu_rules.pcie_link_degraded",
    "gpu_rules.gpu_shared",
    "gpu_rules.gpu_clocks_throttled",
    "gpu_rules.gpu_power_capped",
    "gpu_rules.gpu_memory_errors",
)


def doctor_rules() -> list[ModuleType]:
    """The rule modules of `DOCTOR_RULES`."""
    package = __name__.rsplit(".", 1)[0]
    return [importlib.import_module(f"{package}.{name}") for name in DOCTOR_RULES]


def per_device(
    code: str, severity: str, found: list[tuple[str, str, str, dict[str, Any]]]
) -> Finding | None:
    """One finding for the GPUs that show a problem, from (title, detail, fix, evidence) per
    GPU: the first GPU's title and evidence, every GPU's detail."""
    if not found:
        return None
    title, _, fix, evidence = found[0]
    if len(found) > 1:
        title += f" (and {len(found) - 1} more GPU(s))"
        evidence = {**evidence, "more": [e for *_, e in found[1:]]}
    detail = " ".join(d for _, d, _, _ in found)
    return Finding(code, severity, title, detail, fix, evidence)  # type: ignore[arg-type]


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
        from .reasons import no_gpu_reasons

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
