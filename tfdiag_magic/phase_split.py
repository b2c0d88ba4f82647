"""A phase's steps split by what ran them, where one phase pools unlike steps: the Keras
models of a `train` phase, the loops of a `loop` phase.

A cell that fits a small model and then a larger one, or compares a few architectures, puts all
their training steps in one `train` phase, whose median is then a step of neither. Each step row
of a Keras call lies inside that call (`KerasCall.start` .. `start + duration`), so rows are
given to the calls' models, and each model's rows get the phase's numbers of their own
(`stats.step_numbers`). Only the calls the run kept one by one are placed; past them
(`Record.keras_call_groups`), calls are summed, and a phase whose rows are not all placed is
not split.

A `loop` phase holds the iterations of every loop of the cell: an epoch loop's seconds-long
iterations beside its batch loop's milliseconds. Each row carries its loop (the ``loop``
column), so each loop gets its numbers, its count taking in the iterations it did not keep as
rows (`LoopInfo.rows_dropped`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .record import PHASES, Phase, Record
from .stats import interrupted_gaps, step_numbers, warmup_mask

MAX_ROWS = 6
"""Models or loops listed under one phase; past them the phase says how many more it holds."""


def rows_by_model(record: Record) -> tuple[np.ndarray, list[str]]:
    """For each step row, the index of its Keras call's model in the returned names (in order
    of their first call), or -1 for a row of no kept call.

    A model compiled again between its calls (its layers frozen for a first fit, then unfrozen
    and compiled for fine-tuning, with steps several times as long) is a new training function:
    its calls after each compile are a model of their own here, named with the line of the
    compile (``base, compiled at line 57``)."""
    starts = record.steps["start"]
    owner = np.full(starts.size, -1, dtype=np.int32)
    keys: list[tuple[str, int]] = []
    compiled: dict[str, int] = {}  # the model's compiles so far, in the run
    compile_lines: dict[tuple[str, int], int] = {}
    for call in sorted(record.keras_calls, key=lambda c: c.start):
        if call.api == "compile":
            compiled[call.model] = compiled.get(call.model, 0) + 1
            compile_lines[(call.model, compiled[call.model])] = call.line
            continue
        if call.steps <= 0:
            continue
        lo, hi = np.searchsorted(starts, (call.start, call.start + call.duration), side="left")
        if hi <= lo:
            continue
        key = (call.model, compiled.get(call.model, 0))
        if key not in keys:
            keys.append(key)
        owner[lo:hi] = keys.index(key)
    builds: dict[str, int] = {}
    for model, _ in keys:
        builds[model] = builds.get(model, 0) + 1
    names = [
        model if builds[model] == 1 else _compiled_name(model, n, compile_lines.get((model, n), -1))
        for model, n in keys
    ]
    # Models rebuilt under one name and compiled at one line (a loop over settings that clears
    # the session) would read alike: each such row says which compile it follows.
    repeated = {name for name in names if names.count(name) > 1}
    names = [
        f"{name} (compile {n})" if name in repeated else name
        for name, (_, n) in zip(names, keys, strict=True)
    ]
    return owner, names


def _compiled_name(model: str, compiles: int, line: int) -> str:
    if compiles == 0:
        return f"{model}, compiled before the run"
    return f"{model}, compiled at line {line}" if line >= 0 else f"{model}, compile {compiles}"


def phase_models(record: Record) -> dict[str, dict[str, Any]]:
    """Per phase that holds the steps of two or more models, all placed: each model's numbers
    (the first `MAX_ROWS`, in order of their first call) and how many models it holds."""
    if record.keras_call_groups or record.dropped is not None or not record.keras_calls:
        return {}
    owner, names = rows_by_model(record)
    if len(names) < 2:
        return {}
    steps = record.steps
    warm = warmup_mask(record)
    ends = steps["start"] + steps["duration"]
    result: dict[str, dict[str, Any]] = {}
    for code, phase in enumerate(PHASES):
        rows = steps["phase"] == code
        if not rows.any() or (owner[rows] < 0).any():
            continue
        models = [int(m) for m in dict.fromkeys(owner[rows].tolist())]  # first-seen order
        if len(models) < 2:
            continue
        listed = []
        for model in models[:MAX_ROWS]:
            mine = np.flatnonzero(rows & (owner == model))
            numbers = step_numbers(
                steps["duration"][mine],
                warm[mine],
                steps["start"][mine],
                steps["data_wait"][mine],
                interrupted_gaps(mine, steps["start"], ends),
            )
            durations = steps["duration"][mine]
            listed.append(
                {
                    "model": names[model],
                    "median_all": float(np.median(durations)),
                    "warmup_time": float(durations[warm[mine]].sum()),
                    **numbers,
                }
            )
        result[phase] = {"models": listed, "count": len(models)}
    return result


def loop_split(record: Record) -> dict[str, Any] | None:
    """The `loop` phase's numbers per loop of the cell (the first `MAX_ROWS`, in order of
    their first iteration), where it holds two loops or more; None otherwise."""
    if record.dropped is not None:
        return None
    steps = record.steps
    rows = steps["phase"] == Phase.LOOP
    loops = [int(i) for i in dict.fromkeys(steps["loop"][rows].tolist())]
    if len(loops) < 2:
        return None
    info = {loop.id: loop for loop in record.loops}
    warm = warmup_mask(record)
    ends = steps["start"] + steps["duration"]
    listed = []
    for loop_id in loops[:MAX_ROWS]:
        mine = np.flatnonzero(rows & (steps["loop"] == loop_id))
        durations = steps["duration"][mine]
        numbers = step_numbers(
            durations,
            warm[mine],
            steps["start"][mine],
            steps["data_wait"][mine],
            interrupted_gaps(mine, steps["start"], ends),
        )
        loop = info.get(loop_id)
        if loop is not None:
            numbers["count"] += loop.rows_dropped
        listed.append(
            {
                "loop": f"line {loop.lineno}" if loop is not None else f"loop {loop_id}",
                "median_all": float(np.median(durations)),
                "warmup_time": float(durations[warm[mine]].sum()),
                **numbers,
            }
        )
    return {"loops": listed, "count": len(loops)}
