"""A few steady steps laid out in time, as they ran: the step timeline the views draw.

The tf.data guide explains overlap with pictures of a few steps on a time axis; this is the same
picture for the user's own run. A window of consecutive steps of the main phase, taken where the
run is steady (no tracing in or around it, past the first steps; among the rows a long run's
table keeps in full), from the end of the step before it to the end of its last step. Inside
the window, each step's own time is `compute`; a loop's wait for its next item is `wait`; Keras
callbacks after a batch are `callbacks`; the rest is the Python between steps (the cell's own
work, the training loop's), drawn as the background.

Only the record's columns are read: the window is a handful of segments, small enough for the
JSON report and for a comparison to carry the baseline's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .phase_split import rows_by_model
from .record import Kind, Phase, Record

STEPS = 6  # steps in the window (fewer, down to three, where no window of six is steady)
SEGMENT_KINDS = ("wait", "compute", "callbacks")


def step_timeline(record: Record, steps: int = STEPS) -> dict[str, Any] | None:
    """The timeline of `steps` steady steps of the run's main phase (training where there is
    any, else the phase with the most steps), or None where it has fewer than three steps."""
    table = record.steps
    kinds = table["kind"]
    stepped = kinds != Kind.LOOP
    counts = np.bincount(table["phase"][stepped], minlength=len(Phase))
    if not counts.any():
        return None
    code = Phase.TRAIN if counts[Phase.TRAIN] else int(counts.argmax())
    phase = Phase(code).label
    rows = np.flatnonzero((table["phase"] == code) & stepped)
    if record.reduced:  # past its first rows a long run's table keeps one row in `stride`
        rows = rows[rows < record.dropped.full_rows]
    rows, model = _busiest_model(record, rows)
    if rows.size < 3:  # a window needs a step before it
        return None
    count = min(steps, rows.size - 1)
    starts, ends = table["start"][rows], table["start"][rows] + table["duration"][rows]
    columns = (table["traced"][rows], table["epoch"][rows], table["loop"][rows], ends)
    first, steady = _steady_window(*columns, count)
    # Fewer steps where no window of `count` is steady (epochs of four steps): down to three.
    for size in range(count - 1, 2, -1):
        if steady:
            break
        candidate, steady = _steady_window(*columns, size)
        if steady:
            first, count = candidate, size
    window = rows[first : first + count]
    unsteady = [] if steady else _what_unsteadies(*columns, first, count)
    t0 = float(ends[first - 1])
    t1 = float(ends[first + count - 1])
    if not t1 > t0:
        return None
    segments: list[list[Any]] = []
    for row in window:
        start = float(table["start"][row])
        end = start + float(table["duration"][row])
        segments.append(["compute", start, end])
        callbacks = float(table["callback_time"][row])
        if kinds[row] == Kind.KERAS and callbacks > 0:
            segments.append(["callbacks", end, min(end + callbacks, t1)])
    segments.extend(_loop_waits(record, t0, t1))
    clipped = [
        [kind, round(max(a, t0) - t0, 7), round(min(b, t1) - t0, 7)]
        for kind, a, b in segments
        if min(b, t1) > max(a, t0)
    ]
    clipped.sort(key=lambda s: (s[1], SEGMENT_KINDS.index(s[0])))
    span = t1 - t0
    shares = {kind: _covered(clipped, kind) / span for kind in SEGMENT_KINDS}
    return {
        "phase": phase,
        # The Keras model whose steps these are, where the phase holds several models' steps
        # (the one with the most time in them); None otherwise.
        "model": model,
        "first_step": int(first),  # index among the phase's (or the model's) steps, from 0
        "steps": int(count),
        "span": round(span, 7),
        "step_starts": [round(float(s) - t0, 7) for s in starts[first : first + count]],
        "segments": clipped,
        "shares": {kind: round(value, 4) for kind, value in shares.items()},
        "between_share": round(max(1.0 - sum(shares.values()), 0.0), 4),
        "fit_input_inside": bool((kinds[window] == Kind.KERAS).any()),
        # Empty for a steady window; else what every window of three steps or more held.
        "unsteady": unsteady,
    }


def _busiest_model(record: Record, rows: np.ndarray) -> tuple[np.ndarray, str | None]:
    """Where `rows` hold the steps of several Keras models (several fits of a cell: a toy model
    before the real one, a GAN after a small example), the rows of the one whose steps took the
    most time, and its name: a window drawn by position could show a model with 1% of the run.
    `rows` unchanged and None otherwise."""
    if not record.keras_calls or rows.size == 0:
        return rows, None
    owner, names = rows_by_model(record)
    mine = owner[rows]
    groups = np.unique(mine)
    if groups.size < 2:
        return rows, None
    time = [float(record.steps["duration"][rows[mine == g]].sum()) for g in groups]
    best = int(groups[int(np.argmax(time))])
    return rows[mine == best], (names[best] if best >= 0 else None)


def _what_unsteadies(
    traced: np.ndarray,
    epochs: np.ndarray,
    loops: np.ndarray,
    ends: np.ndarray,
    first: int,
    count: int,
) -> list[str]:
    """What keeps the window at `first` of `count` steps from being steady (the tests of
    `_steady_window`), in words: where no window is steady, the views say so rather than call
    the steps steady."""
    span = slice(first - 1, first + count)
    reasons = []
    if traced[span].any():
        reasons.append("tracing")
    if (np.diff(epochs[span]) != 0).any():
        reasons.append("an epoch's end")
    if (np.diff(loops[span]) != 0).any():
        reasons.append("a change of loop")
    typical = float(np.median(np.diff(ends)))
    if ends[first + count - 1] - ends[first - 1] > 2 * count * typical:
        reasons.append("a pause for other work")
    return reasons


def _steady_window(
    traced: np.ndarray, epochs: np.ndarray, loops: np.ndarray, ends: np.ndarray, count: int
) -> tuple[int, bool]:
    """The first index of a window of `count` steps, and whether it is steady: no tracing in it
    or in the step before, all in one epoch of one loop (an epoch's end runs validation and
    callbacks), and no longer than twice `count` typical steps (no pause for other work inside
    it: another `fit` starting, a loop of the cell between two training loops). From the
    middle of the run onwards, earlier if none is there, never the first step. Where no window
    is steady, the one with the fewest traced steps, then the fewest epoch or loop changes,
    then the shortest."""
    n = traced.size
    firsts = np.arange(1, n - count + 1)
    lasts = firsts + count - 1
    traced_before = np.concatenate(([0], np.cumsum(traced.astype(np.int64))))
    tracings = traced_before[lasts + 1] - traced_before[firsts - 1]
    changed = np.concatenate(([0], np.cumsum((np.diff(epochs) != 0) | (np.diff(loops) != 0))))
    changes = changed[lasts] - changed[firsts - 1]
    spans = ends[lasts] - ends[firsts - 1]
    typical = float(np.median(np.diff(ends)))  # the caller has three steps at least
    steady = (tracings == 0) & (changes == 0) & (spans <= 2 * count * typical)
    middle = max(1, n // 2 - count // 2)
    later = np.flatnonzero(steady & (firsts >= middle))
    if later.size:
        return int(firsts[later[0]]), True
    if steady.any():
        return int(firsts[np.flatnonzero(steady)[0]]), True
    return int(firsts[np.lexsort((spans, changes, tracings))[0]]), False


def _loop_waits(record: Record, t0: float, t1: float) -> list[list[Any]]:
    """The waits of the cell's loops for their next item that fall in [t0, t1]."""
    table = record.steps
    loops = np.flatnonzero(table["kind"] == Kind.LOOP)
    if loops.size == 0:
        return []
    starts = table["start"][loops]
    waits = np.nan_to_num(table["data_wait"][loops])
    inside = (starts > t0) & (starts - waits < t1) & (waits > 0)
    pairs = zip(starts[inside], waits[inside], strict=True)
    return [["wait", float(s - w), float(s)] for s, w in pairs]


def _covered(segments: list[list[Any]], kind: str) -> float:
    """Seconds covered by the union of `kind`'s segments."""
    total, reach = 0.0, -1.0
    for seg_kind, a, b in segments:  # sorted by start
        if seg_kind != kind:
            continue
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


SERIES_POINTS = 2048  # at most this many points in a report's step series


def training_series(record: Record, points: int = SERIES_POINTS) -> dict[str, Any] | None:
    """The training steps' times along the run, thinned evenly to at most `points`: each kept
    step's index among the training steps, its duration and the time from its start to the
    next step's (what the step cost the run, waits included). What a merge of a job's workers
    aligns by step index; None without two training steps. A long run's reduced table gives
    the steps it kept in full (`complete` false)."""
    table = record.steps
    rows = np.flatnonzero((table["phase"] == Phase.TRAIN) & (table["kind"] != Kind.LOOP))
    complete = not record.reduced
    if not complete:
        rows = rows[rows < record.dropped.full_rows]
    if rows.size < 2:
        return None
    starts = table["start"][rows]
    intervals = np.append(np.diff(starts), np.nan)  # the last step has no next
    every = max(1, -(-rows.size // points))
    keep = np.arange(0, rows.size, every)
    return {
        "every": int(every),
        "complete": complete,
        "step": keep.tolist(),
        "duration": [round(float(v), 7) for v in table["duration"][rows][keep]],
        "interval": [None if np.isnan(v) else round(float(v), 7) for v in intervals[keep]],
    }
