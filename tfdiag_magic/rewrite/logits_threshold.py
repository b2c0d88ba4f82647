"""A metric that thresholds a model's logits at 0.5 made to threshold them at 0
(`metric-on-logits`).

In each ``compile(...)`` call of the cell whose ``loss=`` argument is built with
``from_logits=True``, the ``metrics=`` list's entries of the kinds the diagnosis named:
``"accuracy"`` (or ``"acc"``) becomes ``keras.metrics.BinaryAccuracy(name="accuracy",
threshold=0.0)`` (the same name, so `History` and callbacks keep their key), and a
``BinaryAccuracy(...)``, ``Precision(...)`` or ``Recall(...)`` call gets ``threshold=0.0``
(``thresholds=0.0``). TensorFlow's "Basic text classification" tutorial compiles its logits
model so. A compile call whose loss or metrics are names bound elsewhere is left alone: which
model it compiles, and with what, is not in its text.
"""

from __future__ import annotations

import libcst as cst

from .common import (
    Cell,
    aliases,
    dotted,
    find_kwarg,
    method_name,
    parse_expr,
    rewrite_cell,
    set_kwarg,
    walk,
)

ACCURACY_NAMES = ("accuracy", "acc")
THRESHOLD_KEYWORD = {
    "BinaryAccuracy": "threshold",
    "Precision": "thresholds",
    "Recall": "thresholds",
}


def threshold_logits_at_zero(
    source: str, kinds: tuple[str, ...] = ("BinaryAccuracy",)
) -> str | None:
    """The cell with the metrics of `kinds` in its logits models' ``compile`` calls set to
    threshold at 0; None where there is no such call or metric."""
    return rewrite_cell(source, lambda cell: _transform(cell, frozenset(kinds)))


def _transform(cell: Cell, kinds: frozenset[str]) -> cst.Module | None:
    prefix = aliases(cell.module).keras(cell.module)
    if prefix is None:
        return None
    replaced: dict[cst.CSTNode, cst.CSTNode] = {}
    for node in walk(cell.module):
        if not isinstance(node, cst.Call) or method_name(node) != "compile":
            continue
        loss, metrics = find_kwarg(node, "loss"), find_kwarg(node, "metrics")
        if loss is None or metrics is None or not _from_logits(loss.value):
            continue
        if not isinstance(metrics.value, (cst.List, cst.Tuple)):
            continue
        for element in metrics.value.elements:
            new = _at_zero(element.value, kinds, prefix)
            if new is not None:
                replaced[element.value] = new
    if not replaced:
        return None
    return cell.module.visit(_Replace(replaced))  # type: ignore[return-value]


def _from_logits(loss: cst.BaseExpression) -> bool:
    """Whether the loss expression is a call given ``from_logits=True``."""
    if not isinstance(loss, cst.Call):
        return False
    arg = find_kwarg(loss, "from_logits")
    return arg is not None and isinstance(arg.value, cst.Name) and arg.value.value == "True"


def _at_zero(
    metric: cst.BaseExpression, kinds: frozenset[str], prefix: str
) -> cst.BaseExpression | None:
    if isinstance(metric, cst.SimpleString) and "BinaryAccuracy" in kinds:
        name = metric.evaluated_value
        if isinstance(name, str) and name.lower() in ACCURACY_NAMES:
            return parse_expr(f'{prefix}.metrics.BinaryAccuracy(name="{name}", threshold=0.0)')
        return None
    if not isinstance(metric, cst.Call):
        return None
    kind = (dotted(metric.func) or "").rsplit(".", 1)[-1]
    if kind not in kinds or kind not in THRESHOLD_KEYWORD:
        return None
    return set_kwarg(metric, THRESHOLD_KEYWORD[kind], parse_expr("0.0"))


class _Replace(cst.CSTTransformer):
    def __init__(self, replaced: dict[cst.CSTNode, cst.CSTNode]):
        super().__init__()
        self._replaced = replaced

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self._replaced.get(original, updated)
