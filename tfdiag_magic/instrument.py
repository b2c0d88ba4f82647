"""Rewrites a cell's top-level loops so that each iteration, and its wait for data, is recorded.

Only loops that run as the cell's own top-level code are rewritten (also inside top-level
``if``/``with``/``try`` blocks and other loops), never loops inside functions or classes defined
in the cell: those functions outlive the run, and must keep the user's code exactly.

    for T in ITER: BODY          try:
                          ==>        for T in _tfdiag_loops_.iterate(ITER, ID): BODY
                                 finally:
                                     _tfdiag_loops_.end(ID)

``while TEST: BODY`` becomes ``while TEST: _tfdiag_loops_.tick(ID); BODY`` in the same
try/finally. Line numbers are kept, so tracebacks point at the user's lines.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

RUNTIME_NAME = "_tfdiag_loops_"

Register = Callable[[int, str], int]


def _call(method: str, *args: ast.expr) -> ast.Call:
    return ast.Call(
        func=ast.Attribute(
            value=ast.Name(id=RUNTIME_NAME, ctx=ast.Load()), attr=method, ctx=ast.Load()
        ),
        args=list(args),
        keywords=[],
    )


class _LoopRewriter(ast.NodeTransformer):
    def __init__(self, lines: list[str], register: Register) -> None:
        self.lines = lines
        self.register = register
        self.count = 0

    # Code in these runs later, outside the run: leave it exactly as written.
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node

    def _loop_id(self, node: ast.stmt) -> int:
        line = self.lines[node.lineno - 1].strip() if node.lineno <= len(self.lines) else ""
        self.count += 1
        return self.register(node.lineno, line[:160])

    def _wrap(self, loop: ast.stmt, loop_id: int) -> ast.Try:
        end = ast.Expr(value=_call("end", ast.Constant(loop_id)))
        wrapped = ast.Try(body=[loop], handlers=[], orelse=[], finalbody=[end])
        ast.copy_location(wrapped, loop)
        return ast.fix_missing_locations(wrapped)

    def visit_For(self, node: ast.For) -> ast.AST:
        loop_id = self._loop_id(node)  # before the loops inside it: ids in source order
        self.generic_visit(node)
        node.iter = ast.copy_location(_call("iterate", node.iter, ast.Constant(loop_id)), node.iter)
        return self._wrap(node, loop_id)

    def visit_While(self, node: ast.While) -> ast.AST:
        loop_id = self._loop_id(node)
        self.generic_visit(node)
        tick = ast.copy_location(ast.Expr(value=_call("tick", ast.Constant(loop_id))), node)
        node.body = [tick, *node.body]
        return self._wrap(node, loop_id)


def instrument_loops(tree: ast.Module, source: str, register: Register) -> int:
    """Rewrite the loops of `tree` in place; returns how many loops were instrumented.

    `register(lineno, first_line)` is called once per loop and returns the loop's id.
    """
    rewriter = _LoopRewriter(source.splitlines(), register)
    tree.body = [rewriter.visit(statement) for statement in tree.body]
    ast.fix_missing_locations(tree)
    return rewriter.count
