"""Which of a model's metrics read its outputs as probabilities while its loss reads them as
logits (`metric-on-logits`).

Keras 3 makes ``metrics=["accuracy"]`` a `BinaryAccuracy` for a model with one output unit
(`compile_utils.get_metric`), whatever the loss: it counts an output above 0.5 as class 1. A
loss built with ``from_logits=True`` says the outputs are logits, whose decision boundary is 0
(a probability of 0.5); 0.5 as a logit is a probability of 0.62. `Precision` and `Recall`
threshold at 0.5 the same way. Read once at the end of each fit of a watched model, from what
the model holds: its loss (``model.loss``), its output layer's activation (a model whose
output layer is not known, a subclassed one, is not read), and the metrics `fit` showed
(``model.metrics``, the compiled ones inside `CompileMetrics`), with the last value its
`History` holds for each. Attributes only: nothing runs, and no deprecated property is
touched (``compiled_metrics`` would warn).
"""

from __future__ import annotations

import math
from typing import Any

from ..record import LogitsMetric

# Keras' metrics that count an output above a threshold (of a probability) as class 1, and the
# attribute that holds it: one number, or a list of them.
THRESHOLDED = {"BinaryAccuracy": "threshold", "Precision": "thresholds", "Recall": "thresholds"}


def logits_metrics(model: Any) -> tuple[LogitsMetric, ...]:
    """The model's metrics that threshold its logits above 0; () where there are none, or
    where the loss, the output layer or the metrics cannot be read."""
    try:
        loss = getattr(model, "loss", None)
        if getattr(loss, "from_logits", False) is not True:
            return ()
        layer = _output_layer(model)
        activation = getattr(layer, "activation", None) if layer is not None else None
        if activation is None or getattr(activation, "__name__", "") != "linear":
            return ()
        history = getattr(getattr(model, "history", None), "history", None) or {}
        found = []
        for metric in shown_metrics(model):
            kind = type(metric).__name__
            attribute = THRESHOLDED.get(kind)
            if attribute is None or str(type(metric).__module__).split(".")[0] != "keras":
                continue
            threshold = _threshold(getattr(metric, attribute, None))
            if threshold is None or threshold <= 0.0:
                continue
            shown = history.get(metric.name) or [math.nan]
            found.append(
                LogitsMetric(
                    metric=str(metric.name),
                    kind=kind,
                    threshold=threshold,
                    loss=type(loss).__name__,
                    output_layer=str(getattr(layer, "name", "?")),
                    shown_last=float(shown[-1]),
                )
            )
        return tuple(found)
    except Exception:  # a model that cannot be read so says nothing
        return ()


def _output_layer(model: Any) -> Any:
    """The layer that makes the model's one output: a Sequential's last layer, a functional
    model's output's operation; None for other models and for several outputs."""
    outputs = getattr(type(model), "outputs", None) and model.outputs
    if not isinstance(outputs, (list, tuple)) or len(outputs) != 1:
        return None
    history = getattr(outputs[0], "_keras_history", None)
    return getattr(history, "operation", None)


def shown_metrics(model: Any) -> list[Any]:
    """The metrics `fit` shows: the model's, the compiled ones taken out of `CompileMetrics`."""
    shown = []
    for metric in getattr(model, "metrics", None) or []:
        inner = (
            getattr(metric, "metrics", None) if type(metric).__name__ == "CompileMetrics" else None
        )
        shown.extend(inner or [metric])
    return shown


def _threshold(value: Any) -> float | None:
    """One threshold, from a number or a list of one (Precision's and Recall's)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            return None
        value = value[0]
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
