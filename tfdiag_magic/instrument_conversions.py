"""Marks the NumPy arrays that the code converts to tensors itself, step after step.

Inside the bodies of the loops that `instrument` rewrote, wherever they are (the top level's,
and those of the functions and methods the code defines, such as a script's ``main()``), and
anywhere in the bodies of the functions and methods `instrument` looked into (a
``get_batch(i)`` helper that a loop calls), the first argument of a call named
``convert_to_tensor`` or ``constant`` (``tf.convert_to_tensor(x[i:j])``, ``tf.constant(batch)``,
``keras.ops.convert_to_tensor(...)``) is passed through the loop runtime first:

    tf.convert_to_tensor(ARG, ...)   ==>   tf.convert_to_tensor(RUNTIME.host(ARG), ...)

`host` adds a NumPy array's bytes to the next step's ``host_bytes`` and returns the value
itself, so the call gets what it would have got; the argument is evaluated once, as written,
and a call that raises raises from the user's line. `host` counts only what the run's own
thread converts while one of the code's loops runs, outside any step or Keras call: a helper
that loads and converts the whole dataset before the loop adds nothing to any step. A function
made from this code gets its plain compilation back after the run (`code_runner`,
`probes.loops`), as for its loops.

Functions `instrument` leaves as written (given to a compiler, generators, coroutines, Keras
layers' methods) are left so here too; a function's or class's body counts only for itself,
not as part of a loop around its definition. Nothing of TensorFlow is patched: the
conversions TensorFlow and Keras make internally, many per eager step, cost nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

from .instrument import RUNTIME

CONVERSIONS = frozenset({"convert_to_tensor", "constant"})


class _ConversionMarker(ast.NodeTransformer):
    def __init__(self, functions: Collection[int]) -> None:
        self.functions = functions  # ids of the function nodes whose bodies are marked
        self.depth = 0  # rewritten loop bodies we are in, in the scope being visited
        self.everywhere = False  # in the body of one of `functions`
        self.scopes = 0  # function bodies we are in
        self.count = 0
        self.in_functions = 0  # of the marks, those inside functions

    def _scope(self, node: ast.AST, everywhere: bool) -> ast.AST:
        # Decorators, defaults and bases run where the definition runs; the body when the
        # function is called (or the class made), not per iteration of a loop around it.
        body = node.body  # type: ignore[attr-defined]
        node.body = []  # type: ignore[attr-defined]
        self.generic_visit(node)
        saved = self.depth, self.everywhere
        self.depth, self.everywhere = 0, everywhere
        self.scopes += 1
        try:
            node.body = [self.visit(statement) for statement in body]  # type: ignore[attr-defined]
        finally:
            self.depth, self.everywhere = saved
            self.scopes -= 1
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._scope(node, id(node) in self.functions)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._scope(node, False)  # `instrument` leaves coroutines as written

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return self._scope(node, False)  # its methods are functions of their own

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node  # `instrument` leaves lambdas as written

    def _loop(self, node: ast.For | ast.While) -> ast.AST:
        for field in ("target", "iter", "test"):
            value = getattr(node, field, None)
            if value is not None:
                setattr(node, field, self.visit(value))
        rewritten = _rewritten(node)
        self.depth += rewritten
        node.body = [self.visit(statement) for statement in node.body]
        self.depth -= rewritten
        node.orelse = [self.visit(statement) for statement in node.orelse]
        return node

    def visit_For(self, node: ast.For) -> ast.AST:
        return self._loop(node)

    def visit_While(self, node: ast.While) -> ast.AST:
        return self._loop(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if not (self.depth or self.everywhere) or _name_of(node.func) not in CONVERSIONS:
            return node
        marked = self.count
        if node.args and not isinstance(node.args[0], ast.Starred):
            node.args[0] = _through_host(node.args[0])
            self.count += 1
        else:
            for keyword in node.keywords:
                if keyword.arg == "value":
                    keyword.value = _through_host(keyword.value)
                    self.count += 1
        if self.scopes:
            self.in_functions += self.count - marked
        return node


def _rewritten(node: ast.For | ast.While) -> bool:
    """Whether `instrument` rewrote the loop: a ``for`` over ``RUNTIME.iterate...(...)``, a
    ``while`` whose body begins with ``RUNTIME.tick...(...)``."""
    if isinstance(node, ast.For):
        call: ast.expr | None = node.iter
    else:
        first = node.body[0] if node.body else None
        call = first.value if isinstance(first, ast.Expr) else None
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Constant)
        and call.func.value.value == RUNTIME
        and call.func.attr.startswith(("iterate", "tick"))
    )


def _name_of(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _through_host(value: ast.expr) -> ast.expr:
    """``RUNTIME.host(value)`` (the loop hooks' constant, as `instrument` places it)."""
    runtime = ast.copy_location(ast.Constant(RUNTIME), value)
    function = ast.copy_location(ast.Attribute(value=runtime, attr="host", ctx=ast.Load()), value)
    return ast.copy_location(ast.Call(func=function, args=[value], keywords=[]), value)


def mark_conversions(tree: ast.Module, functions: Collection[int] = ()) -> tuple[int, int]:
    """Rewrite, in place, the conversion calls inside the rewritten loops of `tree` and in the
    bodies of the function nodes whose ids are in `functions` (`instrument_loops`'s
    ``entered``); returns (how many, of which inside functions)."""
    marker = _ConversionMarker(functions)
    tree.body = [marker.visit(statement) for statement in tree.body]
    return marker.count, marker.in_functions


def has_function_conversions(tree: ast.Module) -> bool:
    """Whether a function or method in `tree` makes a conversion call that may be marked."""
    return any(
        isinstance(node, ast.FunctionDef)
        and any(
            isinstance(inner, ast.Call) and _name_of(inner.func) in CONVERSIONS
            for inner in ast.walk(node)
        )
        for node in ast.walk(tree)
    )
