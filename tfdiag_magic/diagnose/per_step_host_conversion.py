"""per-step-host-conversion: NumPy arrays converted to tensors on every step."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Kind, Record
from ..rewrite import numpy_batches_to_dataset
from ..units import seconds, share, size
from .evidence import (
    first_rewrite,
    loop_label,
    loop_line,
    rounded,
    steady_rows,
    training_rows,
    with_rewrite,
)

CODE = "per-step-host-conversion"
TITLE = "NumPy batches converted to tensors on every step"
DOC = """\
## What it detects
Training steps fed with NumPy arrays from a Python loop: `model.train_on_batch(x[i:i+b], ...)`,
a tf.function called with NumPy slices, or `tf.convert_to_tensor` / `tf.constant` on each batch
before the step. Every step then copies its batch from NumPy into a new tensor, synchronously,
between steps.

## Why it hurts
The copy, the slicing and the Python bookkeeping run on the critical path: nothing overlaps
them with the previous step. On a GPU each conversion is also a host-to-device transfer that
the step must wait for. `tf.data` does the same work on background threads and prefetches the
next batch (to the device, with `prefetch_to_device`), and `fit` on a dataset runs its steps in
a compiled loop without returning to Python between batches.

## Evidence we show
Steps fed from NumPy and their share of the training steps, bytes converted per step, the cost
of converting one such batch measured right after the run, and the time per iteration the
loop spent outside its steps (slicing, converting, bookkeeping) with its share of the loop.

## Fix
Build the batches with
`tf.data.Dataset.from_tensor_slices((x, y)).batch(b).prefetch(tf.data.AUTOTUNE)`
once, and iterate it (or pass it to `fit`).

## Threshold
At least 20 training steps, 80% of them given NumPy arrays. Silent where converting a step's
bytes as one array (timed after the run) is under 0.5% of the median of at least 20 steady
steps (those that traced left out: a step slow from retracing hides its conversions until that
is fixed) and the loop spends under a tenth of its time outside its steps: there is nothing to
gain (a reinforcement-learning loop converting its observations, a few hundred bytes a step
made one at a time from the model's own actions, read 0.03% and 0.5%). It is a warning when the
loop's time outside its steps is at least 10% of the loop, or TensorFlow has a GPU (every
conversion is then a transfer); an info note otherwise. The set-up of Keras calls the loop
makes (`predict`, `fit`: their time outside their batches) is not time outside the steps here:
a pipeline for the steps' batches does not give it back (`repeated-keras-call` is about it).
"""

MIN_STEPS = 20
MIN_SHARE = 0.8
MIN_OUTSIDE_SHARE = 0.1
# Converting a step's arrays, measured after the run, against the median steady step: under this
# share there is nothing to gain. A reinforcement-learning loop's observations (416 B a step,
# made one at a time from the model's own actions) cost 43 µs against 145 ms steps, 0.03%;
# NumPy batches of 4-9 KiB before 0.7-1.7 ms steps cost 2.6-6.8% (a 2-vCPU EPYC).
MIN_CONVERSION_SHARE = 0.005


def check(record: Record, source: str | None) -> Finding | None:
    steps = record.steps
    rows = training_rows(record)
    fed = rows[steps["host_bytes"][rows] > 0]
    if fed.size == 0:
        return None
    # Over every training step of the run: a long run's table keeps a sample of its rows, and
    # the rows it left out are summed (their NumPy bytes exactly); the steps among them that
    # were fed NumPy are those bytes over a fed step's mean bytes (exact for batches of one
    # size, the usual loop).
    training_total = int(record.phase_total("count", "train"))
    bytes_total = record.phase_total("host_bytes", "train")
    kept_bytes = float(steps["host_bytes"][fed].sum(dtype=np.float64))
    fed_total = fed.size + round((bytes_total - kept_bytes) / (kept_bytes / fed.size))
    if fed_total < MIN_STEPS or fed_total < MIN_SHARE * training_total:
        return None
    per_step = float(np.median(steps["host_bytes"][fed]))
    loop_ids = steps["loop"][fed]
    loop = int(np.bincount(loop_ids[loop_ids >= 0]).argmax()) if (loop_ids >= 0).any() else -1
    outside, loop_time, keras_set_up = _outside_steps(record, loop)
    conversion = record.facts.get("host_conversion_s")
    step_median = float(np.median(steps["duration"][fed]))
    outside_share = outside / loop_time if loop_time > 0 else 0.0
    if _nothing_to_gain(conversion, steady_rows(record, fed), steps, outside_share):
        return None
    gpu = bool(record.facts.get("gpus"))
    severity = "warning" if gpu or outside_share >= MIN_OUTSIDE_SHARE else "info"
    evidence = {
        "steps_fed_from_numpy": fed_total,
        "training_steps": training_total,
        "numpy_bytes": rounded(bytes_total),
        "bytes_per_step": rounded(per_step),
        "conversion_s_per_step": rounded(conversion),
        "median_step_s": rounded(step_median),
        "loop": loop_label(record, loop),
        "outside_steps_s": rounded(outside),
        "outside_steps_share_of_loop": rounded(outside_share, 3),
        "gpu": gpu,
    }
    if keras_set_up > 0:
        evidence["keras_calls_set_up_s"] = rounded(keras_set_up)
    cost = f"; converting one costs {seconds(conversion)} here" if conversion else ""
    finding = Finding(
        code=CODE,
        severity=severity,
        title=(f"{fed_total} steps were fed NumPy batches ({size(per_step)} converted per step)"),
        detail=(
            f"{fed_total} of {training_total} training steps took NumPy arrays from"
            f" {evidence['loop']}"
            f"{cost}."
            + (
                f" The loop spent {share(outside, loop_time)} of its time outside the steps"
                " (slicing, converting, Python bookkeeping), with nothing overlapping it."
                if loop_time > 0
                else ""
            )
            + (
                f" The set-up of the Keras calls it made ({seconds(keras_set_up)}) is left"
                " out of that: a tf.data pipeline for the steps' batches would not give it back."
                if keras_set_up > 0
                else ""
            )
            + (
                " Without a GPU that is little to gain: the rewrite pays off where every"
                " conversion is also a host-to-device copy, and on a CPU it can even be slower"
                "; measure it with --compare."
                if severity == "info"
                else ""
            )
        ),
        fix="Build the batches once with tf.data (`from_tensor_slices(...).batch(b).prefetch()`)"
        " and iterate the dataset, or pass it to `fit`.",
        evidence=evidence,
        impact=outside,
    )
    lineno = loop_line(record, loop)
    return with_rewrite(
        finding,
        source,
        first_rewrite(source, (numpy_batches_to_dataset, {"loop_lineno": lineno})),
    )


def _nothing_to_gain(
    conversion: float | None, steady: np.ndarray, steps: np.ndarray, outside_share: float
) -> bool:
    """Whether converting a step's bytes is too little beside the steady steps to be worth a
    change. Steps that trace are left out of that median: a step retracing every call is slow
    for another reason, and its conversions come back into view once that is fixed. The
    conversion timed is one array of a step's bytes; a step that converts many small ones
    (sample by sample) spends more, which shows as the loop's time outside its steps."""
    if conversion is None or steady.size < MIN_STEPS or outside_share >= MIN_OUTSIDE_SHARE:
        return False
    return conversion < MIN_CONVERSION_SHARE * float(np.median(steps["duration"][steady]))


def _outside_steps(record: Record, loop: int) -> tuple[float, float, float]:
    """Seconds the loop's iterations spent outside steps and outside the set-up of the Keras
    calls made in it, the loop's total time, and that set-up (a `predict` per iteration of a
    GAN's loop spends most of the loop building its pipeline: `repeated-keras-call`'s, not
    time a tf.data pipeline for the steps' batches would give back)."""
    for info in record.loops:
        if info.id == loop:
            steps = record.steps
            inside = (steps["loop"] == loop) & (steps["kind"] != Kind.LOOP)
            step_time = float(steps["duration"][inside].sum())
            set_up = sum(c.duration - c.step_time for c in record.keras_calls if c.loop == loop)
            set_up += sum(
                g.duration - g.step_time for g in record.keras_call_groups if g.loop == loop
            )
            set_up = max(set_up, 0.0)
            outside = max(info.seconds - step_time - set_up, 0.0)
            return outside, info.seconds + info.wait, set_up
    return 0.0, 0.0, 0.0
