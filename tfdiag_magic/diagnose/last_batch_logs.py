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
given, where Keras 2's averaged them over the epoch.

## Why it hurts
The curve `fit` prints and `History` keeps is one batch per epoch: noise, not the trend. Read
under the tool on keras-io's WGAN-GP (512 images, batch 64): epoch 0 showed `d_loss` -12.7 and
`g_loss` 12.34, where the means over its 8 batches were -2.12 and 4.11 (`d_loss` ranged from
-12.7 to 8.7). Early stopping or a checkpoint that monitors such a key judges one batch.

## Evidence we show
The model, each such key with its epochs: the value shown (the last batch's), the epoch's
mean, its least and largest value, and its batches. Read from the logs Keras hands its
callbacks after each batch (a reference to each value kept, read once at the epoch's end),
only for a fit whose first batch returned keys that no metric holds.

## Fix
Track each value with a `keras.metrics.Mean`, as keras-io's Keras 3 examples do: create
`self.d_loss_tracker = keras.metrics.Mean(name="d_loss")` in `__init__`, list the trackers in a
`metrics` property (Keras resets them every epoch), call `self.d_loss_tracker.update_state(
d_loss)` in `train_step`, and return `{m.name: m.result() for m in self.metrics}`.

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
    keys = list(dict.fromkeys(epoch.key for epoch in mine if _misread(epoch)))
    worst = max(off, key=lambda epoch: abs(epoch.shown - epoch.mean) / _range(epoch))
    shown = [epoch for epoch in mine if epoch.key in keys][: SHOWN_MOST * len(keys)]
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"The {_names(keys)} fit showed for each epoch is its last batch's, not the"
            " epoch's mean"
        ),
        detail=(
            f"The `train_step` of model `{model}` returns {_names(keys)}, which no metric of the"
            " model holds: Keras 3 then shows, and `History` keeps, what the step returned for"
            f" each epoch's last batch. In epoch {worst.epoch}, `{worst.key}` was shown as"
            f" {worst.shown:.4g}, where its mean over the epoch's {worst.batches} batches was"
            f" {worst.mean:.4g} (from {worst.least:.4g} to {worst.largest:.4g});"
            f" {len(off)} of {len(mine)} epoch values read were off their mean by a tenth of"
            " their range or more."
        ),
        fix=(
            "Track each value with a `keras.metrics.Mean`: `self.d_loss_tracker ="
            ' keras.metrics.Mean(name="d_loss")` in `__init__`, the trackers listed in a'
            " `metrics` property (Keras resets them every epoch), `update_state(d_loss)` in"
            " `train_step`, and `return {m.name: m.result() for m in self.metrics}`."
        ),
        evidence={
            "model": model,
            "keys": keys,
            "epochs": [
                {
                    "key": epoch.key,
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
