"""The GPU doctor's rules (``%tfgpu``): one module per code, shaped like the rules of `diagnose`.

`DOCTOR_RULES` lists every check ``%tfgpu`` runs, in order. Three of them are the run's rules
(``gpu_not_used``, ``memory_growth_disabled``, ``mixed_precision_available`` in `diagnose`), so
``%tfgpu`` and ``%%tfprofile`` give their advice from the same code; the others need only the
machine's facts and live here. Each rule's `check(record, source)` reads the facts through
`diagnose.gpu_facts`; ``%tfgpu`` hands it `gpu_facts.facts_record(facts)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ...findings import Finding

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
    return Finding(
        code=code, severity=severity, title=title, detail=detail, fix=fix, evidence=evidence
    )  # type: ignore[arg-type]
