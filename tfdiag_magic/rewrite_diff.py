"""A unified diff between a cell and its rewrite, as the reports show it."""

from __future__ import annotations

import difflib


def unified_diff(before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile="cell",
        tofile="rewritten cell",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
