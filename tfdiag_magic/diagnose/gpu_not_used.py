"""gpu-not-used: a GPU is present but TensorFlow does not use it."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Record
from .evidence import rounded, training_rows
from .gpu_facts import doctor_problems, nvml_devices, nvml_series, tf_gpus

CODE = "gpu-not-used"
TITLE = "A GPU is present but TensorFlow does not use it"
DOC = """\
## What it detects
Either the NVIDIA driver reports a GPU that TensorFlow does not list (the CPU-only build
`tensorflow-cpu` is installed, CUDA libraries are missing — TensorFlow's log then says "Cannot
dlopen some GPU libraries" —, `CUDA_VISIBLE_DEVICES` hides it, the driver is older than the
CUDA the build needs, native Windows after TensorFlow 2.10, macOS without tensorflow-metal);
or TensorFlow lists a GPU but it sat idle while the model trained (ops placed on the CPU, a
`with tf.device("/CPU:0")`, `CUDA_VISIBLE_DEVICES` set in the cell after TensorFlow started).

## Why it hurts
Training runs on the CPU, typically 10–100× slower for the models GPUs are bought for, while
the GPU waits. Nothing fails, so it goes unnoticed.

## Evidence we show
The GPUs the driver (NVML) reports and those TensorFlow lists; when TensorFlow has one, the GPU
utilization NVML sampled during training; the reason found by `%tfgpu`.

## Fix
Run `%tfgpu` for the full diagnosis. Install the GPU build (`pip install
"tensorflow[and-cuda]"` on Linux) in place of `tensorflow-cpu`; unset `CUDA_VISIBLE_DEVICES`
before the kernel starts; update the driver; on Windows use WSL2.

## Threshold
NVML reports at least one GPU and TensorFlow lists none; or TensorFlow lists GPUs, training ran
for at least 2 s, and the highest NVML utilization sample during it was at most 5% (sampled
every 0.1 s). Checked on recorded facts: this project's CI machine has no GPU.
"""

MIN_TRAINING_SECONDS = 2.0
MAX_IDLE_UTILIZATION = 5.0


def check(record: Record, source: str | None) -> Finding | None:
    del source
    devices = nvml_devices(record)
    gpus = tf_gpus(record)
    if devices and not gpus:
        reasons = doctor_problems(record, CODE)
        reason = reasons[0]["message"] if reasons else _reason(record)
        fix = reasons[0].get("fix") if reasons else None
        names = [d.get("name") for d in devices]
        listed = ", ".join(str(n) for n in names)
        return Finding(
            code=CODE,
            severity="warning",
            title=f"The driver reports {len(devices)} GPU(s) but TensorFlow sees none",
            detail=f"NVML lists {listed}; TensorFlow lists no GPU. {reason}",
            fix=fix
            or "Run `%tfgpu` for the reason; install the GPU build of TensorFlow in place of"
            " tensorflow-cpu.",
            evidence={
                "nvml_gpus": names,
                "tensorflow_gpus": [],
                "built_with_cuda": record.facts.get("built_with_cuda"),
                "reason": reason,
            },
        )
    if not gpus or not record.nvml:
        return None
    rows = training_rows(record)
    if rows.size == 0:
        return None
    steps = record.steps
    begin = float(steps["start"][rows[0]])
    end = float((steps["start"][rows] + steps["duration"][rows]).max())
    if end - begin < MIN_TRAINING_SECONDS:
        return None
    times = record.nvml.get("time", np.zeros(0))
    during = (times >= begin) & (times <= end)
    peaks = []
    for index in range(len(devices) or len(gpus)):
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
        title=f"TensorFlow lists {len(gpus)} GPU(s), but they stayed idle while it trained",
        detail=(
            f"For {end - begin:.1f} s of training the GPU utilization never rose above"
            f" {max(peaks):.0f}%: the ops ran on the CPU."
        ),
        fix="Look for `tf.device('/CPU:0')` scopes or `CUDA_VISIBLE_DEVICES` set inside the"
        " notebook; `tf.debugging.set_log_device_placement(True)` shows where each op runs.",
        evidence={
            "tensorflow_gpus": [g.get("name") for g in gpus],
            "training_seconds": rounded(end - begin),
            "max_utilization_percent": rounded(max(peaks)),
            "nvml_samples": int(during.sum()),
        },
    )


def _reason(record: Record) -> str:
    if record.facts.get("built_with_cuda") is False:
        return "This TensorFlow is built without CUDA (the CPU-only build)."
    return "TensorFlow is built with CUDA but found no usable GPU (see `%tfgpu`)."


__all__ = ["CODE", "DOC", "TITLE", "check", "nvml_series"]
