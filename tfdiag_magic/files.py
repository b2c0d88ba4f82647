"""Report files written where the user asked: ``~`` expanded, folders made, never half-written.

A report is written to a temporary file in the target's own folder and moved into place with
`os.replace`, so a reader (or a crash, or an interrupt) never sees a truncated report, and an
existing report is replaced only by a complete one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def report_path(path: str | os.PathLike[str]) -> Path:
    """The file `path` names, with ``~`` expanded (a shell would; Python's open does not)."""
    return Path(os.path.expanduser(os.fspath(path)))


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path`, creating missing folders; returns the path written.

    Raises OSError (with the path in its message) when the file cannot be written; the target
    is then unchanged and no temporary file is left behind.
    """
    target = report_path(path)
    if target.is_dir():
        raise IsADirectoryError(f"{target} is a folder, not a file")
    target.parent.mkdir(parents=True, exist_ok=True)
    # In the target's folder: os.replace is atomic only within one file system. Opened with
    # mode 0o666 so that the umask gives the report the permissions any new file gets
    # (tempfile.mkstemp would make it readable by its owner only).
    temporary = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return target


def write_failure(what: str, path: str | os.PathLike[str], error: BaseException) -> str:
    """One line saying why a report file could not be written."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return f"could not write the {what} to {report_path(path)}: {type(error).__name__}: {reason}"
