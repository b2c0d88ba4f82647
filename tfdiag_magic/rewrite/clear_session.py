"""Models built in a loop: clear Keras' global state at the start of each iteration.

Every Keras model or layer built adds to Keras' global state (layer name counters, the graph
of the legacy backend), so a loop that builds a model per iteration (a hyper-parameter sweep,
k-fold training) gets slower and holds more memory each time. The rewrite inserts
``keras.backend.clear_session()`` (spelled the way the cell spells Keras: ``tf.keras.…`` when
it uses ``tf.keras``, ``K.clear_session()`` when it imports the backend as ``K``) as the first
statement of the innermost loop that builds a model.

A call builds a model when it calls ``Sequential``, ``Model``, ``Input``, anything under
``models.``, ``layers.`` or ``applications.`` of Keras (or ``tf.keras``), a class of the cell
derived from a Keras model or layer, or a function of the cell that does one of these.
Limits: a loop that already calls ``clear_session()`` is left alone; models built only inside a
function called from the loop count only when that function is defined in the cell.
"""

from __future__ import annotations

import libcst as cst

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    dotted,
    enclosing_loops,
    import_alias,
    loop_at_line,
    parse_stmt,
    replace,
    rewrite_cell,
    walk,
    walk_skipping_defs,
)

_BUILDERS = ("Sequential", "Model", "Functional", "Input", "models.", "layers.", "applications.")
_BASES = ("Model", "models.Model", "Sequential", "models.Sequential", "layers.Layer", "Layer")


def clear_session_in_loop(source: str, *, loop_lineno: int | None = None) -> str | None:
    """Insert ``keras.backend.clear_session()`` first in loops that build Keras models.

    `loop_lineno` (1-based line of `source`) names the loop to change; by default every
    innermost loop that builds a model.
    """
    return rewrite_cell(source, lambda cell: _rewrite(cell, loop_lineno))


def model_builders(names: Aliases, module: cst.Module) -> set[str]:
    """Names of the cell's functions and classes that build a Keras model when called."""
    builders: set[str] = set()
    for node in walk(module):
        if isinstance(node, cst.ClassDef) and any(
            (names.keras_name(dotted(base.value)) or "") in _BASES for base in node.bases
        ):
            builders.add(node.name.value)
    functions = [n for n in walk(module) if isinstance(n, cst.FunctionDef)]
    changed = True
    while changed:
        changed = False
        for func in functions:
            if func.name.value in builders:
                continue
            if any(builds_model(names, n, builders) for n in walk(func.body)):
                builders.add(func.name.value)
                changed = True
    return builders


def builds_model(names: Aliases, node: cst.CSTNode, builders: set[str]) -> bool:
    if not isinstance(node, cst.Call):
        return False
    name = dotted(node.func)
    if name in builders:
        return True
    return (names.keras_name(name) or "").startswith(_BUILDERS)


def _rewrite(cell: Cell, loop_lineno: int | None) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    builders = model_builders(names, module)
    targets: list[cst.CSTNode] = []
    if loop_lineno is not None:
        loop = loop_at_line(cell, loop_lineno)
        if loop is None or not any(
            builds_model(names, n, builders) for n in walk_skipping_defs(loop.body)
        ):
            return None
        targets = [loop]
    else:
        for node in walk(module):
            if builds_model(names, node, builders):
                loops = enclosing_loops(cell, node)
                if loops and loops[0] not in targets:
                    targets.append(loops[0])
    targets = [t for t in targets if not _clears(t)]
    if not targets:
        return None
    call, missing = _clear_session_call(names, module)
    if call is None:
        return None
    statement = parse_stmt(f"{call}\n")
    edits = {loop: (lambda node: _prepend(node, statement)) for loop in targets}
    module = replace(module, edits)
    return add_import(module, "keras", "keras") if missing else module


def _clears(loop: cst.CSTNode) -> bool:
    return any(
        isinstance(n, cst.Call) and (dotted(n.func) or "").endswith("clear_session")
        for n in walk(loop.body)
    )


def _clear_session_call(names: Aliases, module: cst.Module) -> tuple[str | None, bool]:
    for local, qualified in names.imported.items():
        if qualified in ("keras.backend", "tensorflow.keras.backend"):
            return f"{local}.clear_session()", False
    keras = names.keras(module)
    if keras is not None:
        return f"{keras}.backend.clear_session()", False
    found = import_alias(module, "keras", "keras")
    if found is None:
        return None, False
    return f"{found[0]}.backend.clear_session()", found[1]


def _prepend(loop: cst.CSTNode, statement: cst.BaseStatement) -> cst.CSTNode:
    body = loop.body
    if isinstance(body, cst.IndentedBlock):
        return loop.with_changes(body=body.with_changes(body=[statement, *body.body]))
    rest = cst.SimpleStatementLine(
        body=[
            *body.body[:-1],
            body.body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT),
        ],
        trailing_whitespace=body.trailing_whitespace,
    )
    return loop.with_changes(body=cst.IndentedBlock(body=[statement, rest]))
