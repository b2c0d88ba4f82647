"""The diagnosis: one module per finding code, each a pure function of a Record and the cell.

Every rule module holds ``CODE``, ``TITLE``, ``DOC`` (what it detects, why it hurts, the
evidence shown, the fix, and the threshold with where it comes from) and
``check(record, source) -> Finding | None``. `diagnose` runs them all; `explain` prints one
rule's documentation (``%tfprofile --explain CODE``, ``python -m tfdiag_magic explain CODE``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..findings import Finding
from ..record import Record
from .causes import link_causes
from .evidence import ProblemSink, problems_to, report_problem

RULE_MODULES: tuple[str, ...] = (
    "oom",
    "keras_multi_worker_fit",
    "device_config_too_late",
    "nonfinite_loss",
    "no_learning",
    "untracked_loss",
    "metric_on_logits",
    "batchnorm_training_mode",
    "last_batch_logs",
    "retracing",
    "eager_step",
    "repeated_keras_call",
    "keras_epoch_setup",
    "epoch_start_stall",
    "model_rebuilt_in_loop",
    "progressive_slowdown",
    "host_memory_growth",
    "device_memory_growth",
    "input_bound",
    "per_step_host_conversion",
    "python_preprocessing",
    "repeated_adapt_passes",
    "eager_model_calls",
    "small_batch",
    "slow_callback",
    "gc_pauses",
    "gpu_not_used",
    "memory_growth_disabled",
    "mixed_precision_available",
    # The doctor's rule, on the policy the run trained under (read at its end): a cell that
    # sets `mixed_float16` and trains on the CPU.
    "gpu_rules.mixed_precision_without_tensor_cores",
)


# Findings of a merged multi-worker job (`tfdiag_magic.jobs`), explained as a run's are.
JOB_RULE_MODULES: tuple[str, ...] = ("tfdiag_magic.jobs.straggler",)


def rules() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in RULE_MODULES]


def documented() -> list[ModuleType]:
    """Every finding's module, a run's and a merged job's, for `explain`."""
    return rules() + [importlib.import_module(name) for name in JOB_RULE_MODULES]


def codes() -> list[str]:
    return [rule.CODE for rule in rules()]


def diagnose(record: Record, on_problem: ProblemSink | None = None) -> list[Finding]:
    """Every finding of the run, most important first (errors, then by time at stake).

    A rule or a rewrite that fails is reported on stderr and to `on_problem(stage, error)`
    (the result's "Profiler problems"), and skipped: one broken rule must not cost the user the
    rest of the diagnosis or the record.
    """
    from ..rewrite.namespace import namespace_modules

    findings: list[Finding] = []
    with namespace_modules(record.facts.get("namespace_modules") or {}), problems_to(on_problem):
        for rule in rules():
            try:
                finding = rule.check(record, record.source)
            except Exception as exc:
                report_problem(f"the {rule.CODE} check", exc)
                continue
            if finding is not None:
                findings.append(finding)
    findings.sort(key=Finding.sort_key)
    try:
        return link_causes(record, findings)
    except Exception as exc:  # the findings stand without their links
        report_problem("linking findings to their causes", exc)
        return findings


class UnknownCodeError(LookupError):
    pass


def explain(code: str) -> str:
    """The documentation of the finding `code`, as text."""
    wanted = code.strip().lower().replace("_", "-")
    for rule in documented():
        if wanted == rule.CODE:
            return f"# {rule.CODE}: {rule.TITLE}\n\n{rule.DOC.strip()}\n"
    known = ", ".join(rule.CODE for rule in documented())
    raise UnknownCodeError(f"no finding has the code {code!r}; the codes are: {known}")
