"""Compiles the code to profile (a cell or a script) with its loops instrumented, and runs it.

The code keeps its filename and line numbers, so tracebacks point at the user's lines. For a
cell, the last expression is split off and evaluated apart, as IPython does, so its value can
be displayed as the cell's result.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from .instrument import instrument_loops
from .instrument_conversions import mark_conversions
from .record import LoopInfo

Compiler = Callable[[Any, str, str], CodeType]


def compile_plain(tree: Any, filename: str, mode: str) -> CodeType:
    """Compile as Python compiles a script: no ``__future__`` flag of this module leaks in.

    `compile` without ``dont_inherit`` takes the future flags of the module that calls it, and
    this one has ``from __future__ import annotations``: a script's annotations would become
    strings under the profiler only.
    """
    return compile(tree, filename, mode, dont_inherit=True)


def cell_source(code: str, transformed: str, header: str | None) -> str:
    """The text to compile for a ``%%tfprofile`` cell, line for line as the user wrote it.

    IPython's `transform_cell` drops the body's leading blank lines; they are put back, as is
    the magic's own line (as a comment), so that line N of the result is line N of the cell:
    tracebacks, loop lines and the rewrites (which work on the cell's text) then agree.
    """
    blank = 0
    for line in code.splitlines():
        if line.strip():
            break
        blank += 1
    else:
        blank = 0  # IPython keeps an all-blank cell as it is: nothing was dropped
    body = "\n" * blank + transformed
    return body if header is None else f"# %%tfprofile {header}\n{body}"


@dataclass
class PreparedCode:
    body: CodeType
    last: CodeType | None = None  # evaluated after the body; its value is the cell's value
    loops: list[LoopInfo] = field(default_factory=list)


def prepare(
    source: str,
    filename: str,
    *,
    instrument: bool = True,
    interactivity: str = "none",
    compiler: Compiler = compile_plain,
    transform: Callable[[ast.Module], object] | None = None,
) -> PreparedCode:
    """Parse, instrument and compile `source`. Raises SyntaxError as Python would.

    `interactivity` follows IPython's ``ast_node_interactivity``: "last_expr" (and "last",
    "all") give the value of a final expression statement, "last_expr_or_assign" also that
    of a final assignment to a single name, "none" no value. `transform` may change the parsed
    module in place (keeping line numbers) after the last expression is split off and before
    the loops are instrumented: a sweep drops the cell's own assignments to its variable.
    """
    tree = ast.parse(source, filename=filename, mode="exec")
    last: ast.Expression | None = None
    if interactivity != "none" and tree.body:
        final = tree.body[-1]
        if isinstance(final, ast.Expr):
            tree.body.pop()
            last = ast.Expression(body=final.value)
            ast.copy_location(last, final)
        elif (
            interactivity == "last_expr_or_assign"
            and isinstance(final, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            and _single_name(final) is not None
        ):
            name = _single_name(final)
            last = ast.Expression(body=ast.copy_location(ast.Name(id=name, ctx=ast.Load()), final))
    if transform is not None:
        transform(tree)
    loops: list[LoopInfo] = []
    if instrument:

        def register(lineno: int, text: str) -> int:
            loops.append(LoopInfo(id=len(loops), lineno=lineno, source=text))
            return len(loops) - 1

        if instrument_loops(tree, source, register):
            mark_conversions(tree)  # only inside loops, whose runtime the run then installs
    body = compiler(tree, filename, "exec")
    last_code = None
    if last is not None:
        ast.fix_missing_locations(last)
        last_code = compiler(last, filename, "eval")
    return PreparedCode(body=body, last=last_code, loops=loops)


def _single_name(node: ast.stmt) -> str | None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0].id
    return None


def run(
    prepared: PreparedCode, globals_: dict[str, Any], locals_: dict[str, Any] | None = None
) -> Any:
    """Execute the body, then evaluate the last expression (if any) and return its value."""
    __tracebackhide__ = True
    if locals_ is None:
        locals_ = globals_
    exec(prepared.body, globals_, locals_)
    if prepared.last is not None:
        return eval(prepared.last, globals_, locals_)
    return None
