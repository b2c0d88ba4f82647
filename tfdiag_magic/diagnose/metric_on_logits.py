"""metric-on-logits: accuracy (or precision, recall) read from a model's logits as if they
were probabilities."""

from __future__ import annotations

import math

from ..findings import Finding
from ..record import LogitsMetric, Record, TrainedState
from ..rewrite import threshold_logits_at_zero
from .evidence import first_rewrite, rounded, with_rewrite

CODE = "metric-on-logits"
MAX_NAMED = 6  # other models named in the text (all in the evidence)
TITLE = "A metric counts the model's logits above 0.5 as class 1, not those above 0"
DOC = """\
## What it detects
A model with one output unit, a linear output layer and a loss built with
`from_logits=True` (its outputs are logits) was fitted with a metric that counts an output
above 0.5 as class 1: `metrics=["accuracy"]`, which Keras makes a `BinaryAccuracy` for one
output unit whatever the loss, or `BinaryAccuracy()`, `Precision()` or `Recall()` with their
default threshold.

## Why it hurts
A logit's decision boundary is 0 (a probability of 0.5); a logit of 0.5 is a probability of
0.62. Every example the model gives a probability between 0.5 and 0.62 is predicted class 1 by
the model and counted class 0 by the metric: the accuracy shown is not the model's, and early
in training, when outputs sit near 0, it reads near chance whatever the model knows. Measured
with Keras 3.15 on a small binary classifier (20 features, 2,000 rows, five epochs): `fit`
showed accuracy 0.501 to 0.685; the same model's predictions counted at 0 were 0.788 right, at
0.5 0.713 (`benchmarks/accuracy_on_logits.py`). TensorFlow's word-embeddings tutorial compiles
its logits model with `metrics=['accuracy']`; its "Basic text classification" tutorial uses
`BinaryAccuracy(threshold=0.0)`.

## Evidence we show
The model (the first the run trained so, and the names of the others: `other_models`), its
loss (built with `from_logits=True`) and its output layer (linear), and for each such metric:
its name, its class, its threshold, the probability that threshold stands for, and the last
value `fit` showed. Read from the model at the end of each fit: its loss, its output layer and
its metrics; the tool does not run the model again to count the predictions itself.

## Fix
Threshold at 0: `keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0)` in place of
`"accuracy"` (`Precision(thresholds=0.0)`, `Recall(thresholds=0.0)`), or end the model with a
sigmoid and build the loss with `from_logits=False`. The rewrite does the first in each
`compile` call of the cell whose loss is built with `from_logits=True`.

## Threshold
Read from the model, not timed: the loss's `from_logits` is True, the output layer's
activation is `linear` (a Sequential's last layer, a functional model's one output; models
whose output layer cannot be known, subclassed ones, are not judged), and a `BinaryAccuracy`,
`Precision` or `Recall` among the metrics `fit` showed has a threshold above 0.
"""


def check(record: Record, source: str | None) -> Finding | None:
    faulty = [state for state in record.trained if state.kind == "model" and state.logits_metrics]
    if not faulty:
        return None
    state = faulty[0]
    # Every other model the run trained so (a notebook that compiles seven models in one
    # helper): named, its details are the first's.
    others = list(dict.fromkeys(each.name for each in faulty[1:] if each.name != state.name))
    finding = _finding(state, state.logits_metrics, others)
    kinds = tuple(sorted({metric.kind for each in faulty for metric in each.logits_metrics}))
    return with_rewrite(
        finding, source, first_rewrite(source, (threshold_logits_at_zero, {"kinds": kinds}))
    )


def _probability(logit: float) -> float:
    return 1.0 / (1.0 + math.exp(-logit))


def _finding(state: TrainedState, metrics: tuple[LogitsMetric, ...], others: list[str]) -> Finding:
    first = metrics[0]
    also = ""
    if others:
        named = ", ".join(f"`{name}`" for name in others[:MAX_NAMED])
        more = f" and {len(others) - MAX_NAMED} more" if len(others) > MAX_NAMED else ""
        model = "model" if len(others) == 1 else "models"
        also = f" (and {len(others)} more {model} of the run, the same way: {named}{more})"
    names = ", ".join(f"`{metric.metric}` ({metric.kind})" for metric in metrics)
    shown = [
        f"{metric.metric} {metric.shown_last:.4g}"
        for metric in metrics
        if math.isfinite(metric.shown_last)
    ]
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"`{first.metric}` counts the model's logits above {first.threshold:g} as class 1,"
            " not those above 0"
        ),
        detail=(
            f"The model `{state.name}`{also} is trained with `{first.loss}(from_logits=True)`"
            " on the"
            f" outputs of its linear layer `{first.output_layer}`: logits, whose decision"
            f" boundary is 0 (a probability of 0.5). {names}"
            f" {'counts' if len(metrics) == 1 else 'count'} an output above"
            f" {first.threshold:g} as class 1, a probability of"
            f" {_probability(first.threshold):.2f}: every example the model gives a"
            f" probability between 0.5 and {_probability(first.threshold):.2f} is counted"
            " wrong, and the values `fit` showed"
            + (f" (last: {', '.join(shown)})" if shown else "")
            + " are not the model's."
        ),
        fix=(
            "Threshold at 0: `keras.metrics.BinaryAccuracy(threshold=0.0)` (with"
            ' `name="accuracy"` where it replaces `"accuracy"`, so `History` keeps its key),'
            " `Precision(thresholds=0.0)`, `Recall(thresholds=0.0)`; or end the model with a"
            " sigmoid and build the loss with `from_logits=False`."
        ),
        evidence={
            "model": state.name,
            **({"other_models": others} if others else {}),
            "loss": f"{first.loss}(from_logits=True)",
            "output_layer": first.output_layer,
            "output_activation": "linear",
            "metrics": [
                {
                    "name": metric.metric,
                    "kind": metric.kind,
                    "threshold": metric.threshold,
                    "threshold_as_probability": rounded(_probability(metric.threshold), 3),
                    "shown_last": rounded(metric.shown_last),
                }
                for metric in metrics
            ],
        },
    )
