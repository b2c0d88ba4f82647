"""Make a sweep's value win over the cell's own top-level assignments to the swept name.

``batch_size = 32`` at the top level of the cell would undo ``--sweep batch_size=...``. The
assignment's right-hand side still runs (it may do other work), but its binding of the name
goes to a throw-away target, ``[None][0]``, in place: every node keeps its line and column, so
tracebacks still point at the user's lines. Only statements of the cell's top level are
changed (``NAME = ...``, ``a = NAME = ...``, ``NAME, b = ...``, ``NAME: int = ...``); an
augmented assignment (``NAME *= 2``) derives from the swept value and is kept, as is anything
inside functions, classes, loops and other blocks.
"""

from __future__ import annotations

import ast


def _discard(like: ast.AST) -> ast.Subscript:
    """``[None][0]`` as an assignment target, located where `like` was."""
    target = ast.Subscript(
        value=ast.List(elts=[ast.Constant(None)], ctx=ast.Load()),
        slice=ast.Constant(0),
        ctx=ast.Store(),
    )
    for node in ast.walk(target):
        ast.copy_location(node, like)
    return target


def _replace(target: ast.expr, name: str) -> tuple[ast.expr, bool]:
    if isinstance(target, ast.Name) and target.id == name:
        return _discard(target), True
    if isinstance(target, (ast.Tuple, ast.List)):
        changed = False
        for index, element in enumerate(target.elts):
            target.elts[index], hit = _replace(element, name)
            changed = changed or hit
        return target, changed
    if isinstance(target, ast.Starred):
        target.value, hit = _replace(target.value, name)
        return target, hit
    return target, False


def drop_top_level_assignments(tree: ast.Module, name: str) -> list[int]:
    """Rebind top-level assignments to `name` to a throw-away target; returns their lines."""
    lines: list[int] = []
    for statement in tree.body:
        hit = False
        if isinstance(statement, ast.Assign):
            for index, target in enumerate(statement.targets):
                statement.targets[index], changed = _replace(target, name)
                hit = hit or changed
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, hit = _replace(statement.target, name)
            if hit:
                statement.target = target  # type: ignore[assignment]
                statement.simple = 0
        if hit:
            lines.append(statement.lineno)
    return lines
