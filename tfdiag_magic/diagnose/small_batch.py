"""small-batch: per-step overhead dominates because batches are tiny."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Record
from ..rewrite import larger_batch, steps_per_execution
from ..units import rate, seconds
from .evidence import first_rewrite, rounded, steady_rows, training_rows, with_rewrite

CODE = "small-batch"
TITLE = "Batches are too small to use the hardware"
DOC = """\
## What it detects
Training with batches of a few samples (1 to 8), where each step is short enough that its fixed
cost — Python dispatch, launching the step, the optimizer update of every weight, callbacks —
rather than the work per sample sets the speed.

## Why it hurts
A step's fixed cost is paid per batch, not per sample. On this project's 2-CPU test machine a
small Keras MLP's `fit` step took 0.93 ms at batch 1 and 1.08 ms at batch 32, so batch 32
trained 27× more samples per second (`python benchmarks/small_batch.py` measures it on
yours). On a GPU the gap is larger: one sample cannot fill thousands of
cores. (The seed articles' claim that batch size 1 makes a model "fail" on the GPU is wrong:
it is only slow.)

## Evidence we show
The batch size, the median step time, samples per second, and the steps run.

## Fix
Use a larger batch (32–256 is a common start; raise the learning rate with it), and for
models whose steps are still short, `model.compile(..., steps_per_execution=N)` to run N steps
per call. Batch size changes the optimisation, not only the speed: compare the loss.

For a model with stateful layers (a stateful RNN), the batch size is the number of
sequences it carries state for: the fix is then `steps_per_execution` alone, the same training
without the fixed cost per call.

## Threshold
A known batch size of 8 or less, at least 50 steady training steps, and a median step under
20 ms (longer steps have enough work per step for the fixed cost not to dominate). Steps that
run eagerly may take up to 80 ms: eager mode dispatches every op from Python, a cost per step
that does not grow with the batch. A 16→32→2 Keras MLP with `run_eagerly=True` at batch 1
took 20–27 ms per step on the 2-CPU test machine, nearly all of it dispatch.
"""

MAX_BATCH = 8
MIN_STEPS = 50
MAX_STEP_TIME = 0.02
MAX_EAGER_STEP_TIME = 0.08  # eager dispatch is fixed cost too (see the threshold)
SUGGESTED_BATCH = 64


def check(record: Record, source: str | None) -> Finding | None:
    steps = record.steps
    rows = steady_rows(record, training_rows(record))
    batches = steps["batch"][rows]
    known = rows[~np.isnan(batches)]
    if known.size < MIN_STEPS:
        return None
    batch = float(np.median(steps["batch"][known]))
    if batch > MAX_BATCH:
        return None
    # A row of a fused call (steps_per_execution) already holds its share of the call.
    step = float(np.median(steps["duration"][known]))
    eager = bool(np.median(steps["eager"][known]) >= 0.5)
    if step >= (MAX_EAGER_STEP_TIME if eager else MAX_STEP_TIME):
        return None
    samples_per_s = batch / step if step > 0 else None
    evidence = {
        "batch_size": int(batch),
        "median_step_s": rounded(step),
        "samples_per_s": rounded(samples_per_s),
        "steps": int(known.size),
    }
    detail = (
        f"Each step handled {int(batch)} sample(s) in {seconds(step)}: at this size the"
        " step's fixed cost, not the work per sample, sets the speed."
    )
    fix = (
        f"Use a larger batch (e.g. {SUGGESTED_BATCH}) and adjust the learning rate; with"
        " short steps, also `steps_per_execution` in `compile`."
    )
    attempt: tuple = (larger_batch, {"batch_size": SUGGESTED_BATCH})
    stateful = next((c for c in record.keras_calls if c.api == "fit" and c.stateful_layers), None)
    if stateful is not None:
        # Its batch size is the number of sequences it carries state for (sample i of a batch
        # continues sample i of the last): a larger batch is another model, with its data
        # arranged for it (the larger batch would not even divide the data). Several steps per
        # call carry the state as before: the same training, faster.
        evidence["stateful_layers"] = stateful.stateful_layers
        where = f" (fit at line {stateful.line})" if stateful.line > 0 else ""
        detail += (
            f" The model{where} has {stateful.stateful_layers} stateful layer(s): its batch size"
            " is the number of sequences it carries state for, so a larger batch would be"
            " another model, with its data arranged for it."
        )
        fix = (
            f"`model.compile(..., steps_per_execution={STATEFUL_STEPS_PER_EXECUTION})` runs"
            " that many steps per call, the state carried from batch to batch as before: the"
            " same training without a call's fixed cost per batch."
        )
        attempt = (steps_per_execution, {"steps": STATEFUL_STEPS_PER_EXECUTION})
    finding = Finding(
        code=CODE,
        severity="warning",
        title=f"Batch size {int(batch)}: {rate(samples_per_s)} samples/s at {seconds(step)} a step",
        detail=detail,
        fix=fix,
        evidence=evidence,
        impact=float(steps["duration"][known].sum()) * 0.5,
    )
    return with_rewrite(finding, source, first_rewrite(source, attempt))


# Steps per call proposed for a stateful model's batches: measured on a stateful LSTM of batch
# 1 (`tests/test_diagnose_input.py`'s), 32 steps a call trained the same weights.
STATEFUL_STEPS_PER_EXECUTION = 32
