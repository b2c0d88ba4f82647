"""A training step that runs eagerly becomes a compiled one.

Fixes steps executed op by op from Python: a function of the cell that computes gradients with
a GradientTape and applies them (``tape.gradient`` plus ``optimizer.apply_gradients`` or
``optimizer.apply``) gets ``@tf.function``; ``run_eagerly=True`` is removed from
``model.compile(...)``; ``model.run_eagerly = True`` and ``tf.config.run_functions_eagerly(True)``
become ``False`` (the switch is process-wide, or outlives the cell on a model made earlier:
removing the line would not undo it in a kernel where it already ran).

Limits: a function is left alone when it is a method, already a tf.function (decorated or
wrapped with ``tf.function(f)`` in the cell), carries another decorator, or does things that
behave differently or fail inside a graph: ``print``, ``.numpy()``, ``.item()``, ``float()``,
``int()``, ``bool()``, ``len()``, ``.append()``, NumPy or ``time`` calls, creating variables,
layers, models or optimizers, ``global``/``nonlocal``, ``yield``.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
import libcst.matchers as m

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    dotted,
    find_kwarg,
    import_alias,
    method_name,
    remove_args,
    replace,
    rewrite_cell,
    walk_skipping_defs,
)

_UNSAFE_BUILTINS = {"print", "float", "int", "bool", "len", "input", "breakpoint"}
_UNSAFE_METHODS = {"numpy", "item", "append", "extend", "tolist"}
_BUILDERS = ("Sequential", "Model", "Input", "models.", "layers.", "optimizers.", "applications.")


def compile_eager_step(source: str) -> str | None:
    """Make eager training steps of the cell compiled ones; None when nothing applies."""
    return rewrite_cell(source, _rewrite)


def is_tf_function(names: Aliases, expr: cst.CSTNode) -> bool:
    """Whether `expr` is ``tf.function`` (or a call of it, as in ``@tf.function(...)``)."""
    if isinstance(expr, cst.Call):
        expr = expr.func
    return names.qualify(dotted(expr)) == "tensorflow.function"


def wrapped_functions(names: Aliases, module: cst.Module) -> set[str]:
    """Names of functions the cell passes to ``tf.function(f)``."""
    calls = m.findall(module, m.Call(args=[m.Arg(), m.ZeroOrMore()]))
    wrapped = {dotted(c.args[0].value) for c in calls if is_tf_function(names, c)}
    return wrapped - {None}


def _is_step(names: Aliases, func: cst.FunctionDef) -> bool:
    methods = {method_name(n) for n in walk_skipping_defs(func)}
    return "gradient" in methods and bool(methods & {"apply_gradients", "apply"})


_UNSAFE = (
    m.Global()
    | m.Nonlocal()
    | m.Yield()
    | m.Call(m.Name(m.MatchIfTrue(_UNSAFE_BUILTINS.__contains__)))
    | m.Call(m.Attribute(attr=m.Name(m.MatchIfTrue(_UNSAFE_METHODS.__contains__))))
)


def _graph_safe(names: Aliases, func: cst.FunctionDef) -> bool:
    return graph_safe_nodes(names, walk_skipping_defs(func))


def graph_safe_nodes(names: Aliases, nodes: Iterable[cst.CSTNode]) -> bool:
    """Whether none of `nodes` does what behaves differently or fails inside a graph (the
    module's docstring lists it)."""
    for node in nodes:
        if m.matches(node, _UNSAFE):
            return False
        if isinstance(node, cst.Call):
            name = dotted(node.func)
            qualified = names.qualify(name) or ""
            keras_name = names.keras_name(name) or ""
            if (
                qualified.split(".")[0] in ("numpy", "time")
                or qualified == "tensorflow.Variable"
                or keras_name.startswith(_BUILDERS)
            ):
                return False
    return True


def _rewrite(cell: Cell) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    wrapped = wrapped_functions(names, module)
    edits: dict[cst.CSTNode, object] = {}
    to_decorate: list[cst.FunctionDef] = []
    compile_call = m.Call(m.Attribute(attr=m.Name("compile")))
    for node in m.findall(module, m.FunctionDef() | compile_call | m.SimpleStatementLine()):
        if isinstance(node, cst.FunctionDef):
            block = cell.parent(node)
            if isinstance(cell.parent(block), cst.ClassDef):
                continue  # a method: Keras compiles train_step itself
            if node.decorators or node.name.value in wrapped or node.asynchronous:
                continue
            if _is_step(names, node) and _graph_safe(names, node):
                to_decorate.append(node)
        elif isinstance(node, cst.Call):
            flag = find_kwarg(node, "run_eagerly")
            if flag is not None and m.matches(flag.value, m.Name("True")):
                edits[node] = lambda call, flag=flag: remove_args(
                    call, [a for a in call.args if a.keyword and a.keyword.value == "run_eagerly"]
                )
        else:
            for small in node.body:
                if _eager_switch(names, small):
                    edits[small] = _switched_off

    missing_import = False
    tf = names.tf
    if to_decorate:
        found = import_alias(module, "tensorflow", "tf")
        if found is None:
            to_decorate = []
        else:
            tf, missing_import = found
    for func in to_decorate:
        decorator = cst.Decorator(decorator=cst.parse_expression(f"{tf}.function"))
        edits[func] = lambda node, decorator=decorator: node.with_changes(
            decorators=[decorator, *node.decorators]
        )
    if not edits:
        return None
    module = replace(module, edits)
    return add_import(module, "tensorflow", tf) if missing_import else module


def _switched_off(node: cst.CSTNode) -> cst.CSTNode:
    """The switch with False for True: removing the line would not undo a process-wide
    ``run_functions_eagerly(True)`` (or a model's ``run_eagerly``) that already ran in the
    kernel; setting it to False does, in the same run that verifies the fix."""
    if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
        call = node.value
        arg = call.args[0].with_changes(value=cst.Name("False"))
        return node.with_changes(value=call.with_changes(args=[arg]))
    if isinstance(node, cst.Assign):
        return node.with_changes(value=cst.Name("False"))
    return node


_SWITCHES = (
    "tensorflow.config.run_functions_eagerly",
    "tensorflow.config.experimental_run_functions_eagerly",
)


def _eager_switch(names: Aliases, small: cst.CSTNode) -> bool:
    """``tf.config.run_functions_eagerly(True)`` or ``model.run_eagerly = True``."""
    switch = m.Call(
        m.MatchIfTrue(lambda f: names.qualify(dotted(f)) in _SWITCHES), [m.Arg(m.Name("True"))]
    )
    attribute = m.AssignTarget(m.Attribute(attr=m.Name("run_eagerly")))
    return m.matches(small, m.Expr(switch) | m.Assign([attribute], m.Name("True")))
