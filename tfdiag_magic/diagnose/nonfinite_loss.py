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
Any infinite loss in a training step; a NaN loss from a step after a finite one, when every
later step (at least three, and two fused Keras calls) is NaN too. Keras reports an epoch's
running mean, which stays NaN once one batch was NaN, so the first such step is where it
began. The run's loss column also holds NaN where no loss was read (a step that returns
none, a Keras `train_step` that returns other names, the inner steps of a fused call), so a
loss that is NaN from the very first step cannot be told from a missing one and is not
reported.
"""


MIN_TRAILING = 3


def check(record: Record, source: str | None) -> Finding | None:
    del source
    rows = training_rows(record)
    losses = record.steps["loss"][rows].astype(np.float64)
    bad = _nonfinite_from(losses, int(record.steps["fused"][rows].max()) if rows.size else 1)
    if bad is None:
        return None
    first = bad
    bad = np.flatnonzero(~np.isfinite(losses[first:])) + first
    before = losses[:first][np.isfinite(losses[:first])]
    evidence = {
        "first_step": first,
        "loss_at_first_step": str(losses[first]),
        "last_finite_loss": rounded(float(before[-1])) if before.size else None,
        "losses_before": [rounded(float(v)) for v in before[-5:]],
        "nonfinite_steps": int(bad.size),
        "training_steps": int(rows.size),
    }
    trend = ""
    if before.size >= 3 and before[-1] > 10 * max(abs(before[0]), 1e-12):
        trend = " The loss was rising steeply before it: the learning rate is a likely cause."
    return Finding(
        code=CODE,
        severity="warning",
        title=f"The loss became {losses[first]} at training step {first}",
        detail=(
            f"Training step {first} reported a loss of {losses[first]}"
            + (f" after {before[-1]:.4g}" if before.size else "")
            + f"; {bad.size} of {rows.size} steps had no finite loss.{trend}"
        ),
        fix="Lower the learning rate or clip gradients (`clipnorm=1.0`), check the data for"
        " NaN, and stop early with `keras.callbacks.TerminateOnNaN()`.",
        evidence=evidence,
    )


def _nonfinite_from(losses: np.ndarray, fused: int) -> int | None:
    """The first step of the run's non-finite losses, or None.

    NaN is also what the loss column holds where no loss was read (a step returning no loss,
    the inner steps of a fused Keras call), so a NaN counts only as the tail of a run that
    had finite losses: every step after the last finite one, at least a few of them. An
    infinite loss always counts.
    """
    infinite = np.flatnonzero(np.isinf(losses))
    if infinite.size:
        return int(infinite[0])
    finite = np.flatnonzero(np.isfinite(losses))
    if finite.size == 0:
        return None
    tail = losses.size - 1 - int(finite[-1])
    if tail >= max(MIN_TRAILING, 2 * fused):
        return int(finite[-1]) + 1
    return None
