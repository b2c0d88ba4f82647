"""last-batch-logs: fit showed one batch's value of what a custom `train_step` returns as the
epoch's, where it varied from batch to batch."""

from __future__ import annotations

from ..findings import Finding
from ..record import EpochLogs, Record
from .evidence import rounded

CODE = "last-batch-logs"
TITLE = "Fit shows the last batch's value of what the train_step returns, not the epoch's"
DOC = """\
## What it detects
A model's own `train_step` returns values that no metric of the model holds (`{"d_loss":
d_loss, "g_loss": g_loss}`, keras-io's WGAN-GP), and within an epoch they varied from batch to
batch. Keras 3 shows the metrics' results after an epoch only where the step returns exactly
their names; otherwise it shows, and `History` keeps, what the step returned for the epoch's
last batch (`Trainer._get_metrics_result_or_logs`), and its progress bar shows every value as
given, where Keras 2's averaged them over the epoch. A `test_step` that returns such values
(keras-io's knowledge distillation returns `{"student_loss": ...}`) makes `evaluate` return,
and `fit` show as its `val_` values, the last test batch's the same way.

## Why it hurts
The curve `fit` prints and `History` keeps is one batch per epoch: noise, not the trend. Read
under the tool on keras-io's WGAN-GP (512 images, batch 64): epoch 0 showed `d_loss` -12.7 and
`g_loss` 12.34, where the means over its 8 batches were -2.12 and 4.11 (`d_loss` ranged from
-12.7 to 8.7). Early stopping or a checkpoint that monitors such a key judges one batch.

## Evidence we show
The model, each such key with its epochs (or validations, or evaluate calls): the value shown
(the last batch's), the mean, the least and largest value, and the batches. Read from the logs
Keras hands its callbacks after each batch (a reference to each value kept, read once at the
epoch's or the evaluation's end), only for a top-level fit, its validations or a top-level
evaluate whose first batch returned keys that no metric holds.

## Fix
Track each value with a `keras.metrics.Mean`, as keras-io's Keras 3 examples do: create
`self.d_loss_tracker = keras.metrics.Mean(name="d_loss")` in `__init__`, list the trackers in a
`metrics` property (Keras resets them every epoch), call `self.d_loss_tracker.update_state(
d_loss)` in `train_step` (and in `test_step` for what it returns), and return `{m.name:
m.result() for m in self.metrics}`.

## Threshold
At least one epoch of 3 batches or more whose shown value differs from its mean by at least a
tenth of the range its batches spanned (a value that never varied is shown right). Left out: a
value that is a metric's result at the epoch's end (a tracker's running mean returned under
another name: keras-io's conditional GAN returns its `generator_loss` tracker as `g_loss`) and
one within 5% of the optimizer's learning rate then (a rate on a schedule returned to be shown,
whose last value is the one wanted).
"""

MIN_BATCHES = 3
MIN_OFF = 0.1  # of the epoch's range: the shown value this far from the mean
SHOWN_MOST = 4  # epochs in the evidence


def check(record: Record, source: str | None) -> Finding | None:
    del source  # the fix is the same whatever the step looks like
    off = [epoch for epoch in record.epoch_logs if _misread(epoch)]
    if not off:
        return None
    model = off[0].model
    mine = [epoch for epoch in record.epoch_logs if epoch.model == model]
    off = [epoch for epoch in off if epoch.model == model]
    keys = list(dict.fromkeys(epoch.key for epoch in off))
    worst = max(off, key=lambda epoch: abs(epoch.shown - epoch.mean) / _range(epoch))
    shown = [epoch for epoch in mine if epoch.key in keys][: SHOWN_MOST * len(keys)]
    steps = _steps(off)
    return Finding(
        code=CODE,
        severity="warning",
        title=_title(off, keys),
        detail=(
            f"Model `{model}`'s {_returns(off)}, which no metric of the model holds: Keras 3"
            " then shows, and `History` keeps, what the step returned for the last batch. In"
            f" {_where(worst)}, `{worst.key}` was shown as"
            f" {worst.shown:.4g}, where its mean over the {worst.batches} batches was"
            f" {worst.mean:.4g} (from {worst.least:.4g} to {worst.largest:.4g});"
            f" {len(off)} of {len(mine)} values read were off their mean by a tenth of"
            " their range or more."
        ),
        fix=(
            "Track each value with a `keras.metrics.Mean`: `self.d_loss_tracker ="
            ' keras.metrics.Mean(name="d_loss")` in `__init__`, the trackers listed in a'
            " `metrics` property (Keras resets them every epoch and before each evaluation),"
            f" `update_state(d_loss)` in {steps}, and `return {{m.name: m.result() for m in"
            " self.metrics}`."
        ),
        evidence={
            "model": model,
            "keys": keys,
            "epochs": [
                {
                    "key": epoch.key,
                    "phase": epoch.phase,
                    "epoch": epoch.epoch,
                    "shown": rounded(epoch.shown, 4),
                    "mean": rounded(epoch.mean, 4),
                    "least": rounded(epoch.least, 4),
                    "largest": rounded(epoch.largest, 4),
                    "batches": epoch.batches,
                }
                for epoch in shown
            ],
            "epochs_off": len(off),
            "epochs_read": len(mine),
        },
    )


def _steps(off: list[EpochLogs]) -> str:
    """The steps whose returned values were misread: `train_step`, `test_step` or both."""
    phases = {epoch.phase for epoch in off}
    named = ["`train_step`"] if "train" in phases else []
    if phases - {"train"}:
        named.append("`test_step`")
    return " and ".join(named)


def _returns(off: list[EpochLogs]) -> str:
    """What each step returned, as it returned the keys (fit's "val_" left out): "`train_step`
    returns `d_loss`", "`train_step` returns `a` and its `test_step` returns `b`"."""
    returned: dict[str, list[str]] = {}
    for epoch in off:
        step = "`train_step`" if epoch.phase == "train" else "`test_step`"
        key = epoch.key.removeprefix("val_") if epoch.phase == "validation" else epoch.key
        keys = returned.setdefault(step, [])
        if key not in keys:
            keys.append(key)
    parts = [f"{step} returns {_names(keys)}" for step, keys in returned.items()]
    return " and its ".join(parts)


def _title(off: list[EpochLogs], keys: list[str]) -> str:
    phases = {epoch.phase for epoch in off}
    fit, evaluate = bool(phases - {"evaluate"}), "evaluate" in phases
    if fit and evaluate:
        return (
            f"The {_names(keys)} fit showed for each epoch and evaluate returned are the last"
            " batch's, not the mean over the batches"
        )
    if evaluate:
        return (
            f"The {_names(keys)} evaluate returned is its last batch's, not the mean over its"
            " batches"
        )
    return f"The {_names(keys)} fit showed for each epoch is its last batch's, not the epoch's mean"


def _where(epoch: EpochLogs) -> str:
    """Where the value was shown, epochs counted from 1 as fit prints them."""
    if epoch.phase == "evaluate":
        return f"evaluate call {epoch.epoch + 1}"
    if epoch.phase == "validation":
        return f"epoch {epoch.epoch + 1}'s validation"
    return f"epoch {epoch.epoch + 1}"


def _range(epoch: EpochLogs) -> float:
    return max(epoch.largest - epoch.least, 1e-12)


def _misread(epoch: EpochLogs) -> bool:
    return (
        epoch.batches >= MIN_BATCHES
        and epoch.largest > epoch.least
        and abs(epoch.shown - epoch.mean) >= MIN_OFF * _range(epoch)
    )


def _names(keys: list[str]) -> str:
    quoted = [f"`{key}`" for key in keys]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
