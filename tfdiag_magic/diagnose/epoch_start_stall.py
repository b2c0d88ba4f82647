"""epoch-start-stall: each epoch's first batch waits, asleep, while the iterator over the data
that Keras lets go shuts down."""

from __future__ import annotations

import statistics

from ..findings import Finding
from ..record import EpochStart, KerasCall, Record
from ..units import and_list, seconds, share
from .dataset_facts import iterates_across_devices
from .evidence import call_label, rounded

CODE = "epoch-start-stall"
TITLE = "Epochs or validations start asleep while the last iterator over the data shuts down"
DOC = """\
## What it detects
A `model.fit` whose epochs, or their validations, start late: between an epoch's start (its
callbacks' `on_epoch_begin` done) and its first training batch, or between the epoch's call of
`evaluate` on the validation data and its first batch, the run's thread slept, neither running
on a CPU nor waiting for one, for tenths of a second or seconds, epoch after epoch.

## Why it hurts
Keras makes a new iterator over the data at each epoch's start and at each validation (a
tf.data pipeline, also where the data are arrays) and lets the last one go, and a tf.data
iterator shuts its threads down as it goes: its autotuning thread, and any element still being
made. In TensorFlow 2.21 that can last as long as the autotuner's current pause: reviews of
the keras-io knowledge-distillation example and of TensorFlow's "overfit and underfit"
tutorial measured first batches starting 2.5-10 s after their epoch began with 0.015 s of CPU
used, 20-30% of the programs' time; with autotuning off the same programs ran in 58-73 s
instead of 101-137 s, and in 51-65 s instead of 79-102 s. Nothing runs meanwhile.

## Evidence we show
The fit calls, the epoch and validation starts measured (the first of each in a fit is left
out: it also starts everything once), how many of each stalled, the time asleep in all and in
the median stalled start, its share of the run, and the CPU the thread used in those starts;
the data kind.

## Fix
Turn tf.data's autotuning off for the datasets given to `fit`, validation data included:
`options = tf.data.Options(); options.autotune.enabled = False; ds = ds.with_options(options)`.
The shut-down then no longer waits for the autotuner; the pipeline runs with the buffer sizes
and parallelism it was given instead of tuned ones (`AUTOTUNE` takes a fixed default). A test
fit with validation, 30 epochs over autotuned pipelines, slept 0.36 s in its epoch starts and
ran 9.7 s; with autotuning off its starts slept 0.02 s and it ran 7.6 s. For the training
data alone, one iterator for the whole fit also works: `model.fit(ds.repeat(),
steps_per_epoch=N, ...)` (arrays: build the dataset once and repeat it); its starts slept
0.006 s. Not for the validation data: Keras lets the validation's iterator go at every
validation whatever `validation_steps` says, and with a repeated validation dataset the same
fit's validations slept 1.3 s.

## Threshold
Not for a distributed dataset (`MirroredStrategy`): its iterator starts each device's
prefetching at every epoch's start, a wait that `keras-epoch-setup` covers, with its fix.
Ten starts or more each asleep 50 ms or more (a healthy start, the iterator made and the
old one gone, takes 4-10 ms, nearly all of it on the CPU), or three where the median stalled
start slept 1 s or more; 1 s asleep in all and 5% of the run (TensorFlow's time-series
tutorial, 13 fits of up to 5 epochs, slept 5.6-12.4 s in 10-18 starts of 50 ms or more in
plain runs of 145-176 s; profiled, once 11.5 s in 20 starts, 9% of the run, and it was found in
one run of three at a bar of 10%; autotuning off took its fits from 87 s to 79 s, median of five
runs, beside other programs' training). Whether a start sleeps depends
on the moment: TensorFlow's image-classification tutorial, two fits of three epochs, had 4 of
its 8 later starts (epochs and validations) asleep 0.32 s (median) once, 14% of the run,
beside another test worker, and none in other runs; ten stalled starts ask for a fit long
enough that the loss recurs.
Asleep is the start's wall time less the thread's CPU time and its wait for a CPU, as Linux
counts them per thread: a busy neighbour that keeps the thread from a CPU is not sleep. Where
the kernel keeps no such counts the rule stays silent.
"""

MIN_STALL_S = 0.05  # an epoch start asleep this long is stalled
MIN_STALLED = 10
LONG_STALL_S = 1.0  # a median stalled start this long needs only a few of them
MIN_LONG_STALLED = 3
MIN_SECONDS = 1.0
MIN_RUN_SHARE = 0.05
# Keras makes a tf.data iterator for these kinds of data (arrays are made into a dataset).
TF_DATA_KINDS = frozenset({"dataset", "numpy", "tensor", "pandas", "structure"})


def measured_starts(record: Record) -> list[tuple[KerasCall, EpochStart]]:
    """The epoch starts of each fit on data Keras makes a tf.data iterator for, with their
    fit, but for each fit's first (it also starts everything once), where the kernel counted
    the thread's time."""
    found = []
    for call in record.keras_calls:
        if call.api != "fit" or call.data not in TF_DATA_KINDS:
            continue
        if iterates_across_devices(record, call):
            # A distributed iterator starts its devices' prefetching at each epoch's start:
            # a wait of its own, with a fix of its own (keras-epoch-setup's).
            continue
        end = call.start + call.duration
        for validation in (False, True):
            mine = [
                s
                for s in record.epoch_starts
                if call.start <= s.time <= end and s.validation == validation
            ]
            found.extend((call, s) for s in mine[1:] if s.asleep == s.asleep)  # not NaN
    return found


def check(record: Record, source: str | None) -> Finding | None:
    del source  # the fix is the fit's arguments, whatever the cell looks like
    measured = measured_starts(record)
    stalled = [(call, s) for call, s in measured if s.asleep >= MIN_STALL_S]
    asleep = sum(start.asleep for _, start in stalled)
    wall = float(record.wall_time)
    if asleep < MIN_SECONDS or asleep < MIN_RUN_SHARE * wall or not stalled:
        return None
    median = statistics.median(start.asleep for _, start in stalled)
    needed = MIN_LONG_STALLED if median >= LONG_STALL_S else MIN_STALLED
    if len(stalled) < needed:
        return None
    calls: list[KerasCall] = []
    for call, _ in stalled:
        if not any(call is seen for seen in calls):
            calls.append(call)
    on_cpu = sum(start.on_cpu for _, start in stalled)
    kinds = sorted({call.data for call in calls})
    in_training = sum(1 for _, start in stalled if not start.validation)
    in_validation = len(stalled) - in_training
    evidence = {
        "calls": list(dict.fromkeys(call_label(record, call) for call in calls)),
        "data": kinds,
        "starts_measured": len(measured),
        "stalled_epoch_starts": in_training,
        "stalled_validation_starts": in_validation,
        "asleep_s": rounded(asleep),
        "median_stalled_asleep_s": rounded(median),
        "cpu_in_stalled_starts_s": rounded(on_cpu),
        "share_of_run": rounded(asleep / wall, 3) if wall else None,
    }
    where = and_list(
        [
            f"{count} {what}"
            for count, what in (
                (in_training, "epochs"),
                (in_validation, "validations"),
            )
            if count
        ]
    )
    autotune_off = (
        "`options = tf.data.Options(); options.autotune.enabled = False;"
        " ds = ds.with_options(options)`; the pipeline then runs with the buffer sizes and"
        " parallelism it was given instead of tuned ones."
    )
    if kinds == ["dataset"]:
        fix = (
            "Turn tf.data's autotuning off for the datasets given to fit, validation data"
            " included: " + autotune_off
        )
        if in_training:
            fix += (
                " Or, for the training data, keep one iterator for the whole fit:"
                " `model.fit(dataset.repeat(), steps_per_epoch=N, ...)`, N the batches an epoch."
            )
    else:
        # Keras builds the pipeline over arrays itself: the code cannot set its options.
        batch = _batch_size(calls)
        fix = (
            "Keras makes the tf.data pipeline over arrays itself, autotuned; build the dataset"
            " once yourself instead"
            + (
                f" and keep one iterator for the whole fit: `ds = tf.data.Dataset"
                f".from_tensor_slices((x, y)).shuffle(len(x)).batch({batch}).repeat()`,"
                f" `model.fit(ds, steps_per_epoch=len(x) // {batch}, ...)`"
                if in_training
                else ""
            )
            + " (with `validation_split`, split the arrays first and pass `validation_data`:"
            " Keras splits only arrays), or turn autotuning off on the datasets you build: "
            + autotune_off
        )
    if in_validation:
        fix += (
            " A repeated validation dataset does not help: Keras lets the validation's"
            " iterator go at every validation, whatever `validation_steps` says."
        )
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{where} started {seconds(median)} late (median), asleep: {share(asleep, wall)} of"
            " the run"
        ),
        detail=(
            f"In {len(stalled)} of {len(measured)} starts of epochs and validations the first"
            f" batch came {seconds(median)} (median) after the start, {seconds(asleep)} in all,"
            f" while the run's thread used {seconds(on_cpu)} of CPU: it slept, waiting. Keras"
            " makes a new iterator over the data at each epoch's start and each validation and"
            " lets the last one go; a tf.data iterator's shut-down waits for its threads (the"
            " autotuner's pause, an element still being made)."
        ),
        fix=fix,
        evidence=evidence,
        impact=asleep,
    )


def _batch_size(calls: list) -> str:
    """The fits' batch size where they share one, else a name for it."""
    sizes = {call.batch_size for call in calls}
    if len(sizes) == 1:
        (size,) = sizes
        if size == size and size > 0:
            return str(int(size))
    return "batch_size"
