"""GPU memory growth, set where it can work: before TensorFlow initialises the GPU.

``tf.config.experimental.set_memory_growth`` stops TensorFlow from reserving (nearly) all GPU
memory when it initialises a GPU; it does not defragment anything, and once the GPU runtime is
initialised (any op, any tensor, listing logical devices) it raises RuntimeError. So the block
has to run first in a fresh kernel: `MEMORY_GROWTH_CELL` is that block as a cell of its own, and
`memory_growth_first` puts it at the top of the given cell (after a ``%%tfprofile`` line,
a module docstring and ``from __future__`` imports).
"""

from __future__ import annotations

import libcst as cst

from ..gpu.memory_growth import MEMORY_GROWTH_CELL
from .common import split_magic_line

__all__ = ["MEMORY_GROWTH_CELL", "memory_growth_first"]


def memory_growth_first(source: str) -> str:
    """The cell with the memory-growth block at its very top (always a result)."""
    header, body = split_magic_line(source)
    if body.startswith(MEMORY_GROWTH_CELL):
        return source
    split = _after_future_imports(body)
    before, after = body[:split], body[split:]
    if before and not before.endswith("\n"):
        before += "\n"
    return header + before + MEMORY_GROWTH_CELL + ("\n" if after.strip() else "") + after


def _after_future_imports(body: str) -> int:
    """Where code may start: after a docstring and ``from __future__`` imports, if any."""
    try:
        module = cst.parse_module(body)
    except cst.ParserSyntaxError:
        return 0
    count = 0
    for index, statement in enumerate(module.body):
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        is_docstring = (
            index == 0 and isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)
        )
        is_future = (
            isinstance(small, cst.ImportFrom)
            and isinstance(small.module, cst.Name)
            and small.module.value == "__future__"
        )
        if not (is_docstring or is_future):
            break
        count = index + 1
    if count == 0:
        return 0
    kept = module.with_changes(body=module.body[:count], footer=[])
    return len(kept.code)
