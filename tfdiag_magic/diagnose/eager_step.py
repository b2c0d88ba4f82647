"""eager-step: the training step runs eagerly, op by op, with no graph."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import KINDS, Record
from ..rewrite import compile_eager_step, compile_inline_step
from ..units import seconds, share
from .evidence import first_rewrite, rounded, steady_rows, training_rows, with_rewrite

CODE = "eager-step"
TITLE = "The training step runs eagerly"
DOC = """\
## What it detects
Training steps that ran eagerly: a GradientTape step that is not wrapped in `tf.function`,
`model.compile(..., run_eagerly=True)`, or `tf.config.run_functions_eagerly(True)` left on
after debugging.

## Why it hurts
Eagerly, Python dispatches every operation one at a time; TensorFlow cannot fuse operations,
plan memory, or run independent ops in parallel, and every op pays Python's overhead. For the
small and medium models of a notebook, a compiled step is commonly several times faster (the
TensorFlow guide "Better performance with tf.function" measures this). Eager mode is the right
tool for debugging, and the wrong one for training.

## Evidence we show
Eager training steps and their median time, their seconds against all training steps', the cause
(`run_eagerly`, `run_functions_eagerly` or an uncompiled update), and the median of the compiled
steps of the same run when there are any.

## Fix
Decorate the step function with `@tf.function`; remove `run_eagerly=True` from `compile`;
set `tf.config.run_functions_eagerly(False)`: the switch is process-wide, so deleting the line
does not turn it off in a kernel where it already ran. Where the update is written inline in
the loop, move the forward pass, the gradient and the update into one `@tf.function` (the
rewrite moves the loop's statements from its first tape to its last update, unchanged, into
`train_step`, defined once before the loop, which takes the batch and returns what the code
after it reads); where the work between the model's calls cannot run in a graph (an
environment's `step` in a reinforcement-learning episode), compile the model's call alone
(`tf.function(model)`): in the keras-io actor-critic example that took its model calls from
3.9 to 0.85 ms and the run from 16.2 to 8.8 s, with the same rewards (a 2-vCPU EPYC).

## Threshold
At least 10 eager training steps, and either the majority of the training steps, or at least a
quarter of them taking at least half of the training steps' time and 0.5 s: debugging calls
before compiled training (a few eager steps among many compiled ones) do not trigger it, and a
run that trains a model eagerly and then as many steps compiled (the keras-io subclassing
guide's VAE: its custom loop, then `fit`, 938 steps each; the eager ones took 48 s of 57) does.
"""

MIN_STEPS = 10
MIN_TIME_SHARE = 0.5  # of the training steps' time, where eager steps are not the majority
MIN_SECONDS = 0.5  # in eager steps, for the time share to count
MIN_COUNT_SHARE = 0.25  # of the training steps, eager, for the time share to count


def check(record: Record, source: str | None) -> Finding | None:
    rows = training_rows(record)
    steps = record.steps
    eager_rows = rows[steps["eager"][rows]]
    # Counts over every training step of the run (a long run's table keeps a sample of them);
    # medians come from the rows kept.
    eager_total = int(record.phase_total("eager", "train"))
    training_total = int(record.phase_total("count", "train"))
    if eager_rows.size == 0 or eager_total < MIN_STEPS:
        return None
    # Seconds in the eager and in all training steps, the kept rows scaled to every step.
    eager_s = float(steps["duration"][eager_rows].sum()) * eager_total / eager_rows.size
    training_s = float(steps["duration"][rows].sum()) * training_total / max(rows.size, 1)
    most_of_the_time = (
        eager_s >= MIN_TIME_SHARE * training_s
        and eager_s >= MIN_SECONDS
        and eager_total >= MIN_COUNT_SHARE * training_total
    )
    if eager_total * 2 <= training_total and not most_of_the_time:
        return None
    eager_steady = steady_rows(record, eager_rows)
    durations = steps["duration"][eager_steady if eager_steady.size else eager_rows]
    eager_median = float(np.median(durations))
    graph_rows = steady_rows(record, rows[~steps["eager"][rows]])
    graph_median = float(np.median(steps["duration"][graph_rows])) if graph_rows.size else None
    kinds = {KINDS[k] for k in np.unique(steps["kind"][eager_rows])}
    cause = _cause(record, kinds, source)
    evidence = {
        "eager_steps": eager_total,
        "training_steps": training_total,
        "median_eager_step_s": rounded(eager_median),
        "median_compiled_step_s": rounded(graph_median),
        "eager_steps_s": rounded(eager_s),
        "training_steps_s": rounded(training_s),
        "cause": cause,
    }
    compiled = "not measured in this run"
    if graph_median:
        compiled = f"{seconds(graph_median)} for the compiled steps of this run"
    finding = Finding(
        code=CODE,
        severity="warning",
        title=f"{eager_total} training steps ran eagerly ({seconds(eager_median)} per step)",
        detail=f"{cause} A compiled step's time: {compiled}."
        + (
            f" The eager steps took {seconds(eager_s)} of the training steps'"
            f" {seconds(training_s)} ({share(eager_s, training_s)})."
            if graph_median
            else ""
        ),
        fix="Compile the step: `@tf.function` on the step function, no `run_eagerly=True`.",
        evidence=evidence,
        # the kept rows' time, scaled to every eager step where the table kept a sample
        impact=float(durations.sum()) * 0.5 * eager_total / eager_rows.size,
    )
    attempts = [(compile_eager_step, {})]
    if cause == _PYTHON_UPDATE:  # the step may be written inline in the loop
        attempts.append((compile_inline_step, {}))
    finding = with_rewrite(finding, source, first_rewrite(source, *attempts))
    if finding.rewrite is None and cause == _PYTHON_UPDATE:
        finding.fix = _NO_STEP_FUNCTION_FIX
    return finding


_PYTHON_UPDATE = (
    "The optimizer update runs in plain Python: the step function is not wrapped in `tf.function`."
)
# The cell has no step function to decorate (the update is inline in its loop).
_NO_STEP_FUNCTION_FIX = (
    "Compile the step: move the forward pass, the gradient and the optimizer update into one"
    " function decorated with `@tf.function`, and call it from the loop. Where the work between"
    " the model's calls cannot run in a graph (NumPy, an environment's `step`, as in a"
    " reinforcement-learning episode), compile the model's call alone: `policy ="
    " tf.function(model)`, and call `policy(state)` inside the tape."
)


_FUNCTIONS_EAGERLY = (
    "`tf.config.run_functions_eagerly(True)` is on, so every tf.function runs eagerly."
)


def _cause(record: Record, kinds: set[str], source: str | None) -> str:
    """Why the steps ran eagerly, from what made the rows and what the cell says."""
    text = source or ""
    switched_on = "run_functions_eagerly(True)" in text.replace(" ", "")
    if record.facts.get("functions_run_eagerly") or (
        "tf_function" in kinds and (switched_on or "keras" not in kinds)
    ):
        # A tf.function call runs eagerly only when functions are run eagerly globally
        # (its rows are `tf_function` rows; a plain Python step makes `eager_update` rows).
        return _FUNCTIONS_EAGERLY
    if "keras" in kinds or "on_batch" in kinds:
        if switched_on and "run_eagerly=True" not in text.replace(" ", ""):
            return _FUNCTIONS_EAGERLY
        return "The model was compiled with `run_eagerly=True`, so Keras runs its step eagerly."
    return _PYTHON_UPDATE
