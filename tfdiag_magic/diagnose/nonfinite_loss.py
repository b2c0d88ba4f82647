"""nonfinite-loss: the loss became NaN or Inf."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Record
from .evidence import rounded, training_rows

CODE = "nonfinite-loss"
TITLE = "The loss became NaN or Inf"
DOC = """\
## What it detects
A training step reported a loss that is NaN or infinite. From then on the weights are
usually NaN too and every later step is wasted.

## Why it hurts
It does not slow anything down: it makes the run useless, silently, unless someone looks at
the numbers. Common causes: a learning rate too high (the loss grows, then overflows), a log or
division of zero in a custom loss, unscaled inputs, NaN in the data, float16 overflow without
loss scaling.

## Evidence we show
The step where the loss first stopped being finite, the last finite loss before it, and how
the loss moved just before (rising losses point at the learning rate, a sudden jump at the
data).

## Fix
Lower the learning rate, clip gradients (`clipnorm=1.0` on the optimizer), check the data
(`np.isfinite(x).all()`), use `from_logits=True` losses instead of a softmax then a log, and
stop early with `keras.callbacks.TerminateOnNaN()`. `tf.debugging.enable_check_numerics()`
finds the first op that makes a NaN (slow: for debugging only).

## Threshold
Any NaN or infinite loss that a training step reported. Only losses the code produced count:
a step that reported no loss (a step function returning nothing, a Keras `train_step` whose
logs have other names, such as a GAN's `d_loss` and `g_loss`, the inner steps of a fused
call, a value that is no number) is recorded as "no loss" (the record's `no_loss` column), never
as NaN, and is left out. Keras reports an epoch's running mean, which stays NaN once one batch
was NaN, so the first such step is where it began.
"""


def check(record: Record, source: str | None) -> Finding | None:
    del source
    training = training_rows(record)
    # Steps that reported no loss are left out: a missing loss is no NaN loss.
    rows = training[~record.steps["no_loss"][training]]
    losses = record.steps["loss"][rows].astype(np.float64)
    first = _first_nonfinite(losses)
    if first is None:
        return _in_dropped_rows(record, training.size)
    bad = np.flatnonzero(~np.isfinite(losses[first:])) + first
    before = losses[:first][np.isfinite(losses[:first])]
    step = int(np.searchsorted(training, rows[first]))  # its index among all training steps
    evidence = {
        "first_step": step,
        "loss_at_first_step": str(losses[first]),
        "last_finite_loss": rounded(float(before[-1])) if before.size else None,
        "losses_before": [rounded(float(v)) for v in before[-5:]],
        "nonfinite_steps": int(bad.size),
        "training_steps": int(training.size),
        "steps_without_loss": int(training.size - rows.size),
    }
    trend = ""
    if before.size >= 3 and before[-1] > 10 * max(abs(before[0]), 1e-12):
        trend = " The loss was rising steeply before it: the learning rate is a likely cause."
    unreported = (
        f" ({training.size - rows.size} steps reported no loss and are not counted)"
        if rows.size < training.size
        else ""
    )
    return Finding(
        code=CODE,
        severity="warning",
        title=f"The loss became {losses[first]} at training step {step}",
        detail=(
            f"Training step {step} reported a loss of {losses[first]}"
            + (f" after {before[-1]:.4g}" if before.size else "")
            + f"; {bad.size} of {rows.size} steps that reported a loss had no finite"
            f" loss{unreported}.{trend}"
        ),
        fix="Lower the learning rate or clip gradients (`clipnorm=1.0`), check the data for"
        " NaN, and stop early with `keras.callbacks.TerminateOnNaN()`.",
        evidence=evidence,
    )


def _first_nonfinite(losses: np.ndarray) -> int | None:
    """The index of the first reported loss that is NaN or infinite, or None."""
    nonfinite = np.flatnonzero(~np.isfinite(losses))
    return int(nonfinite[0]) if nonfinite.size else None


def _in_dropped_rows(record: Record, kept_training_steps: int) -> Finding | None:
    """A non-finite loss in a step the reduced table left out (a very long run) is still a
    finding: the recorder counts such losses exactly, though the step's row is not kept."""
    dropped = record.dropped
    if dropped is None or dropped.total("loss_nonfinite", "train") <= 0:
        return None
    count = int(dropped.total("loss_nonfinite", "train"))
    return Finding(
        code=CODE,
        severity="warning",
        title=f"{count} training steps reported a NaN or infinite loss",
        detail=(
            f"{count} training steps past the first {dropped.full_rows:,} rows of the run"
            " reported a loss that was no finite number; the step table keeps one row in"
            f" {dropped.stride:,} there, and none of those kept had one, so where it began is"
            " not known."
        ),
        fix="Lower the learning rate or clip gradients (`clipnorm=1.0`), check the data for"
        " NaN, and stop early with `keras.callbacks.TerminateOnNaN()`.",
        evidence={
            "nonfinite_steps_left_out_of_table": count,
            "training_steps_in_table": int(kept_training_steps),
            "table_stride": dropped.stride,
        },
    )
