"""Memory probe: host RSS, the bytes of tensors TensorFlow holds on the CPU, and TensorFlow's
per-GPU allocator, read by the recorder's sampler.

The recorder samples at most every `memory_interval` seconds, from the end of a step, so each
sample belongs to a known step. Device memory is read only once TensorFlow's runtime is up,
never before: reading it would initialise the GPUs and break a `set_memory_growth` in the cell.

RSS alone misses memory kept per step when the process reuses memory it freed earlier (a cell
run again frees its old list of tensors, and the new run refills the same pages: RSS stays
flat). The CPU allocator's count of bytes in use does not: it falls when tensors are freed and
rises with every tensor kept. TensorFlow keeps that count only for its oneDNN CPU allocator
(the default on x86 Linux builds); elsewhere the series is -1.
"""

from __future__ import annotations

from collections.abc import Callable

from ..recorder import Recorder


def host_rss_reader() -> Callable[[], int]:
    import psutil

    process = psutil.Process()

    def rss() -> int:
        return int(process.memory_info().rss)

    return rss


def gpu_memory_reader(gpu_names: list[str]) -> Callable[[], dict[str, tuple[int, int]]]:
    """Reads `tf.config.experimental.get_memory_info` for each GPU, once TF has initialised."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    devices = [f"GPU:{i}" for i in range(len(gpu_names))]

    def read() -> dict[str, tuple[int, int]]:
        if context.context()._context_handle is None:  # runtime not initialised yet
            return {}
        values: dict[str, tuple[int, int]] = {}
        for device in devices:
            try:
                info = tf.config.experimental.get_memory_info(device)
            except (ValueError, RuntimeError):
                continue
            values[device] = (int(info.get("current", -1)), int(info.get("peak", -1)))
        return values

    return read


def cpu_tensor_reader() -> Callable[[], int]:
    """Bytes in use by TensorFlow's CPU allocator (-1 before the runtime is up, or where the
    allocator keeps no statistics: then it stops asking)."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    available = True

    def read() -> int:
        nonlocal available
        if not available or context.context()._context_handle is None:
            return -1
        try:
            return int(tf.config.experimental.get_memory_info("CPU:0").get("current", -1))
        except (ValueError, RuntimeError):  # "Allocator stats not available for device"
            available = False
            return -1

    return read


class MemoryProbe:
    name = "memory"

    def __init__(self, gpu_names: list[str]) -> None:
        self._gpu_names = gpu_names
        self._rec: Recorder | None = None

    def install(self, recorder: Recorder) -> None:
        self._rec = recorder
        recorder.rss_reader = host_rss_reader()
        recorder.tensor_reader = cpu_tensor_reader()
        if self._gpu_names:
            recorder.gpu_reader = gpu_memory_reader(self._gpu_names)
        recorder.sample_memory()

    def remove(self) -> None:
        """Nothing is patched; the readers stay on the recorder for its last sample, taken by
        `Recorder.finish`, which then drops them."""
        self._rec = None
