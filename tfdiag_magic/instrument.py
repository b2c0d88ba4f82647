"""Rewrites the loops of a cell or script so that each iteration and its wait for data is recorded.

Two kinds of loops are rewritten, with line numbers kept (tracebacks point at the user's lines):

- the code's own top-level loops (also inside top-level ``if``/``with``/``try`` blocks and other
  loops), which run once, during the run;
- the loops of the functions and methods the code defines: those functions outlive the run, so
  their loops call the runtime's *guarded* entries (``iterate_guarded``, ...), which iterate
  plainly on another thread, inside a tf.function or a Keras call, and once the run is over;
  after the run every function made from this code gets its plain compilation back
  (`code_runner`, `probes.loops`).

    for T in ITER: BODY          try:
                          ==>        for T in RUNTIME.iterate(ITER, ID): BODY
                                 finally:
                                     RUNTIME.end(ID)

``while TEST: BODY`` becomes ``while TEST: RUNTIME.tick(ID); BODY`` in the same try/finally.
RUNTIME is no name: the rewritten code loads the string constant `RUNTIME`, which
`code_runner` replaces by the runtime object in the compiled code's constants. Nothing is bound
in the user's globals or builtins, and code still running when the run ends (a thread, a
finalizer) finds the runtime there, idle.

Left exactly as written: class bodies and lambdas; generator functions and coroutines (a
suspended generator runs its loop interleaved with its consumer's, so their iterations are not
its own; its consumer's loop already times each item); functions given to a compiler
(``@tf.function``, ``@jit``, ``tf.function(f)``, ``keras.layers.Lambda(f)``: they read the
function's source or bytecode); and methods of Keras layers and models (their ``call`` runs
inside every step).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

# A string no source holds; `code_runner.bind_runtime` puts the runtime in its place.
RUNTIME = "\x00tfdiag_magic loop runtime\x00"

# register(lineno, first line, enclosing function's qualified name or "") -> the loop's id
Register = Callable[[int, str, str], int]

# Decorators and calls that compile a function from its source or bytecode, by the last part
# of their dotted name, or by the library they come from.
_COMPILING = frozenset(
    {
        "function",  # tf.function
        "jit",
        "njit",
        "vectorize",
        "guvectorize",
        "cfunc",
        "stencil",
        "script",
        "trace",
        "compile",
        "defun",
        "do_not_convert",
        "pmap",
        "vmap",
        "py_function",
        "numpy_function",
        "Lambda",  # keras.layers.Lambda marshals its function's code
    }
)
_LIBRARIES = frozenset({"tf", "tensorflow", "keras", "numba", "nb", "jax", "torch", "cython"})
# Keras and TensorFlow classes whose methods run inside every step.
_LAYER_BASES = frozenset({"Layer", "Model", "Sequential", "Functional", "Module"})

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _call(at: ast.AST, method: str, *args: ast.expr) -> ast.Call:
    """``RUNTIME.method(*args)``, every new node placed at `at` (no walk to fix them later)."""
    runtime = ast.copy_location(ast.Constant(RUNTIME), at)
    function = ast.copy_location(ast.Attribute(value=runtime, attr=method, ctx=ast.Load()), at)
    return ast.copy_location(ast.Call(func=function, args=list(args), keywords=[]), at)


def _dotted(node: ast.expr) -> list[str]:
    """``tf.function(...)`` -> ["tf", "function"]; [] for anything that is no dotted name."""
    if isinstance(node, ast.Call):
        node = node.func
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return []
    parts.append(node.id)
    return parts[::-1]


def _compiles(node: ast.expr) -> bool:
    """Whether a decorator or a callee may compile the function it is given."""
    parts = _dotted(node)
    return bool(parts) and (parts[-1] in _COMPILING or parts[0] in _LIBRARIES)


def _given_to_compilers(tree: ast.AST) -> set[str]:
    """Names passed to a compiling call anywhere in `tree` (``tf.function(train_step)``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _compiles(node.func):
            values = [*node.args, *(keyword.value for keyword in node.keywords)]
            names.update(value.id for value in values if isinstance(value, ast.Name))
    return names


def _is_generator(node: ast.FunctionDef) -> bool:
    """Whether `node`'s own body yields (a nested function's yield is its own)."""
    pending: list[ast.AST] = list(node.body)
    while pending:
        current = pending.pop()
        if isinstance(current, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(current, _SCOPES):
            pending.extend(ast.iter_child_nodes(current))
    return False


# The fields of a statement that hold statements: loops are statements, so the rewrite walks
# these only, never an expression (a lambda holds none).
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _statements(node: ast.AST) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for field in _BLOCKS:
        for item in getattr(node, field, ()):
            # an except clause or a match case holds statements without being one
            found.extend(
                item.body if isinstance(item, (ast.excepthandler, ast.match_case)) else [item]
            )
    return found


def has_function_loops(tree: ast.Module) -> bool:
    """Whether a function or method in `tree` has a loop that `instrument_loops` may rewrite."""
    pending: list[tuple[ast.stmt, bool]] = [(statement, False) for statement in tree.body]
    while pending:
        statement, in_function = pending.pop()
        if in_function and isinstance(statement, (ast.For, ast.While)):
            return True
        inside = in_function or isinstance(statement, ast.FunctionDef)
        pending.extend((inner, inside) for inner in _statements(statement))
    return False


class _LoopRewriter(ast.NodeVisitor):
    """Rewrites the loops among the statements it visits (it never visits an expression)."""

    def __init__(self, lines: list[str], register: Register, functions: bool, tree: ast.AST):
        self.lines = lines
        self.register = register
        self.functions = functions
        self.count = 0
        self.in_functions = 0  # loops rewritten inside functions
        self.scope: list[str] = []  # qualified name of the function or class being visited
        self.where = "top"  # "top", "function" or "class" (a class body's own statements)
        self.skipped_names = _given_to_compilers(tree) if functions else set()
        self.layer_classes: set[str] = set()
        self.entered: set[int] = set()  # ids of the function nodes whose bodies were visited

    # -- scopes --------------------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if not self.functions or self._left_alone(node):
            return node
        self.entered.add(id(node))
        return self._inside(node, node.name, "function")

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return node  # a coroutine's loop runs interleaved with the event loop's other work

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        if not self.functions:
            return node
        bases = [_dotted(base) for base in node.bases]
        if any(
            parts
            and (
                parts[-1] in _LAYER_BASES
                or parts[-1].endswith(("Layer", "Model"))
                or parts[-1] in self.layer_classes
            )
            for parts in bases
        ):
            self.layer_classes.add(node.name)
            return node
        return self._inside(node, node.name, "class")

    def _left_alone(self, node: ast.FunctionDef) -> bool:
        return (
            node.name in self.skipped_names
            or any(_compiles(decorator) for decorator in node.decorator_list)
            or _is_generator(node)
        )

    def visit(self, node: ast.AST) -> ast.AST:
        visitor = getattr(self, "visit_" + node.__class__.__name__, None)
        if visitor is not None:
            return visitor(node)
        self._blocks(node)  # an if, with, try, match...: the statements in it
        return node

    def _blocks(self, node: ast.AST) -> None:
        for field in _BLOCKS:
            items = getattr(node, field, None)
            if not items:
                continue
            if isinstance(items[0], (ast.excepthandler, ast.match_case)):
                for item in items:
                    item.body = [self.visit(statement) for statement in item.body]
            else:
                setattr(node, field, [self.visit(statement) for statement in items])

    def _inside(self, node: ast.FunctionDef | ast.ClassDef, name: str, where: str) -> ast.AST:
        saved = self.where
        # As Python writes __qualname__: a function's own names are "<locals>" of it.
        names = ["<locals>", name] if saved == "function" else [name]
        self.scope.extend(names)
        self.where = where
        try:
            node.body = [self.visit(statement) for statement in node.body]
        finally:
            del self.scope[-len(names) :]
            self.where = saved
        return node

    def _qualname(self) -> str:
        return ".".join(self.scope)

    # -- loops ---------------------------------------------------------------------------------

    def _loop_id(self, node: ast.stmt) -> int:
        line = self.lines[node.lineno - 1].strip() if node.lineno <= len(self.lines) else ""
        self.count += 1
        if self.where == "function":
            self.in_functions += 1
        return self.register(node.lineno, line[:160], self._qualname())

    def _wrap(self, loop: ast.stmt, loop_id: int, end: str) -> ast.Try:
        call = ast.copy_location(ast.Expr(value=self._runtime(loop, end, loop_id)), loop)
        wrapped = ast.Try(body=[loop], handlers=[], orelse=[], finalbody=[call])
        return ast.copy_location(wrapped, loop)

    @staticmethod
    def _runtime(at: ast.AST, method: str, loop_id: int, *args: ast.expr) -> ast.Call:
        return _call(at, method, *args, ast.copy_location(ast.Constant(loop_id), at))

    def _names(self) -> tuple[str, str, str]:
        if self.where == "function":
            return "iterate_guarded", "tick_guarded", "end_guarded"
        return "iterate", "tick", "end"

    def visit_For(self, node: ast.For) -> ast.AST:
        if self.where == "class":  # a class body's own loop: only the functions in it
            self._blocks(node)
            return node
        iterate, _, end = self._names()
        loop_id = self._loop_id(node)  # before the loops inside it: ids in source order
        self._blocks(node)
        node.iter = self._runtime(node.iter, iterate, loop_id, node.iter)
        return self._wrap(node, loop_id, end)

    def visit_While(self, node: ast.While) -> ast.AST:
        if self.where == "class":
            self._blocks(node)
            return node
        _, tick, end = self._names()
        loop_id = self._loop_id(node)
        self._blocks(node)
        call = ast.copy_location(ast.Expr(value=self._runtime(node, tick, loop_id)), node)
        node.body = [call, *node.body]
        return self._wrap(node, loop_id, end)


def instrument_loops(
    tree: ast.Module,
    source: str,
    register: Register,
    functions: bool = True,
    entered: set[int] | None = None,
) -> tuple[int, int]:
    """Rewrite the loops of `tree` in place; returns (loops rewritten, of which in functions).

    `register(lineno, first_line, function)` is called once per loop, in source order, and
    returns the loop's id; `function` is the qualified name of the function the loop is in
    ("" at the top level). With `functions` False only the top-level loops are rewritten.
    `entered`, if given, gets the ids of the function nodes whose bodies were looked into
    (every function and method but those left as written), loops or not.
    """
    rewriter = _LoopRewriter(source.splitlines(), register, functions, tree)
    tree.body = [rewriter.visit(statement) for statement in tree.body]
    if entered is not None:
        entered.update(rewriter.entered)
    return rewriter.count, rewriter.in_functions
