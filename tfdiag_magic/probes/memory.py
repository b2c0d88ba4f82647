"""Memory probe: host RSS, the bytes of tensors TensorFlow holds on the CPU, and TensorFlow's
per-GPU allocator, read by the recorder's sampler.

The recorder samples at most every `memory_interval` seconds, from the end of a step, so each
sample belongs to a known step. Device memory is read only once TensorFlow's runtime is up,
never before: reading it would initialise the GPUs and break a `set_memory_growth` in the cell.

RSS alone misses memory kept per step when the process reuses memory it freed earlier (a cell
run again frees its old list of tensors, and the new run refills the same pages: RSS stays
flat). The CPU allocator's count of bytes in use does not: it falls when tensors are freed and
rises with every tensor kept. TensorFlow keeps that count only for its oneDNN CPU allocator
(on by default on x86 CPUs with AVX-512 and similar). Elsewhere (AVX2-only CPUs such as many AMD
EPYC, `TF_ENABLE_ONEDNN_OPTS=0`) TensorFlow's default CPU allocator takes every tensor from the C
heap with `malloc`, and the series is the C heap's bytes in use instead (glibc's `mallinfo2`,
microseconds a read in a fresh process, milliseconds on a fragmented heap: paced, see
`paced_read`): it also falls when tensors are freed and rises with every tensor
kept, and counts NumPy arrays and large Python objects as well. Without either (another C
library) the series is -1.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from time import perf_counter

from ..record import Record
from ..recorder import Recorder
from .paced_read import PacedReader

_STATM = "/proc/self/statm"
# The heap series beside TensorFlow's own count is first read this long into a run.
HEAP_FIRST_READ_S = 0.5


def host_rss_reader() -> Callable[[], int]:
    """The process's resident set size in bytes: from ``/proc/self/statm`` where there is one
    (Linux: four calls a read), else from psutil (about a dozen)."""
    if os.path.exists(_STATM):
        page = os.sysconf("SC_PAGE_SIZE")
        read_only = os.O_RDONLY

        def statm() -> int:
            fd = os.open(_STATM, read_only)
            try:
                return int(os.read(fd, 256).split()[1]) * page
            finally:
                os.close(fd)

        return statm
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
        ctx = context.context_safe()  # made by the code, never by the tool (session.py)
        if ctx is None or ctx._context_handle is None:  # runtime not initialised yet
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


def tf_cpu_allocator_bytes() -> int | None:
    """Bytes in use by TensorFlow's CPU allocator; None where the allocator keeps no
    statistics ("Allocator stats not available for device 'CPU:0'")."""
    import tensorflow as tf

    try:
        return int(tf.config.experimental.get_memory_info("CPU:0").get("current", -1))
    except (ValueError, RuntimeError):
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def heap_bytes_reader() -> Callable[[], int] | None:
    """Bytes the C heap has handed out and not taken back (glibc's `mallinfo2`: `uordblks`
    from its arenas plus `hblkhd` mapped for large blocks); None without glibc 2.33 or later."""
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, the C library's among them
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    mallinfo2.argtypes = []

    def read() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return read


class CpuTensorReader:
    """Reads the `cpu_tensors` measure (`read`, from `cpu_tensor_reader`) and says which count
    it read; `read_heap` reads the C heap's bytes in use where that count is TensorFlow's own
    (which sees tensors alone), -1 elsewhere (where the measure is the heap already)."""

    def __init__(self) -> None:
        self.read = cpu_tensor_reader(self)
        self.counted_by: str | None = None  # "tensorflow" or "heap" once read
        self._heap: Callable[[], int] | None = None

    def read_heap(self) -> int:
        if self.counted_by != "tensorflow":
            return -1
        if self._heap is None:
            self._heap = heap_bytes_reader() or (lambda: -1)
        return self._heap()


def cpu_tensor_reader(said: CpuTensorReader | None = None) -> Callable[[], int]:
    """Bytes in use by the allocator TensorFlow's CPU tensors come from: TensorFlow's own
    count where its allocator keeps one, else the C heap's bytes in use (see the module's
    docstring); -1 before the runtime is up, or where neither can be read."""
    from tensorflow.python import pywrap_tfe
    from tensorflow.python.eager import context

    heap: Callable[[], int] | None = None
    tensorflow_counts: bool | None = None  # not asked yet

    def read() -> int:
        nonlocal heap, tensorflow_counts
        ctx = context.context_safe()
        handle = None if ctx is None else ctx._context_handle
        if handle is None:
            return -1
        if tensorflow_counts:
            try:  # what `get_memory_info("CPU:0")` reads, without its three calls
                return int(pywrap_tfe.TFE_GetMemoryInfo(handle, "CPU:0")["current"])
            except Exception:
                tensorflow_counts = None  # ask again, the public way
        if tensorflow_counts is None:
            # The first read asks through `get_memory_info`, which says where the allocator
            # keeps no statistics (a property of the build and the CPU: asked once).
            value = tf_cpu_allocator_bytes()
            if value is not None:
                tensorflow_counts = True
                if said is not None:
                    said.counted_by = "tensorflow"
                return value
            tensorflow_counts = False
            heap = heap_bytes_reader()
            if said is not None and heap is not None:
                said.counted_by = "heap"
        return heap() if heap is not None else -1

    return read


class MemoryProbe:
    name = "memory"

    def __init__(self, gpu_names: list[str]) -> None:
        self._gpu_names = gpu_names
        self._rec: Recorder | None = None
        self._tensors: CpuTensorReader | None = None
        # The two reads that walk an allocator's lists, paced to 1 % of the time at most.
        self._paced: dict[str, PacedReader[int]] = {}

    def install(self, recorder: Recorder) -> None:
        self._rec = recorder
        recorder.rss_reader = host_rss_reader()
        self._tensors = CpuTensorReader()
        self._paced = {
            "cpu_tensors": PacedReader(self._tensors.read, -1),
            "python_blocks": PacedReader(sys.getallocatedblocks, -1),
            # Read from half a second into the run: a growth is fitted past each span's first
            # tenth, so a read at the start serves no fit, and in a long-lived process (a
            # notebook's kernel, a test worker) the heap's walk takes tens of milliseconds.
            "heap": PacedReader(self._tensors.read_heap, -1, perf_counter() + HEAP_FIRST_READ_S),
        }
        recorder.tensor_reader = self._paced["cpu_tensors"]
        recorder.blocks_reader = self._paced["python_blocks"]
        recorder.heap_reader = self._paced["heap"]
        if self._gpu_names:
            recorder.gpu_reader = gpu_memory_reader(self._gpu_names)
        recorder.sample_memory()

    def remove(self) -> None:
        """Nothing is patched; the readers stay on the recorder for its last sample, taken by
        `Recorder.finish`, which then drops them; that sample reads every series."""
        self._rec = None
        for reader in self._paced.values():
            reader.read_next_call()

    def finish(self, record: Record) -> None:
        """The samples are the recorder's (`Record.memory`); this adds which count the
        `cpu_tensors` series is (``facts["cpu_tensors_counted_by"]``: "tensorflow", its
        allocator's own, or "heap", the C heap's bytes in use), where it was read."""
        if self._tensors is not None and self._tensors.counted_by is not None:
            record.facts["cpu_tensors_counted_by"] = self._tensors.counted_by
        # Each paced series' reads, made and skipped, and their seconds (`paced_read`).
        if self._paced:
            record.facts["memory_reads"] = {
                name: reader.summary() for name, reader in self._paced.items()
            }
