"""eager-model-calls: a loop of the code calls a Keras model eagerly, one call after another."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record
from ..units import seconds, share
from .evidence import loop_label, rounded

CODE = "eager-model-calls"
TITLE = "A loop calls a Keras model eagerly, call after call"
DOC = """\
## What it detects
A loop of the code whose time goes to calling a Keras model directly (`model(x)`), eagerly:
text generated one token at a time with each prediction fed back, a model run sample by sample
or batch by batch in a Python loop, a hand-written evaluation loop; or, in a loop whose
training steps are compiled, a forward pass between the steps (TensorFlow's "Custom training:
walkthrough" updates its accuracy with `model(x, training=True)` after each step). A loop whose
steps run eagerly is `eager-step`'s: its model calls are part of its steps.

## Why it hurts
Called eagerly, a Keras model runs its layers' Python on every call and dispatches each
operation on its own, as an eager training step does (see `eager-step`). Compiled once with
`tf.function`, later calls run the traced graph, without the layers' Python. Calls that do not
depend on each other can also be made at once, on a batch.

## Evidence we show
The loop's line, its iterations, the eager model calls made in it with their time, their
share of the cell, and the time per call.

## Fix
Compile the call once, before the loop: `forward = tf.function(model)` (or a `@tf.function`
function that calls the model), and call `forward(x)` in the loop. Between compiled steps, a
metric can also take the outputs the step computed already (return them from the step), or be
updated inside the step. Keep the input's shape the
same from call to call, or give `input_signature` / `reduce_retracing=True`, so it is traced
once, not on every call. Independent calls: `model.predict_on_batch(x)` or `model(x)` on all
the inputs at once.

## Threshold
At least 100 eager model calls in a loop with no step or with compiled steps, taking at least
0.5 s and at least 25% of the cell's wall time less the time the cell's thread waited for a CPU
(a busy machine stretches the rest of the run more than the calls: beside two CPU hogs the
test's 1,500 calls took 2.5-2.8 s of 10.4-11.3 s runs, against 1.9 s of 4.1-4.2 s quiet). The
walkthrough's loop, its step compiled by `eager-step`'s rewrite (201 epochs of 9 batches, the
2-vCPU Xeon): 1,809 calls of 2.2-2.4 ms between 0.6 ms steps, 35-36% of the run
(`benchmarks/rewrite_payoff.py`).
"""

MIN_CALLS = 100
MIN_SECONDS = 0.5
MIN_SHARE = 0.25


def check(record: Record, source: str | None) -> Finding | None:
    del source  # the fix is the same whatever the loop looks like
    ready = _ready_time(record)
    candidates = [
        loop
        for loop in record.loops  # a loop of eager steps has no timed calls
        if loop.model_calls >= MIN_CALLS
        and loop.model_seconds >= MIN_SECONDS
        and loop.model_seconds >= MIN_SHARE * max(ready, loop.model_seconds)
    ]
    if not candidates:
        return None
    # An outer loop holds its inner loops' calls: the loop with the most time in calls, the
    # innermost (latest line) among equals, is the one that makes them.
    loop = max(candidates, key=lambda item: (item.model_seconds, item.lineno))
    spent = loop.model_seconds
    per_call = spent / loop.model_calls
    evidence = {
        "loop": loop_label(record, loop.id),
        "iterations": loop.iterations,
        "model_calls": loop.model_calls,
        "model_calls_s": rounded(spent),
        "share_of_cell": rounded(spent / record.wall_time, 3) if record.wall_time else None,
        "per_call_s": rounded(per_call),
        "between_compiled_steps": loop.has_steps,
    }
    if ready < record.wall_time:
        evidence["thread_waited_for_cpu_s"] = rounded(record.wall_time - ready)
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{loop.model_calls:,} eager model calls in a loop took {seconds(spent)},"
            f" {share(spent, record.wall_time)} of the run"
        ),
        detail=(
            f"The loop at {evidence['loop']} called a Keras model {loop.model_calls:,} times"
            f" eagerly, {seconds(per_call)} a call, "
            + (
                "between its compiled steps"
                if loop.has_steps
                else "with no training step inside it"
            )
            + ": each call ran the model's layers in Python, op by op."
        ),
        fix="Compile the call once before the loop, `forward = tf.function(model)`, and call"
        " `forward(x)` in it (same input shape each call, or an `input_signature`); call the"
        " model on all the inputs at once where the calls do not depend on each other."
        + (
            " Where the call computes a metric on the batch the step trained on, return the"
            " outputs the step computed from it and update the metric with them, or update the"
            " metric inside the step."
            if loop.has_steps
            else ""
        ),
        evidence=evidence,
        impact=spent * 0.5,
    )


def _ready_time(record: Record) -> float:
    """The run's wall time less the time its own thread was kept waiting for a CPU (Linux's
    run-queue count, probes/cpu_wait.py): what a busy machine adds around the calls is no part
    of the cell's work."""
    waited = record.facts.get("thread_cpu_wait_s")
    if not isinstance(waited, (int, float)) or waited <= 0:
        return float(record.wall_time)
    return max(float(record.wall_time) - float(waited), 0.0)
