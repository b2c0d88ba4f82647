"""Marks the NumPy arrays that the code's loops convert to tensors themselves, step after step.

Inside the bodies of the loops that `instrument` rewrote, wherever they are (the top level's,
and those of the functions and methods the code defines, such as a script's ``main()``), the
first argument of a call named ``convert_to_tensor`` or ``constant``
(``tf.convert_to_tensor(x[i:j])``, ``tf.constant(batch)``, ``keras.ops.convert_to_tensor(...)``)
is passed through the loop runtime first:

    tf.convert_to_tensor(ARG, ...)   ==>   tf.convert_to_tensor(RUNTIME.host(ARG), ...)

`host` adds a NumPy array's bytes to the next step's ``host_bytes`` and returns the value
itself, so the call gets what it would have got; the argument is evaluated once, as written,
and a call that raises raises from the user's line. `host` counts only what the run's own
thread converts outside any step or Keras call, and a function made from this code gets its
plain compilation back after the run (`code_runner`, `probes.loops`), as for its loops.

Only the loops `instrument` rewrote are looked into (it recognises them by the runtime's
calls it put there): a loop it left as written (in a generator, a function given to a
compiler, a Keras layer's method) is left so here too. The body of a function or class
defined inside a loop runs when it is called, not once per iteration: only its own rewritten
loops count. Nothing of TensorFlow is patched: the conversions TensorFlow and Keras make
internally, many per eager step, cost nothing.
"""

from __future__ import annotations

import ast

from .instrument import RUNTIME

CONVERSIONS = frozenset({"convert_to_tensor", "constant"})


class _ConversionMarker(ast.NodeTransformer):
    def __init__(self) -> None:
        self.depth = 0  # rewritten loop bodies we are in, in the scope being visited
        self.count = 0

    def _scope(self, node: ast.AST) -> ast.AST:
        # A function's or class's body runs when called, not per iteration of a loop around
        # its definition: inside it only its own rewritten loops count.
        depth, self.depth = self.depth, 0
        try:
            self.generic_visit(node)
        finally:
            self.depth = depth
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._scope(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._scope(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return self._scope(node)

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
        if not self.depth or _name_of(node.func) not in CONVERSIONS:
            return node
        if node.args and not isinstance(node.args[0], ast.Starred):
            node.args[0] = _through_host(node.args[0])
            self.count += 1
        else:
            for keyword in node.keywords:
                if keyword.arg == "value":
                    keyword.value = _through_host(keyword.value)
                    self.count += 1
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


def mark_conversions(tree: ast.Module) -> int:
    """Rewrite, in place, the conversion calls inside the loops of `tree`; returns how many."""
    marker = _ConversionMarker()
    tree.body = [marker.visit(statement) for statement in tree.body]
    return marker.count
