"""NVML probe: GPU utilization, memory and power from a background thread, when a GPU exists.

No NVIDIA driver, no GPU, or no `pynvml` is the normal case on many machines: the probe then
records why in `status` and starts no thread. When it runs, it holds the process's NVML session
(`tfdiag_magic.nvml`), samples every `interval` seconds and is stopped and joined (at most
JOIN_TIMEOUT seconds) when the probe is removed.
"""

from __future__ import annotations

import threading
from array import array
from time import perf_counter
from typing import Any

import numpy as np

from ..nvml import NVMLUnavailableError, device_handles, nvml_close, nvml_open, nvml_query
from ..recorder import Recorder

FIELDS = ("util", "mem_util", "mem_used", "mem_total", "power_w")
# Seconds `remove` waits for the sampling thread: one sample is a few NVML queries, so the
# thread ends well within it; a driver call that hangs must not hang the end of the run.
JOIN_TIMEOUT = 2.0
NAN = float("nan")


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
            self._nvml = nvml_open()
        except NVMLUnavailableError as exc:
            self.status = f"NVML not available: {exc.error or exc.reason}"
            return
        handles = [handle for _, handle in device_handles(self._nvml)]
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
            rates = nvml_query(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = nvml_query(nvml.nvmlDeviceGetMemoryInfo, handle)
            power = nvml_query(nvml.nvmlDeviceGetPowerUsage, handle)
            values = {
                "util": float(rates.gpu) if rates is not None else NAN,
                "mem_util": float(rates.memory) if rates is not None else NAN,
                "mem_used": float(memory.used) if memory is not None else NAN,
                "mem_total": float(memory.total) if memory is not None else NAN,
                "power_w": power / 1000.0 if power is not None else NAN,
            }
            for field, value in values.items():
                self._columns[f"{device}:{field}"].append(value)

    def remove(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=JOIN_TIMEOUT)
            if thread.is_alive():
                # Stuck in a driver call: keep holding NVML under it (shutting it down under a
                # running query is undefined); the daemon thread ends with its wait.
                self.status += f"; the sampler did not stop within {JOIN_TIMEOUT:g} s"
                return
        self._shutdown()

    def _shutdown(self) -> None:
        if self._nvml is not None:
            self._nvml = None
            nvml_close()

    def table(self) -> dict[str, np.ndarray]:
        if not self._time:
            return {}
        size = len(self._time)
        table = {"time": np.array(self._time, dtype=np.float64)}
        for name, column in self._columns.items():
            table[name] = np.array(column[:size], dtype=np.float64)
        return table
