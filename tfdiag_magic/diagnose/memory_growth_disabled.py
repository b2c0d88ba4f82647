"""memory-growth-disabled: TensorFlow reserved (almost) all of a GPU's memory up front."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record
from ..rewrite import memory_growth_first
from ..stats import memory_stats
from ..units import size
from .evidence import rewrite, rounded, with_rewrite
from .gpu_facts import env, nvml_devices, nvml_series, tf_gpus

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
Memory growth off for a GPU TensorFlow uses, `TF_FORCE_GPU_ALLOW_GROWTH` not `true`, and NVML
reporting at least 90% of the GPU's memory in use while the allocator's peak was under half of
it. An info note: it matters when the GPU is shared. Checked on recorded facts.
"""

MIN_RESERVED = 0.9
MAX_USED = 0.5


def check(record: Record, source: str | None) -> Finding | None:
    if (env(record, "TF_FORCE_GPU_ALLOW_GROWTH") or "").lower() == "true":
        return None
    if (env(record, "TF_GPU_ALLOCATOR") or "") == "cuda_malloc_async":
        return None
    gpus = tf_gpus(record)
    devices = nvml_devices(record)
    peaks = memory_stats(record).gpu
    for index, gpu in enumerate(gpus):
        if gpu.get("memory_growth") is not False or index >= len(devices):
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
                fix="Turn memory growth on in the first cell (or `TF_FORCE_GPU_ALLOW_GROWTH=true`)"
                " and restart the kernel.",
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
