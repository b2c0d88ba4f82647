"""Keras calls inside Python loops that redo per-call setup on every iteration.

- `predict_in_loop`: ``model.predict(x)`` in a loop builds a data adapter, a progress bar and
  (on first use) a predict function every call; ``model.predict_on_batch(x)`` runs the compiled
  step directly and also returns NumPy. ``verbose=`` and ``batch_size=`` are dropped (the whole
  ``x`` is one batch, so keep it batch-sized). Calls with other options (``steps=``,
  ``callbacks=``), more than one positional argument, or a tf.data dataset built in the cell
  as input are left alone.
- `compile_once`: ``model.compile(...)`` in a loop rebuilds the train function (and a new
  optimizer, when given by name) on every iteration. It moves before the loop when the model
  is built outside the loop and its arguments use nothing the loop assigns.
- `fit_once`: ``for e in range(E): model.fit(..., epochs=1)`` (only that call, plus optional
  printing) becomes one ``model.fit(..., epochs=E)``; the ``epochs=e + 1, initial_epoch=e``
  form too. A history kept from the call then holds all epochs.
- `train_on_batch_in_loop`: ``model.fit(x, y, epochs=1, verbose=0)`` on data the loop makes
  each iteration (a replay buffer's sample), one batch a call as measured, becomes
  ``model.train_on_batch(x, y)``: the same training step, without a call's set-up.
  ``sample_weight=`` and ``class_weight=`` are kept; ``epochs=1``, ``verbose=``,
  ``shuffle=`` and ``batch_size=`` dropped (the whole ``x`` was one batch). A call whose
  result is used (its history), or with other options (callbacks, validation), is left alone.
"""

from __future__ import annotations

import libcst as cst

from .common import (
    Cell,
    aliases,
    dotted,
    enclosing_loops,
    find_kwarg,
    hoist_target,
    insert_before,
    int_value,
    loaded_names,
    loads_after,
    loop_at_line,
    loop_body,
    method_name,
    parse_expr,
    positional_args,
    remove,
    remove_args,
    replace,
    rewrite_cell,
    same_expr,
    set_kwarg,
    single_small,
    small_statements,
    stored_names,
    walk,
)
from .pipeline import dataset_names, is_dataset

_DROPPED_PREDICT_OPTIONS = {"verbose", "batch_size"}
_DROPPED_FIT_OPTIONS = {"epochs", "verbose", "shuffle", "batch_size"}
_KEPT_FIT_OPTIONS = {"x", "y", "sample_weight", "class_weight"}


def predict_in_loop(source: str, *, loop_lineno: int | None = None) -> str | None:
    """``model.predict(x)`` inside a loop becomes ``model.predict_on_batch(x)``.

    `loop_lineno` (1-based line of `source`) limits the rewrite to calls inside that loop.
    """

    def transform(cell: Cell) -> cst.Module | None:
        chosen = None
        if loop_lineno is not None:
            chosen = loop_at_line(cell, loop_lineno)
            if chosen is None:
                return None
        names = aliases(cell.module)
        datasets = dataset_names(names, cell.module)
        edits = {}
        for node in walk(cell.module):
            if method_name(node) != "predict":
                continue
            x = find_kwarg(node, "x") or next(iter(positional_args(node)), None)
            if x is not None and is_dataset(names, x.value, datasets):
                continue  # predict_on_batch takes one batch, not a dataset
            loops = enclosing_loops(cell, node)
            if not loops or (chosen is not None and chosen not in loops):
                continue
            if len(positional_args(node)) > 1 or any(a.star for a in node.args):
                continue
            keywords = {a.keyword.value for a in node.args if a.keyword is not None}
            if keywords - _DROPPED_PREDICT_OPTIONS - {"x"}:
                continue
            edits[node] = _to_predict_on_batch
        return replace(cell.module, edits) if edits else None

    return rewrite_cell(source, transform)


def _to_predict_on_batch(call: cst.Call) -> cst.Call:
    dropped = [a for a in call.args if a.keyword and a.keyword.value in _DROPPED_PREDICT_OPTIONS]
    call = remove_args(call, dropped)
    return call.with_changes(func=call.func.with_changes(attr=cst.Name("predict_on_batch")))


def compile_once(source: str) -> str | None:
    """Move ``model.compile(...)`` out of loops that do not change what it uses."""

    def transform(cell: Cell) -> cst.Module | None:
        names = aliases(cell.module)
        edits: dict[cst.CSTNode, object] = {}
        for statement in list(walk(cell.module)):
            small = single_small(statement)
            if not isinstance(small, cst.Expr):
                continue
            call = small.value
            if method_name(call) != "compile":
                continue
            receiver = dotted(call.func.value)
            if receiver is None or names.qualify(receiver) == "re":
                continue
            reads = loaded_names(call)
            target = hoist_target(cell, statement, reads, set())
            if target is None or not _built_before(cell, receiver.split(".")[0], target):
                continue
            remove(edits, [statement])
            insert_before(edits, target, [statement])
        return replace(cell.module, edits) if edits else None

    return rewrite_cell(source, transform)


def _built_before(cell: Cell, name: str, loop: cst.CSTNode) -> bool:
    """`name` is bound before `loop` starts, or nowhere in the cell (an earlier cell built it)."""
    start = cell.line(loop)
    bound_lines = [
        cell.line(node)
        for node in walk(cell.module)
        if isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement)
        and not isinstance(node, cst.For | cst.While | cst.If | cst.With | cst.Try)
        and name in stored_names(node)
    ]
    return not bound_lines or min(bound_lines) < start


def fit_once(source: str) -> str | None:
    """``for e in range(E): model.fit(..., epochs=1)`` becomes ``model.fit(..., epochs=E)``."""

    def transform(cell: Cell) -> cst.Module | None:
        edits = {}
        for loop in walk(cell.module):
            new = _single_fit(cell, loop)
            if new is not None:
                edits[loop] = new
        return replace(cell.module, edits) if edits else None

    return rewrite_cell(source, transform)


def _single_fit(cell: Cell, loop: cst.CSTNode) -> cst.SimpleStatementLine | None:
    if not (
        isinstance(loop, cst.For)
        and isinstance(loop.target, cst.Name)
        and loop.orelse is None
        and isinstance(loop.iter, cst.Call)
        and dotted(loop.iter.func) == "range"
        and len(loop.iter.args) == 1
        and not loop.iter.args[0].star
    ):
        return None
    epoch = loop.target.value
    count = loop.iter.args[0].value
    fits, others = [], []
    for statement in loop_body(loop):
        smalls = small_statements(statement)
        if not smalls:
            return None  # a compound statement: more than a fit and prints
        for small in smalls:
            value = small.value if isinstance(small, cst.Expr | cst.Assign) else None
            if method_name(value) == "fit" and _fit_target_ok(small):
                fits.append((statement, small, value))
            else:
                others.append(small)
    if len(fits) != 1 or len(small_statements(fits[0][0])) != 1:
        return None
    statement, small, call = fits[0]
    if any(not _is_print(o) for o in others):
        return None
    if any(a.star for a in call.args) or len(positional_args(call)) > 3:
        return None
    epochs = find_kwarg(call, "epochs")
    initial = find_kwarg(call, "initial_epoch")
    reads = loaded_names(
        call.with_changes(args=[a for a in call.args if a is not epochs and a is not initial])
    )
    if initial is not None:
        # model.fit(..., epochs=e + 1, initial_epoch=e)
        if not (
            isinstance(initial.value, cst.Name)
            and initial.value.value == epoch
            and epochs is not None
            and same_expr(epochs.value, parse_expr(f"{epoch} + 1"))
        ):
            return None
        call = remove_args(call, [initial])
    elif epochs is not None and int_value(epochs.value) != 1:
        return None
    result = small.targets[0].target.value if isinstance(small, cst.Assign) else None
    if epoch in reads or (result is not None and result in reads):
        return None
    if loads_after(cell, {epoch}, loop):
        return None
    new_call = set_kwarg(call, "epochs", count)
    new_small = small.with_changes(value=new_call)
    return statement.with_changes(
        body=[new_small], leading_lines=[*loop.leading_lines, *statement.leading_lines]
    )


def _fit_target_ok(small: cst.CSTNode) -> bool:
    if isinstance(small, cst.Expr):
        return True
    return (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
    )


def _is_print(small: cst.CSTNode) -> bool:
    return (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and dotted(small.value.func) == "print"
    )


def train_on_batch_in_loop(source: str, *, loop_lineno: int | None = None) -> str | None:
    """``model.fit(x, y, epochs=1, ...)`` on data bound in the loop at `loop_lineno` becomes
    ``model.train_on_batch(x, y)`` (see the module's docstring). The caller has measured
    one batch a call: the rewrite cannot see how many samples ``x`` holds."""

    def transform(cell: Cell) -> cst.Module | None:
        chosen = loop_at_line(cell, loop_lineno) if loop_lineno is not None else None
        if loop_lineno is not None and chosen is None:
            return None
        edits = {}
        for statement in walk(cell.module):
            small = single_small(statement)
            if not isinstance(small, cst.Expr) or method_name(small.value) != "fit":
                continue
            call = small.value
            loops = enclosing_loops(cell, statement)
            if not loops or (chosen is not None and chosen not in loops):
                continue
            if _fit_of_one_batch_ok(call) and _data_made_in(loops[0], call):
                edits[call] = _to_train_on_batch
        return replace(cell.module, edits) if edits else None

    return rewrite_cell(source, transform)


def _fit_of_one_batch_ok(call: cst.Call) -> bool:
    """A fit call train_on_batch can take: x and y (positional or named), weights, and
    options that mean nothing for one batch; one epoch."""
    if any(a.star for a in call.args) or len(positional_args(call)) > 2:
        return False
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    if keywords - _DROPPED_FIT_OPTIONS - _KEPT_FIT_OPTIONS:
        return False
    epochs = find_kwarg(call, "epochs")
    return epochs is None or int_value(epochs.value) == 1


def _data_made_in(loop: cst.CSTNode, call: cst.Call) -> bool:
    """The fit's data is bound in the loop (its target or the body's assignments): new data
    each iteration, not the same data fitted again (`fit_once`'s case)."""
    data = [a for a in call.args if a.keyword is None or a.keyword.value in ("x", "y")]
    made = stored_names(loop)
    return bool(data) and all(loaded_names(a.value) & made for a in data)


def _to_train_on_batch(call: cst.Call) -> cst.Call:
    dropped = [a for a in call.args if a.keyword and a.keyword.value in _DROPPED_FIT_OPTIONS]
    call = remove_args(call, dropped)
    return call.with_changes(func=call.func.with_changes(attr=cst.Name("train_on_batch")))
