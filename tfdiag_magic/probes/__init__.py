"""Probes: each one installs the hooks for one source of facts and removes them exactly.

A probe has `install(recorder)` and `remove()`. The session installs them in order and removes
them in reverse order in a `finally`, so nothing outlives a run, whatever the cell did.
"""

from __future__ import annotations

from typing import Protocol

from ..recorder import Recorder


class Probe(Protocol):
    name: str

    def install(self, recorder: Recorder) -> None: ...

    def remove(self) -> None: ...
