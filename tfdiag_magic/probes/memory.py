"""Memory probe: host RSS and TensorFlow's per-GPU allocator, read by the recorder's sampler.

The recorder samples at most every `memory_interval` seconds, from the end of a step, so each
sample belongs to a known step. GPU memory is read only once TensorFlow's runtime is up, never
before: reading it would initialise the GPUs and break a `set_memory_growth` in the cell.
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


class MemoryProbe:
    name = "memory"

    def __init__(self, gpu_names: list[str]) -> None:
        self._gpu_names = gpu_names
        self._rec: Recorder | None = None

    def install(self, recorder: Recorder) -> None:
        self._rec = recorder
        recorder.rss_reader = host_rss_reader()
        if self._gpu_names:
            recorder.gpu_reader = gpu_memory_reader(self._gpu_names)
        recorder.sample_memory()

    def remove(self) -> None:
        if self._rec is not None:
            self._rec.gpu_reader = None
