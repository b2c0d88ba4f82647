"""Summary numbers of a Record: steady-state step times, time split, memory at start/peak/end.

Warm-up steps are kept apart from the steady state: the first step of each phase (it builds
iterators, variables and the runtime) and every step during which a tf.function was traced
(a graph it runs: not a tf.data transformation's function, traced as a pipeline is built).
Counts and totals include the rows a long run's reduced table left out (`Record.dropped`);
medians and percentiles come from the rows it kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .fit_epochs import epoch_setup_seconds
from .record import PHASES, Kind, Record

_LOOP = PHASES.index("loop")
# A gap between two steps of a phase longer than this many times their median gap is a pause
# (an epoch's end, a checkpoint), and one that holds other phases' steps is when longer than this
# many of the phase's own steps (`paused_time`): left out of the phase's steps per second. A
# comparison's step interval leaves the first kind out too.
PAUSE_FACTOR = 5.0


@dataclass
class PhaseStats:
    phase: str
    count: int
    steady_count: int
    median: float | None  # seconds, steady-state steps
    p90: float | None
    mean: float | None
    median_all: float  # seconds, every step (warm-up included)
    warmup_count: int
    warmup_time: float
    total_time: float  # seconds inside the steps
    span: float  # seconds from the first step's start to the last step's end
    # steady steps / the span less its pauses (`paused_time`) and the warm-up steps' time
    steps_per_second: float | None
    data_wait: float | None  # seconds of input wait attributed to these steps; None: not seen
    callback_time: float
    eager_steps: int
    fused: int  # steps per host call (Keras steps_per_execution), the largest seen

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TimeSplit:
    """Where the run's wall time went; the parts add up to `wall` (they never overlap)."""

    wall: float
    compute: float  # inside steps, their tracing left out
    # waiting for the next item of the code's loops, and for tf.data iterators it steps itself
    data_wait: float
    other: float  # everything else: Python between steps, setup, printing
    data_wait_observable: bool  # waits were measured: the code's loops or iterators
    data_wait_note: str = ""  # what the data wait does not cover, when that matters
    tracing: float = 0.0  # building tf.function graphs (inside steps or not)
    callbacks: float = 0.0  # Keras callbacks: around the batches, and their epoch hooks
    # Keras' own work between a fit's epochs: the next epoch's iterator, logs (`fit_epochs`)
    epoch_setup: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MemoryStats:
    host_rss: dict[str, int] = field(default_factory=dict)  # start, peak, end (bytes)
    gpu: dict[str, dict[str, int]] = field(default_factory=dict)  # device -> start/peak/end

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def warmup_mask(record: Record) -> np.ndarray:
    """Rows that are warm-up: a tf.function was traced, or the first row of their phase."""
    steps = record.steps
    mask = steps["traced"].copy()
    for code in range(len(PHASES)):
        rows = np.flatnonzero(steps["phase"] == code)
        if rows.size:
            mask[rows[0]] = True
    return mask


@dataclass(frozen=True)
class PauseScale:
    """What a pause among one phase's steps is measured against, taken over the whole run.

    `typical` is the steps' median start-to-start gap. `idle` is the median time from a step's
    end to the next one's start, over the gaps no other phase's step falls in (0 where every
    gap holds one). `cycle` is the median step plus that idle: one step's time as the phase runs
    it, the scale of a gap that holds other work (a validation of one batch an epoch has only
    such gaps, each a whole epoch long, so its `typical` gap says nothing of its own pace).
    """

    typical: float
    idle: float
    cycle: float


def pause_scale(starts: np.ndarray, durations: np.ndarray, interrupted: np.ndarray) -> PauseScale:
    """The `PauseScale` of one phase's steps in time order; `interrupted[i]`: another phase's
    step lies between step i and step i + 1."""
    if starts.size < 2:
        return PauseScale(0.0, 0.0, 0.0)
    gaps = np.diff(starts)
    own = ~interrupted
    idle = float(np.median(gaps[own] - durations[:-1][own])) if own.any() else 0.0
    idle = max(idle, 0.0)
    return PauseScale(float(np.median(gaps)), idle, float(np.median(durations)) + idle)


def interrupted_gaps(positions: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For a phase's rows at `positions` (ascending indices into all the run's rows, whose
    `starts` and `ends` are given, sorted by start): whether another phase's step ran in the gap
    from each of its rows to the next, ending before the next began (len(positions) - 1 values).
    A row that starts in the gap but holds the next step (a loop's iteration around its
    function call) is the next step's setting, not other work."""
    interrupted = np.zeros(max(positions.size - 1, 0), dtype=bool)
    between = np.diff(positions) > 1
    if between.any():
        first = positions[:-1][between] + 1  # each gap's rows: first..after-1
        after = positions[1:][between]
        earliest_end = np.minimum.reduceat(ends, np.column_stack((first, after)).ravel())[::2]
        interrupted[between] = earliest_end <= starts[after]
    return interrupted


def paused_time(
    gaps: np.ndarray, durations: np.ndarray, interrupted: np.ndarray, scale: PauseScale
) -> float:
    """Seconds of pauses among one phase's start-to-start `gaps`, never a step's own time
    (`durations[i]`, the step that opens `gaps[i]`): a slow step among fast ones (a larger
    model's `fit` after a small one's) is work, not a pause.

    A gap that no other phase's step falls in is a pause when longer than `PAUSE_FACTOR` times
    the `typical` gap (an epoch's end, a checkpoint): its time beyond a typical gap counts. A gap
    that holds other phases' steps (training between validations, validation between epochs) is
    a pause when longer than `PAUSE_FACTOR` steps of the phase's own `cycle`: everything in it
    but its step and a typical idle counts.
    """
    if gaps.size == 0:
        return 0.0
    own = durations[: gaps.size]
    idle_part = gaps - own
    quiet = (gaps > PAUSE_FACTOR * scale.typical) & ~interrupted
    filled = (gaps > PAUSE_FACTOR * scale.cycle) & interrupted
    quiet_pause = np.minimum(gaps[quiet] - scale.typical, idle_part[quiet])
    filled_pause = idle_part[filled] - scale.idle
    return float(np.maximum(quiet_pause, 0.0).sum() + np.maximum(filled_pause, 0.0).sum())


def step_numbers(
    durations: np.ndarray,
    warm: np.ndarray,
    starts: np.ndarray,
    waits: np.ndarray,
    interrupted: np.ndarray,
    scale: PauseScale | None = None,
) -> dict[str, Any]:
    """The numbers of a set of steps (one phase's, of a run or of a window of it): counts, the
    steady steps' median, p90 and mean (warm-up left out), time inside the steps, the span from
    the first start to the last end, steps per second over it less its pauses (an epoch's end,
    validation, another phase's steps: `paused_time`, by the phase's `scale` over the run, these
    steps' own when not given), and the input wait where seen."""
    steady = durations[~warm]
    span = float((starts + durations).max() - starts.min())
    if scale is None:
        scale = pause_scale(starts, durations, interrupted)
    active = span - paused_time(np.diff(starts), durations, interrupted, scale)
    seen = ~np.isnan(waits)
    return {
        "count": int(durations.size),
        "steady_count": int(steady.size),
        "median": float(np.median(steady)) if steady.size else None,
        "p90": float(np.percentile(steady, 90)) if steady.size else None,
        "mean": float(steady.mean()) if steady.size else None,
        "warmup_count": int(warm.sum()),
        "total_time": float(durations.sum()),
        "span": span,
        "steps_per_second": steady_rate(durations, steady, active),
        "data_wait": float(waits[seen].sum()) if seen.any() else None,
    }


def steady_rate(durations: np.ndarray, steady: np.ndarray, active: float) -> float | None:
    """Steps per second in the steady state, as the median is: the steady steps over the active
    time less the warm-up steps' own (a first step that traced for a second is not the pace of
    the 78 after it); all the steps over all of it where every step was warm-up."""
    if steady.size:
        steady_active = active - float(durations.sum() - steady.sum())
        if steady_active > 0:
            return steady.size / steady_active
    return durations.size / active if active > 0 else None


def phase_stats(record: Record) -> dict[str, PhaseStats]:
    steps = record.steps
    warm = warmup_mask(record)
    ends = steps["start"] + steps["duration"]
    result: dict[str, PhaseStats] = {}
    for code, name in enumerate(PHASES):
        rows = steps["phase"] == code
        count = int(rows.sum())
        if not count:  # a phase whose rows a reduced table left out all is not summarized
            continue
        durations = steps["duration"][rows]
        interrupted = interrupted_gaps(np.flatnonzero(rows), steps["start"], ends)
        numbers = step_numbers(
            durations, warm[rows], steps["start"][rows], steps["data_wait"][rows], interrupted
        )
        warmup_time = float(durations[warm[rows]].sum())
        if code == _LOOP:
            # An inner loop's iterations (their rows carry the outer one's index as epoch) lie
            # inside its outer loop's: its time is counted there once.
            outer = steps["epoch"][rows] < 0
            numbers["total_time"] = float(durations[outer].sum())
            warmup_time = float(durations[warm[rows] & outer].sum())
            # Iterations past a loop's kept rows are counted, not kept (`LoopInfo.rows_dropped`).
            numbers["count"] += sum(loop.rows_dropped for loop in record.loops)
        callback_time = float(steps["callback_time"][rows].sum())
        eager_steps = int(steps["eager"][rows].sum())
        if record.dropped is not None:  # a reduced table: add the rows it left out
            count = int(record.phase_total("count", name))
            numbers["total_time"] = record.phase_total("duration", name)
            if numbers["data_wait"] is not None or record.dropped.total("data_wait_count", name):
                numbers["data_wait"] = record.phase_total("data_wait", name)
            callback_time = record.phase_total("callback_time", name)
            eager_steps = int(record.phase_total("eager", name))
            # The rows left out lie between those kept: the gap they leave is no pause, and
            # the rate is over the whole span.
            span = numbers["span"]
            numbers.update(count=count, steps_per_second=count / span if span > 0 else None)
        result[name] = PhaseStats(
            phase=name,
            median_all=float(np.median(durations)),
            warmup_time=warmup_time,
            callback_time=callback_time,
            eager_steps=eager_steps,
            fused=int(steps["fused"][rows].max()),
            **numbers,
        )
    return result


def time_split(record: Record) -> TimeSplit:
    steps = record.steps
    is_loop = steps["kind"] == Kind.LOOP
    step_starts, step_durations = steps["start"][~is_loop], steps["duration"][~is_loop]
    compute = _covered_time(step_starts, step_durations)
    # Tracing: the outermost tracings (a nested one lies inside its caller's), inside steps (a
    # step that traced) or not (`get_concrete_function` in the cell); what of it fell inside
    # steps is no step's work.
    outer = [t for t in record.traces if not t.nested]
    trace_starts = np.array([t.time for t in outer], dtype=np.float64)
    trace_durations = np.array([t.duration for t in outer], dtype=np.float64)
    tracing = _covered_time(trace_starts, trace_durations)
    if tracing > 0.0 and compute > 0.0:
        both = _covered_time(
            np.concatenate((step_starts, trace_starts)),
            np.concatenate((step_durations, trace_durations)),
        )
        compute -= compute + tracing - both  # less the tracing inside steps
    # The callbacks' batch hooks (each step's row) and epoch hooks (a checkpoint saved).
    callbacks = float(np.nansum(steps["callback_time"])) + record.epoch_hook_seconds
    loop_waits = steps["data_wait"][is_loop]
    data_wait = float(np.nansum(loop_waits)) if loop_waits.size else 0.0
    # next() on tf.data iterators outside the instrumented loops (a loop in an imported module,
    # `next(iterator)` in a loop's body), timed by the dataset-wait probe.
    iterator_wait = float(record.facts.get("iterator_wait_s", 0.0) or 0.0)
    data_wait += iterator_wait
    # The loops' last next(), which found no item after a wait (probes.loops).
    data_wait += float(record.facts.get("loop_end_wait_s", 0.0) or 0.0)
    if record.dropped is not None:
        # Rows a reduced table left out: their waits are exact; their time is counted as the
        # kept rows' is (overlaps, where an eager step holds function rows, shrink it alike).
        data_wait += record.dropped.total("data_wait", "loop")
        kept = float(steps["duration"][~is_loop].sum())
        left_out = record.dropped.total("duration") - record.dropped.total("duration", "loop")
        compute += left_out * (compute / kept if kept > 0 else 1.0)
        callbacks += record.dropped.total("callback_time")
    wall = float(record.wall_time)
    observable = bool(is_loop.any()) or bool(record.facts.get("iterator_waits"))
    keras_steps = bool((steps["kind"] == Kind.KERAS).any())
    if keras_steps:
        note = (
            "Keras fit/evaluate/predict read their input inside each step, so its wait is in "
            "their step time"
            + ("; data wait counts the code's loops and tf.data iterators" if observable else "")
        )
    elif not observable:
        note = (
            "not measured: no loop of the code and no tf.data iterator it steps itself gave a "
            "wait (loops of functions defined outside the profiled code, e.g. in an imported "
            "module or an earlier cell, are timed only where they iterate tf.data)"
        )
    else:
        note = ""
    if compute == 0.0 and is_loop.any():
        # Only loop iterations were recorded: the outermost loops' bodies are the work, every
        # top-level loop's. An inner loop's iterations (their rows carry the outer one's index
        # as epoch) lie inside them, and so do its waits, which are data wait.
        outer = is_loop & (steps["epoch"] < 0)
        inner_waits = float(np.nansum(steps["data_wait"][is_loop & ~outer]))
        inner_waits += float(record.facts.get("inner_loop_end_wait_s", 0.0) or 0.0)
        compute = float(steps["duration"][outer].sum()) - inner_waits
        if tracing > 0.0:
            # Less the tracing inside the bodies (a function that raised as it first traced
            # left no step of its own): counted once, as tracing.
            body_starts, body_durations = steps["start"][outer], steps["duration"][outer]
            bodies = _covered_time(body_starts, body_durations)
            both = _covered_time(
                np.concatenate((body_starts, trace_starts)),
                np.concatenate((body_durations, trace_durations)),
            )
            compute -= bodies + tracing - both
    compute = max(compute, 0.0)
    epoch_setup = epoch_setup_seconds(record)
    other = max(wall - compute - data_wait - tracing - callbacks - epoch_setup, 0.0)
    return TimeSplit(
        wall, compute, data_wait, other, observable, note, tracing, callbacks, epoch_setup
    )


def _covered_time(starts: np.ndarray, durations: np.ndarray) -> float:
    """Seconds covered by the union of the intervals (an eager step may hold function rows)."""
    if starts.size == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    begin, end = starts[order], starts[order] + durations[order]
    reach = np.maximum.accumulate(end)
    # A new block starts where an interval begins after everything before it has ended.
    new_block = np.concatenate(([True], begin[1:] > reach[:-1]))
    block = np.cumsum(new_block) - 1
    block_begin = begin[new_block]
    block_end = np.zeros(block_begin.size)
    np.maximum.at(block_end, block, end)
    return float((block_end - block_begin).sum())


def memory_stats(record: Record) -> MemoryStats:
    stats = MemoryStats()
    memory = record.memory
    rss = memory.get("rss")
    if rss is not None and rss.size and rss[0] >= 0:
        stats.host_rss = {"start": int(rss[0]), "peak": int(rss.max()), "end": int(rss[-1])}
    for device, values in record.gpu_memory().items():
        seen = values[values >= 0]
        peaks = memory.get(f"gpu:{device}:peak", np.zeros(0))
        peaks = peaks[peaks >= 0]
        if seen.size:
            # TensorFlow's peak is the process's: it counts for this run only if it rose
            # during the run; otherwise the largest sampled use is this run's peak.
            rose = peaks.size > 1 and peaks.max() > peaks[0]
            stats.gpu[device] = {
                "start": int(seen[0]),
                "peak": int(max(seen.max(), peaks.max())) if rose else int(seen.max()),
                "end": int(seen[-1]),
            }
    return stats


def gc_stats(record: Record) -> dict[str, float | int]:
    gc = record.gc
    durations = gc.get("duration", np.zeros(0))
    # Pauses past the probe's event limit are counted, not kept one by one.
    total = float(durations.sum()) + float(gc.get("dropped_seconds", np.zeros(0)).sum())
    longest = max(
        float(durations.max()) if durations.size else 0.0,
        float(gc.get("dropped_longest", np.zeros(1)).max(initial=0.0)),
    )
    return {
        "collections": int(durations.size) + int(gc.get("dropped_count", np.zeros(0)).sum()),
        "pause_time": total,
        "share": total / record.wall_time if record.wall_time > 0 else 0.0,
        "longest": longest,
    }


def training_step_count(record: Record) -> int:
    return record.phase_counts().get("train", 0)
