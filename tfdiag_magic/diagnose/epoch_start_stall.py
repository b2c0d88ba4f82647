"""epoch-start-stall: each epoch's first batch waits, asleep, while the iterator over the data
that Keras lets go shuts down."""

from __future__ import annotations

import statistics

from ..findings import Finding
from ..record import EpochStart, KerasCall, Record
from ..units import seconds, share
from .evidence import call_label, rounded

CODE = "epoch-start-stall"
TITLE = "Each epoch's first batch waits while the last iterator over the data shuts down"
DOC = """\
## What it detects
A `model.fit` whose epochs start late: between an epoch's start (its callbacks'
`on_epoch_begin` done) and its first training batch, the run's thread slept, neither running
on a CPU nor waiting for one, for tenths of a second or seconds, epoch after epoch.

## Why it hurts
At each epoch's start Keras makes a new iterator over the data (a tf.data pipeline, also where
the data are arrays) and lets the last one go, and a tf.data iterator shuts its threads down
as it goes: its autotuning thread, and any element still being made. In TensorFlow 2.21 the
first wait can last as long as the autotuner's current pause, which grows with the pipeline's
age: reviews of the keras-io knowledge-distillation example and of TensorFlow's "overfit and
underfit" tutorial measured first batches starting 2.5-10 s after their epoch began with
0.015 s of CPU used, 20-30% of the programs' time; with autotuning off the same programs ran
in 58-73 s instead of 101-137 s, and in 51-65 s instead of 79-102 s. Nothing runs meanwhile.

## Evidence we show
The fit calls, the epoch starts measured (the first of each fit is left out: it also starts
everything once), how many stalled, the time asleep in all and in the median stalled start, its
share of the run, and the CPU the thread used in those starts; the data kind.

## Fix
Keep one iterator for the whole fit: repeat the dataset and give the epoch's length,
`model.fit(dataset.repeat(), steps_per_epoch=N, ...)` (with validation data,
`validation_data=val.repeat(), validation_steps=M`); for arrays, build the dataset once,
`tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(32).repeat()`. Keras then
makes the iterator once and no epoch waits for one to go (a test fit's epoch starts slept
0.8 s in all over 12 epochs, and 0.01 s with `repeat()` and `steps_per_epoch`). Or turn
tf.data's autotuning off for the dataset, `options = tf.data.Options();
options.autotune.enabled = False; dataset = dataset.with_options(options)`: the shut-down no
longer waits for the autotuner, but the pipeline keeps the buffer sizes and parallelism it was
given instead of tuned ones.

## Threshold
Three epoch starts or more each asleep 50 ms or more (a healthy start, the iterator made and
the old one gone, takes 4-10 ms, nearly all of it on the CPU), 1 s asleep in all and 10% of the
run. Asleep is the start's wall time less the thread's CPU time and its wait for a CPU, as
Linux counts them per thread: a busy neighbour that keeps the thread from a CPU is not sleep.
Where the kernel keeps no such counts the rule stays silent.
"""

MIN_STALL_S = 0.05  # an epoch start asleep this long is stalled
MIN_STALLED = 3
MIN_SECONDS = 1.0
MIN_RUN_SHARE = 0.10
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
        end = call.start + call.duration
        mine = [s for s in record.epoch_starts if call.start <= s.time <= end]
        found.extend((call, s) for s in mine[1:] if s.asleep == s.asleep)  # not NaN
    return found


def check(record: Record, source: str | None) -> Finding | None:
    del source  # the fix is the fit's arguments, whatever the cell looks like
    measured = measured_starts(record)
    stalled = [(call, s) for call, s in measured if s.asleep >= MIN_STALL_S]
    asleep = sum(start.asleep for _, start in stalled)
    wall = float(record.wall_time)
    if len(stalled) < MIN_STALLED or asleep < MIN_SECONDS or asleep < MIN_RUN_SHARE * wall:
        return None
    calls: list[KerasCall] = []
    for call, _ in stalled:
        if not any(call is seen for seen in calls):
            calls.append(call)
    median = statistics.median(start.asleep for _, start in stalled)
    on_cpu = sum(start.on_cpu for _, start in stalled)
    kinds = sorted({call.data for call in calls})
    evidence = {
        "calls": [call_label(record, call) for call in calls],
        "data": kinds,
        "epoch_starts_measured": len(measured),
        "stalled_starts": len(stalled),
        "asleep_s": rounded(asleep),
        "median_stalled_asleep_s": rounded(median),
        "cpu_in_stalled_starts_s": rounded(on_cpu),
        "share_of_run": rounded(asleep / wall, 3) if wall else None,
    }
    arrays = kinds != ["dataset"]
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{len(stalled)} epochs started {seconds(median)} late (median), asleep:"
            f" {share(asleep, wall)} of the run"
        ),
        detail=(
            f"In {len(stalled)} of {len(measured)} epoch starts the first batch came"
            f" {seconds(median)} (median) after the epoch began, {seconds(asleep)} in all,"
            f" while the run's thread used {seconds(on_cpu)} of CPU: it slept, waiting. Keras"
            " makes a new iterator over the data at each epoch's start and lets the last one"
            " go; a tf.data iterator's shut-down waits for its threads (the autotuner's pause,"
            " an element still being made)."
        ),
        fix=(
            "Keep one iterator for the whole fit: "
            + (
                "build the dataset once and repeat it, `tf.data.Dataset.from_tensor_slices((x,"
                " y)).shuffle(len(x)).batch(32).repeat()`, and pass"
                " `steps_per_epoch=len(x) // 32`"
                if arrays
                else "`model.fit(dataset.repeat(), steps_per_epoch=N, ...)` with N the"
                " batches an epoch"
            )
            + " (validation data likewise: `validation_data=val.repeat(),"
            " validation_steps=M`). Or turn tf.data's autotuning off for the dataset"
            " (`options = tf.data.Options(); options.autotune.enabled = False;"
            " dataset = dataset.with_options(options)`), at the price of the tuned buffer"
            " sizes and parallelism."
        ),
        evidence=evidence,
        impact=asleep,
    )
