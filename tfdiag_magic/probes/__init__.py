"""Probes: each one installs the hooks for one source of facts and removes them exactly.

The probe protocol (`Probe`):

- ``install(recorder)``: put the hooks in place; from then on they write what they see into
  the `Recorder`, through its public methods and fields only.
- ``remove()``: take every hook out again, exactly as it was. The session removes the probes
  in reverse order in a ``finally``, so nothing outlives a run, whatever the cell did.
- ``finish(record)``: after every probe is removed and the recorder has made its `Record`,
  write the probe's own part of it (a table, a fact); most probes write everything through the
  recorder while the run goes on, and have nothing left to add here. The session calls it for
  each probe in the order they were installed, and knows nothing of what each writes.
"""

from __future__ import annotations

from typing import Protocol

from ..record import Record
from ..recorder import Recorder


class Probe(Protocol):
    name: str

    def install(self, recorder: Recorder) -> None: ...

    def remove(self) -> None: ...

    def finish(self, record: Record) -> None: ...
