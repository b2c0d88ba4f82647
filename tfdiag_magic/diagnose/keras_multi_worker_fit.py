"""keras-multi-worker-fit: Keras 3's fit/evaluate/predict failed under a multi-worker strategy."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record

CODE = "keras-multi-worker-fit"
TITLE = "Keras 3's fit does not run under MultiWorkerMirroredStrategy"
DOC = """\
## What it detects
The run ended with `ValueError: Attempt to convert a value (PerReplica:{...})` while a Keras 3
model was trained, evaluated or predicted on under `tf.distribute.MultiWorkerMirroredStrategy`
with two or more workers: Keras 3's trainer hands the per-replica values of the distributed
dataset to an op that takes one tensor. Measured here with TensorFlow 2.21 and Keras 3.15: a
two-worker job on localhost fails at its first batch in `model.fit`, every worker alike; the
same script with one worker trains. Known upstream since TensorFlow 2.16 (Keras 3 the default),
keras-team/keras#20585.

## Why it hurts
The job stops at its first step on every worker, with a message that names neither Keras nor
the strategy.

## Evidence we show
The error's type and the start of its message, the worker (task type and index from
`TF_CONFIG`) and the job's size, the Keras version.

## Fix
Either a custom training loop, as TensorFlow's multi-worker guide writes it
(`strategy.distribute_datasets_from_function`, `strategy.run` inside a `tf.function` given the
iterator, `strategy.reduce`), which runs under the strategy with Keras 3 models and
optimizers; or the legacy Keras 2 package: `pip install tf_keras`, then
`TF_USE_LEGACY_KERAS=1` in the environment before TensorFlow is imported (`tf.keras` is then
Keras 2, whose `fit` supports the strategy).

## Threshold
The error itself, with the per-replica value in its message.
"""

_SYMPTOM = "Attempt to convert a value (PerReplica"


def check(record: Record, source: str | None) -> Finding | None:
    del source
    error = record.error
    if error is None or error.type != "ValueError" or _SYMPTOM not in error.message:
        return None
    keras_version = str(record.facts.get("keras") or "")
    if keras_version and not keras_version.startswith("3"):
        return None
    worker = record.facts.get("worker") or {}
    where = (
        f" on {worker['task_type']} {worker['task_index']} of a {worker['workers']}-worker job"
        if worker
        else ""
    )
    return Finding(
        code=CODE,
        severity="error",
        title=f"Keras {keras_version or '3'}'s fit failed under a multi-worker strategy{where}",
        detail=(
            "Keras 3's trainer passed a per-replica value of the distributed dataset to an op"
            " that takes one tensor (`ValueError: Attempt to convert a value (PerReplica...`):"
            " Keras 3's fit, evaluate and predict do not run under"
            " `MultiWorkerMirroredStrategy` with two or more workers (keras-team/keras#20585)."
        ),
        fix=(
            "Train with a custom loop, as TensorFlow's multi-worker guide does"
            " (`strategy.distribute_datasets_from_function`, `strategy.run` in a `tf.function`"
            " given the iterator, `strategy.reduce`); or use Keras 2: `pip install tf_keras` and"
            " set `TF_USE_LEGACY_KERAS=1` before TensorFlow is imported."
        ),
        evidence={
            "error": error.type,
            "message": error.message[:120],
            "keras": keras_version or None,
            "worker": f"{worker['task_type']} {worker['task_index']}" if worker else None,
            "workers": worker.get("workers"),
        },
    )
