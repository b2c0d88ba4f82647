"""``%tfgpu --watch``: utilization and memory per GPU (and of the host), sampled in the background.

One daemon thread samples every `interval` seconds while other cells run; in a notebook an
ipywidgets HTML view is updated from it, in a terminal the samples are kept and summarised when
the watch stops. Only one watch runs at a time; ``%tfgpu --stop`` and ``%unload_ext`` stop it
and join its thread. Without NVML the host is still watched and the reason is shown.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..nvml import NVMLUnavailableError, device_handles, nvml_close, nvml_open, nvml_query
from .nvml_facts import gib

THREAD_NAME = "tfdiag-gpu-watch"
DEFAULT_INTERVAL = 1.0
# Below this, sampling (psutil and NVML queries, a widget message per sample) would take a
# CPU core of its own and flood the frontend.
MIN_INTERVAL = 0.05
# Seconds `stop` waits for the sampling thread: a sample takes milliseconds, but an NVML call
# that hangs must not hang the cell (or the kernel's shutdown) that stops the watch.
JOIN_TIMEOUT = 2.0
SPARK = "▁▂▃▄▅▆▇█"
HISTORY_SHOWN = 40


@dataclass
class GPUSample:
    index: int
    name: str | None
    utilization: float | None
    memory_used: int | None
    memory_total: int | None


@dataclass
class Sample:
    time: float  # seconds since the watch started
    cpu_percent: float
    memory_used: int
    memory_total: int
    process_rss: int
    gpus: list[GPUSample] = field(default_factory=list)


def sparkline(values: list[float | None], top: float = 100.0) -> str:
    """A one-line history of percentages (a space where a sample had no value)."""
    chars = []
    for value in values:
        if value is None:
            chars.append(" ")
        else:
            level = max(0.0, min(1.0, value / top)) if top > 0 else 0.0
            chars.append(SPARK[min(len(SPARK) - 1, int(level * len(SPARK)))])
    return "".join(chars)


class GPUWatch:
    """Samples host CPU/memory and, when NVML works, each GPU's utilization and memory."""

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        *,
        keep: int = 3600,
        on_sample: Callable[[GPUWatch, Sample], None] | None = None,
    ) -> None:
        if not interval >= MIN_INTERVAL:
            raise ValueError(
                f"the watch interval must be at least {MIN_INTERVAL:g} seconds; got {interval:g}"
            )
        self.interval = float(interval)
        self.samples: deque[Sample] = deque(maxlen=keep)
        self.on_sample = on_sample
        self.view_error: str | None = None
        self.nvml_status = "not started"
        self.started_at: float | None = None
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handles: list[tuple[int, str | None, Any]] = []
        self._process: Any = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("this watch was already started")
        import psutil

        self._open_nvml()
        self._process = psutil.Process()
        psutil.cpu_percent(None)  # the first call only sets the baseline
        self.started_at = time.time()
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _open_nvml(self) -> None:
        try:
            self._nvml = nvml = nvml_open()
        except NVMLUnavailableError as exc:
            self.nvml_status = f"GPUs not watched: {exc.reason}"
            return
        for index, handle in device_handles(nvml):
            self._handles.append((index, nvml_query(nvml.nvmlDeviceGetName, handle), handle))
        count = len(self._handles)
        self.nvml_status = f"watching {count} GPU(s)" if count else "NVML sees no GPU"

    def _close_nvml(self) -> None:
        if self._nvml is not None:
            self._nvml = None
            self._handles = []
            nvml_close()

    def _run(self) -> None:
        while True:
            sample = self.sample()
            self.samples.append(sample)
            if self.on_sample is not None:
                try:
                    self.on_sample(self, sample)
                except Exception as exc:  # a view that fails must not end the sampling
                    self.view_error = f"{type(exc).__name__}: {exc}"
                    self.on_sample = None
            if self._stop.wait(self.interval):
                break

    def sample(self) -> Sample:
        import psutil

        memory = psutil.virtual_memory()
        sample = Sample(
            time=time.perf_counter() - self._t0,
            cpu_percent=float(psutil.cpu_percent(None)),
            memory_used=int(memory.total - memory.available),
            memory_total=int(memory.total),
            process_rss=int(self._process.memory_info().rss) if self._process else 0,
        )
        nvml = self._nvml
        for index, name, handle in self._handles:
            rates = nvml_query(nvml.nvmlDeviceGetUtilizationRates, handle)
            info = nvml_query(nvml.nvmlDeviceGetMemoryInfo, handle)
            sample.gpus.append(
                GPUSample(
                    index,
                    name,
                    float(rates.gpu) if rates is not None else None,
                    int(info.used) if info is not None else None,
                    int(info.total) if info is not None else None,
                )
            )
        return sample

    def stop(self) -> None:
        """Stop sampling and join the thread (at most JOIN_TIMEOUT seconds); calling it again
        does nothing."""
        thread = self._thread
        if thread is not None:
            self._stop.set()
            thread.join(timeout=JOIN_TIMEOUT)
            if thread.is_alive():
                # Stuck in a driver call: NVML stays initialised under it (shutting it down
                # under a running query is undefined); the daemon thread ends after that call.
                return
        self._close_nvml()

    # -- views -----------------------------------------------------------------------------

    def rows(self) -> list[tuple[str, str, str]]:
        """(what, latest value, recent history) for the host and each GPU."""
        samples = list(self.samples)
        if not samples:
            return []
        latest = samples[-1]
        recent = samples[-HISTORY_SHOWN:]
        rows = [
            ("host CPU", f"{latest.cpu_percent:.0f} %", sparkline([s.cpu_percent for s in recent])),
            (
                "host memory",
                f"{gib(latest.memory_used)} of {gib(latest.memory_total)}",
                sparkline([100.0 * s.memory_used / s.memory_total for s in recent]),
            ),
            ("this process (RSS)", gib(latest.process_rss), ""),
        ]
        for gpu in latest.gpus:
            label = f"GPU {gpu.index}" + (f" ({gpu.name})" if gpu.name else "")
            history = [
                next((g.utilization for g in s.gpus if g.index == gpu.index), None) for s in recent
            ]
            rows.append(
                (
                    f"{label} utilization",
                    "not available" if gpu.utilization is None else f"{gpu.utilization:.0f} %",
                    sparkline(history),
                )
            )
            memory = (
                f"{gib(gpu.memory_used)} of {gib(gpu.memory_total)}"
                if gpu.memory_total
                else "not available"
            )
            rows.append((f"{label} memory", memory, ""))
        return rows

    def header(self) -> str:
        state = "watching" if self.running and not self._stop.is_set() else "stopped"
        since = time.strftime("%H:%M:%S", time.localtime(self.started_at or time.time()))
        return (
            f"{state}; sampled every {self.interval:g} s since {since} "
            f"({len(self.samples)} samples); {self.nvml_status}"
        )

    def html(self) -> str:
        body = "".join(
            f"<tr><td style='padding-right:12px;color:#555'>{escape(what)}</td>"
            f"<td style='padding-right:12px'>{escape(value)}</td>"
            f"<td style='font-family:monospace'>{escape(history)}</td></tr>"
            for what, value, history in self.rows()
        )
        note = " %tfgpu --stop ends it." if self.running else ""
        return (
            "<div style='font-family:system-ui,sans-serif;font-size:13px'>"
            f"<div><b>%tfgpu --watch</b>: {escape(self.header())}.{escape(note)}</div>"
            f"<table>{body}</table></div>"
        )

    def summary(self) -> str:
        """Mean and maximum of what was sampled, in text."""
        samples = list(self.samples)
        lines = [f"%tfgpu --watch: {self.header()}"]
        if not samples:
            return lines[0]
        cpu = [s.cpu_percent for s in samples]
        lines.append(f"  host CPU        mean {sum(cpu) / len(cpu):.0f} %, max {max(cpu):.0f} %")
        lines.append(
            f"  host memory     max {gib(max(s.memory_used for s in samples))} of "
            f"{gib(samples[-1].memory_total)}"
        )
        for gpu in samples[-1].gpus:
            series = [g for s in samples for g in s.gpus if g.index == gpu.index]
            used = [g.utilization for g in series if g.utilization is not None]
            memory = [g.memory_used for g in series if g.memory_used is not None]
            label = f"GPU {gpu.index}" + (f" ({gpu.name})" if gpu.name else "")
            utilization = (
                f"utilization mean {sum(used) / len(used):.0f} %, max {max(used):.0f} %"
                if used
                else "utilization not available"
            )
            peak = f"memory max {gib(max(memory))} of {gib(gpu.memory_total)}" if memory else ""
            lines.append(f"  {label}  {utilization}" + (f"; {peak}" if peak else ""))
        if self.view_error:
            lines.append(f"  (the live view stopped updating: {self.view_error})")
        return "\n".join(lines)


class WatchView:
    """The notebook view: an ipywidgets HTML widget the sampling thread rewrites."""

    def __init__(self, watch: GPUWatch) -> None:
        import ipywidgets

        self.widget = ipywidgets.HTML(value=watch.html())

    def update(self, watch: GPUWatch, sample: Sample) -> None:
        self.widget.value = watch.html()


_lock = threading.Lock()
_active: tuple[GPUWatch, WatchView | None] | None = None


def start_watch(interval: float, *, widget: bool) -> tuple[GPUWatch, WatchView | None]:
    """Start the process's watch (stopping one already running); returns it and its view."""
    global _active
    stop_watch()
    watch = GPUWatch(interval)
    view = WatchView(watch) if widget else None
    if view is not None:
        watch.on_sample = view.update
    watch.start()
    with _lock:
        _active = (watch, view)
    return watch, view


def stop_watch() -> GPUWatch | None:
    """Stop the running watch and join its thread; None when none was running."""
    global _active
    with _lock:
        active, _active = _active, None
    if active is None:
        return None
    watch, view = active
    watch.stop()
    if view is not None:
        view.widget.value = watch.html()  # the final state, marked stopped
    return watch


def active_watch() -> GPUWatch | None:
    with _lock:
        return _active[0] if _active is not None else None
