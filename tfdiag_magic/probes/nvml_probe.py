"""The NVML sampler as a probe of the session: on or off, it writes its part of the record.

`NVMLSampler` does the sampling; this probe adds what a probe owes the record at the end (the
samples, and why there are none, in ``facts["nvml"]``), also when the session was asked to run
without NVML, so that the session treats it as any other probe.
"""

from __future__ import annotations

from ..record import Record
from ..recorder import Recorder
from .nvml_sampler import NVMLSampler


class NVMLProbe:
    name = "nvml"

    def __init__(self, interval: float | None) -> None:
        """`interval`: seconds between samples; None: NVML is off for the run."""
        self.sampler = NVMLSampler(interval) if interval is not None else None

    def install(self, recorder: Recorder) -> None:
        if self.sampler is not None:
            self.sampler.install(recorder)

    def remove(self) -> None:
        if self.sampler is not None:
            self.sampler.remove()

    def finish(self, record: Record) -> None:
        """The samples (`Record.nvml`) and the sampler's status (``facts["nvml"]``: "off"
        when the run was made without NVML)."""
        if self.sampler is None:
            record.facts["nvml"] = "off"
            return
        record.nvml = self.sampler.table()
        record.facts["nvml"] = self.sampler.status
