"""gpu-not-used: a GPU is present but TensorFlow does not use it."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Record
from .evidence import rounded, training_rows
from .gpu_facts import join_phrases, nvml_devices, tf_gpus, tf_readable, without_run
from .gpu_rules.reasons import gpu_presence, no_gpu_reasons

CODE = "gpu-not-used"
TITLE = "A GPU is present but TensorFlow does not use it"
DOC = """\
## What it detects
Either the machine has a GPU (the NVIDIA driver lists one, or it is an Apple-silicon Mac) that
TensorFlow does not list — the CPU-only build `tensorflow-cpu`, CUDA libraries missing
(TensorFlow's log says "Cannot dlopen some GPU libraries"), `CUDA_VISIBLE_DEVICES` hiding it,
a driver older than the CUDA the build needs, a GPU older than the build's kernels, native
Windows after TensorFlow 2.10, macOS without tensorflow-metal —; or, in a profiled run,
TensorFlow lists a GPU but it sat idle while the model trained (ops placed on the CPU).

## Why it hurts
Training runs on the CPU, typically 10–100× slower for the models GPUs are bought for, while
the GPU waits. Nothing fails, so it goes unnoticed.

## Evidence we show
The GPUs NVML reports and those TensorFlow lists, and each reason found with its fix; for an
idle GPU, the highest utilization NVML sampled during training.

## Fix
The fix of each reason: install the GPU build (`pip install "tensorflow[and-cuda]"` on Linux)
in place of `tensorflow-cpu`, unset `CUDA_VISIBLE_DEVICES` before the kernel starts, update
the driver, use WSL2 on Windows; for an idle GPU, remove `tf.device("/CPU:0")` scopes.

## Threshold
A GPU present and none listed by TensorFlow: an error in `%tfgpu`, whose question it answers,
and a warning on a profiled run (which did run, on the CPU). An idle GPU: training ran for at
least 2 s and the highest NVML utilization sample during it was at most 5% (sampled every
0.1 s). Checked on recorded facts: this project's CI machine has no GPU.
"""

MIN_TRAINING_SECONDS = 2.0
MAX_IDLE_UTILIZATION = 5.0


def check(record: Record, source: str | None) -> Finding | None:
    del source
    facts = record.facts.get("gpu") or {}
    gpus = tf_gpus(record)
    if not tf_readable(record):
        return None
    if not gpus:
        presence = gpu_presence(facts) if facts else None
        if presence is None:
            return None
        reasons = no_gpu_reasons(facts)
        because = join_phrases([r["reason"] for r in reasons]) or "no reason found"
        return Finding(
            code=CODE,
            severity="error" if without_run(record) else "warning",
            title="TensorFlow cannot use the GPU",
            detail=f"TensorFlow sees no GPU although {presence}: {because}.",
            fix="\n".join(f"- {r['fix']}" for r in reasons),
            evidence={
                "nvml_gpus": [d.get("name") for d in nvml_devices(record)],
                "tensorflow_gpus": [],
                "built_with_cuda": record.facts.get("built_with_cuda"),
                "reason": because,
                "reasons": [r["code"] for r in reasons],
            },
        )
    return None if without_run(record) else _idle(record, len(gpus))


def _idle(record: Record, listed: int) -> Finding | None:
    """TensorFlow lists GPUs but NVML saw them idle while the run trained."""
    rows = training_rows(record)
    if rows.size == 0 or not record.nvml:
        return None
    steps = record.steps
    begin = float(steps["start"][rows[0]])
    end = float((steps["start"][rows] + steps["duration"][rows]).max())
    if end - begin < MIN_TRAINING_SECONDS:
        return None
    times = record.nvml.get("time", np.zeros(0))
    during = (times >= begin) & (times <= end)
    peaks = []
    for index in range(len(nvml_devices(record)) or listed):
        util = record.nvml.get(f"nvml{index}:util")
        if util is None:
            continue
        sampled = util[during[: util.size]] if util.size == during.size else util
        sampled = sampled[~np.isnan(sampled)]
        if sampled.size:
            peaks.append(float(sampled.max()))
    if not peaks or max(peaks) > MAX_IDLE_UTILIZATION:
        return None
    return Finding(
        code=CODE,
        severity="warning",
        title=f"TensorFlow lists {listed} GPU(s), but they stayed idle while it trained",
        detail=(
            f"For {end - begin:.1f} s of training the GPU utilization never rose above"
            f" {max(peaks):.0f}%: the ops ran on the CPU."
        ),
        fix="Look for `tf.device('/CPU:0')` scopes or `CUDA_VISIBLE_DEVICES` set inside the"
        " notebook; `tf.debugging.set_log_device_placement(True)` shows where each op runs.",
        evidence={
            "tensorflow_gpus": [g.get("name") for g in tf_gpus(record)],
            "training_seconds": rounded(end - begin),
            "max_utilization_percent": rounded(max(peaks)),
            "nvml_samples": int(during.sum()),
        },
    )
