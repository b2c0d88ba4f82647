"""The epochs of a `model.fit` call and the time between them that was Keras' own.

Between one epoch's last training step and the next one's first, Keras makes the next epoch's
iterator (for arrays, a tf.data pipeline built again), runs the validation steps, the
callbacks' epoch hooks and writes the epoch's logs. Less the validation steps and the
callbacks (both measured), the rest is Keras' own set-up of the epoch: a part of the run's time
split (`stats.time_split`) and what the keras-epoch-setup finding weighs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .record import KerasCall, Phase, Record


@dataclass(frozen=True)
class EpochSetup:
    """One fit call's epochs and the time between them that was Keras' own."""

    call: KerasCall
    epochs: int
    boundaries: int  # epoch ends followed by another epoch in the call
    setup: float  # seconds between epochs, less the steps and batch hooks in them
    train_time: float  # seconds in the call's training steps
    train_steps: int


def fit_epochs(record: Record, call: KerasCall) -> EpochSetup | None:
    """The epochs of a top-level `fit` call and the gaps between them, from its step rows."""
    steps = record.steps
    starts = steps["start"]
    lo, hi = np.searchsorted(starts, (call.start, call.start + call.duration), side="left")
    phase = steps["phase"][lo:hi]
    train = np.flatnonzero(phase == Phase.TRAIN)
    if train.size < 2:
        return None
    epoch = steps["epoch"][lo:hi][train]
    durations = steps["duration"][lo:hi]
    callbacks = np.nan_to_num(steps["callback_time"][lo:hi].astype(np.float64))
    ends = starts[lo:hi] + durations
    last = np.flatnonzero(epoch[1:] != epoch[:-1])  # indices into `train` of each epoch's end
    if last.size == 0:
        return None
    before, after = train[last], train[last + 1]  # rows (in the call) around each boundary
    if record.reduced and record.step_index is not None and record.dropped is not None:
        # Past `full_rows` a long run's table keeps one row in `stride`: a gap there holds
        # steps it left out, so only the boundaries among the rows kept in full are read.
        whole = record.step_index[lo:hi][after] < record.dropped.full_rows
        before, after = before[whole], after[whole]
        if before.size == 0:
            return None
    gaps = starts[lo:hi][after] - ends[before]
    # Rows inside a gap (validation steps) and the batch hooks around the boundary's rows.
    busy = np.concatenate(([0.0], np.cumsum(durations + callbacks)))
    inside = busy[after] - busy[before + 1]
    hooks = callbacks[before] + callbacks[after]
    setup = float(np.maximum(gaps - inside - hooks, 0.0).sum())
    return EpochSetup(
        call=call,
        epochs=int(np.unique(epoch).size),
        boundaries=int(before.size),
        setup=setup,
        train_time=float(durations[train].sum()),
        train_steps=int(train.size),
    )


def epoch_setup_seconds(record: Record) -> float:
    """Keras' own time between epochs over every top-level fit of two epochs or more: the
    gaps less the validation steps, the batch hooks around them and every callback's epoch
    hooks (`Record.epoch_hook_seconds`, measured over the whole run)."""
    fits = [
        found
        for call in record.keras_calls
        if call.api == "fit"
        for found in [fit_epochs(record, call)]
        if found is not None and found.epochs >= 2
    ]
    if not fits:
        return 0.0
    return max(sum(fit.setup for fit in fits) - record.epoch_hook_seconds, 0.0)
