"""A Keras 2 `train_step` made to report its loss under Keras 3 (`untracked-loss`).

A step that ends ``return {"loss": loss}`` returns names that are exactly the model's metrics'
after ``compile(loss=...)``, and Keras 3's `fit` shows those metrics (its own loss tracker) in
their place, which the step never updates. The rewrite feeds the loss to the metric named
"loss" and returns the metrics' results, as keras-io's Keras 3 guide to customizing `fit`
does:

    for metric in self.metrics:
        if metric.name == "loss":
            metric.update_state(loss)
    return {m.name: m.result() for m in self.metrics}

Only the `train_step` of the class the diagnosis named (and its `test_step`, which Keras'
`evaluate` and a fit's validation show the same way), and only its own ``return`` statements
of a one-entry dict keyed ``"loss"`` (not those of functions defined inside it).

A Keras 2 step that calls ``self.compiled_metrics.update_state(y, y_pred)`` calls Keras 3's
shim, which gives every `Mean` metric (the loss tracker among them) the predictions alone;
`metrics_fed_by_hand` puts in its place the loss fed to the metric named "loss" and the
labels and predictions to the others, the loss being the name the step takes the gradient of
(``tape.gradient(loss, ...)``), else the one it assigns from ``self.compiled_loss(...)``,
``self.compute_loss(...)`` or ``self.loss(...)``.
"""

from __future__ import annotations

import libcst as cst

from .common import Cell, parse_cell, parse_stmts, rewrite_cell, walk_skipping_defs


def feed_loss_to_metrics(
    source: str, train_step_of: str, test_step_of: str | None = None
) -> str | None:
    """The cell with `train_step_of`'s `train_step` feeding its loss to the model's metrics,
    and `test_step_of`'s `test_step` too where that is given and returns its loss alike;
    None where that class, its step or such a return is not in the cell."""

    def both(cell: Cell) -> cst.Module | None:
        module = _transform(cell.module, train_step_of, "train_step")
        if module is not None and test_step_of:
            module = _transform(module, test_step_of, "test_step") or module
        return module

    return rewrite_cell(source, both)


def feed_val_loss_to_metrics(source: str, test_step_of: str) -> str | None:
    """The cell with `test_step_of`'s `test_step` feeding its loss to the model's metrics;
    None where that class, its step or such a return is not in the cell."""
    return rewrite_cell(source, lambda cell: _transform(cell.module, test_step_of, "test_step"))


def metrics_fed_by_hand(source: str, train_step_of: str) -> str | None:
    """The cell with `train_step_of`'s `train_step` feeding the model's metrics itself instead
    of through ``compiled_metrics``; None where the class, its step, such a call or the name
    of its loss is not in the cell."""
    return rewrite_cell(source, lambda cell: _by_hand(cell, train_step_of))


LOSS_METHODS = ("compiled_loss", "compute_loss", "loss")


def calls_compiled_metrics(source: str, class_name: str, method: str) -> bool:
    """Whether the method `method` of the cell's class `class_name` calls
    ``self.compiled_metrics.update_state(...)`` (Keras 3's shim) itself."""
    cell = parse_cell(source)
    if cell is None:
        return False
    found = _method(cell.module, class_name.rsplit(".", 1)[-1], method)
    if found is None or not found.params.params:
        return False
    model = found.params.params[0].name.value
    return any(_shim_call(node, model) is not None for node in walk_skipping_defs(found.body))


def _by_hand(cell: Cell, class_name: str) -> cst.Module | None:
    step = _train_step(cell.module, class_name.rsplit(".", 1)[-1])
    if step is None or not step.params.params:
        return None
    model = step.params.params[0].name.value
    loss = _differentiated(step) or next(
        (
            target.target.value
            for node in walk_skipping_defs(step.body)
            if isinstance(node, cst.Assign) and len(node.targets) == 1
            for target in node.targets
            if isinstance(target.target, cst.Name) and _calls_method(node.value, model)
        ),
        None,
    )
    if loss is None:
        return None
    replaced = {}
    for node in walk_skipping_defs(step.body):
        call = _shim_call(node, model)
        if call is not None:
            others = call.with_changes(func=cst.parse_expression("metric.update_state"))
            replaced[node] = _loop(model, loss, cst.Module([]).code_for_node(others), node)
    if not replaced:
        return None
    return cell.module.deep_replace(step, step.visit(_Replace(replaced)))  # type: ignore[return-value]


def _differentiated(step: cst.FunctionDef) -> str | None:
    """The name the step takes the gradient of (``tape.gradient(loss, ...)``): its loss."""
    for node in walk_skipping_defs(step.body):
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "gradient"
            and node.args
            and node.args[0].keyword is None
            and isinstance(node.args[0].value, cst.Name)
        ):
            return node.args[0].value.value
    return None


def _calls_method(value: cst.BaseExpression, model: str) -> bool:
    """``model.compiled_loss(...)`` and the like."""
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and isinstance(value.func.value, cst.Name)
        and value.func.value.value == model
        and value.func.attr.value in LOSS_METHODS
    )


def _shim_call(node: cst.CSTNode, model: str) -> cst.Call | None:
    """The call of a line ``model.compiled_metrics.update_state(...)``, else None."""
    if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1:
        return None
    expr = node.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
        return None
    func = expr.value.func
    if (
        isinstance(func, cst.Attribute)
        and func.attr.value == "update_state"
        and isinstance(func.value, cst.Attribute)
        and func.value.attr.value == "compiled_metrics"
        and isinstance(func.value.value, cst.Name)
        and func.value.value.value == model
    ):
        return expr.value
    return None


def _loop(
    model: str, loss: str, others: str, line: cst.SimpleStatementLine
) -> cst.FlattenSentinel[cst.BaseStatement]:
    """The metric named "loss" fed `loss`, the others by the call `others`."""
    return _in_place_of(
        line,
        f"for metric in {model}.metrics:\n"
        f'    if metric.name == "loss":\n'
        f"        metric.update_state({loss})\n"
        f"    else:\n"
        f"        {others}\n",
    )


def _in_place_of(
    line: cst.SimpleStatementLine, code: str
) -> cst.FlattenSentinel[cst.BaseStatement]:
    """The statements of `code`, to stand where `line` stood (its comments above kept)."""
    statements = parse_stmts(code)
    first = statements[0].with_changes(leading_lines=line.leading_lines)
    return cst.FlattenSentinel([first, *statements[1:]])


def _transform(module: cst.Module, class_name: str, method: str) -> cst.Module | None:
    step = _method(module, class_name.rsplit(".", 1)[-1], method)
    if step is None or not step.params.params:
        return None
    model = step.params.params[0].name.value  # `self`, as the method calls it
    returns = [
        node
        for node in walk_skipping_defs(step.body)
        if isinstance(node, cst.SimpleStatementLine)
        and len(node.body) == 1
        and _returned_loss(node.body[0]) is not None
    ]
    if not returns:
        return None
    replaced = {
        line: _feeding(model, _returned_loss(line.body[0]), line)  # type: ignore[arg-type]
        for line in returns
    }
    new_step = step.visit(_Replace(replaced))
    return module.deep_replace(step, new_step)  # type: ignore[return-value]


def _train_step(module: cst.Module, class_name: str) -> cst.FunctionDef | None:
    return _method(module, class_name, "train_step")


def _method(module: cst.Module, class_name: str, name: str) -> cst.FunctionDef | None:
    """The method `name` that the class `class_name` of the cell defines, else None."""
    for node in walk_skipping_defs(module):
        if isinstance(node, cst.ClassDef) and node.name.value == class_name:
            for statement in node.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                    return statement
    return None


def _returned_loss(statement: cst.BaseSmallStatement) -> cst.BaseExpression | None:
    """The loss of ``return {"loss": EXPR}``, else None."""
    if not isinstance(statement, cst.Return) or not isinstance(statement.value, cst.Dict):
        return None
    elements = statement.value.elements
    if len(elements) != 1 or not isinstance(elements[0], cst.DictElement):
        return None
    key = elements[0].key
    if not isinstance(key, cst.SimpleString) or key.evaluated_value != "loss":
        return None
    return elements[0].value


def _feeding(
    model: str, loss: cst.BaseExpression, line: cst.SimpleStatementLine
) -> cst.FlattenSentinel[cst.BaseStatement]:
    return _in_place_of(
        line,
        f"for metric in {model}.metrics:\n"
        f'    if metric.name == "loss":\n'
        f"        metric.update_state({cst.Module([]).code_for_node(loss)})\n"
        f"return {{m.name: m.result() for m in {model}.metrics}}\n",
    )


class _Replace(cst.CSTTransformer):
    def __init__(self, replaced: dict[cst.CSTNode, cst.FlattenSentinel[cst.BaseStatement]]):
        super().__init__()
        self._replaced = replaced

    def leave_SimpleStatementLine(  # noqa: N802 (libcst's name)
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        return self._replaced.get(original, updated)
