"""untracked-loss: `fit` shows a loss of 0 that a custom `train_step` never fed to Keras."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Phase, Record, TrainedState
from ..rewrite import feed_loss_to_metrics
from .evidence import first_rewrite, rounded, with_rewrite

CODE = "untracked-loss"
TITLE = "Keras shows a loss of 0 that the train_step never reports to it"
DOC = """\
## What it detects
A model whose class overrides `train_step` was trained with `fit`, and `fit` showed a loss of
exactly 0 for every epoch while the step itself returned losses that were not 0.

Keras 3 does not show what a `train_step` returns when the names it returns are exactly the
model's metrics' names (`Model.metrics`: after `compile(loss=...)` with no metrics, only
Keras' own loss tracker, named "loss"). It shows those metrics' values instead
(`Trainer._get_metrics_result_or_logs`), read from the model. A step written for Keras 2 (the
TensorFlow text-generation tutorial's `CustomTraining.train_step`, and many others) computes
its loss with `self.loss(...)` or `self.compiled_loss(...)`, returns `{"loss": loss}`, and never
updates that tracker: `fit`'s progress bar, its `History`, and every callback read the
tracker's empty mean, 0.0, on every step, while the model trains.

## Why it hurts
The training cannot be followed: the loss shown never moves, so a diverging or stalled run
looks the same as a good one, and callbacks that watch `loss` (`EarlyStopping`,
`ReduceLROnPlateau`, `ModelCheckpoint(save_best_only=True)`) act on a 0 that never improves.
Keras 2 showed the returned value, so code that worked there goes silent after an upgrade.

## Evidence we show
The model, the class whose `train_step` it runs, the epochs whose loss `fit` showed as 0 (read
from its `History` when it ended), and the losses the steps themselves returned (the tool reads
each step's returned value): how many, their median, least and greatest.

## Fix
Feed the step's loss to the model's metrics and return their results, as keras-io's
"Customizing what happens in `fit()`" does for Keras 3:
```python
for metric in self.metrics:
    if metric.name == "loss":
        metric.update_state(loss)
    else:
        metric.update_state(y, y_pred)
return {m.name: m.result() for m in self.metrics}
```
Or return the loss under a name that is no metric's (`{"train_loss": loss}`): `fit` then shows
what the step returned.

## Threshold
A `train_step` defined by the code's own class (not Keras'), every epoch of the model's fits
shown with a loss of exactly 0, and at least 3 of its fits' steps returning a loss that is not
0. Measured with Keras 3.15: the TensorFlow text-generation tutorial's step showed 0.0000e+00
for each epoch while it returned about 4.0. Steps of `train_on_batch` do not count: it
returns what the step returns.
"""

MIN_STEPS = 3


def check(record: Record, source: str | None) -> Finding | None:
    for state in record.trained:
        if state.kind != "model" or not state.custom_train_step or not state.shown_losses:
            continue
        shown = np.asarray(state.shown_losses, dtype=np.float64)
        returned, fits = _fit_losses(record, state.name)
        returned = returned[np.isfinite(returned)]
        if np.all(shown == 0.0) and np.count_nonzero(returned) >= MIN_STEPS:
            finding = _finding(state, returned, fits)
            attempt = (feed_loss_to_metrics, {"train_step_of": state.custom_train_step})
            return with_rewrite(finding, source, first_rewrite(source, attempt))
    return None


def _fit_losses(record: Record, model: str) -> tuple[np.ndarray, int]:
    """The losses the training steps of `model`'s fits returned, and how many fits ran."""
    steps = record.steps
    reported = (steps["phase"] == Phase.TRAIN) & ~steps["no_loss"]
    inside = np.zeros(steps["phase"].size, dtype=bool)
    fits = 0
    for call in record.keras_calls:
        if call.api == "fit" and call.model == model:
            fits += 1
            end = call.start + call.duration
            inside |= (steps["start"] >= call.start) & (steps["start"] <= end)
    return steps["loss"][reported & inside].astype(np.float64), fits


def _finding(state: TrainedState, returned: np.ndarray, fits: int) -> Finding:
    cls = state.custom_train_step
    epochs = len(state.shown_losses)
    median = float(np.median(returned))
    every = "its one epoch" if epochs == 1 else f"each of its {epochs} epochs"
    return Finding(
        code=CODE,
        severity="warning",
        title=f"Keras showed a loss of 0 for {every}; the step returned a median of {median:.4g}",
        detail=(
            f"`{cls}.train_step` returns names that are exactly the model's metrics'"
            " (`Model.metrics`), and Keras 3 shows those metrics' values in place of what the"
            " step returns. The step never updates them: its"
            f" {returned.size} steps over {fits} fit{'s' if fits != 1 else ''} returned losses"
            f" from {float(returned.min()):.4g} to {float(returned.max()):.4g}, and `fit`"
            f" showed 0.0 for {every} (its progress bar, `History`, and callbacks that watch"
            " `loss`)."
        ),
        fix=(
            "In the step, feed the loss to the model's metrics and return their results"
            ' (`for metric in self.metrics: metric.update_state(loss) if metric.name == "loss"'
            " else metric.update_state(y, y_pred)`, then `return {m.name: m.result() for m in"
            " self.metrics}`), or return the loss under a name that is no metric's"
            ' (`{"train_loss": loss}`).'
        ),
        evidence={
            "model": state.name,
            "train_step_of": cls,
            "epochs_shown": epochs,
            "shown_loss": 0.0,
            "steps": int(returned.size),
            "fits": fits,
            "returned_loss_median": rounded(median),
            "returned_loss_min": rounded(float(returned.min())),
            "returned_loss_max": rounded(float(returned.max())),
        },
    )
