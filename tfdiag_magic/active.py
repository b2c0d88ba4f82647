"""The one profiling run in progress in this process, if any (runs do not nest)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .recorder import Recorder

_recorder: Recorder | None = None


def recorder() -> Recorder | None:
    return _recorder


def claim(rec: Recorder) -> None:
    global _recorder
    if _recorder is not None:
        raise AlreadyProfilingError(
            "a tfdiag_magic profiling run is already in progress; profiling runs cannot nest, "
            "so this one was not started (and its code was not run)"
        )
    _recorder = rec


def release(rec: Recorder) -> None:
    global _recorder
    if _recorder is rec:
        _recorder = None


class AlreadyProfilingError(RuntimeError):
    """A profiling run was started while another one was running."""
