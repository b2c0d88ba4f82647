"""keras-epoch-setup: Keras' set-up of each epoch outweighs the training of it."""

from __future__ import annotations

from ..findings import Finding
from ..fit_epochs import EpochSetup, fit_epochs
from ..record import Record
from ..rewrite import datasets_built_once
from ..units import seconds, share
from .dataset_facts import iterates_across_devices
from .epoch_start_stall import measured_starts
from .evidence import call_label, first_rewrite, rounded, with_rewrite

CODE = "keras-epoch-setup"
TITLE = "Keras' set-up of every epoch outweighs the epoch's training"
DOC = """\
## What it detects
A `model.fit` of many short epochs (a small dataset: a few batches an epoch, tens or hundreds
of epochs) whose time between one epoch's last training step and the next one's first, less
the validation steps and the callbacks' own time, is at least twice the training steps' time of
an epoch: Keras' own set-up of each epoch.

## Why it hurts
Keras starts every epoch with a new iterator over the data: for NumPy arrays, pandas frames or
tensors it builds a tf.data pipeline from them again (with the epoch's shuffle), and with
`validation_split` or `validation_data` it does the same for the validation data at the end of
the epoch; then the epoch's logs, history and callbacks. That costs tens of milliseconds an
epoch on a CPU, whatever the epoch's size: with eight batches of 2 ms an epoch (the shape of a
tabular tutorial's `fit(x, y, validation_split=0.2, epochs=100)`), most of `fit` is set-up.

## Evidence we show
The fit calls and their epochs, the training batches an epoch, the set-up per epoch against the
steps' time per epoch, and the set-up's total and share of the run; the data kind.

## Fix
- NumPy, pandas or tensor data: build the tf.data datasets once and pass them to `fit`
  (`tf.data.Dataset.from_tensor_slices((x, y)).shuffle(n).batch(32)`, the validation data as a
  second dataset, `validation_split`'s last part of the arrays); each epoch then only starts an
  iterator over a pipeline that exists. Measured on a 2-CPU machine (README): the set-up of an
  epoch of the tabular tutorial's shape fell to about a third.
- Any data: fewer, longer epochs (`dataset.repeat()` with `steps_per_epoch`), where per-epoch
  callbacks (early stopping, checkpoints) allow it.

## Threshold
At least 10 epochs, the set-up at least 1 s and 25% of the run's time, and per epoch at least
1.5 times the training steps' own time (once, from 0.5 s an epoch): three fifths of an epoch is
set-up. The tabular tutorial's shape read 3.7 times here once (163 ms against 44 ms an epoch),
and 1.1 times with its datasets built once (41 against 36 ms); measured again on the quiet
2-vCPU VM, 1.97-2.2 times (54-64 ms against 27-33 ms), and 0.18-0.54 times fixed (5-13 ms
against 25-27 ms), and 2.7-4.3 times beside a CPU hog: the fix leaves it silent, with margin,
where twice the training (the bar before) missed the unfixed cell in quiet runs. A set-up of
0.5 s an epoch or more, ten times what Keras' own takes on a CPU, is judged by its share of
the run alone (1 s and 25%), and so is one of 0.2 s or more in a fit over a distributed or
copy-to-device dataset, whose iterators over the devices start again each epoch, asleep while
they do: a `MirroredStrategy` fit over a dataset (the distributed-training
tutorial's, 12 epochs on two logical CPUs) spent 3.6 s an epoch between epochs against 2.3 s of
training, 57% of the run, in the restart of each epoch's distributed iterator; `repeat()` with
`steps_per_epoch` halved the fit (71-102 s to 35-42 s). A review's runs of it, with 6,000
images, spent 1.5-2.2 s an epoch against 3.0 s of training, 29-39% of the run, and were silent
at a bar of the epoch's training; its fits took 63-117 s as written and 22-83 s with the fix
(medians 70 and 42 s, beside other programs' work). A later review's runs of it (12 epochs
of 60 batches) spent 0.39-1.03 s an epoch between epochs against 0.64-1.15 s of training,
28-39% of the run, the thread asleep for about 1 s of each epoch's start (0.05 s on a CPU), and
fired in one run of three at 0.5 s; `repeat()` with `steps_per_epoch` took its fit from
13.5-17.6 s to 8.2 s. What is not Keras' own is left out of
the set-up: the validation steps, every callback's batch hooks and the callbacks'
`on_epoch_begin/end` (a checkpoint saved, a plot drawn each epoch), whose time the tool
measures.
"""

MIN_EPOCHS = 10
MIN_SECONDS = 1.0
MIN_RUN_SHARE = 0.25
MIN_SETUP_TO_WORK = 1.5  # the set-up of an epoch against its training steps' time
# A set-up this long an epoch is far beyond Keras' own (41-163 ms an epoch, measured): it
# is judged by its share of the run alone (see the threshold).
LONG_SETUP_S = 0.5
MIN_LONG_SETUP_TO_WORK = 0.0
# A fit over a distributed (or copy-to-device) dataset restarts its devices' iterators each
# epoch, asleep while they start: from this set-up an epoch it is judged by its share alone.
DISTRIBUTED_SETUP_S = 0.2


def check(record: Record, source: str | None) -> Finding | None:
    fits = [
        found
        for call in record.keras_calls
        if call.api == "fit"
        for found in [fit_epochs(record, call)]
        if found is not None
    ]
    fits = [fit for fit in fits if fit.epochs >= 2]
    if not fits:
        return None
    epochs = sum(fit.epochs for fit in fits)
    boundaries = sum(fit.boundaries for fit in fits)
    # The callbacks' epoch hooks are measured over the whole run: all of it is left out.
    # So is the time the epochs' starts slept, waiting for an iterator to shut down: not
    # Keras' work, and `epoch-start-stall`'s finding.
    asleep = sum(start.asleep for _, start in measured_starts(record) if not start.fit_end)
    setup = max(sum(fit.setup for fit in fits) - record.epoch_hook_seconds - asleep, 0.0)
    train_time = sum(fit.train_time for fit in fits)
    if epochs < MIN_EPOCHS or boundaries == 0:
        return None
    per_epoch = setup / boundaries
    work_per_epoch = train_time / epochs
    wall = record.wall_time
    across = [fit for fit in fits if iterates_across_devices(record, fit.call)]
    long_setup = DISTRIBUTED_SETUP_S if across else LONG_SETUP_S
    needed = MIN_LONG_SETUP_TO_WORK if per_epoch >= long_setup else MIN_SETUP_TO_WORK
    if setup < MIN_SECONDS or setup < MIN_RUN_SHARE * wall or per_epoch < needed * work_per_epoch:
        return None
    kinds = sorted({fit.call.data for fit in fits})
    in_memory = all(kind in ("numpy", "tensor", "pandas", "structure") for kind in kinds)
    steps_per_epoch = sum(fit.train_steps for fit in fits) / epochs
    evidence = {
        "fit_calls": len(fits),
        "calls": list(dict.fromkeys(call_label(record, fit.call) for fit in fits))[:4],
        "epochs": epochs,
        "steps_per_epoch": rounded(steps_per_epoch, 2),
        "setup_per_epoch_s": rounded(per_epoch),
        "steps_time_per_epoch_s": rounded(work_per_epoch),
        "setup_s": rounded(setup),
        "share_of_run": rounded(setup / wall, 3) if wall else None,
        "epoch_callbacks_s": rounded(record.epoch_hook_seconds),
        "data": kinds,
    }
    slept = _asleep_at_distributed_starts(record, across)
    if across:
        evidence["distributed_iterator"] = True
        evidence["asleep_at_epoch_starts_s"] = rounded(slept) if slept == slept else None
    if in_memory:
        fix = (
            "Build the tf.data datasets once and pass them to fit:"
            " `tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(32)`, and the"
            " validation data as a second dataset (for validation_split, the arrays' last"
            " part); each epoch then starts an iterator over a pipeline that exists instead of"
            " building one from the arrays. Fewer, longer epochs cut the set-up further."
        )
    else:
        fix = (
            "Use fewer, longer epochs: `dataset.repeat()` and `steps_per_epoch` several epochs'"
            " batches long, with `epochs` divided to match, where per-epoch callbacks allow it"
            " (a shuffled dataset is still shuffled anew each pass, in another order than the"
            " run's)."
        )
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"Keras' set-up of each epoch took {seconds(per_epoch)}, against the epoch's"
            f" {seconds(work_per_epoch)} of training: {share(setup, wall)} of the run"
        ),
        detail=(
            f"The fit at {evidence['calls'][0]}"
            + (f" and {len(fits) - 1} more" if len(fits) > 1 else "")
            + f": {epochs} epochs of about {steps_per_epoch:.0f} training batches each"
            f" ({', '.join(kinds)} data): between epochs, {seconds(setup)} went to"
            + (_distributed_setup(slept) if across else _own_setup())
            + " (validation steps and callbacks left out)."
        ),
        fix=fix,
        evidence=evidence,
        impact=setup,
    )
    if not set(kinds) <= {"numpy", "tensor", "pandas"}:
        return finding  # a structure of arrays (several inputs) is not sliced by the rewrite
    facts: dict[str, object] = {"pandas": "pandas" in kinds}
    for side in ("x_cast", "y_cast"):  # the float types Keras cast pandas data to
        casts = {getattr(fit.call, side) for fit in fits}
        if len(casts) > 1:
            return finding  # fits whose data Keras casts unlike: no one rewrite matches them
        facts[side] = casts.pop()
    return with_rewrite(finding, source, first_rewrite(source, (datasets_built_once, facts)))


def _own_setup() -> str:
    return " Keras building each epoch's iterators, logs and history"


def _distributed_setup(slept: float) -> str:
    """What the set-up of a fit over a distributed dataset went to, with the time its
    epochs' starts slept where the kernel counted it."""
    text = " Keras restarting the distributed iterator over the devices at each epoch's start"
    if slept == slept and slept > 0:
        text += (
            f"; {seconds(slept)} of it the thread slept at those starts (neither running nor"
            " waiting for a CPU) while the devices' iterators started"
        )
    return text


def _asleep_at_distributed_starts(record: Record, fits: list[EpochSetup]) -> float:
    """Seconds the run's thread slept at the starts of the epochs after the first of `fits`
    (NaN where the kernel kept no per-thread counts)."""
    slept = 0.0
    for fit in fits:
        end = fit.call.start + fit.call.duration
        starts = [
            s
            for s in record.epoch_starts
            if fit.call.start <= s.time <= end and not s.validation and not s.fit_end
        ]
        for start in starts[1:]:
            slept += start.asleep
    return slept
