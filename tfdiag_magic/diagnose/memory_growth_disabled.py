"""memory-growth-disabled: TensorFlow reserved (almost) all of a GPU's memory up front."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record
from ..rewrite import MEMORY_GROWTH_CELL, memory_growth_first
from ..stats import memory_stats
from ..units import size
from .evidence import rewrite, rounded, with_rewrite
from .gpu_facts import (
    env,
    gib,
    gpu_label,
    gpu_memory_total,
    growth_forced,
    nvml_devices,
    nvml_series,
    section,
    tf_gpus,
    tf_readable,
    without_run,
)

CODE = "memory-growth-disabled"
TITLE = "TensorFlow reserved all GPU memory up front"
DOC = """\
## What it detects
TensorFlow uses a GPU with memory growth off (the default): on start its allocator reserves
nearly all of the GPU's memory, whatever the model needs. NVML then shows the GPU "full"
while TensorFlow's own allocator reports that only a fraction is in use.

## Why it hurts
Nothing else can use that GPU: a second notebook, a second process of a workshop participant
on a shared GPU, or PyTorch in the same kernel fail with out-of-memory. It does not slow
TensorFlow itself down, and it is not fragmentation: `set_memory_growth` only changes how much
is reserved up front (it grows the reservation as needed instead).

## Evidence we show
Per GPU: the memory NVML reports in use, the GPU's total, and the peak TensorFlow's allocator
had in use during the run.

## Fix
In the first cell of the notebook, before anything uses TensorFlow:
`for gpu in tf.config.list_physical_devices("GPU"):`
`tf.config.experimental.set_memory_growth(gpu, True)`,
or set `TF_FORCE_GPU_ALLOW_GROWTH=true` before the kernel starts. Once TensorFlow has started
in a kernel the setting cannot change: restart the kernel.

## Threshold
Memory growth not on (off, or not set: the default) for a GPU TensorFlow uses,
`TF_FORCE_GPU_ALLOW_GROWTH` not `true` and `TF_GPU_ALLOCATOR` not `cuda_malloc_async` (that
allocator grows its pool as needed). `%tfgpu`, before or without a run, warns on that alone: it
is the moment the setting can still be chosen. After a profiled run it is an info note, and only
where NVML reported at least 90% of the GPU's memory in use while the allocator's peak was under
half of it: it matters when the GPU is shared. Checked on recorded facts.
"""

MIN_RESERVED = 0.9
MAX_USED = 0.5


def fix_text(initialized: bool) -> str:
    """The fix, the same in `%tfgpu` and after a run: before the runtime starts, the magic or
    the cell; after, a restart and the cell first."""
    if initialized:
        return (
            "The runtime is already initialised, so this can no longer change in this kernel. "
            "Restart the kernel and run this cell first:\n"
            + MEMORY_GROWTH_CELL
            + "(or set TF_FORCE_GPU_ALLOW_GROWTH=true in the environment that starts Jupyter)"
        )
    return (
        "Run %tfgpu --memory-growth now (the runtime is not initialised yet), or put this "
        "cell first in the notebook:\n" + MEMORY_GROWTH_CELL
    )


def check(record: Record, source: str | None) -> Finding | None:
    if growth_forced(record) or not tf_readable(record):
        return None
    if (env(record, "TF_GPU_ALLOCATOR") or "") == "cuda_malloc_async":
        return None
    gpus = tf_gpus(record)
    if without_run(record):
        return _before_the_run(record, gpus)
    devices = nvml_devices(record)
    peaks = memory_stats(record).gpu
    for index, gpu in enumerate(gpus):
        if gpu.get("memory_growth") is True or index >= len(devices):
            continue
        total = devices[index].get("memory_total")
        used = nvml_series(record, index, "mem_used")
        reserved = float(used.max()) if used.size else devices[index].get("memory_used")
        peak = (peaks.get(f"GPU:{index}") or {}).get("peak")
        if not total or reserved is None or peak is None:
            continue
        if reserved >= MIN_RESERVED * total and peak < MAX_USED * total:
            finding = Finding(
                code=CODE,
                severity="info",
                title=(
                    f"TensorFlow holds {size(reserved)} of GPU {index}'s {size(total)};"
                    f" the run needed at most {size(peak)}"
                ),
                detail=(
                    "Memory growth is off, so TensorFlow reserved nearly all of the GPU's memory"
                    " when it started; its allocator's peak in this run was"
                    f" {size(peak)}. Other processes cannot use the rest."
                ),
                fix=fix_text(initialized=True),
                evidence={
                    "gpu": gpu.get("name"),
                    "nvml_memory_used_bytes": rounded(reserved),
                    "memory_total_bytes": rounded(float(total)),
                    "tensorflow_peak_bytes": int(peak),
                    "memory_growth": False,
                },
            )
            return with_rewrite(finding, source, rewrite(memory_growth_first, source))
    return None


def _before_the_run(record: Record, gpus: list[dict]) -> Finding | None:
    off = [g for g in gpus if g.get("memory_growth") is not True]
    if not off:
        return None
    initialized = bool(section(record, "tensorflow").get("initialized"))
    labels = ", ".join(
        gpu_label(g)
        + (f", {gib(gpu_memory_total(record, g))}" if gpu_memory_total(record, g) else "")
        for g in off
    )
    when = (
        "TensorFlow has reserved" if initialized else "when its runtime starts, TensorFlow reserves"
    )
    return Finding(
        code=CODE,
        severity="warning",
        title="Memory growth is off",
        detail=f"Memory growth is off on {labels}: {when} almost all of the GPU's memory, so no"
        " other process (a second notebook, another framework) can use it, and the memory in use"
        " says nothing about what the model needs.",
        fix=fix_text(initialized),
        evidence={
            "gpus": [g.get("name") for g in off],
            "initialized": initialized,
            "TF_FORCE_GPU_ALLOW_GROWTH": env(record, "TF_FORCE_GPU_ALLOW_GROWTH"),
            "TF_GPU_ALLOCATOR": env(record, "TF_GPU_ALLOCATOR"),
        },
    )
