"""Batch size and steps per execution: more work per step, fewer Python round trips.

- `larger_batch`: sets the batch size where the cell states it as a number: the
  ``batch_size=`` of ``fit``/``evaluate``/``predict``, the size in ``.batch(n)`` of a tf.data
  chain, and a top-level ``BATCH_SIZE = n`` / ``batch_size = n`` / ``bs = n`` assignment (which
  also covers ``batch_size=BATCH_SIZE`` and ``.batch(BATCH_SIZE)`` uses of it). A batch size
  computed by an expression or swept by a loop is not touched.
- `steps_per_execution`: adds or replaces ``steps_per_execution=`` in ``model.compile(...)``,
  so Keras runs several steps per call into its compiled function.
"""

from __future__ import annotations

import libcst as cst

from .common import (
    Cell,
    aliases,
    dotted,
    find_kwarg,
    int_value,
    method_name,
    positional_args,
    replace,
    rewrite_cell,
    set_kwarg,
    single_small,
    walk,
)

_BATCH_NAMES = {"batch_size", "bs", "batch"}
_KERAS_BATCHED = {"fit", "evaluate", "predict"}


def batch_size_literals(cell: Cell, *, training_only: bool = False) -> list[cst.Integer]:
    """The integer literals that state the cell's batch sizes (see the module documentation).

    With `training_only`, ``evaluate``/``predict`` batch sizes are left out.
    """
    module = cell.module
    assigned = _top_level_int_assignments(module)
    found: list[cst.Integer] = []

    def add(expr: cst.CSTNode | None) -> None:
        if isinstance(expr, cst.Integer):
            found.append(expr)
        elif isinstance(expr, cst.Name) and expr.value in assigned:
            found.append(assigned[expr.value])

    keras_methods = {"fit"} if training_only else _KERAS_BATCHED
    for node in walk(module):
        if not isinstance(node, cst.Call):
            continue
        method = method_name(node)
        if method in keras_methods:
            arg = find_kwarg(node, "batch_size")
            add(arg.value if arg else None)
        elif method == "batch":
            arg = find_kwarg(node, "batch_size")
            args = positional_args(node)
            add(arg.value if arg else (args[0].value if args else None))
    for name, literal in assigned.items():
        if name.lower() in _BATCH_NAMES:
            add(literal)
    unique: list[cst.Integer] = []
    for literal in found:
        if all(literal is not other for other in unique):
            unique.append(literal)
    return unique


def _top_level_int_assignments(module: cst.Module) -> dict[str, cst.Integer]:
    """``NAME = <int>`` at the top level, for names the cell binds exactly once."""
    counts: dict[str, int] = {}
    values: dict[str, cst.Integer] = {}
    for node in walk(module):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    counts[target.target.value] = counts.get(target.target.value, 0) + 1
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            counts[node.target.value] = counts.get(node.target.value, 0) + 1
    for statement in module.body:
        small = single_small(statement)
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and isinstance(small.value, cst.Integer)
        ):
            values[small.targets[0].target.value] = small.value
    return {name: value for name, value in values.items() if counts.get(name) == 1}


def larger_batch(source: str, *, batch_size: int) -> str | None:
    """Set the cell's literal batch sizes to `batch_size`; None when it states none."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")

    def transform(cell: Cell) -> cst.Module | None:
        literals = [lit for lit in batch_size_literals(cell) if int_value(lit) != batch_size]
        if not literals:
            return None
        return replace(cell.module, {lit: cst.Integer(str(batch_size)) for lit in literals})

    return rewrite_cell(source, transform)


def is_keras_compile(node: cst.CSTNode) -> bool:
    """A ``something.compile(...)`` call that is not ``re.compile``."""
    if method_name(node) != "compile":
        return False
    receiver = dotted(node.func.value)
    return receiver is not None and receiver != "re"


def steps_per_execution(source: str, *, steps: int) -> str | None:
    """Add or replace ``steps_per_execution=steps`` in the cell's ``model.compile(...)`` calls."""
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")

    def transform(cell: Cell) -> cst.Module | None:
        names = aliases(cell.module)
        edits = {}
        for node in walk(cell.module):
            if not is_keras_compile(node) or names.qualify(dotted(node.func.value)) == "re":
                continue
            current = find_kwarg(node, "steps_per_execution")
            if current is not None and int_value(current.value) == steps:
                continue
            edits[node] = lambda call: set_kwarg(
                call, "steps_per_execution", cst.Integer(str(steps))
            )
        return replace(cell.module, edits) if edits else None

    return rewrite_cell(source, transform)
