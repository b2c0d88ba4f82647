"""slow-callback: a Keras callback takes a large share of each step."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Kind, Phase, Record
from ..stats import warmup_mask
from ..units import seconds, share
from .evidence import rounded

CODE = "slow-callback"
TITLE = "A Keras callback slows every batch"
DOC = """\
## What it detects
Keras callbacks whose per-batch hooks (`on_train_batch_end` and friends) take a large share of
the time of the batches they run around: logging to a file or the network on every batch,
computing metrics in NumPy, reading the loss (which waits for the device), saving, plotting.

## Why it hurts
Batch hooks run on the training thread between steps: the next step cannot start until they
return, and reading tensors in them forces the host to wait for the device every batch.

## Evidence we show
Time in callbacks against time in the steps, per callback class (each one's batch hooks are
timed on their own), and the share of the run.

## Fix
Do the work per epoch (`on_epoch_end`) or every N batches; keep values as tensors until they
are needed; for the progress bar, `verbose=2` prints once per epoch. A Keras callback's own
work per batch cannot be moved (Keras 3's `TensorBoard` passes each logged value to
`tf.summary.scalar` after every batch, even with `update_freq='epoch'`, where nothing is
written: 0.12 ms a value here): `steps_per_execution=N` in `compile()` runs the batch hooks
once every N batches (20 epochs of 20 batches with `TensorBoard`: 2.63 s, its batch hooks
called 400 times, at 1; 1.22 s and 20 calls at 20, measured here). `ModelCheckpoint` and
`BackupAndRestore` with a number for `save_freq` save that often: `'epoch'` saves once an epoch.

## Threshold
Callback time at least 20% of step time and at least 0.2 s in all, over the steady batches
of one phase (training, evaluation or prediction; the first batch and tracing batches left
out): the same 20% share that TensorBoard's profiler uses for input waits, applied to time
spent outside the step on the training thread.
"""

MIN_SHARE = 0.2
MIN_SECONDS = 0.2


def check(record: Record, source: str | None) -> Finding | None:
    del source
    steps = record.steps
    steady = ~warmup_mask(record)
    best = None
    # Phase by phase: a predict or evaluate run from inside a training callback has batches
    # of its own, whose time is already in the training callback's.
    for phase in ("train", "eval", "predict"):
        in_phase = steps["phase"] == Phase.of(phase)
        keras_rows = (steps["kind"] == Kind.KERAS) & in_phase
        rows = keras_rows & steady
        if not rows.any():
            continue
        left_callbacks, left_work, left_batches = _left_out(record, phase, keras_rows, in_phase)
        callbacks = float(steps["callback_time"][rows].sum()) + left_callbacks
        work = float(steps["duration"][rows].sum()) + left_work
        if callbacks < MIN_SECONDS or callbacks < MIN_SHARE * work:
            continue
        if best is None or callbacks > best[0]:
            best = (callbacks, work, phase, int(rows.sum()) + left_batches)
    if best is None:
        return None
    callbacks, work, phase, batches = best
    per_class = sorted(record.callback_seconds.items(), key=lambda item: -item[1])
    worst = per_class[0] if per_class else None
    evidence = {
        "callback_s": rounded(callbacks),
        "step_s": rounded(work),
        "callback_share_of_step_time": rounded(callbacks / work if work else None, 3),
        "per_callback_s": {name: rounded(value) for name, value in per_class[:8]},
        "phase": phase,
        "batches": batches,
        "per_batch_callback_s": rounded(callbacks / batches),
    }
    who = f" — mostly `{worst[0]}` ({seconds(worst[1])})" if worst else ""
    return Finding(
        code=CODE,
        severity="warning",
        title=f"Callbacks took {seconds(callbacks)}, {share(callbacks, work)} of step time{who}",
        detail=(
            f"Batch hooks of the callbacks ran for {seconds(callbacks)} against"
            f" {seconds(work)} of steps over {batches} batches; the next step waits"
            " for them each time."
        ),
        fix=_fix(worst[0] if worst else None, record.facts.get("keras_own_callbacks", [])),
        evidence=evidence,
        impact=callbacks,
    )


# Fewer batch hooks, whoever's they are: Keras runs them once per `train_function` call.
FEWER_HOOKS = (
    " `steps_per_execution=N` in `compile()` runs the batch hooks once every N batches (and N"
    " steps in one call); larger batches mean fewer of them too."
)


def _fix(worst: str | None, keras_own: list[str]) -> str:
    """The fix for the callback that took the most time: the user's own callback's work can
    move; a Keras callback's per-batch work is fixed, and only fewer batch hooks cut it."""
    if worst == "ProgbarLogger" and worst in keras_own:
        return (
            "Keras' progress bar (`verbose=1`, which the default `'auto'` picks) redraws after"
            " every batch: `verbose=2` prints one line per epoch, `verbose=0` none."
        )
    if worst == "TensorBoard" and worst in keras_own:
        return (
            "Keras' `TensorBoard` hands every value of a batch's logs to `tf.summary.scalar` after"
            " each batch, even with `update_freq='epoch'` (its default), where nothing is"
            " written (Keras 3)." + FEWER_HOOKS
        )
    if worst in ("ModelCheckpoint", "BackupAndRestore") and worst in keras_own:
        return (
            f"`{worst}` saves every `save_freq` batches when `save_freq` is a number:"
            " `save_freq='epoch'` (the default) saves once an epoch."
        )
    if worst is not None and worst in keras_own:
        return f"`{worst}` is Keras' own callback: its work per batch is fixed." + FEWER_HOOKS
    return (
        "Move the callback's work to `on_epoch_end` or every N batches; use `verbose=2` if the"
        " progress bar is the cost."
    )


def _left_out(
    record: Record, phase: str, keras_rows: np.ndarray, in_phase: np.ndarray
) -> tuple[float, float, int]:
    """Callback seconds, step seconds and batches of the Keras rows of `phase` that a long
    run's table left out (zeros where it keeps every row). Callback time is only ever on Keras
    rows, so its sum is exact; the phase's other sums are shared out by the Keras rows' share
    of the rows the table kept of that phase (all of them in a run of fit alone)."""
    if record.dropped is None:
        return 0.0, 0.0, 0
    kept = int(np.count_nonzero(in_phase))
    share = int(np.count_nonzero(keras_rows)) / kept if kept else 0.0
    dropped = record.dropped
    return (
        dropped.total("callback_time", phase),
        dropped.total("duration", phase) * share,
        round(dropped.total("count", phase) * share),
    )
