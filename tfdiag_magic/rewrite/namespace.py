"""The modules the notebook bound before a cell ran, for the rewrites of that cell.

A cell that uses ``tf`` imported in an earlier cell is rewritten with that ``tf``. The diagnosis
sets them around its rules (`namespace_modules`); the rewrites read them (`modules_bound`). Kept
apart from the rewrites themselves, which need libcst: a diagnosis that rewrites nothing never
imports it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping

# name -> module name: ``tf`` -> tensorflow
_NAMESPACE_MODULES: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "namespace_modules", default=None
)


@contextlib.contextmanager
def namespace_modules(modules: Mapping[str, str]) -> Iterator[None]:
    """Within the block, names the cell uses without binding them resolve through `modules`
    (the modules bound in the user's namespace when the run started)."""
    token = _NAMESPACE_MODULES.set(dict(modules))
    try:
        yield
    finally:
        _NAMESPACE_MODULES.reset(token)


def modules_bound() -> Mapping[str, str] | None:
    """The modules set by the innermost `namespace_modules` block; None outside any."""
    return _NAMESPACE_MODULES.get()
