"""input-bound: training steps (or, where nothing trains, a loop's work) wait for their data."""

from __future__ import annotations

import math

import numpy as np

from ..findings import Finding
from ..record import DatasetStructure, InputStageWork, Phase, Record
from ..rewrite import tune_input_pipeline
from ..units import rate, seconds, share
from .dataset_facts import (
    by_hand,
    cached,
    iterates_across_devices,
    loop_iterates_across_devices,
    prefetched,
    rewrite_facts,
    runs_ahead,
    served_from_cache,
    structure_of_call,
    structure_of_loop,
    where,
)
from .evidence import (
    call_label,
    first_rewrite,
    loop_label,
    rounded,
    steady_rows,
    training_rows,
    with_rewrite,
)
from .stage_work import library_share, stage_work, work_evidence, work_sentence

CODE = "input-bound"
TITLE = "Training waits for its input"
DOC = """\
## What it detects
A large share of the training time is spent waiting for the next batch: the input pipeline
cannot keep up with the model. Measured during the run, as a share of training time:
- in the cell's own loops (`for x, y in dataset:`), the time each `next()` took before a step,
  against the steps' own time. In a run that trains nothing (an inference loop, or the tf.data
  guide's benchmark, whose `time.sleep(0.01)` stands for the step), the innermost loops over a
  `tf.data` dataset or that call functions are judged the same way, their function calls (or,
  without any, their iterations) as the steps, and only where their bodies work for at least a
  tenth of the loop's time (their median time times their count: a few bodies held up by a
  neighbour or a garbage collection are no work) and its waits beyond a ready batch add up to
  1 s or more: a loop that only reads its data (`for x in ds: n += 1`) waits for nearly all
  of it by design, and a few batches drawn or printed may wait half their short loop. (The
  guide's sequential map waited 74% of its loop here: 36 ms a sample against its 10 ms
  sleep.);
- for `fit` on a `tf.data` dataset, and on a Python generator or `keras.utils.PyDataset` (which
  Keras wraps in a `tf.data` pipeline): tf.data's own model of the live iterator records the gap
  between consecutive requests for the next batch (the time the training loop spent
  elsewhere); a training cycle minus its batches' gaps is the time its steps blocked waiting
  for them. The model is read every 64 batches, between steps: it takes no element and changes
  nothing. (The time a generator takes per batch against a steady step is shown, not decided
  on: when the generator sets the pace that ratio sits at about 1 whether the steps wait or
  not.) `evaluate`/`predict` on a generator, where this is not measured, stay silent;
  For a dataset that caches (`cache()` anywhere in it), the epochs after the first are judged
  where one ran: the work before the cache runs once, in the first epoch, while the cache
  fills, and later epochs read memory. (A cached pipeline whose map ran one element at a time
  waited 43% of fit's first epoch on loaded CPUs here, and next to nothing after.) A single
  epoch is judged as it is: its wait was paid in full;
- for a tf.function given the iterator itself (`train_step(iterator)` with `next(iterator)`
  inside, as TensorFlow's distributed training guides write the step), the same in-run
  measure on that iterator (a distributed iterator's one per-device iterator where a worker
  has one device): the calls' cycles minus the gaps between their requests;
- for `fit` on a `tf.data` dataset, the first step of each epoch after the first against the
  steady step: the pipeline redoing work before it hands out an epoch's first batch (a `map`
  feeding a `shuffle` buffer with nothing cached).

What the dataset is made of is read once when it is given to `fit` or a loop starts on it,
from its transformations (never by iterating it): whether it already prefetches or caches,
which maps run in parallel and which one element at a time, which call Python
(`tf.py_function`, `from_generator`), draw random numbers or read files. Nothing iterates the
user's data again: a seeded shuffle's next epoch, a generator's side effects and a stateful
source stay as they would be without the tool.

## Why it hurts
The model (and the GPU, if there is one) idles while Python or the pipeline makes the next
batch. Typical causes: a Python generator or `tf.py_function` doing the preprocessing, a
`map` without `num_parallel_calls`, reading files serially, no `prefetch` with a generator,
heavy per-element Python. tf.data runs on the host's CPU threads, not on the GPU, in parallel
when asked to (`num_parallel_calls`), and overlaps with training when it prefetches. (Recent
TensorFlow releases, 2.21 here, add a final prefetch after a last stage that is synchronous,
and parallelise a `map` whose function holds no state by default, except where the `batch`
right after it is fused with it: `map(f).batch(n)` stays one element at a time, as do
`py_function` and random maps. The finding reads these rewrites too: it asks
`num_parallel_calls` only of the maps that still run serially, and a `prefetch` only where
the last stage runs synchronously and tf.data adds none there. A last stage that runs in
parallel (a parallel map, interleave or batch, or a map tf.data parallelises itself) already
makes the next elements while the step runs: the time-series tutorial's `split_window` after
`timeseries_dataset_from_array`'s batches trained no faster with a prefetch after it on 2
CPUs, quiet, and 16-22% slower beside other programs' training.)

## Evidence we show
The share of training time spent waiting for input, the waits' total, the share it fires at,
the batches per second the input delivered when waited for against the training steps per
second, and where the data comes from (the loop's line, the generator or PyDataset given to
Keras, the dataset given to `fit`); for per-epoch work, the median first step of an epoch
against the steady step and their excess as a share of the epoch. For a `tf.data` dataset,
what it is made of (`pipeline`: already prefetched, cached, the maps that run one element at a
time, the stages that run Python or read files) and, in the text, where its work is: the map
functions by name, the file reads, the Python. Where the iterator's runtime model was read
(`fit` on a dataset, a function given its iterator, a loop of the cell over a dataset or
`enumerate` of one that ran 64 items or 0.25 s), each stage's own work per batch
(`stage_work`: tf.data's name for the stage, the map's function where the runtime's maps and the
pipeline's pair up, seconds per batch and per element, elements per batch, parallelism), their
sum, and the share in maps a library utility made (`library_share_of_work`).

## Fix
Move the preprocessing into `tf.data` with `map(..., num_parallel_calls=tf.data.AUTOTUNE)`,
`cache()` what is deterministic and fits in memory, `prefetch(tf.data.AUTOTUNE)` at the end;
replace `py_function` and generators with TensorFlow ops where possible. The rewrite of the
cell proposes only what the measured dataset lacks: no `prefetch` where one already follows its
last stage that does work (Keras' `timeseries_dataset_from_array` and
`image_dataset_from_directory` prefetch, then batch) or that stage runs in parallel,
`num_parallel_calls` only on the maps that run one element at a time, `cache()` only after a
deterministic map, before any shuffle or random function, where it is not cached already.
With nothing to add there is no rewrite: the finding says where the input's time goes and what
is left to do by hand (Python rewritten as TensorFlow ops or done once offline, fewer and
larger files read in parallel, a cache, fewer and cheaper elements).

## Threshold
Waiting for input is at least 30% of the measured training time (wait + steps), and at least
0.2 s in all; below 20% it never fires, and the 20-30% band is left silent on purpose (a miss
is better than a false alarm). The margin is measured on this 2-CPU machine with a CPU hog on
one core, ten runs each: pipelines that set the pace waited 67-82% of fit's measured time (a
`py_function` map, one element at a time) and 57-86% (Keras' windowed time series), and fired
10 of 10; a light, prefetched pipeline under a wide model waited -5-6% and stayed silent 10 of
10, and up to 19% (its prefetching thread starved) in 20 more runs, all silent, while the
machine's load average was 7-9 on its two CPUs. Without the hog, pace-setting pipelines waited
60-80% and a parallel `tf.image` augmentation sharing the two CPUs with a convolutional step
0-23%, a wait that no pipeline option removes on two cores. A pipeline that overlaps with the
step at about its pace is the band's case: with the hog, one waited 11-37% and fired 6 of 10.
(20% is TensorBoard's profiler threshold for "highly input-bound"; firing there would call the
`tf.image` case input-bound half the time.) In the cell's loops only the part of each wait
beyond what taking a ready batch costs counts: 1 ms for a local iterator, whose `next()` costs
0.1–0.3 ms per batch on this 2-CPU machine with a prefetched `tf.data` pipeline (so a tiny
model's loop is not called input-bound for the iterator's own call: a loop of 0.5 ms steps
read at most 10% beyond it beside three CPU hogs, where the tf.data guide's naive generator
pipeline with a real step read 35-38% quiet), and 20 ms for a loop over
a distributed dataset or one copied to a device
(`MirroredStrategy.experimental_distribute_dataset`, `prefetch_to_device`), whose `next()` took
1.5–7 ms per batch here with one or two replicas. In `fit`, measured in-run, the same beyond
0.2 ms per batch (what taking a ready, prefetched batch costs in the compiled loop: 0.01-0.06
ms measured). An epoch's repeated start-up counts when, in at least 2 epochs after the first
(tracing steps left out), the first step's excess over the steady step is at least 30% of that
epoch's training time in every one of them (the least of them is judged: a busy machine only
adds) and at least 0.2 s in all; not for a pipeline whose output is a cache with only batching
and prefetching over it, which redoes nothing before an epoch's first batch once filled (its
slow first steps were a busy machine's: 332 ms against 2.3 ms steps once, beside a full test
run and two other TensorFlow programs on 2 vCPUs).
"""

# Fires at a clear share of training time spent waiting for input, and never below 20%: the
# 20-30% band is left silent on purpose, a miss being better than a false alarm (see DOC).
MIN_SHARE = 0.3
MIN_WAIT = 0.2
# In a run that trains nothing, the share of a loop's time its bodies must work for its waits
# to count: a loop that only reads its data (a pipeline's benchmark, `for x in ds: n += 1`)
# waits for nearly all of it by design.
MIN_WORK_SHARE = 0.1
# ...and waits of at least a second beyond a ready batch: nine images drawn from a decoding
# pipeline (`for image, label in ds.take(9): plt.imshow(image)`) may wait half their loop.
MIN_UNTRAINED_WAIT = 1.0
# next() on a ready local iterator: 0.1-0.3 ms measured. A healthy prefetched loop of 0.5 ms
# steps (767 steps) read 1-3% of its time beyond 1 ms quiet and 9-10% beside three CPU hogs (its
# waits' median 0.23 ms, 90th percentile 0.27-0.46 ms); the tf.data guide's naive pipeline (a
# generator of 15 ms a sample, no prefetch of its own) with a real 9 ms step waited 42-44% of
# its time, 35-38% beyond 1 ms, and 29-31% beyond 2 ms: a miss.
READY_BATCH_S = 0.001
READY_CROSS_DEVICE_BATCH_S = 0.02  # distributed / copy-to-device iterator: 1.5-7 ms measured
# In-graph GetNext on a ready (prefetched) element: 0.01-0.06 ms per batch measured on this
# 2-CPU machine, with a tiny model, steps_per_execution=16 included.
READY_ELEMENT_S = 0.0002
MIN_REPEATS = 2  # epochs after the first whose first step shows the repeated work
# fit on tf.data, measured in-run: pipelines that set the pace waited 60-80% of the cycle here,
# healthy prefetched ones 0-6% (with a CPU hog on one core included); a parallel tf.image
# augmentation sharing the 2 CPUs with a conv step waited 0-23% (notebook 03), a wait that no
# pipeline option removes on two cores. MIN_SHARE (30%) keeps that out, with a wide margin on
# both sides.


# A share of the measured pipeline work in the library's own maps past which the fix says
# that the code's options cannot reach it.
MOST_OF_THE_WORK = 0.5
NOTHING_TO_ADD = "Nothing is left to add to the pipeline's options"


def check(record: Record, source: str | None) -> Finding | None:
    return (
        _loop_waits(record, source)
        or _keras_generator(record, source)
        or _keras_dataset(record, source)
        or _function_iterator(record, source)
        or _epoch_starts(record, source)
    )


def _loop_waits(record: Record, source: str | None) -> Finding | None:
    steps = record.steps
    trains = training_rows(record).size > 0
    rows = steady_rows(record, training_rows(record) if trains else _untrained_work_rows(record))
    rows = rows[~np.isnan(steps["data_wait"][rows])]
    if rows.size < 5:
        return None
    waits = steps["data_wait"][rows].astype(np.float64)
    durations = steps["duration"][rows].astype(np.float64)
    loop_ids = steps["loop"][rows]
    ready = np.full(rows.size, READY_BATCH_S)
    for loop_id in np.unique(loop_ids[loop_ids >= 0]).tolist():
        if loop_iterates_across_devices(record, loop_id):
            ready[loop_ids == loop_id] = READY_CROSS_DEVICE_BATCH_S
    waited = np.clip(waits - ready, 0.0, None)
    wait, busy, excess = float(waits.sum()), float(durations.sum()), float(waited.sum())
    count = int(rows.size)
    if record.dropped is not None and record.reduced:
        # The training rows a long run's table left out: their waits and how many had one are
        # summed exactly; their step time is shared out by that count (all of it in a loop
        # whose every step has a wait), and the wait beyond a ready batch is the kept rows'
        # share of their wait.
        dropped = record.dropped
        left_wait = dropped.total("data_wait", "train")
        left_count = dropped.total("data_wait_count", "train")
        left_rows = dropped.total("count", "train")
        busy += dropped.total("duration", "train") * (left_count / left_rows if left_rows else 0)
        excess += left_wait * (excess / wait if wait > 0 else 0.0)
        wait += left_wait
        count += int(left_count)
    if excess < MIN_WAIT or excess < MIN_SHARE * (wait + busy):
        return None
    if not trains and (
        _typical_work(durations, count, busy) < MIN_WORK_SHARE * (wait + busy)
        or excess < MIN_UNTRAINED_WAIT
    ):
        # A loop that only reads its data: waiting is all it has to do. Or a short one (a
        # few batches looked at, drawn): what it waited is no pipeline's problem.
        return None
    loop = int(np.bincount(loop_ids[loop_ids >= 0]).argmax()) if (loop_ids >= 0).any() else -1
    where = loop_label(record, loop)
    data_rate = count / wait
    train_rate = count / (wait + busy)
    evidence = {
        "wait_share": rounded(excess / (wait + busy), 3),
        "wait_s": rounded(wait),
        "wait_beyond_ready_batch_s": rounded(excess),
        "ready_batch_s": rounded(float(np.max(ready))),
        "step_s": rounded(busy),
        "steps": count,
        "median_wait_s": rounded(float(np.median(waits))),
        "median_step_s": rounded(float(np.median(durations))),
        "input_batches_per_s": rounded(data_rate),
        ("training_steps_per_s" if trains else "iterations_per_s"): rounded(train_rate),
        "where": where,
    }
    if not trains:
        evidence["trains"] = False
    step, run = ("step", "training ran") if trains else ("iteration", "the loop ran")
    time_of = "training time" if trains else "the loop's time"
    finding = Finding(
        code=CODE,
        severity="warning",
        title=f"{evidence['wait_share']:.0%} of {time_of} waits for input",
        detail=(
            f"Each {step} waited a median {seconds(float(np.median(waits)))} for its batch from"
            f" {where}, against {seconds(float(np.median(durations)))} of work: the input"
            f" delivers {rate(data_rate)} batches/s when waited for, and {run} at"
            f" {rate(train_rate)} {step}s/s."
        ),
        fix="Build the input with tf.data: `map(..., num_parallel_calls=tf.data.AUTOTUNE)`,"
        " `cache()` for deterministic work (before any shuffle), `prefetch(tf.data.AUTOTUNE)`"
        " last.",
        evidence=evidence,
        impact=excess,
    )
    structure = structure_of_loop(record, loop)
    finding = _with_pipeline(finding, source, structure)
    stages = next((each.input_stages for each in record.loops if each.id == loop), ())
    return _with_stage_work(finding, stages, structure)


def _typical_work(durations: np.ndarray, count: int, busy: float) -> float:
    """The work of a loop's bodies as their median times their count (at most their sum): a
    few bodies that a neighbour or a garbage collection held up are not work the loop does.
    Measured in `make test` at a load of 7 on 2 vCPUs: a loop that only counted a pipeline's
    2,000 elements (`total += 1`, a median body of 2.5 µs) summed 0.74 s of bodies, 12% of
    its time."""
    return min(busy, float(np.median(durations)) * count)


def _untrained_work_rows(record: Record) -> np.ndarray:
    """In a run that trains nothing, the rows of the work done on each batch of the code's
    loops over a `tf.data` dataset or that call functions: the function, evaluation or
    prediction calls where the loop makes them, else the loop's iterations (a step simulated
    with a sleep, eager model calls). A loop over other iterators (a file, a process pool) is
    not input in this sense."""
    steps = record.steps
    phase, loops = steps["phase"], steps["loop"]
    calls = (phase == Phase.FUNCTION) | (phase == Phase.EVAL) | (phase == Phase.PREDICT)
    chosen: dict[int, np.ndarray] = {}
    for loop_id in np.unique(loops[loops >= 0]).tolist():
        in_loop = loops == loop_id
        called = np.flatnonzero(in_loop & calls)
        if called.size:
            chosen[loop_id] = called
        elif structure_of_loop(record, loop_id) is not None:
            chosen[loop_id] = np.flatnonzero(in_loop & (phase == Phase.LOOP))
    # An outer loop's bodies hold its inner loop's waits: only the innermost are judged.
    inner = [
        rows
        for loop_id, rows in chosen.items()
        if not any(_holds(steps, rows, other) for key, other in chosen.items() if key != loop_id)
    ]
    return np.sort(np.concatenate(inner)) if inner else np.empty(0, dtype=np.int64)


def _holds(steps: dict[str, np.ndarray], outer: np.ndarray, inner: np.ndarray) -> bool:
    """Whether the rows `inner` begin within one of the rows `outer` (an outer loop's
    iterations, holding an inner loop's)."""
    begin = float(steps["start"][inner[0]])
    starts = steps["start"][outer]
    ends = starts + steps["duration"][outer]
    return bool(np.any((starts <= begin) & (begin <= ends)))


def _call_step_median(record: Record, call) -> float | None:
    """Median steady time of a Keras call's training steps (tracing steps left out)."""
    steps = record.steps
    inside = (steps["start"] >= call.start) & (steps["start"] <= call.start + call.duration)
    rows = steady_rows(record, np.flatnonzero(inside & (steps["phase"] == Phase.TRAIN)))
    if rows.size < 3:
        return None
    # A row of a fused call (steps_per_execution) already holds its share of the call.
    return float(np.median(steps["duration"][rows]))


def _keras_generator(record: Record, source: str | None) -> Finding | None:
    best = None
    for call in record.keras_calls:
        if math.isnan(call.data_time) or call.steps < 5 or call.data_items < 1:
            continue
        step = _call_step_median(record, call)
        if not step:
            continue
        # Making a batch against a steady step (a PyDataset with `workers` threads makes that
        # many at once): shown, not decided on. When the generator sets the pace a step lasts
        # as long as making a batch, so the ratio sits at about 1 (0.94-1.06 measured) whether
        # the steps wait for most of their time or not at all: it flips with noise. The
        # decision is the share of the measured training cycles the steps spent blocked on
        # the tf.data iterator Keras wraps the generator in, measured in-run (that pipeline
        # holds nothing but the generator); a call without that measure stays silent.
        ratio = call.data_time / call.data_items / max(call.data_workers, 1) / step
        measured = _in_run_wait(call)
        if measured is None:
            continue
        waited_share, waited = measured
        slow = waited_share >= MIN_SHARE and waited >= MIN_WAIT
        if slow and (best is None or waited_share > best[3]):
            best = (call, ratio, step, waited_share)
    if best is None:
        return None
    best, ratio, per_step, waited_share = best
    per_batch = best.data_time / max(best.data_items, 1)
    what = "PyDataset" if best.data == "pydataset" else "Python generator"
    evidence = {
        "api": best.api,
        "source": what,
        "workers": best.data_workers,
        "generator_s": rounded(best.data_time),
        "batches_made": best.data_items,
        "generator_s_per_batch": rounded(per_batch),
        "step_s": rounded(best.step_time),
        "median_step_s": rounded(per_step),
        "generator_share_of_step_time": rounded(ratio, 3),
        "wait_share_in_run": rounded(waited_share, 3),
        "fires_at_wait_share": MIN_SHARE,
        "input_batches_per_s": rounded(1 / per_batch if per_batch > 0 else None),
        "training_steps_per_s": rounded(best.steps / best.duration if best.duration else None),
    }
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"The {what} given to `{best.api}` takes {seconds(per_batch)} per batch;"
            f" a steady step takes {seconds(per_step)}"
        ),
        detail=(
            f"The {what} needed {seconds(best.data_time)} to make {best.data_items} batches"
            + (f" on {best.data_workers} threads" if best.data_workers > 1 else "")
            + f" while the steps took {seconds(best.step_time)}: the steps wait for Python to"
            " make the next batch."
        ),
        fix=(
            "Move the batch-making work into tf.data ops (`from_tensor_slices` + `map` with"
            " `num_parallel_calls`), or at least `tf.data.Dataset.from_generator(...).prefetch()`."
            + (
                " For a PyDataset: vectorise `__getitem__` (whole-batch NumPy instead of a"
                " per-sample loop), or make batches on several threads with `workers=`."
                if best.data == "pydataset"
                else ""
            )
        ),
        evidence=evidence,
        impact=best.data_time,
    )
    return with_rewrite(finding, source, first_rewrite(source, (tune_input_pipeline, {})))


IN_RUN_HOW = "in-run: the iterator's tf.data model (gaps between GetNext calls)"


def _beyond_ready(wait: float, span: float, elements: int) -> tuple[float, float] | None:
    """(share of `span`, seconds) that `elements` GetNext calls blocked beyond what taking a
    ready element costs; None where too little was measured."""
    if math.isnan(wait) or span <= 0 or elements < 5:
        return None
    # A GetNext on a ready element also takes a little time (10-60 us measured here).
    waited = max(wait - READY_ELEMENT_S * elements, 0.0)
    return waited / span, waited


def _in_run_wait(call) -> tuple[float, float] | None:
    """The share of a fit's measured training cycles its steps spent blocked on the next
    batch, beyond what taking a ready batch costs, and those seconds (None: not measured)."""
    if call.api != "fit":
        return None
    return _beyond_ready(call.input_wait, call.input_span, call.input_elements)


def _after_cache_filled(call) -> tuple[float, float] | None:
    """`_in_run_wait` over the epochs after the first: a pipeline that caches runs its work
    before the cache once, in the first epoch, and reads memory after it. None where no later
    epoch was measured."""
    return _beyond_ready(
        call.input_wait - call.first_epoch_wait,
        call.input_span - call.first_epoch_span,
        call.input_elements - call.first_epoch_elements,
    )


def _keras_dataset(record: Record, source: str | None) -> Finding | None:
    """fit on a tf.data dataset whose steps spent a large share of their time blocked on the
    iterator's next element, as the iterator's own model recorded it during the run. For a
    dataset that caches, the epochs after the first are judged, where a later one ran."""
    slow_calls = []
    for call in record.keras_calls:
        if call.data != "dataset":
            continue
        structure = structure_of_call(record, call)
        later = _after_cache_filled(call) if structure is not None and cached(structure) else None
        measured = later or _in_run_wait(call)
        if measured is None:
            continue
        ratio, waited = measured
        if ratio >= MIN_SHARE and waited >= MIN_WAIT:
            slow_calls.append((call, ratio, waited, later is not None))
    if not slow_calls:
        return None
    # The worst call is shown; the others that waited as much are named with their numbers
    # (several models fit on one slow pipeline: each of them waited).
    best = max(slow_calls, key=lambda found: found[1])
    call, ratio, waited, after_first = best
    others = [
        {
            "model": other.model,
            "call": call_label(record, other),
            "line": other.line,
            "called_from_line": other.caller_line,
            "wait_share": rounded(other_ratio, 3),
            "wait_beyond_ready_batch_s": rounded(other_waited),
            "batches_measured": other.input_elements,
        }
        for other, other_ratio, other_waited, _ in slow_calls
        if other is not call
    ]
    wait, span, elements = call.input_wait, call.input_span, call.input_elements
    if after_first:
        wait -= call.first_epoch_wait
        span -= call.first_epoch_span
        elements -= call.first_epoch_elements
    per_element = wait / elements
    cycle = span / elements
    ready = max(wait - waited, 0.0) / elements  # what handing over a ready batch costs
    step = _call_step_median(record, call)
    evidence = {
        "api": "fit",
        "model": call.model,
        "call": call_label(record, call),
        "wait_share": rounded(ratio, 3),
        "wait_s": rounded(wait),
        "wait_beyond_ready_batch_s": rounded(waited),
        "measured_s": rounded(span),
        "batches_measured": elements,
        "epochs_measured": "after the first (the cache fills in it)" if after_first else "all",
        "wait_s_per_batch": rounded(per_element),
        "cycle_s_per_batch": rounded(cycle),
        "median_step_s": rounded(step),
        "training_steps_per_s": rounded(1 / cycle if cycle > 0 else None),
        "fires_at_wait_share": MIN_SHARE,
        "how": IN_RUN_HOW,
        "other_fits_waiting": others,
    }
    also = ""
    if others:
        listed = ", ".join(
            f"model '{o['model']}'"
            + (f" at line {o['line']}" if o["line"] >= 0 else "")
            + (f" (called from line {o['called_from_line']})" if o["called_from_line"] >= 0 else "")
            + f": {o['wait_share']:.0%}"
            for o in others[:4]
        )
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        also = (
            f" {len(others)} other fit call{'s' if len(others) > 1 else ''} waited as much"
            f" ({listed}{more}), {seconds(sum(o[2] for o in slow_calls if o[0] is not call))}"
            " in all."
        )
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{evidence['wait_share']:.0%} of fit's training time (model '{call.model}') waits"
            " for the dataset's next batch" + (" after its cache filled" if after_first else "")
        ),
        detail=(
            f"The fit of model '{call.model}' ({evidence['call']}): over {elements} batches"
            f" ({seconds(span)})"
            + (" of the epochs after the first" if after_first else "")
            + ", each training"
            f" step waited {seconds(per_element)} on average for the input pipeline, of a"
            f" {seconds(cycle)} cycle per batch; less the {seconds(ready)} that taking a ready"
            f" batch costs, that is the {evidence['wait_share']:.0%} above: the pipeline, not"
            " the model, sets the pace."
            " Measured during the run from the dataset iterator's own tf.data model (the time"
            " the train function spent between requests for the next batch), without taking an"
            " element." + also
        ),
        fix="Parallelise and overlap the pipeline: `map(..., num_parallel_calls=tf.data.AUTOTUNE)`,"
        " `cache()` deterministic work (before any shuffle), `prefetch(tf.data.AUTOTUNE)`;"
        " replace `py_function` with TensorFlow ops where possible.",
        evidence=evidence,
        impact=sum(found[2] for found in slow_calls),
    )
    structure = structure_of_call(record, call)
    finding = _with_pipeline(finding, source, structure)
    return _with_stage_work(finding, call.input_stages, structure)


def _with_stage_work(
    finding: Finding, stages: tuple[InputStageWork, ...], structure: DatasetStructure | None
) -> Finding:
    """Add where the pipeline's work goes per batch, from the iterator's runtime model, where
    it was read; where most of it is in the library's own maps, the fix says so first."""
    work = stage_work(stages, structure)
    if not work:
        return finding
    batches = stages[0].elements
    finding.evidence.update(work_evidence(work, batches))
    finding.detail += " " + work_sentence(work, batches)
    library = library_share(work)
    finding.evidence["library_share_of_work"] = rounded(library, 3)
    if library >= MOST_OF_THE_WORK:
        # The heaviest of them, as the pipeline names it: a utility's own map function (the
        # windows of `timeseries_dataset_from_array`, `sample_from_datasets`' selection).
        heaviest = next(row["made_as"] for row in work if row["library"])
        # The time-series tutorial's windows, cut again every epoch: its Dense model's steps
        # took 3.4-4.4 ms a batch as written, 0.85-1.17 ms on the same batches held in memory.
        finding.fix = (
            f"{library:.0%} of the pipeline's measured work is in maps the library made"
            f" itself (the most in a {heaviest}), which no option of the code's own maps"
            " reaches: make those elements another way (vectorised, in a map after `batch`),"
            " or once, ahead of training (a utility's windows: cut them with `shuffle=False`"
            " and `batch_size=None`, `.cache()` them, then shuffle and batch them yourself). "
            + finding.fix
        )
    return finding


def _function_iterator(record: Record, source: str | None) -> Finding | None:
    """A tf.function given the iterator itself (`train_step(iterator)`, ``next(iterator)``
    inside, as the distributed training guides write it) whose calls spent a large share of
    their time blocked on the next element, measured in-run from the iterator's tf.data model."""
    best = None
    for function in record.functions:
        measured = _beyond_ready(function.input_wait, function.input_span, function.input_elements)
        if measured is None:
            continue
        ratio, waited = measured
        if ratio >= MIN_SHARE and waited >= MIN_WAIT and (best is None or ratio > best[1]):
            best = (function, ratio, waited)
    if best is None:
        return None
    function, ratio, waited = best
    per_call = function.input_wait / function.input_elements
    cycle = function.input_span / function.input_elements
    evidence = {
        "function": function.name,
        "wait_share": rounded(ratio, 3),
        "wait_s": rounded(function.input_wait),
        "wait_beyond_ready_batch_s": rounded(waited),
        "measured_s": rounded(function.input_span),
        "calls_measured": function.input_elements,
        "wait_s_per_call": rounded(per_call),
        "cycle_s_per_call": rounded(cycle),
        "fires_at_wait_share": MIN_SHARE,
        "how": IN_RUN_HOW,
    }
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{evidence['wait_share']:.0%} of `{function.name}`'s time waits for the"
            " iterator's next batch"
        ),
        detail=(
            f"`{function.name}` takes the iterator and reads it inside. Over"
            f" {function.input_elements} calls ({seconds(function.input_span)}), each waited"
            f" {seconds(per_call)} on average for the input pipeline, of a {seconds(cycle)}"
            " cycle per call: the pipeline, not the model, sets the pace. Measured during the"
            " run from the iterator's own tf.data model (the time between requests for the next"
            " batch), without taking an element."
        ),
        fix="Parallelise and overlap the pipeline: `map(..., num_parallel_calls=tf.data.AUTOTUNE)`,"
        " `cache()` deterministic work (before any shuffle), `prefetch(tf.data.AUTOTUNE)` last;"
        " replace `py_function`/`numpy_function` with TensorFlow ops where possible.",
        evidence=evidence,
        impact=waited,
    )
    finding = _with_stage_work(finding, function.input_stages, None)
    return with_rewrite(finding, source, first_rewrite(source, (tune_input_pipeline, {})))


def _epoch_starts(record: Record, source: str | None) -> Finding | None:
    """fit whose first step of every epoch waits long for its batch: the pipeline redoes work
    before its first element (a map feeding a shuffle buffer, with no cache), each epoch."""
    steps = record.steps
    best = None
    for call in record.keras_calls:
        if call.api != "fit" or call.data != "dataset" or call.steps < 5:
            continue
        end = call.start + call.duration
        if iterates_across_devices(record, call):
            # A distributed (multi-device) iterator starts its per-device prefetching at each
            # epoch's first batch: up to 0.8 s here with two CPU replicas, a cost of the
            # strategy that no cache removes.
            continue
        if served_from_cache(structure_of_call(record, call)):
            # Batches of a cache its first epoch filled: nothing is redone before an epoch's
            # first batch. Slow first steps there are a busy machine's (332 ms against 2.3 ms
            # steps once, beside a full test run and two other TensorFlow programs on 2
            # vCPUs), not work a cache would save. A first epoch cut short by
            # `steps_per_epoch` leaves the cache unfilled: a miss there, never a false word.
            continue
        inside = (steps["start"] >= call.start) & (steps["start"] <= end)
        rows = np.flatnonzero(inside & (steps["phase"] == Phase.TRAIN))
        steady = steady_rows(record, rows)
        if rows.size < 5 or steady.size < 3:
            continue
        step = float(np.median(steps["duration"][steady]))
        epochs = steps["epoch"][rows]
        if record.dropped is not None and record.step_index is not None and record.reduced:
            # Past `full_rows` the table keeps a sample: an epoch there may lack its first
            # step and most of its others, so only epochs kept whole are measured.
            late = record.step_index[rows] >= record.dropped.full_rows
            epochs = np.where(np.isin(epochs, epochs[late]), -1, epochs)
        excesses: list[float] = []
        times: list[float] = []
        for epoch in np.unique(epochs).tolist():
            if epoch < 1:  # the first epoch's first step also starts everything once
                continue
            mine = rows[epochs == epoch]
            group = mine[: max(int(steps["fused"][mine[0]]), 1)]
            if steps["traced"][group].any() or mine.size < 2:
                continue
            excesses.append(float(steps["duration"][group].sum()) - step * group.size)
            times.append(float(steps["duration"][mine].sum()))
        if len(excesses) < MIN_REPEATS:
            continue
        shares = [max(e, 0.0) / t for e, t in zip(excesses, times, strict=True) if t > 0]
        # Every epoch pays work that repeats: the least of them is what each one pays at
        # least, where a busy machine can only add.
        least = min(shares) if len(shares) == len(excesses) else 0.0
        total = sum(max(e, 0.0) for e in excesses)
        if least >= MIN_SHARE and total >= MIN_WAIT and (best is None or least > best[1]):
            best = (call, least, total, excesses, times, step)
    if best is None:
        return None
    call, least, total, excesses, times, step = best
    first = float(np.median(excesses)) + step
    evidence = {
        "api": "fit",
        "epochs_measured": len(excesses),
        "median_first_step_s": rounded(first),
        "median_step_s": rounded(step),
        "first_step_excess_s": rounded(total),
        "training_s": rounded(sum(times)),
        "share_of_training": rounded(total / sum(times), 3),
        "least_share_of_an_epoch": rounded(least, 3),
    }
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"Each epoch's first step takes {seconds(first)} against {seconds(step)} for the"
            f" others: {share(total, sum(times))} of training time"
        ),
        detail=(
            f"In {len(excesses)} epochs after the first, the first batch cost"
            f" {seconds(total)} more than steady steps would have, out of"
            f" {seconds(sum(times))} of training steps. The input pipeline redoes work before it"
            " can hand out an epoch's first batch: typically a `map` feeding a `shuffle`"
            " buffer, run again every epoch because nothing caches its results."
        ),
        fix="`cache()` right after the deterministic, expensive `map` (before `shuffle` and any"
        " random augmentation, if the data fits in memory; `cache(path)` otherwise), with"
        " `num_parallel_calls=tf.data.AUTOTUNE` on the map and `prefetch(tf.data.AUTOTUNE)` last.",
        evidence=evidence,
        impact=total,
    )
    return _with_pipeline(finding, source, structure_of_call(record, call), cache=True)


def _with_pipeline(
    finding: Finding, source: str | None, structure: DatasetStructure | None, cache: bool = False
) -> Finding:
    """Attach the rewrite of the cell's pipeline that proposes only what the measured dataset
    lacks (what the run read of it, where it was a tf.data dataset); with nothing to add, the
    finding says where the input's work is and what is left to do by hand instead."""
    facts = rewrite_facts(structure)
    attempts = [(tune_input_pipeline, {**facts, "cache": True})] if cache else []
    attempts.append((tune_input_pipeline, facts))
    new_source = first_rewrite(source, *attempts)
    if structure is not None:
        finding.detail += " " + where(structure)
        finding.evidence["pipeline"] = {
            "prefetched": prefetched(structure),
            "last_stage_runs_ahead": runs_ahead(structure),
            "cached": facts["cached"],
            "one_at_a_time": [f"{method}({name})" for method, name in facts["sequential"]],
            "python": sorted({s.function or s.kind for s in structure.stages if s.python}),
            "file_reads": sorted({op for s in structure.stages for op in s.reads_files}),
            "stages": len(structure.stages),
        }
        lacks = [
            f"`num_parallel_calls=tf.data.AUTOTUNE` on its {method} `{name}`"
            for method, name in facts["sequential"]
        ]
        if not facts["prefetched"]:
            lacks.append("`.prefetch(tf.data.AUTOTUNE)` at its end")
        if new_source is None and lacks:  # the chain is not in the cell, or not one it can edit
            finding.fix = (
                "Where the dataset is built, it lacks " + "; ".join(lacks) + ". " + finding.fix
            )
        elif new_source is None:
            elements = ": the time goes to the work of its elements. "
            finding.fix = NOTHING_TO_ADD + elements + by_hand(structure)
    return with_rewrite(finding, source, new_source)
