"""The NVML sampler's own CPU, per second of run, on a machine with an NVIDIA GPU (issue 18's
target for the tool's samplers: at most 1 % of one core).

Run: ``python benchmarks/nvml_sampler_cpu.py`` (``SECONDS``, default 20; ``INTERVAL``, default
0.1, the tool's default sampling interval). Needs ``pynvml`` (nvidia-ml-py) and NumPy, and a GPU
load to run beside: PyTorch or CuPy matrix products if either is installed (a training loop's
kind of load: the GPU busy, the host thread launching kernels), else none. TensorFlow is not
needed: `NVMLSampler` is loaded without the package's ``__init__`` (which loads the views).

The sampler runs as a run of the tool runs it (`NVMLSampler.install` with a `Recorder`,
`remove` at the end), once with the GPU idle and once under the load; its thread's CPU time is
read with ``time.thread_time()`` as the thread ends, and from ``/proc/thread-self/stat``.
Printed: samples taken, the thread's CPU seconds, its share of one core over the run, and the
GPU utilization, memory and power it sampled (so the samples are seen to be real).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECONDS = float(os.environ.get("SECONDS", "20"))
INTERVAL = float(os.environ.get("INTERVAL", "0.1"))
_TICK = os.sysconf("SC_CLK_TCK")


def _load_sampler():
    """`tfdiag_magic.probes.nvml_sampler`, with the package's ``__init__`` files skipped."""
    for name, folder in (
        ("tfdiag_magic", ROOT / "tfdiag_magic"),
        ("tfdiag_magic.probes", ROOT / "tfdiag_magic" / "probes"),
    ):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    spec = importlib.util.find_spec("tfdiag_magic.probes.nvml_sampler")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    from tfdiag_magic.recorder import Recorder

    return module.NVMLSampler, Recorder


def _stat_seconds() -> float:
    with open("/proc/thread-self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _gpu_load(stop: threading.Event) -> tuple[str, threading.Thread | None]:
    """Start matrix products on the GPU until `stop` is set: the library used ("none": no
    load) and the thread to join before the interpreter ends (a CUDA call cut off by the
    interpreter's exit aborts the process)."""
    try:
        import torch

        if torch.cuda.is_available():
            a = torch.randn(4096, 4096, device="cuda")

            def run() -> None:
                while not stop.is_set():
                    b = a @ a
                    b.sum().item()  # the host waits for the step, as a loss read would

            thread = threading.Thread(target=run, name="load", daemon=True)
            thread.start()
            return "torch", thread
    except ImportError:
        pass
    try:
        import cupy

        a = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32)

        def run_cupy() -> None:
            while not stop.is_set():
                float((a @ a).sum())

        thread = threading.Thread(target=run_cupy, name="load", daemon=True)
        thread.start()
        return "cupy", thread
    except ImportError:
        return "none", None


def measure(sampler_class, recorder_class, label: str) -> None:
    cpu: dict[str, float] = {}
    sampler = sampler_class(INTERVAL)
    original = sampler._run

    def run(*args) -> None:
        try:
            original(*args)
        finally:
            cpu["thread_time"] = time.thread_time()
            cpu["stat"] = _stat_seconds()

    sampler._run = run
    rec = recorder_class()
    start = time.perf_counter()
    sampler.install(rec)
    time.sleep(SECONDS)
    sampler.remove()
    wall = time.perf_counter() - start
    table = sampler.table()
    samples = len(table.get("time", ()))
    print(f"{label}: {sampler.status}; {samples} samples in {wall:.1f} s")
    if not cpu:
        return
    share = cpu["thread_time"] / wall * 100
    print(
        f"  sampler thread CPU {cpu['thread_time'] * 1e3:.1f} ms by its clock"
        f" ({cpu['stat'] * 1e3:.0f} ms by /proc stat's ticks): {share:.3f} % of one core,"
        f" {cpu['thread_time'] / max(samples, 1) * 1e6:.0f} µs a sample"
    )
    for field in ("util", "mem_used", "power_w"):
        column = table.get(f"nvml0:{field}")
        if column is not None and len(column):
            print(f"  nvml0 {field}: median {sorted(column)[len(column) // 2]:.4g}")


def main() -> None:
    sampler_class, recorder_class = _load_sampler()
    measure(sampler_class, recorder_class, "GPU idle")
    stop = threading.Event()
    library, load = _gpu_load(stop)
    time.sleep(2.0)  # the load is running
    try:
        measure(sampler_class, recorder_class, f"GPU under load ({library})")
    finally:
        stop.set()
        if load is not None:
            load.join()


if __name__ == "__main__":
    main()
