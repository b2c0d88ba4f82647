"""Compiles the code to profile (a cell or a script) with its loops instrumented, and runs it.

The code keeps its filename and line numbers, so tracebacks point at the user's lines. For a
cell, the last expression is split off and evaluated apart, as IPython does, so its value can
be displayed as the cell's result. Where functions of the code have loops, the code is also
compiled plainly, and each rewritten function code object is paired with its plain twin, which
the functions made during the run get back after it (`probes.loops.LoopHooks`).
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from .instrument import RUNTIME, has_function_loops, instrument_loops
from .instrument_conversions import has_function_conversions, mark_conversions
from .probes.loops import LoopHooks
from .probes.traceback_frames import PACKAGE_DIR
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
    # What the rewritten code calls (`probes.loops.LoopProbe` activates it for the run); None
    # where nothing was rewritten.
    hooks: LoopHooks | None = None


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
    body, loops, hooks = _compile_body(tree, source, filename, instrument, compiler)
    last_code = None
    if last is not None:
        ast.fix_missing_locations(last)
        last_code = compiler(last, filename, "eval")
    return PreparedCode(body=body, last=last_code, loops=loops, hooks=hooks)


def _compile_body(
    tree: ast.Module, source: str, filename: str, instrument: bool, compiler: Compiler
) -> tuple[CodeType, list[LoopInfo], LoopHooks | None]:
    """The module's code, its loops rewritten (with their `LoopInfo`s and the hooks the code
    calls, None where it has no loop), or as written."""
    if not instrument:
        return compiler(tree, filename, "exec"), [], None
    # The functions' plain twins: compiled from the same tree, before it is rewritten.
    changes_functions = has_function_loops(tree) or has_function_conversions(tree)
    plain = compiler(tree, filename, "exec") if changes_functions else None
    loops: list[LoopInfo] = []

    def register(lineno: int, text: str, function: str) -> int:
        loops.append(LoopInfo(id=len(loops), lineno=lineno, source=text, function=function))
        return len(loops) - 1

    entered: set[int] = set()
    rewritten, in_functions = instrument_loops(tree, source, register, entered=entered)
    if rewritten:  # no loop, no step of a loop to give a conversion's bytes to
        # inside the rewritten loops and the functions' bodies (see `instrument_conversions`)
        in_functions += mark_conversions(tree, entered)[1]
    hooks = LoopHooks()
    body = bind_runtime(compiler(tree, filename, "exec"), hooks)
    if plain is not None and in_functions:
        try:
            pair_functions(body, plain, hooks.plain_code)
        except _UnpairedError:
            # Never seen. Were it so, the code runs as written and no loop is recorded:
            # functions must never keep the rewritten code after the run.
            return plain, [], None
        hooks.seal(body)
    return body, loops, hooks if loops else None


def bind_runtime(code: CodeType, runtime: object) -> CodeType:
    """`code` with `runtime` in place of the `instrument.RUNTIME` constant, in it and in every
    code object nested in it."""
    consts = []
    changed = False
    for const in code.co_consts:
        if isinstance(const, CodeType):
            bound = bind_runtime(const, runtime)
            changed = changed or bound is not const
            consts.append(bound)
        elif type(const) is str and const == RUNTIME:
            consts.append(runtime)
            changed = True
        else:
            consts.append(const)
    return code.replace(co_consts=tuple(consts)) if changed else code


class _UnpairedError(Exception):
    """The rewritten and the plain compilation do not nest the same code objects."""


def pair_functions(
    rewritten: CodeType, plain: CodeType, pairs: dict[int, tuple[CodeType, CodeType]]
) -> None:
    """Add to `pairs` each code object nested in `rewritten` that differs from its twin in
    `plain` (same place, name, first line and variables), by id, with that twin."""
    ours = [const for const in rewritten.co_consts if isinstance(const, CodeType)]
    theirs = [const for const in plain.co_consts if isinstance(const, CodeType)]
    if len(ours) != len(theirs):
        raise _UnpairedError(rewritten.co_qualname)
    for code, twin in zip(ours, theirs, strict=True):
        if _shape(code) != _shape(twin):
            raise _UnpairedError(code.co_qualname)
        if code != twin:
            pairs[id(code)] = (code, twin)
            pair_functions(code, twin, pairs)


def _shape(code: CodeType) -> tuple[Any, ...]:
    """What a function's `__code__` may only be replaced by a code object that shares."""
    return (
        code.co_qualname,
        code.co_firstlineno,
        code.co_filename,
        code.co_freevars,
        code.co_cellvars,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_varnames[: code.co_argcount + code.co_kwonlyargcount],
        code.co_flags,
    )


def _single_name(node: ast.stmt) -> str | None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0].id
    return None


def run(
    prepared: PreparedCode, globals_: dict[str, Any], locals_: dict[str, Any] | None = None
) -> Any:
    """Execute the body, then evaluate the last expression (if any) and return its value.

    The code runs under the tool's frames (the magic's or the command line's, and these), which
    a plain run does not have: while it runs, Python's recursion limit is raised by as many, so
    that a recursion ends where it would plainly, with the same `RecursionError` (TensorFlow's
    tf.function guide shows one). The limit is put back after, unless the code changed it.
    A script's recursion then ends where it does plainly; a cell's within one level (the C
    calls of IPython's magic machinery count towards the limit too, and no frame shows them).
    """
    __tracebackhide__ = True
    if locals_ is None:
        locals_ = globals_
    limit = sys.getrecursionlimit()
    raised = limit + _tool_frames()
    sys.setrecursionlimit(raised)
    try:
        exec(prepared.body, globals_, locals_)
        if prepared.last is not None:
            return eval(prepared.last, globals_, locals_)
        return None
    finally:
        if sys.getrecursionlimit() == raised:
            sys.setrecursionlimit(limit)


def _tool_frames() -> int:
    """How many more frames the code runs under than it would plainly, read once per run (the
    one other reading of the stack, tests/test_layers.py). A cell's code runs plainly where the
    cell that called the magic runs: the frames from `run` up to that cell's top level
    (``<module>``) are the tool's and IPython's magic machinery, and one more for the code's
    own top level. A script's top level runs plainly at the bottom of the stack: under the
    command line (whose ``__main__`` is this package's) every frame below it is the tool's."""
    frame = sys._getframe(1)  # run's
    count = 0
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and not code.co_filename.startswith(PACKAGE_DIR + os.sep):
            return count + 1
        count += 1
        frame = frame.f_back
    return count + _EXEC_ENTRIES


# `exec` enters the interpreter through C calls that count towards the limit as frames do:
# 2 in Python 3.11, measured (a script's recursion under the command line ended 2 levels early
# without them). IPython runs a plain cell through `exec` too; a plain script has none.
_EXEC_ENTRIES = 2
