"""epoch-start-stall: each epoch's first batch waits, asleep, while the iterator over the data
that Keras lets go shuts down; and likewise the end of each run of the code's own loop over a
dataset, where the `for` statement lets its iterator go."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..findings import Finding
from ..record import EpochStart, KerasCall, LoopInfo, Record
from ..units import and_list, seconds, share
from .dataset_facts import iterates_across_devices, loop_iterates_across_devices, structure_of_loop
from .evidence import call_label, loop_label, rounded
from .machine_load import machine_during_run

CODE = "epoch-start-stall"
TITLE = "Epochs or validations start asleep while the last iterator over the data shuts down"
DOC = """\
## What it detects
A `model.fit` whose epochs, or their validations, start late: between an epoch's start (its
callbacks' `on_epoch_begin` done) and its first training batch, or between the epoch's call of
`evaluate` on the validation data and its first batch, or at the fit's end between its last
epoch's callbacks and its return (its `on_train_end` callbacks left out), the run's thread
slept, neither running on a CPU nor waiting for one, for tenths of a second or seconds, epoch
after epoch. Likewise a loop of the code's own over a dataset that ran steps (`for batch in
dataset:` inside an epoch loop): after its last item, the `for` statement lets the iterator
go, and the thread sleeps there, epoch after epoch.

## Why it hurts
Keras makes a new iterator over the data at each epoch's start and at each validation (a
tf.data pipeline, also where the data are arrays) and lets the last one go, and a tf.data
iterator shuts its threads down as it goes: its autotuning thread, and any element still being
made. In TensorFlow 2.21 that can last as long as the rest of the autotuner's current pause:
the autotuner pauses 10 ms, then twice as long after each tuning (10, 20, 40 ms ... up to a
minute), so the longer an iterator lived, the longer its shut-down can sleep (measured here:
epochs held to 0.75 s slept 0.50-0.51 s, the rest of the pause from 0.63 s to 1.27 s; keras-io's
GAN, a fit of 100 steps in 23-25 s, slept 17-19 s at its end, the pause from 20.5 s to 41 s,
in 7 of 18 runs). Not every shut-down sleeps. Reviews of
the keras-io knowledge-distillation example and of TensorFlow's "overfit and underfit"
tutorial measured first batches starting 2.5-10 s after their epoch began with 0.015 s of CPU
used, 20-30% of the programs' time; with autotuning off the same programs ran in 58-73 s
instead of 101-137 s, and in 51-65 s instead of 79-102 s. Nothing runs meanwhile.

## Evidence we show
The fit calls, the epoch and validation starts and the fits' ends measured (the first start of
each kind in a fit is left out: it also starts everything once), how many of each stalled, the
time asleep in all and in the median stalled start, its share of the run, the sleep from which
a start counted as stalled, and the CPU the thread used in those starts; the data kind (the
fits' numbers only where the run had fits). For the code's loops: the loops, their releases
measured and stalled (a loop keeps its stalled releases' sum: each counts at their mean in the
median). Where other programs kept the machine busy (the report's machine line), their CPUs,
and that a shut-down sleeps more often then.

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
fit's validations slept 1.3 s. For a loop of the code's own, one iterator for every epoch
(`iterator = iter(dataset.repeat())` before the epochs, `next(iterator)` an epoch's number of
times in each), or autotuning off: an autotuned parallel map over 20,000 rows, six epochs of
0.4-1 s each in a loop, slept 0.2-0.46 s in 1-5 of its six releases per run; with either
fix each release took 1-2 ms. How often a release sleeps depends on the machine's load: a
loop of 60 epochs of 128 batches slept in 3-4 of its 60 ends quiet (0.2-0.3 s in all), and in
21-32 beside a CPU hog on one core (23-31% of the run), where the rule finds it. A loop of 40
such epochs ran 6.95-7.64 s as written, 6.28-6.39 s with one iterator and 6.15-6.47 s with
autotuning off (four runs each, quiet). A loop of the code's own over a distributed dataset
(`for x in strategy.experimental_distribute_dataset(ds)`, TensorFlow's "Custom training with
tf.distribute.Strategy") shuts its devices' prefetching down at each end and starts it again
at the next epoch: keep one distributed iterator over the repeated dataset,
`iter(strategy.experimental_distribute_dataset(ds.repeat()))`, and call `next` on it an
epoch's number of times in each. A review's 12 epochs of 40 batches slept at 10-11 of their
ends with other programs' tests running (1.2-1.9 s of 3.1-3.8 s runs), and the script ran
3.1-3.2 s with one iterator against 5.0-5.1 s; autotuning off left 1.1-2.4 s of such sleep.
One iterator moves the wait more than it removes it: its own shut-down at the end sleeps as
long as the autotuner's pause has grown by then. A review's run of TensorFlow's DCGAN tutorial
(a loop of 15 epochs) rewritten to one iterator slept 25.5 s and 31 s there, in 2 of 5 runs
beside other programs, and autotuning off removed every wait: where it applies (all but the
distributed loop), it comes first.

## Threshold
Not for a `fit` over a distributed dataset (`MirroredStrategy`): its iterator starts each
device's prefetching at every epoch's start, a wait that `keras-epoch-setup` covers, with its
fix. A loop of the code's own over one is judged here, as any loop over a dataset.
Ten starts or more each asleep 50 ms or more (a healthy start, the iterator made and the
old one gone, takes 4-10 ms, nearly all of it on the CPU); or five where the median stalled
start slept 0.2 s or more (an autotuned pipeline of 0.45 s epochs slept 0.23-0.29 s at 7-11 of
its 29 later starts, 11-19% of the run); or three where it slept 1 s or more; or one alone that
slept 5 s or more and 20% of the run (keras-io's GAN, one fit of 100 steps, slept 17-19 s at
its end in 7 of 18 plain runs, 43% of the run; none of 8 with autotuning off). Always 1 s
asleep in all and 5% of the run (TensorFlow's time-series
tutorial, 13 fits of up to 5 epochs, slept 5.6-12.4 s in 10-18 starts of 50 ms or more in
plain runs of 145-176 s; profiled, once 11.5 s in 20 starts, 9% of the run, and it was found in
one run of three at a bar of 10%; autotuning off took its fits from 87 s to 79 s, median of five
runs, beside other programs' training). Whether a start sleeps depends
on the moment: TensorFlow's image-classification tutorial, two fits of three epochs, had 4 of
its 8 later starts (epochs and validations) asleep 0.32 s (median) once, 14% of the run,
beside another test worker, and none in other runs; ten stalled starts ask for a fit long
enough that the loss recurs.
Or many short ones: twenty starts or ends or more asleep 10 ms or more each (a loop's ends, of
which only sums are kept, all of them where their mean is), 1 s in all and a tenth of the run
(`stalled_from_s` says which bar counted). A healthy start or end sleeps 1-2 ms. TensorFlow's
custom-training walkthrough, its step compiled (201 epochs of a loop over a small dataset),
slept at each of its 201 ends 1.5 ms on average quiet (0.3 s of a 6.3 s run), and 25 ms beside
a CPU hog and another program (5.0-5.2 s, 43% of 11.7-12.1 s runs), where one iterator for
every epoch took the loop from 12.1-12.4 s to 5.0-6.6 s.
Asleep is the start's wall time less the thread's CPU time and its wait for a CPU, as Linux
counts them per thread: a busy neighbour that keeps the thread from a CPU is not sleep. Where
the kernel keeps no such counts the rule stays silent.
"""

MIN_STALL_S = 0.05  # an epoch start asleep this long is stalled
MIN_SECONDS = 1.0
MIN_RUN_SHARE = 0.05
# How many stalled starts the finding needs, by how long the median one slept: the longer each
# sleep, the fewer it takes to be more than chance; one alone only where it is a large share of
# the run (see the DOC's Threshold for the measurements). Each tier: (median asleep at least,
# stalled starts at least, share of the run at least).
STALL_TIERS = (
    (5.0, 1, 0.2),
    (1.0, 3, MIN_RUN_SHARE),
    (0.2, 5, MIN_RUN_SHARE),
    (MIN_STALL_S, 10, MIN_RUN_SHARE),
)
# Many short stalls: a start or release asleep this long is ten times a healthy one's sleep
# (an iterator kept for every epoch, or autotuning off: 1-2 ms a release), and twenty of them
# or more, a tenth of the run, are a habit. TensorFlow's custom-training walkthrough (201
# epochs of a loop over a small dataset, with its step compiled) slept about 27 ms at each
# release, 5.5 s of a 12.5 s run, and ran 5.0-6.6 s with one iterator against 12.1-12.4 s.
SHORT_STALL_S = 0.01
SHORT_STALL_TIERS = ((SHORT_STALL_S, 20, 0.1),)
# Keras makes a tf.data iterator for these kinds of data (arrays are made into a dataset).
TF_DATA_KINDS = frozenset({"dataset", "numpy", "tensor", "pandas", "structure"})


def measured_starts(record: Record) -> list[tuple[KerasCall, EpochStart]]:
    """The epoch starts of each fit on data Keras makes a tf.data iterator for, with their
    fit, but for each fit's first (it also starts everything once), and each fit's end, where
    the kernel counted the thread's time."""
    found = []
    for call in record.keras_calls:
        if call.api != "fit" or call.data not in TF_DATA_KINDS:
            continue
        if iterates_across_devices(record, call):
            # A distributed iterator starts its devices' prefetching at each epoch's start:
            # a wait of its own, with a fix of its own (keras-epoch-setup's).
            continue
        end = call.start + call.duration
        inside = [s for s in record.epoch_starts if call.start <= s.time <= end]
        for validation in (False, True):
            mine = [s for s in inside if s.validation == validation and not s.fit_end]
            found.extend((call, s) for s in mine[1:] if s.asleep == s.asleep)  # not NaN
        found.extend((call, s) for s in inside if s.fit_end and s.asleep == s.asleep)
    return found


def check(record: Record, source: str | None) -> Finding | None:
    del source  # the fix is the fit's arguments, whatever the cell looks like
    measured = measured_starts(record)
    wall = float(record.wall_time)
    found = _stalls(record, measured, MIN_STALL_S, wall) or _stalls(
        record, measured, SHORT_STALL_S, wall
    )
    if found is None:
        return None
    stalled, loop_stalls, asleep, median = found.starts, found.loops, found.asleep, found.median
    loops = [loop for loop, _ in loop_stalls]
    count = len(stalled) + sum(each.count for _, each in loop_stalls)
    calls: list[KerasCall] = []
    for call, _ in stalled:
        if not any(call is seen for seen in calls):
            calls.append(call)
    on_cpu = sum(start.on_cpu for _, start in stalled) + sum(each.on_cpu for _, each in loop_stalls)
    kinds = sorted({call.data for call in calls})
    in_validation = sum(1 for _, start in stalled if start.validation)
    at_fit_ends = sum(1 for _, start in stalled if start.fit_end)
    in_training = len(stalled) - in_validation - at_fit_ends
    evidence: dict = {}
    if measured:  # the fits' numbers, where the run had fits (not for loops of the code alone)
        evidence = {
            "calls": list(dict.fromkeys(call_label(record, call) for call in calls)),
            "data": kinds,
            "starts_measured": len(measured),
            "stalled_epoch_starts": in_training,
            "stalled_validation_starts": in_validation,
            "stalled_fit_ends": at_fit_ends,
        }
    evidence |= {
        "asleep_s": rounded(asleep),
        # A start or release asleep this long counted as stalled (many short ones: 0.01 s).
        "stalled_from_s": found.bar,
        "median_stalled_asleep_s": rounded(median),
        "cpu_in_stalled_starts_s": rounded(on_cpu),
        "share_of_run": rounded(asleep / wall, 3) if wall else None,
    }
    if loops:
        evidence["loops"] = [loop_label(record, loop.id) for loop in loops]
        evidence["loop_releases_measured"] = sum(loop.releases_measured for loop in loops)
        evidence["stalled_loop_releases"] = sum(each.count for _, each in loop_stalls)
    where = and_list(
        [
            f"{n} {plural}" if n > 1 else f"one {singular}"
            for n, singular, plural in (
                (in_training, "epoch", "epochs"),
                (in_validation, "validation", "validations"),
                (at_fit_ends, "fit's end", "ends of fits"),
                (
                    sum(each.count for _, each in loop_stalls),
                    "end of the code's loop over a dataset",
                    "ends of the code's loops over a dataset",
                ),
            )
            if n
        ]
    )
    fix = _fit_fix(calls, kinds, in_training, in_validation) if calls else ""
    distributed = [loop for loop in loops if loop_iterates_across_devices(record, loop.id)]
    if len(distributed) < len(loops):
        fix = (fix + " " if fix else "") + _LOOP_FIX
    if distributed:
        fix = (fix + " " if fix else "") + _DISTRIBUTED_LOOP_FIX
        evidence["distributed_loops"] = len(distributed)
    median_of = " (median)" if count > 1 else ""
    if not in_training and not in_validation:
        # Only ends: nothing started late, the run waited to go on.
        title = (
            f"{where} waited {seconds(median)}{median_of} asleep for the last iterator to shut"
            f" down: {share(asleep, wall)} of the run"
        )
    else:
        title = (
            f"{where} started {seconds(median)} late{median_of}, asleep:"
            f" {share(asleep, wall)} of the run"
        )
    title = title[0].upper() + title[1:]
    detail = ""
    if stalled:
        detail = (
            f"In {len(stalled)} of {len(measured)} starts of epochs and validations"
            + (" and ends of fits" if at_fit_ends else "")
            + f" the thread waited {seconds(statistics.median(s.asleep for _, s in stalled))}"
            + (" (median)" if len(stalled) > 1 else "")
            + " before the first batch"
            + (" or the fit's return" if at_fit_ends else "")
            + f", {seconds(sum(s.asleep for _, s in stalled))} in all, while it used"
            f" {seconds(sum(s.on_cpu for _, s in stalled))} of CPU: it slept, waiting. Keras"
            " makes a new iterator over the data at each epoch's start and each validation and"
            " lets the last one go (at the fit's end, the validation's and the training's); a"
            " tf.data iterator's shut-down waits for its threads (the autotuner's pause, an"
            " element still being made)."
        )
    for loop, each in loop_stalls:
        detail += (" " if detail else "") + (
            f"The loop at line {loop.lineno} (`{_first_line(loop)}`) ran out of items"
            f" {loop.releases_measured} times, and in {each.count} of them the"
            f" `for` statement's letting its iterator go kept the thread asleep"
            f" {seconds(each.asleep)} in all ({seconds(each.on_cpu)} on a CPU):"
            + (
                " a distributed dataset's iterator shuts down its devices' prefetching each"
                " time, and the next epoch's `for` starts them again."
                if any(loop is each for each in distributed)
                else " a tf.data iterator's shut-down waits for its threads (the autotuner's"
                " pause)."
            )
        )
    machine = machine_during_run(record)
    if machine is not None and machine["busy"]:
        evidence["other_programs_cpus"] = machine["other_programs_cpus"]
        detail += " " + _busy_machine(machine)
    return Finding(
        code=CODE,
        severity="warning",
        title=title,
        detail=detail,
        fix=fix,
        evidence=evidence,
        impact=asleep,
    )


@dataclass(frozen=True)
class Stalls:
    """The starts and loop releases stalled at a bar, their sleep in all and the median one's."""

    bar: float
    starts: list[tuple[KerasCall, EpochStart]]
    loops: list[tuple[LoopInfo, LoopStalls]]
    asleep: float
    median: float


@dataclass(frozen=True)
class LoopStalls:
    """A loop's releases judged stalled at a bar, their seconds asleep and on a CPU."""

    count: int
    asleep: float
    on_cpu: float


def _stalls(
    record: Record, measured: list[tuple[KerasCall, EpochStart]], bar: float, wall: float
) -> Stalls | None:
    """The starts and loop releases stalled at `bar` (`MIN_STALL_S`, or `SHORT_STALL_S` for
    many short ones), their sleep in all and the median one's, where they pass `bar`'s tiers;
    None where they do not."""
    stalled = [(call, s) for call, s in measured if s.asleep >= bar]
    loop_stalls = []
    for loop in record.loops:
        if bar >= MIN_STALL_S:  # the recorder's own count (its RELEASE_STALL_S, the same)
            each = LoopStalls(loop.releases_stalled, loop.release_asleep, loop.release_cpu)
        elif loop.releases_measured and loop.releases_asleep_all >= bar * loop.releases_measured:
            # Short stalls: a loop keeps its releases' sums alone, so all of them count, where
            # their mean passes the bar.
            each = LoopStalls(
                loop.releases_measured, loop.releases_asleep_all, loop.releases_cpu_all
            )
        else:
            continue
        if each.count and _over_a_dataset(record, loop):
            loop_stalls.append((loop, each))
    asleep = sum(start.asleep for _, start in stalled) + sum(e.asleep for _, e in loop_stalls)
    count = len(stalled) + sum(e.count for _, e in loop_stalls)
    if asleep < MIN_SECONDS or asleep < MIN_RUN_SHARE * wall or not count:
        return None
    # A loop keeps its stalled releases' sum: each counts at their mean.
    asleep_each = [start.asleep for _, start in stalled] + [
        e.asleep / e.count for _, e in loop_stalls for _ in range(e.count)
    ]
    median = statistics.median(asleep_each)
    tiers = STALL_TIERS if bar >= MIN_STALL_S else SHORT_STALL_TIERS
    if not _enough(median, count, asleep / wall if wall else 0.0, tiers):
        return None
    return Stalls(bar, stalled, loop_stalls, asleep, median)


def _enough(
    median: float, count: int, run_share: float, tiers: tuple[tuple[float, int, float], ...]
) -> bool:
    """Whether `count` stalls of this median sleep, this share of the run, pass a tier."""
    return any(
        median >= tier_median and count >= tier_count and run_share >= tier_share
        for tier_median, tier_count, tier_share in tiers
    )


def _busy_machine(machine: dict) -> str:
    """What a busy machine has to do with the sleep: more of the releases sleep, longer."""
    return (
        f"Other programs kept {machine['other_programs_cpus']:.1f} of the"
        f" {machine['usable_cpus']} CPUs this process may use busy during the run, and a"
        " shut-down sleeps more often on a busy machine (measured: a loop of 60 epochs slept"
        " at 3-4 of its 60 ends quiet, at 21-32 beside a CPU hog on one core): on a quiet"
        " machine this share would be smaller, but the waits are the pipeline's on both."
    )


def _first_line(loop: LoopInfo) -> str:
    lines = loop.source.strip().splitlines()
    return lines[0][:80] if lines else ""


def _over_a_dataset(record: Record, loop: LoopInfo) -> bool:
    """Whether the loop iterated a tf.data dataset (its make-up was read as it began) or a
    distributed one (its iterator traced its cross-device functions as the loop began); a
    Python generator's clean-up is the code's."""
    return structure_of_loop(record, loop.id) is not None or loop_iterates_across_devices(
        record, loop.id
    )


_AUTOTUNE_OFF = (
    "`options = tf.data.Options(); options.autotune.enabled = False;"
    " ds = ds.with_options(options)`; the pipeline then runs with the buffer sizes and"
    " parallelism it was given instead of tuned ones."
)
# Measured: an autotuned parallel map over 20,000 rows, six epochs of 0.4-1 s each in a loop
# of the code's own, slept 0.2-0.46 s in 1-5 of its releases; with one iterator over the
# repeated dataset, or autotuning off, each release took 1-2 ms. The test's loop (40 epochs of
# 128 batches) ran 6.95-7.64 s as written, 6.28-6.39 s with one iterator and 6.15-6.47 s with
# autotuning off (four runs each, alternating, quiet).
# Measured by a review: TensorFlow's DCGAN tutorial (a loop of the code's own, 15 epochs over an
# autotuned pipeline) rewritten to one iterator for every epoch slept 25.5 s and 31 s in that
# iterator's one release at the end, in 2 of 5 runs beside other programs (load 4-9): the
# autotuner's pause had grown with the iterator's life. Autotuning off removed every wait.
_ONE_ITERATOR_CAVEAT = (
    " No epoch then waits, but that iterator's own shut-down at the end still can, as long as"
    " the autotuner's pause has grown by then (up to a minute in a long run): autotuning off"
    " is the fix that removes both."
)
_LOOP_FIX = (
    "For a loop of the code's own over a dataset, turn autotuning off on that dataset: "
    + _AUTOTUNE_OFF
    + " Or keep one iterator for every epoch: `iterator = iter(dataset.repeat())` before the"
    " epochs, and `for _ in range(steps): batch = next(iterator)` in each." + _ONE_ITERATOR_CAVEAT
)

# Measured: TensorFlow's "Custom training with tf.distribute.Strategy" loop (`for x in
# train_dist_dataset`, one CPU replica, 12 epochs of 40 batches) slept at 11 of its 12 ends,
# 1.9 s of a 3.8 s run; with one iterator over the repeated dataset the script ran 3.1-3.2 s
# against 5.0-5.1 s, with the same loss. Autotuning off left 1.1-2.4 s of such sleep (8 epochs).
_DISTRIBUTED_LOOP_FIX = (
    "For a loop of the code's own over a distributed dataset, keep one distributed iterator"
    " for every epoch: `dist_dataset = strategy.experimental_distribute_dataset("
    "dataset.repeat())` and `iterator = iter(dist_dataset)` before the epochs, and `for _ in"
    " range(steps): distributed_train_step(next(iterator))` in each (turning autotuning off"
    " does not remove this wait)."
)


def _fit_fix(calls: list[KerasCall], kinds: list[str], in_training: int, in_validation: int) -> str:
    """The fix for the fits' stalled starts: autotuning off, one iterator for the whole fit."""
    if kinds == ["dataset"]:
        fix = (
            "Turn tf.data's autotuning off for the datasets given to fit, validation data"
            " included: " + _AUTOTUNE_OFF
        )
        if in_training:
            fix += (
                " Or, for the training data, keep one iterator for the whole fit:"
                " `model.fit(dataset.repeat(), steps_per_epoch=N, ...)`, N the batches an epoch."
                + _ONE_ITERATOR_CAVEAT
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
            " Keras splits only arrays). Keras' own pipeline takes no options from the code;"
            " on a dataset built as above, turning its autotuning off also stops the sleep: "
            + _AUTOTUNE_OFF
            + " Time the fit both ways: Keras slices whole batches of arrays at once, and a"
            " dataset built from them element by element can cost more than the sleep it"
            " saves where the sleep is short (a review's fit of ten epochs of 16 batches of"
            " 2,048 rows took 4.4-6.0 s so, against 2.5-3.4 s, its starts' sleep gone; a run of"
            " it that slept 21 s would have gained)."
        )
    if in_validation:
        fix += (
            " A repeated validation dataset does not help: Keras lets the validation's"
            " iterator go at every validation, whatever `validation_steps` says."
        )
    return fix


def _batch_size(calls: list) -> str:
    """The fits' batch size where they share one, else a name for it."""
    sizes = {call.batch_size for call in calls}
    if len(sizes) == 1:
        (size,) = sizes
        if size == size and size > 0:
            return str(int(size))
    return "batch_size"
