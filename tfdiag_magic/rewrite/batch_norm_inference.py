"""BatchNormalization layers of a base called with ``training=False`` set non-trainable after
the base is unfrozen (`batchnorm-training-mode`).

Keras 3's `fit` runs every layer of a functional model with ``training=True``, over the
``training=False`` the graph was built with; a non-trainable BatchNormalization runs in
inference mode whatever ``training`` says. For each name the cell calls with
``training=False`` at its top level (``x = base_model(inputs, training=False)``), a loop
that sets the name's BatchNormalization layers non-trainable goes after the cell's last
``NAME.trainable = True`` at its top level (setting ``trainable`` on a model sets it on each of
its layers, so the loop must come after it), or after the call's statement where the cell
unfreezes nothing. Keras is spelled as the cell spells it.
"""

from __future__ import annotations

import libcst as cst

from .common import Cell, aliases, find_kwarg, fresh_name, parse_stmts, rewrite_cell, walk


def freeze_batch_norm(source: str) -> str | None:
    """The cell with the loop inserted for each base it calls with ``training=False``; None
    where it calls none at its top level."""
    return rewrite_cell(source, _transform)


def _transform(cell: Cell) -> cst.Module | None:
    keras = aliases(cell.module).keras(cell.module)
    if keras is None:
        return None
    body = list(cell.module.body)
    after: dict[int, list[str]] = {}  # statement index -> bases whose loop follows it
    for name, call_index in _pinned_calls(body).items():
        unfrozen = [i for i, statement in enumerate(body) if _unfreezes(statement, name)]
        after.setdefault(unfrozen[-1] if unfrozen else call_index, []).append(name)
    if not after:
        return None
    layer = fresh_name(cell.module, ["layer", "bn_layer"])
    new_body: list[cst.BaseStatement] = []
    for index, statement in enumerate(body):
        new_body.append(statement)
        for name in after.get(index, []):
            (loop,) = parse_stmts(
                f"for {layer} in {name}.layers:\n"
                f"    if isinstance({layer}, {keras}.layers.BatchNormalization):\n"
                f"        {layer}.trainable = False\n"
            )
            comments = (
                f"# Keras 3's fit trains {name}'s BatchNormalization layers whatever",
                "# training=False says; non-trainable, they stay in inference mode.",
            )
            lines = [cst.EmptyLine(comment=cst.Comment(text)) for text in comments]
            new_body.append(loop.with_changes(leading_lines=lines))
    return cell.module.with_changes(body=new_body)


def _pinned_calls(body: list[cst.BaseStatement]) -> dict[str, int]:
    """Each name the top-level statements call with ``training=False``, and the index of the
    first statement that does (a call nested in other calls counts: ``Dense(1)(base(x,
    training=False))``)."""
    found: dict[str, int] = {}
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for node in walk(statement):
            if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name):
                continue
            training = find_kwarg(node, "training")
            if (
                training is not None
                and isinstance(training.value, cst.Name)
                and training.value.value == "False"
            ):
                found.setdefault(node.func.value, index)
    return found


def _unfreezes(statement: cst.BaseStatement, name: str) -> bool:
    """Whether the statement is ``NAME.trainable = True``."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if not isinstance(small, cst.Assign) or not isinstance(small.value, cst.Name):
            continue
        if small.value.value != "True":
            continue
        for target in small.targets:
            node = target.target
            if (
                isinstance(node, cst.Attribute)
                and node.attr.value == "trainable"
                and isinstance(node.value, cst.Name)
                and node.value.value == name
            ):
                return True
    return False
