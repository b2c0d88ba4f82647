"""input-bound: training steps wait for their data."""

from __future__ import annotations

import math

import numpy as np

from ..findings import Finding
from ..record import PHASES, Record
from ..views.units import rate, seconds, share
from .evidence import (
    first_rewrite,
    loop_label,
    loop_line,
    rounded,
    steady_rows,
    training_rows,
    with_rewrite,
)

CODE = "input-bound"
TITLE = "Training waits for its input"
DOC = """\
## What it detects
A large share of the training time is spent waiting for the next batch: the input pipeline
cannot keep up with the model. Measured two ways:
- in the cell's own loops (`for x, y in dataset:`), the time each `next()` took before a step;
- for `fit`/`evaluate`/`predict` on a Python generator, the time the generator took to make
  its batches, against the time of the steps that consumed them;
- for `fit` on a `tf.data` dataset, the time per batch of the same dataset iterated on its own
  right after the run (at most 1 s, 50 batches), against the median training step.

## Why it hurts
The model (and the GPU, if there is one) idles while Python or the pipeline makes the next
batch. Typical causes: a Python generator or `tf.py_function` doing the preprocessing, a
`map` without `num_parallel_calls`, reading files serially, no `prefetch` with a generator,
heavy per-element Python. tf.data runs on the host's CPU threads, not on the GPU, in parallel
when asked to (`num_parallel_calls`), and overlaps with training when it prefetches. (Recent
TensorFlow releases, 2.21 here, add a final prefetch and parallelise stateless `map`
functions by default, so a missing `.prefetch()` matters mostly with generators and
`py_function`.)

## Evidence we show
The share of step time spent waiting for input, the waits' total, the batches per second the
input delivered when waited for against the training steps per second, and where the data
comes from (the loop's line, or the generator given to Keras).

## Fix
Move the preprocessing into `tf.data` with `map(..., num_parallel_calls=tf.data.AUTOTUNE)`,
`cache()` what is deterministic and fits in memory, `prefetch(tf.data.AUTOTUNE)` at the end;
replace `py_function` and generators with TensorFlow ops where possible.

## Threshold
Waiting for input is at least 20% of the steady training time (wait + step), and at least
0.2 s in all. 20% is TensorBoard's profiler threshold for calling a program "highly
input-bound" (its input-pipeline analyser; 5–20% it calls "moderately"). For a generator or a
dataset given to Keras, which tf.data runs on its own threads, making a batch must take at
least 80% of a step's time: below that the input can run ahead and the step is the
bottleneck.
"""

MIN_SHARE = 0.2
MIN_WAIT = 0.2
MIN_GENERATOR_SHARE = 0.8
TRAIN = PHASES.index("train")


def check(record: Record, source: str | None) -> Finding | None:
    return (
        _loop_waits(record, source)
        or _keras_generator(record, source)
        or _keras_dataset(record, source)
    )


def _loop_waits(record: Record, source: str | None) -> Finding | None:
    steps = record.steps
    rows = steady_rows(record, training_rows(record))
    rows = rows[~np.isnan(steps["data_wait"][rows])]
    if rows.size < 5:
        return None
    waits = steps["data_wait"][rows].astype(np.float64)
    durations = steps["duration"][rows].astype(np.float64)
    wait, busy = float(waits.sum()), float(durations.sum())
    if wait < MIN_WAIT or wait < MIN_SHARE * (wait + busy):
        return None
    loop_ids = steps["loop"][rows]
    loop = int(np.bincount(loop_ids[loop_ids >= 0]).argmax()) if (loop_ids >= 0).any() else -1
    where = loop_label(record, loop)
    data_rate = rows.size / wait
    train_rate = rows.size / (wait + busy)
    evidence = {
        "wait_share": rounded(wait / (wait + busy), 3),
        "wait_s": rounded(wait),
        "step_s": rounded(busy),
        "steps": int(rows.size),
        "median_wait_s": rounded(float(np.median(waits))),
        "median_step_s": rounded(float(np.median(durations))),
        "input_batches_per_s": rounded(data_rate),
        "training_steps_per_s": rounded(train_rate),
        "where": where,
    }
    finding = Finding(
        code=CODE,
        severity="warning",
        title=f"{share(wait, wait + busy)} of training time waits for input",
        detail=(
            f"Each step waited a median {seconds(float(np.median(waits)))} for its batch from"
            f" {where}, against {seconds(float(np.median(durations)))} of work: the input"
            f" delivers {rate(data_rate)} batches/s when waited for, and training ran at"
            f" {rate(train_rate)} steps/s."
        ),
        fix="Build the input with tf.data: `map(..., num_parallel_calls=tf.data.AUTOTUNE)`,"
        " `cache()` for deterministic work, `prefetch(tf.data.AUTOTUNE)` last.",
        evidence=evidence,
        impact=wait,
    )
    lineno = loop_line(record, loop)
    del lineno
    return with_rewrite(finding, source, first_rewrite(source, ("tune_input_pipeline", {})))


def _keras_generator(record: Record, source: str | None) -> Finding | None:
    best = None
    for call in record.keras_calls:
        if math.isnan(call.data_time) or call.steps < 5 or call.step_time <= 0:
            continue
        ratio = call.data_time / call.step_time
        slow = ratio >= MIN_GENERATOR_SHARE and call.data_time >= MIN_WAIT
        if slow and (best is None or call.data_time > best.data_time):
            best = call
    if best is None:
        return None
    per_batch = best.data_time / max(best.data_items, 1)
    per_step = best.step_time / best.steps
    evidence = {
        "api": best.api,
        "generator_s": rounded(best.data_time),
        "batches_made": best.data_items,
        "generator_s_per_batch": rounded(per_batch),
        "step_s": rounded(best.step_time),
        "median_step_s": rounded(per_step),
        "generator_share_of_step_time": rounded(best.data_time / best.step_time, 3),
        "input_batches_per_s": rounded(1 / per_batch if per_batch > 0 else None),
        "training_steps_per_s": rounded(best.steps / best.duration if best.duration else None),
    }
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"The Python generator given to `{best.api}` takes {seconds(per_batch)} per batch,"
            f" {share(best.data_time, best.step_time)} of the step time"
        ),
        detail=(
            f"The generator needed {seconds(best.data_time)} to make {best.data_items} batches"
            f" while the steps took {seconds(best.step_time)}: the steps wait for Python to make"
            " the next batch."
        ),
        fix="Move the generator's work into tf.data ops (`from_tensor_slices` + `map` with"
        " `num_parallel_calls`), or at least `tf.data.Dataset.from_generator(...).prefetch()`.",
        evidence=evidence,
        impact=best.data_time,
    )
    return with_rewrite(finding, source, first_rewrite(source, ("tune_input_pipeline", {})))


def _keras_dataset(record: Record, source: str | None) -> Finding | None:
    """A dataset given to fit that, iterated alone after the run, makes batches about as
    slowly as training consumed them: the pipeline, not the model, set the pace."""
    steps = record.steps
    best = None
    for call in record.keras_calls:
        if call.api != "fit" or math.isnan(call.data_alone) or call.steps < 5:
            continue
        inside = (steps["start"] >= call.start) & (steps["start"] <= call.start + call.duration)
        rows = steady_rows(record, np.flatnonzero(inside & (steps["phase"] == TRAIN)))
        if rows.size < 3:
            continue
        step = float(np.median(steps["duration"][rows] / np.maximum(steps["fused"][rows], 1)))
        total = float(steps["duration"][rows].sum())
        slow = step > 0 and call.data_alone >= MIN_GENERATOR_SHARE * step and total >= MIN_WAIT
        if slow and (best is None or call.data_alone / step > best[1]):
            best = (call, call.data_alone / step, step)
    if best is None:
        return None
    call, ratio, step = best
    evidence = {
        "api": "fit",
        "dataset_alone_s_per_batch": rounded(call.data_alone),
        "median_step_s": rounded(step),
        "ratio": rounded(ratio, 3),
        "input_batches_per_s": rounded(1 / call.data_alone),
        "training_steps_per_s": rounded(1 / step),
    }
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"The dataset given to fit makes a batch in {seconds(call.data_alone)};"
            f" a training step takes {seconds(step)}"
        ),
        detail=(
            f"Iterated on its own after the run, the input pipeline delivered"
            f" {rate(1 / call.data_alone)} batches/s; training ran at {rate(1 / step)} steps/s."
            " The pipeline is as slow as the training it feeds, so it sets the pace."
        ),
        fix="Parallelise and overlap the pipeline: `map(..., num_parallel_calls=tf.data.AUTOTUNE)`,"
        " `cache()` deterministic work, `prefetch(tf.data.AUTOTUNE)`; replace `py_function`"
        " with TensorFlow ops where possible.",
        evidence=evidence,
        impact=float(call.data_alone * call.steps),
    )
    return with_rewrite(finding, source, first_rewrite(source, ("tune_input_pipeline", {})))
