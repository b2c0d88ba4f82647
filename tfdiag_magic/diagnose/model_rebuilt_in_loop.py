"""model-rebuilt-in-loop: Keras models built again and again without clearing Keras' state."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from ..findings import Finding
from ..record import ModelBuilt, Phase, Record
from ..rewrite import clear_session_in_loop
from ..units import size
from .evidence import first_rewrite, loop_label, loop_line, rounded, with_rewrite

CODE = "model-rebuilt-in-loop"
TITLE = "Models built in a loop without clear_session()"
DOC = """\
## What it detects
A loop of the cell that builds a new Keras model on many of its iterations (a search over
hyper-parameters, a model per fold, or a model rebuilt by mistake every step) while Keras'
global state is never cleared: model names keep counting up (`dense_57`, `sequential_12`).

## Why it hurts
Keras keeps global state for every model built in the process: the name registry, and in the
TensorFlow backend the graph-level objects of every layer and compiled function. Without
`keras.backend.clear_session()` they are never released, so memory grows with each model and
each later build gets slower (Keras' documentation of `clear_session` says exactly this). A model
rebuilt every training step is worse: its weights start from scratch each time and every step
traces new functions.

## Evidence we show
Models built in the loop, the first and last names (the counter that never resets), and the
process memory per model, from the memory measured after each build.

## Fix
Call `keras.backend.clear_session()` at the start of each iteration that builds a model (after
saving what you need from the previous one), or build the model once outside the loop when
the loop only trains it.

## Threshold
Five models built in one loop with names that never repeat (`clear_session` resets the
counter, so repeating names mean it is being called). It is a warning when 20 or more models
were built, or the loop ran at most two training steps per model built (a model rebuilt every
step, so no model learns); an info note otherwise: a k-fold loop, an ensemble or a small
search builds a handful of models on purpose. The memory per model is shown (fitted over the
builds after the first, which also pays the run's one-off costs: 36-63 MiB here) but does not
make a warning: clearing the session does not stop it. Measured on this 2-CPU machine with a
loop that builds, fits and evaluates a Keras MLP per iteration: 11-12.5 MiB per model
without `clear_session()` and 4.1-5.7 MiB with it (12→32→1); 27 MiB without and 16.5-23 MiB
with it (12→1024→1024→1), so the memory one run shows per model says little about what
clearing would save.
"""

MIN_MODELS = 5
MANY_MODELS = 20
MAX_STEPS_PER_MODEL = 2
_COUNTER = re.compile(r"^(.*?)(?:_(\d+))?$")


def check(record: Record, source: str | None) -> Finding | None:
    by_loop: dict[int, list[ModelBuilt]] = defaultdict(list)
    for model in record.models:
        if model.loop >= 0:
            by_loop[model.loop].append(model)
    if not by_loop:
        return None
    loop, models = max(by_loop.items(), key=lambda item: len(item[1]))
    if len(models) < MIN_MODELS:
        return None
    names = [m.name for m in models]
    if len(set(names)) < len(names):
        return None  # the name counter was reset: clear_session is being called
    rss = np.array([m.rss for m in models if m.rss >= 0], dtype=np.float64)
    per_model = None
    if rss.size >= 4:
        # From the second build on: memory after the first build still lacks the one-off
        # costs of the run's first fit (its tracing, the runtime's first allocations).
        per_model = float(np.polyfit(np.arange(rss.size - 1), rss[1:], 1)[0])
    trained = _training_steps_in_loop(record, loop)
    per_step = 0 < trained <= MAX_STEPS_PER_MODEL * len(models)
    severity = "warning" if per_step or len(models) >= MANY_MODELS else "info"
    evidence = {
        "models_built": len(models),
        "training_steps_in_loop": trained,
        "loop": loop_label(record, loop),
        "first_name": names[0],
        "last_name": names[-1],
        "memory_per_model_bytes": rounded(per_model),
        "memory_growth_bytes": rounded(float(rss[-1] - rss[0])) if rss.size >= 2 else None,
    }
    memory = (
        f"; process memory grew {size(per_model)} per model"
        if per_model is not None and per_model > 0
        else ""
    )
    rebuilt = (
        f" The loop ran {trained} training steps for {len(models)} models: a new model every"
        " step or two, so no model keeps what it learned."
        if per_step
        else ""
    )
    finding = Finding(
        code=CODE,
        severity=severity,
        title=f"{len(models)} Keras models built in a loop without clear_session(){memory}",
        detail=(
            f"{len(models)} models were built in {evidence['loop']}, named {names[0]} … "
            f"{names[-1]}: Keras' global state was never cleared, so each model stays"
            f" registered{memory}.{rebuilt}"
            + (
                ""
                if severity == "warning"
                else " A handful of models built on purpose (folds, an ensemble, a small"
                " search) is fine; clearing the session matters for long searches (even"
                " with it, memory still grows part of this per model)."
            )
        ),
        fix="Call `keras.backend.clear_session()` at the start of each iteration that builds a"
        " model, or build the model once, outside the loop.",
        evidence=evidence,
        impact=0.0,
    )
    lineno = loop_line(record, loop)
    return with_rewrite(
        finding, source, first_rewrite(source, (clear_session_in_loop, {"loop_lineno": lineno}))
    )


def _training_steps_in_loop(record: Record, loop: int) -> int:
    """Training steps recorded in `loop`. Past `dropped.full_rows` a long run's table keeps a
    uniform sample of its rows and sums the others per phase, not per loop: there each kept
    training row stands for its share of the training rows left out (an estimate; exact
    where the table keeps every row)."""
    steps = record.steps
    train = steps["phase"] == Phase.TRAIN
    mine = train & (steps["loop"] == loop)
    dropped, index = record.dropped, record.step_index
    if dropped is None or index is None or not record.reduced:
        return int(np.count_nonzero(mine))
    late = index >= dropped.full_rows
    sampled = int(np.count_nonzero(train & late))
    weight = (sampled + dropped.total("count", "train")) / sampled if sampled else 0.0
    return int(np.count_nonzero(mine & ~late)) + round(np.count_nonzero(mine & late) * weight)
