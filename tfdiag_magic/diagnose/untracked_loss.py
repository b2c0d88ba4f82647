"""untracked-loss: the loss `fit` shows is not the loss a custom `train_step` computed."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Phase, Record, TrainedState, WarningRecord
from ..rewrite import (
    calls_compiled_metrics,
    feed_loss_to_metrics,
    feed_val_loss_to_metrics,
    metrics_fed_by_hand,
)
from .evidence import first_rewrite, rounded, with_rewrite

CODE = "untracked-loss"
TITLE = "Keras shows a loss that is not the one the train_step computed"
DOC = """\
## What it detects
A model whose class overrides `train_step` was trained with `fit`, and `fit` showed a loss of
exactly 0 for every epoch while the step itself returned losses that were not 0. Or its class
overrides `test_step`, returning its loss alone, and the fit's validation showed a `val_loss`
of exactly 0 for every epoch it validated.

Keras 3 does not show what a `train_step` returns when the names it returns are exactly the
model's metrics' names (`Model.metrics`: after `compile(loss=...)` with no metrics, only
Keras' own loss tracker, named "loss"). It shows those metrics' values instead
(`Trainer._get_metrics_result_or_logs`), read from the model. A step written for Keras 2 (the
TensorFlow text-generation tutorial's `CustomTraining.train_step`, and many others) computes
its loss with `self.loss(...)` or `self.compiled_loss(...)`, returns `{"loss": loss}`, and never
updates that tracker: `fit`'s progress bar, its `History`, and every callback read the
tracker's empty mean, 0.0, on every step, while the model trains. A `test_step` that returns
`{"loss": loss}` does the same to `val_loss` and to what `evaluate` returns: measured with
Keras 3.15, a fit showed `loss` 5.51, 5.43, 5.35 and `val_loss` 0.0, 0.0, 0.0, and `evaluate`
returned 0.0.

The same step written after keras-io's Keras 2 guide (`loss = self.compiled_loss(y, y_pred)`,
`self.compiled_metrics.update_state(y, y_pred)`, `return {m.name: m.result() for m in
self.metrics}`) returns the metrics' results, but Keras 3 keeps `compiled_metrics` only as a
shim (it warns that `model.compiled_metrics()` is deprecated), which gives every `Mean` among
the model's metrics the predictions alone (`_compiled_metrics_update_state`): the loss tracker
is one, so the loss shown is the running mean of the model's outputs. Measured here with the
guide's model: `fit` showed 0.498, 0.493, 0.490 while the model's mean squared error was 0.176
and its mean output 0.504; with the metrics fed by hand it showed 0.207, 0.194, 0.183.

## Why it hurts
The training cannot be followed: the loss shown never moves, so a diverging or stalled run
looks the same as a good one, and callbacks that watch `loss` (`EarlyStopping`,
`ReduceLROnPlateau`, `ModelCheckpoint(save_best_only=True)`) act on a 0 that never improves.
Keras 2 showed the returned value, so code that worked there goes silent after an upgrade.

## Evidence we show
The model, the class whose `train_step` it runs, the epochs whose loss `fit` showed as 0 (read
from its `History` when it ended), and the losses the steps themselves returned (the tool reads
each step's returned value): how many, their median, least and greatest. For the shim: Keras'
warning, given while a training step of the model traced, and the first and last loss shown;
whether the class's `test_step` in the cell calls the shim too (then `evaluate`'s loss and
`val_loss` are the outputs' mean as well: keras-io's knowledge-distillation example's is).
For a `test_step`: the epochs whose `val_loss` was shown as 0 and the training loss shown
beside them.

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
what the step returned. For the shim, the same loop in place of
`self.compiled_metrics.update_state(y, y_pred)`. The rewrite does either in the named class's
`train_step`.

## Threshold
A `train_step` defined by the code's own class (not Keras'), every epoch of the model's fits
shown with a loss of exactly 0, and at least 3 of its fits' steps returning a loss that is not
0. Measured with Keras 3.15: the TensorFlow text-generation tutorial's step showed 0.0000e+00
for each epoch while it returned about 4.0. Steps of `train_on_batch` do not count: it
returns what the step returns. The shim: Keras' warning given while one of the model's fits'
training steps ran (its train function tracing the step; a `test_step` traces at validation),
or, where the warning was not given (Python shows it once per process: a cell run again warns
no more), the call in that class's `train_step` in the cell; 3 steps or more, and the model's
class defining `train_step`. The shim feeds the loss tracker whenever the model was compiled
with a loss, which its "loss" in `History` shows it was. A `test_step`: every `val_loss` its
fits' `History` holds exactly 0 (at least one), and the step, in the cell, returning `{"loss":
X}` alone: the tool does not read what validation steps return, and a `val_loss` of exactly 0
can be true (a hinge loss whose margins all hold), so the step's text must say why.
"""

MIN_STEPS = 3
# What Keras 3 warns when a step calls `self.compiled_metrics.update_state(y, y_pred)`.
SHIM_WARNING = "`model.compiled_metrics()` is deprecated"


def check(record: Record, source: str | None) -> Finding | None:
    for state in record.trained:
        if state.kind != "model":
            continue
        val_untracked = _val_loss_untracked(state, source)
        if not state.custom_train_step or not state.shown_losses:
            if val_untracked:
                return _val_finding(state, source)
            continue
        shown = np.asarray(state.shown_losses, dtype=np.float64)
        returned, fits, rows = _fit_losses(record, state.name)
        returned = returned[np.isfinite(returned)]
        step_of = {"train_step_of": state.custom_train_step}
        if np.all(shown == 0.0) and np.count_nonzero(returned) >= MIN_STEPS:
            finding = _finding(state, returned, fits, val_untracked)
            if val_untracked:
                step_of["test_step_of"] = state.custom_test_step
            return with_rewrite(
                finding, source, first_rewrite(source, (feed_loss_to_metrics, step_of))
            )
        if val_untracked:
            return _val_finding(state, source)
        if rows.size < MIN_STEPS:
            continue
        warned = _shim_warned_in_training(record, rows)
        # Python shows a warning once per place, and Keras' is given from its own code: a
        # cell run again in the same kernel warns no more. The step's call, in the cell, says
        # the same.
        in_cell = bool(source) and calls_compiled_metrics(
            source, state.custom_train_step, "train_step"
        )
        if warned is not None or in_cell:
            by_hand = first_rewrite(source, (metrics_fed_by_hand, step_of))
            test_step_too = bool(source) and calls_compiled_metrics(
                source, state.custom_train_step, "test_step"
            )
            finding = _predictions_finding(state, warned, int(rows.size), fits, test_step_too)
            return with_rewrite(finding, source, by_hand)
    return None


def _val_loss_untracked(state: TrainedState, source: str | None) -> bool:
    """Whether the model's fits showed a `val_loss` of exactly 0 for every epoch that
    validated, and its class's `test_step`, in the cell, returns its loss alone (``return
    {"loss": X}``) without feeding the metric Keras shows in its place."""
    shown = np.asarray(state.shown_val_losses, dtype=np.float64)
    return (
        bool(state.custom_test_step)
        and shown.size > 0
        and bool(np.all(shown == 0.0))
        and bool(source)
        and feed_val_loss_to_metrics(source, state.custom_test_step) is not None
    )


def _val_finding(state: TrainedState, source: str | None) -> Finding:
    cls = state.custom_test_step
    epochs = len(state.shown_val_losses)
    every = "its one epoch" if epochs == 1 else f"each of its {epochs} epochs"
    trained = np.asarray(state.shown_losses, dtype=np.float64)
    beside = (
        f", while the training loss it showed went from {trained[0]:.4g} to {trained[-1]:.4g}"
        if trained.size and np.any(trained != 0.0)
        else ""
    )
    finding = Finding(
        code=CODE,
        severity="warning",
        title=f"Keras showed a val_loss of 0 for {every}: the test_step's loss is never shown",
        detail=(
            f'`{cls}.test_step` returns `{{"loss": ...}}`, a name that is exactly the model\'s'
            " metrics' (`Model.metrics`), and Keras 3 shows those metrics' values in place of"
            " what the step returns. The step never updates them, so the validation's"
            f" `val_loss` read 0.0 for {every}{beside}; `evaluate` returns 0.0 the same way,"
            " and callbacks that watch `val_loss` (`EarlyStopping`, `ReduceLROnPlateau`,"
            " `ModelCheckpoint(save_best_only=True)`) act on it."
        ),
        fix=(
            "In the test_step, feed the loss to the model's metrics and return their results"
            ' (`for metric in self.metrics: if metric.name == "loss": metric.update_state(loss)`,'
            " then `return {m.name: m.result() for m in self.metrics}`), or return the loss"
            ' under a name that is no metric\'s (`{"eval_loss": loss}`).'
        ),
        evidence={
            "model": state.name,
            "test_step_of": cls,
            "epochs_validated": epochs,
            "shown_val_loss": 0.0,
            "shown_loss_first": rounded(float(trained[0])) if trained.size else None,
            "shown_loss_last": rounded(float(trained[-1])) if trained.size else None,
            "test_step_returns": '{"loss": ...}',
        },
    )
    step_of = {"test_step_of": cls}
    return with_rewrite(finding, source, first_rewrite(source, (feed_val_loss_to_metrics, step_of)))


def _fit_losses(record: Record, model: str) -> tuple[np.ndarray, int, np.ndarray]:
    """The losses the training steps of `model`'s fits returned, how many fits ran, and the
    rows of those steps."""
    steps = record.steps
    reported = (steps["phase"] == Phase.TRAIN) & ~steps["no_loss"]
    inside = np.zeros(steps["phase"].size, dtype=bool)
    fits = 0
    for call in record.keras_calls:
        if call.api == "fit" and call.model == model:
            fits += 1
            end = call.start + call.duration
            inside |= (steps["start"] >= call.start) & (steps["start"] <= end)
    rows = np.flatnonzero((steps["phase"] == Phase.TRAIN) & inside)
    return steps["loss"][reported & inside].astype(np.float64), fits, rows


def _shim_warned_in_training(record: Record, rows: np.ndarray) -> WarningRecord | None:
    """Keras 3's warning that `compiled_metrics` is deprecated, given while one of `rows`
    (a training step, its train function tracing the code's `train_step`) ran."""
    steps = record.steps
    starts = steps["start"][rows]
    ends = starts + steps["duration"][rows]
    for warning in record.warnings:
        if warning.message.startswith(SHIM_WARNING) and np.any(
            (starts <= warning.time) & (warning.time <= ends)
        ):
            return warning
    return None


def _finding(state: TrainedState, returned: np.ndarray, fits: int, val_untracked: bool) -> Finding:
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
            + (
                f' `{state.custom_test_step}.test_step` returns `{{"loss": ...}}` alike: the'
                " validation's `val_loss` read 0.0 for every epoch too, and `evaluate` returns"
                " 0.0."
                if val_untracked
                else ""
            )
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
            "test_step_too": val_untracked,
        },
    )


def _predictions_finding(
    state: TrainedState,
    warning: WarningRecord | None,
    steps: int,
    fits: int,
    test_step_too: bool,
) -> Finding:
    cls = state.custom_train_step
    shown = state.shown_losses
    return Finding(
        code=CODE,
        severity="warning",
        title="Keras shows the mean of the model's outputs as its loss",
        detail=(
            f"`{cls}.train_step` calls `self.compiled_metrics.update_state(y, y_pred)`, which"
            " Keras 3 keeps only as a shim"
            + (
                " (it warned that `model.compiled_metrics()` is deprecated while the first"
                " training step traced)"
                if warning is not None
                else ""
            )
            + ". The shim gives every `Mean`"
            " among the model's metrics the predictions alone, and Keras' loss tracker, named"
            f' "loss", is one: the loss fit showed over its {len(shown)} epoch'
            f"{'s' if len(shown) != 1 else ''} ({shown[0]:.4g} to {shown[-1]:.4g}) is the"
            f" running mean of the model's outputs over {steps} steps, not of its loss."
            + (
                f" `{cls}.test_step` calls it too: the loss `evaluate` returns and the"
                " validation's `val_loss` are the mean of the outputs as well, and feeding"
                " its metrics the same way mends them."
                if test_step_too
                else ""
            )
        ),
        fix=(
            "Feed the loss to the metric named loss and the labels and predictions to the"
            " others: `for metric in self.metrics: metric.update_state(loss) if metric.name =="
            ' "loss" else metric.update_state(y, y_pred)` in place of'
            " `self.compiled_metrics.update_state(y, y_pred)` (keras-io's Keras 3 guide to"
            " customizing `fit`)."
        ),
        evidence={
            "model": state.name,
            "train_step_of": cls,
            "warning": warning.message.splitlines()[0] if warning is not None else None,
            "seen_in": "Keras' warning" if warning is not None else "the cell's train_step",
            "test_step_too": test_step_too,
            "epochs_shown": len(shown),
            "shown_loss_first": rounded(float(shown[0])),
            "shown_loss_last": rounded(float(shown[-1])),
            "steps": steps,
            "fits": fits,
        },
    )
