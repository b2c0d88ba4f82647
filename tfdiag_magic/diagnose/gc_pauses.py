"""gc-pauses: Python garbage-collection pauses take a real share of the run."""

from __future__ import annotations

import ast

import numpy as np

from ..findings import Finding
from ..record import Record
from ..stats import gc_stats
from ..units import seconds, share
from .evidence import rounded
from .where import line_label

CODE = "gc-pauses"
TITLE = "Python garbage collection pauses the run"
DOC = """\
## What it detects
Python's cyclic garbage collector stopped the program for a real share of the run: many
collections of the oldest generation, or `gc.collect()` called by the cell (every N steps, as
one of the articles advises).

## Why it hurts
A full collection walks every container object of the process; a TensorFlow process holds
millions (modules, graphs, Keras layers), so each full collection takes tens to hundreds of
milliseconds, during which nothing else runs. `gc.collect()` does not free TensorFlow memory
that is still referenced, and frees nothing reference counting would not; it helps only when
reference cycles hold large tensors.

## Evidence we show
Pause time in all, its share of the run, the number of collections per generation, the
longest pause, whether the cell calls `gc.collect()` itself, and, where half the pause time or
more fell while one line of the code ran (each pause of 5 ms or more keeps the line it began
at), that line and its seconds.

## Fix
Remove periodic `gc.collect()` calls. Where one line holds most of the pause time, make fewer
Python objects there: the collections are set off by what it allocates, and `gc.freeze()`
cannot shorten collections of objects the run makes (TensorFlow's autoencoder tutorial's
`plt.hist(train_loss[None, :], bins=50)` draws 2,330 one-value histograms: 11-11.5 s of its 12 s
of pauses, 73-77 s of the line, with `gc.freeze()` or without; the 1-D array takes 0.04 s).
Otherwise, after set-up (data loaded, model built) call `gc.freeze()` so the collector stops
re-scanning the objects that live for the whole run; break reference cycles that hold tensors
instead of collecting them.

## Threshold
Pauses at least 5% of the run's wall time and at least 0.25 s in all, leaving the longest
pause out: one collection is a one-off cost (a `keras.backend.clear_session()` at the top of
the cell runs one full collection, 0.15–0.6 s in a TensorFlow process on this machine), the
finding is about pauses that recur. A warning; an info note when the cell calls
`keras.backend.clear_session()` and not `gc.collect()`: then the pauses are the price of
releasing the models built before (the fix `model-rebuilt-in-loop` asks for), worth knowing
but not a mistake.
"""

MIN_SHARE = 0.05
MIN_SECONDS = 0.25
LINE_SHARE = 0.5  # of the pause time at one line of the code, for the fix to name it


def check(record: Record, source: str | None) -> Finding | None:
    stats = gc_stats(record)
    total = float(stats["pause_time"])
    recurring = total - float(stats["longest"])
    if recurring < MIN_SECONDS or recurring < MIN_SHARE * record.wall_time:
        return None
    generations = record.gc.get("generation", np.zeros(0))
    dropped = record.gc.get("dropped_count", np.zeros(3, dtype=np.int64))
    per_generation = {
        str(g): int((generations == g).sum()) + int(dropped[g])
        for g in range(3)
        if (generations == g).any() or dropped[g]
    }
    explicit = _calls(source, "collect", "gc")
    clears = _calls(source, "clear_session", None)
    evidence = {
        "pause_s": rounded(total),
        "share_of_run": rounded(float(stats["share"]), 3),
        "collections": int(stats["collections"]),
        "collections_per_generation": per_generation,
        "longest_pause_s": rounded(float(stats["longest"])),
        "cell_calls_gc_collect": explicit,
        "cell_calls_clear_session": clears,
    }
    # Collections the code asks for (`gc.collect()`, `clear_session`) are at its own lines.
    at_line = None if explicit or clears else _line_holding_most(record, total)
    if at_line is not None:
        line, seconds_there = at_line
        evidence["where"] = line_label(line, record.lines.get(line, ""))
        evidence["pause_at_that_line_s"] = rounded(seconds_there)
    cause = ""
    if at_line is not None:
        cause = (
            f" {seconds(at_line[1])} of them came while {evidence['where']} ran: the"
            " collections there are set off by what that line allocates."
        )
    elif explicit:
        cause = " The cell calls `gc.collect()` itself: each call is a full collection."
    elif clears:
        cause = (
            " The cell calls `keras.backend.clear_session()`, which runs a full"
            " `gc.collect()` each time; `gc.freeze()` after set-up keeps those collections"
            " short."
        )
    return Finding(
        code=CODE,
        severity="info" if clears and not explicit else "warning",
        title=(
            f"Garbage collection paused the run for {seconds(total)}"
            f" ({share(total, record.wall_time)}, {stats['collections']} collections)"
        ),
        detail=(
            f"{stats['collections']} collections took {seconds(total)} in all, the longest"
            f" {seconds(float(stats['longest']))}.{cause}"
        ),
        fix=_fix(explicit, evidence.get("where") if at_line is not None else None),
        evidence=evidence,
        impact=total,
    )


def _fix(explicit: bool, where: str | None = None) -> str:
    """The fix for what the cell does: its own `gc.collect()` calls go; where most pause time
    fell at one line, that line makes fewer Python objects; otherwise collections the
    interpreter (or `clear_session`) runs are kept short by freezing what set-up made."""
    freeze = "call `gc.freeze()` once set-up is done (data loaded, model built)"
    if explicit:
        return f"Remove periodic `gc.collect()` calls; {freeze}."
    if where is not None:
        return (
            f"Make fewer Python objects at {where}: one array or call where it makes many"
            " (a plot of thousands of series, a Python loop over elements, a list of small"
            " objects per item). `gc.freeze()` does not shorten collections of objects the"
            " run itself makes."
        )
    return (
        f"{freeze[0].upper()}{freeze[1:]}, so each collection stops re-scanning the objects"
        " that live for the whole run; break reference cycles that hold tensors."
    )


def _line_holding_most(record: Record, total: float) -> tuple[int, float] | None:
    """The line of the code that most of the pause time (half or more) fell at, and its
    seconds, from the long pauses' lines (probes/gc_pauses.py); None where none holds half."""
    lines = record.gc.get("line")
    durations = record.gc.get("duration")
    if lines is None or durations is None or lines.size != durations.size or total <= 0:
        return None
    known = lines > 0
    if not known.any():
        return None
    seconds_at = np.bincount(lines[known], weights=durations[known])
    line = int(seconds_at.argmax())
    if seconds_at[line] < LINE_SHARE * total:
        return None
    return line, float(seconds_at[line])


def _calls(source: str | None, name: str, module: str | None) -> bool:
    """Whether the cell calls `module.name(...)` (or `name(...)`; any `x.name(...)` when
    `module` is None)."""
    if not source:
        return False
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return f"{name}(" in source
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == name:
                owner = func.value
                if module is None or (isinstance(owner, ast.Name) and owner.id == module):
                    return True
            if isinstance(func, ast.Name) and func.id == name:
                return True
    return False
