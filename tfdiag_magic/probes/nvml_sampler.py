"""NVML probe: GPU utilization, memory and power from a background thread, when a GPU exists.

No NVIDIA driver, no GPU, or no `pynvml` is the normal case on many machines: the probe then
records why in `status` and starts no thread. When it runs, the thread samples every
`interval` seconds and is stopped and joined (at most JOIN_TIMEOUT seconds) when the probe is
removed.
"""

from __future__ import annotations

import contextlib
import threading
from array import array
from time import perf_counter
from typing import Any

import numpy as np

from ..recorder import Recorder

FIELDS = ("util", "mem_util", "mem_used", "mem_total", "power_w")
# Seconds `remove` waits for the sampling thread: one sample is a few NVML queries, so the
# thread ends well within it; a driver call that hangs must not hang the end of the run.
JOIN_TIMEOUT = 2.0


class NVMLSampler:
    name = "nvml"

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.status = "not started"
        self.devices: list[str] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._time = array("d")
        self._columns: dict[str, array] = {}
        self._nvml: Any = None

    def install(self, recorder: Recorder) -> None:
        try:
            import pynvml
        except ImportError:
            self.status = "pynvml (nvidia-ml-py) is not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            self.status = f"NVML not available: {_nvml_error(exc)}"
            return
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            self.status = f"NVML could not list devices: {_nvml_error(exc)}"
            self._shutdown()
            return
        if not handles:
            self.status = "NVML found no GPU"
            self._shutdown()
            return
        self.devices = [f"nvml{i}" for i in range(len(handles))]
        for device in self.devices:
            for field in FIELDS:
                self._columns[f"{device}:{field}"] = array("d")
        self.status = f"sampling {len(handles)} GPU(s) every {self.interval:g} s"
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(recorder.t0, handles), name="tfdiag-nvml", daemon=True
        )
        self._thread.start()

    def _run(self, t0: float, handles: list[Any]) -> None:
        while True:
            self._sample(t0, handles)
            if self._stop.wait(self.interval):
                break

    def _sample(self, t0: float, handles: list[Any]) -> None:
        nvml = self._nvml
        self._time.append(perf_counter() - t0)
        for device, handle in zip(self.devices, handles, strict=True):
            values = dict.fromkeys(FIELDS, float("nan"))
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                values["util"], values["mem_util"] = float(rates.gpu), float(rates.memory)
            except Exception:
                pass
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                values["mem_used"], values["mem_total"] = float(memory.used), float(memory.total)
            except Exception:
                pass
            with contextlib.suppress(Exception):
                values["power_w"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            for field, value in values.items():
                self._columns[f"{device}:{field}"].append(value)

    def remove(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=JOIN_TIMEOUT)
            if thread.is_alive():
                # Stuck in a driver call: leave NVML initialised under it (shutting it down
                # under a running query is undefined); the daemon thread ends with its wait.
                self.status += f"; the sampler did not stop within {JOIN_TIMEOUT:g} s"
                return
        self._shutdown()

    def _shutdown(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None

    def table(self) -> dict[str, np.ndarray]:
        if not self._time:
            return {}
        size = len(self._time)
        table = {"time": np.array(self._time, dtype=np.float64)}
        for name, column in self._columns.items():
            table[name] = np.array(column[:size], dtype=np.float64)
        return table


def _nvml_error(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.strip()
