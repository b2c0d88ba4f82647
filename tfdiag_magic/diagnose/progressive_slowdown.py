"""progressive-slowdown: step time rises over the run."""

from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..record import Kind, Phase, Record
from ..units import seconds
from .causes import growing_in_loops
from .evidence import loop_label, rounded
from .machine_load import (
    MIN_SPAN_S,
    kept_waiting_for_cpus,
    load_change,
    made_by_a_busy_machine,
    steps_load,
    work_per_step,
)
from .retracing import same_function
from .where import running_place

CODE = "progressive-slowdown"
TITLE = "Steps get slower as the run goes on"
DOC = """\
## What it detects
The time of a step rises steadily over the run: the late steps are much slower than the early
ones, and the rise is a trend, not a few outliers.

## Why it hurts
A run that slows as it goes costs more with every epoch, and the cause usually grows too.
The causes we see in practice are things that accumulate per step: a tf.function retracing
(new graphs kept), models, layers or ops created inside the loop, tensors appended to Python
lists (each one holds device memory), tensors that grow and are copied every step, and Keras
calls made inside a loop. Memory fragmentation, often blamed, can cause an out-of-memory
error but rarely a gradual slowdown: TensorFlow's allocator works inside memory it reserved.

## Evidence we show
The median step time of the first and the last tenth of the steady steps, their ratio, the
slope per 1000 steps, the step where the rise began, what grew alongside it in the same run
(tracings, models built, process memory), and where: for a loop's iterations, that loop; for
steps, the line of the cell or script that was running at most of the memory samples taken
after the rise began (with that share of them), or the loop holding it. Where the run read
what the CPUs did (Linux): the process's CPU seconds per step, its threads' wait for a CPU per
step, and the CPUs the other programs kept busy, in the first and the last tenth.

## Fix
Follow the cause the evidence names; the related findings carry the rewrites. Without one:
keep the loop free of object creation (no `tf.function`, model, layer or `tf.Variable` made
per step), keep Python floats rather than tensors in lists (`float(loss)`), and avoid tensors
that grow each step.

## Threshold
At least 100 steady steps (ten per window) of one phase that do the same work (one model,
one batch size: a sweep over model or batch sizes is not a slowdown), or 100 iterations of one
loop of the cell
(its iterations are judged too, since what slows may be the Python around the step); the
median of the last tenth at least 2 times the median of the first tenth and at least 0.5 ms
slower; the medians of ten consecutive windows rising (Spearman rank correlation ≥ 0.8, of
the ten or of nine with one left out: a neighbour's burst can fill a window); each half of the
run rising within itself (the Theil-Sen slope of its five window medians, the median of the
slopes between every two of them, times its span, at least a tenth of the whole rise) or, for
a rise of 3× or more, no split of the windows (three at least a side) into two such flat parts;
and the rise costing at least 0.1 s (the time above the early median, summed over the steps).
When nothing is seen growing alongside the rise (tracings of the code's own functions, not
of those Keras and TensorFlow define: Keras' train, test and predict functions, a distributed
dataset's iterator functions, traced anew for each epoch's iterator; models built, Keras
calls from a loop, 50 MiB of process memory, a value the code's loops grow and work on
whole), the late median must be at least 3 times the early one (4.5 times where one half is flat).

Nor is a rise the machine made: where the run read what the CPUs did (Linux), a rise whose
steps took no more CPU time each in the last tenth than in the first (less than 1.5 times),
while the process kept fewer CPUs busy, other programs took at least half of what it gave up
(and a quarter of a CPU at least), and its threads' wait for a CPU per step grew by half the
steps' rise or three times over (a step on several threads waits in the threads held back,
while the thread waiting for them sleeps), is other programs' arrival, however large. (A sleep
that grows also gives the CPU up, and on a full machine others take it, but its threads wait no
more for a CPU.) A step that uses several threads (TensorFlow's) can slow far more than 2× when
neighbours arrive: a healthy MirroredStrategy loop read up to 5.2× with two or three CPU hogs
started at its second epoch, its CPU per step 0.80-1.22×; the cells whose work grows read
5.6-9.5× CPU per step, quiet or beside three hogs. A wait for a device or a file that grows
leaves the CPUs idle, and is still reported. But where the first tenth of a rise with nothing
growing alongside lasted less than 50 ms, the samples (at most 50 ms apart, the CPUs counted in
10 ms ticks) read it only widened, mixed with the steps around it, and cannot tell a
neighbour's burst from a wait that grows: such a rise is reported only where the steps' own CPU
time rose 2 times with it. Measured in `make test` on a 2-vCPU AMD EPYC virtual machine, beside
two other test workers: a healthy MirroredStrategy custom loop's 132 iterations (its first
tenth 13 iterations of about 0.76 ms) read 6.7×, 756 µs to 5.04 ms, rising through its first
half, while their CPU time rose 1.4× and the other programs' CPUs from 0.87 to 1.8. And where
the last tenth's steps were kept waiting for a CPU among busy neighbours (their threads' wait
for a CPU at least half of a step's time, other programs keeping half a CPU busy), a rise with
nothing growing alongside is reported only where the steps' own CPU time rose 3 times with it:
there the steps' CPU time also rises without more work, as TensorFlow's threads spin while the
ones they wait for are held back. Measured beside 5-7 CPU hogs on 2 vCPUs, the same healthy
loop read 3.2-9.7× in wall time, its CPU per step 1.2-2.1×, its late steps waiting 57-86% of
their time. A window too short to read is read widened up to 0.8 s, between the samples inside
it: samples are taken at the ends of steps, and the ones around a window can be seconds apart,
over an iterator's shut-down between epochs.

On a full machine, neighbours that come and go can slow some windows of a rise and not others,
so that the windows' wall times no longer rank with their order. Where they do not, and the
last tenth is still 2 times the first in wall time, the windows are read again by the work of a
step: the process's CPU seconds per step in each (from the same load samples), which other
programs do not change. Work that rises by the same bars (2 times, in rank order, each half
rising) is a slowdown, and the finding says it was judged so (`judged_on`, `work_per_step_s`).
Measured on a 2-vCPU AMD EPYC virtual machine, at a load of 6-7: a loop concatenating each
step's outputs onto one tensor (700 iterations) read window medians of 2.4, 4.0, 6.5, 7.5, 3.4,
3.5, 3.8, 4.4, 7.8 and 8.3 ms in a run that missed it (2 of 5 read at that load), while its CPU
time per iteration rose from 1.2 to 6.6 ms in a run read at that load; quiet, it reads a steady
rise of 4-5× in wall time.

Why these: what accumulates per step (a growing tensor, a list stacked every step, a memory
bank) slows every part of the run, while a busy machine makes steps slower in jumps. Measured
on this shared 2-CPU machine: 24 healthy series (0.4–0.6 ms steps, 380 steps each) had window
medians differing by up to 1.8×, the last tenth up to 1.54× the first, and a rank correlation up
to 0.83, each in a different run; a CPU hog started on one core halfway through a healthy LSTM's
`fit` made its steps 1.6× slower from then on, flat within each half (first half +0.12 of the
rise, second half −0.23, read then by the means of two windows at each end). The accumulating
cells in the tests slowed 3–20× with each half rising by 0.18–0.8 of the rise, quiet or with
the hog. With the hog and a neighbour's training besides (CI's other test worker), single
windows of a stacking loop jumped up to 2× above their neighbours: by the two-window means its
second half rose 0.03 of the whole rise, by the slope 0.29 (six more runs: 0.22–1.04 each
half). In 1 run of 12 of that loop (beside a hog and a neighbour training), the neighbour
slowed the middle windows and not the last ones: a rise of 3.3× that read flat in its second
half. One neighbour takes at most half a core, so its arrival is a step of 2× at most: a rise
beyond 3× may level off in one half, as long as no split leaves flat, a jump, flat. A slowdown
below 2× is not reported: a neighbour can cause that much. On a 2-vCPU AMD EPYC virtual
machine, where the same work's CPU time also drifts by up to 1.4× between phases, a healthy
`fit` (168 steps of 1.45 ms) read 2.34× with both halves rising beside CI's other test worker,
and beside a neighbour's training the same cell's windows read up to 2.6× the first: a rise
with no cause in sight must pass 3×.
"""

# Ten steps per window at least: the medians of windows of ~6 steps (a 60-step custom loop)
# were put in rising order by a loaded machine's noise once in about 15 runs of a healthy loop.
MIN_STEPS = 100
# A neighbour on a 2-CPU machine takes at most about half of the process's CPU: a CPU hog on
# one core made a healthy LSTM's steps 1.6× slower from the epoch it started in (measured).
MIN_RATIO = 2.0
# Each half of the run must rise by this share of the whole rise: what accumulates per step
# slows every part of the run, a neighbour starting (or a burst) is one jump, flat on one side.
MIN_HALF_RISE = 0.1
# A rise this large may flatten in one half (a neighbour slowing the middle windows and not
# the last ones reads as a rise, then a plateau), when no split leaves two flat parts: one
# neighbour takes at most half of a core, so its arrival is a step of 2x at most.
MIN_ONE_SIDED_RATIO = 3.0
# With nothing seen growing alongside (tracings, models, Keras calls from a loop, process
# memory, a value the code's loops grow and work on whole), a rise must be larger: on a 2-vCPU
# AMD EPYC virtual machine a healthy `fit` (168 steps of 1.45 ms) read 2.34x with both halves
# rising, beside CI's other test worker; beside a neighbour's training, windows of the same
# cell read up to 2.6x the first. A neighbour's half core (2x) and the same work's CPU time
# drifting between phases (up to 1.4x, experiments/noise.py) make at most 2.8x together.
UNEXPLAINED_RATIO = 3.0
UNEXPLAINED_ONE_SIDED_RATIO = 4.5
MIN_DELTA = 0.0005
MIN_RANK_CORRELATION = 0.8
MIN_EXCESS = 0.1  # seconds the run lost to the rise
WINDOWS = 10


def check(record: Record, source: str | None) -> Finding | None:
    best = None
    grown = growing_in_loops(source)
    for rows, label, loop in _series(record):
        found = _trend(record, rows)
        if found is None:
            continue
        found["load"] = load_change(record, found["spans"][0], found["spans"][-1], found["steady"])
        found["late_load"] = steps_load(record, found["spans"][-1], found["steady"])
        if made_by_a_busy_machine(found["load"]):
            continue
        causes = _growing_alongside(record, found["start_time"])
        if not (causes or grown) and not _beyond_a_busy_machine(found):
            continue
        if best is None or found["ratio"] > best[0]["ratio"]:
            best = (found, label, loop, causes)
    if best is None:
        return None
    found, label, loop, causes = best
    # A loop's iterations are where they ran; steps are where the code was at the memory
    # samples taken while they slowed (each sample a share of the time).
    place = None if loop >= 0 else running_place(record, found["start_time"], found["end_time"])
    where = loop_label(record, loop) if loop >= 0 else (place.label if place else None)
    evidence = {
        "steps": label,
        "where": where,
        "early_median_s": rounded(found["early"]),
        "late_median_s": rounded(found["late"]),
        "ratio": rounded(found["ratio"], 3),
        "slope_s_per_1000_steps": rounded(found["slope"] * 1000),
        "began_at_step": found["began"],
        "rank_correlation": rounded(found["rho"], 3),
        "rise_first_half_s": rounded(found["halves"][0]),
        "rise_second_half_s": rounded(found["halves"][1]),
        "alongside": causes,
        "memory_rank_correlation": _memory_rank_correlation(record, found),
        # The windows' wall times, or where those were too uneven to read (a busy machine),
        # the CPU time per step in them (`work_per_step_s`, each window's).
        "judged_on": "wall time" if found["work"] is None else "CPU time per step",
    }
    if found["work"] is not None:
        evidence["work_per_step_s"] = [rounded(v) for v in found["work"]]
    if found["load"] is not None:
        # What the machine did in the first and the last tenth: the work per step, the wait
        # for a CPU per step, and the other programs' CPUs (see machine_load).
        evidence.update(found["load"].evidence())
    if place is not None:
        evidence.update(place.evidence())
    because = (" Growing alongside: " + "; ".join(causes) + ".") if causes else ""
    if found["work"] is not None:
        work = found["work"]
        because = (
            f" Other programs made the step times uneven, but the work of a step grew in"
            f" step: its CPU time rose from {seconds(work[0])} to {seconds(work[-1])}"
            f" ({work[-1] / work[0]:.1f}×).{because}"
        )
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{label.capitalize()} slowed from {seconds(found['early'])} to"
            f" {seconds(found['late'])} ({found['ratio']:.1f}×)"
        ),
        detail=(
            f"The median {label[:-1]}"
            + (f" of {where}" if where is not None else "")
            + f" took {seconds(found['early'])} early in the run and"
            f" {seconds(found['late'])} at its end; the rise began around step"
            f" {found['began']}.{because}"
        ),
        fix="Remove what accumulates per step (see the related findings): retracing, objects"
        " created in the loop, tensors kept in Python lists.",
        evidence=evidence,
        impact=found["excess"],
    )


def _series(record: Record):
    steps = record.steps
    for phase in ("train", "predict", "eval", "function"):
        rows = np.flatnonzero(steps["phase"] == Phase.of(phase))
        if rows.size < MIN_STEPS:
            continue
        label = f"{phase} steps" if phase != "train" else "training steps"
        for group in _comparable(record, rows):
            if group.size >= MIN_STEPS:
                yield group, label, -1
    # The iterations of the cell's loops, whether or not they hold steps: what slows down may
    # be the Python around the step (a list of tensors stacked every iteration, a tensor
    # concatenated onto), not the step itself.
    is_loop = steps["kind"] == Kind.LOOP
    for loop_id in np.unique(steps["loop"][is_loop]).tolist():
        rows = np.flatnonzero(is_loop & (steps["loop"] == loop_id))
        # Models built by an enclosing loop (a sweep) start new groups; models built by this
        # loop's own iterations are part of its work, and may be what slows it.
        outside = [m.time for m in record.models if m.loop != loop_id]
        for group in _split_at(steps["start"][rows], rows, outside):
            if group.size >= MIN_STEPS:
                yield group, "loop iterations", int(loop_id)


def _comparable(record: Record, rows: np.ndarray) -> list[np.ndarray]:
    """`rows` in groups whose steps do the same work: the steps of one model (a model built
    during the run starts a new group: a sweep over model sizes is not a slowdown) at one
    batch size (a sweep over batch sizes neither; a last, partial batch makes a small group
    of its own)."""
    steps = record.steps
    if rows.size == 0:
        return []
    builds = np.sort(np.array([m.time for m in record.models], dtype=np.float64))
    model = np.searchsorted(builds, steps["start"][rows], side="right")
    batch = np.nan_to_num(steps["batch"][rows].astype(np.float64), nan=-1.0)
    keys = np.stack([model.astype(np.float64), batch], axis=1)
    _, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    return [rows[group == g] for g in range(int(group.max()) + 1)]


def _split_at(starts: np.ndarray, rows: np.ndarray, times: list[float]) -> list[np.ndarray]:
    """`rows` (in time order) cut before each of `times`."""
    if not times:
        return [rows]
    segment = np.searchsorted(np.sort(np.array(times, dtype=np.float64)), starts, side="right")
    return [rows[segment == s] for s in np.unique(segment)]


def _trend(record: Record, rows: np.ndarray) -> dict | None:
    steps = record.steps
    steady = rows[~steps["traced"][rows]][1:]
    if steady.size < MIN_STEPS:
        return None
    durations = steps["duration"][steady].astype(np.float64)
    chunks = np.array_split(durations, WINDOWS)
    medians = np.array([np.median(c) for c in chunks])
    early, late = medians[0], medians[-1]
    if early <= 0 or late < MIN_RATIO * early or late - early < MIN_DELTA:
        return None
    spans = [
        (float(steps["start"][c[0]]), float(steps["start"][c[-1]] + steps["duration"][c[-1]]))
        for c in np.array_split(steady, WINDOWS)
    ]
    judged = _rises(medians)
    work = None
    if judged is None:
        # Too uneven in wall time to read as a trend: neighbours that come and go on a full
        # machine slow some windows and not others. The work each step did is theirs alone.
        work = _work_medians(record, spans, steady)
        judged = _rises(work) if work is not None else None
        if judged is None:
            return None
    rho, halves, one_sided = judged
    slope = float(np.polyfit(np.arange(durations.size), durations, 1)[0])
    threshold = early + 0.25 * (late - early)
    above = np.flatnonzero(medians >= threshold)
    began_chunk = int(above[0]) if above.size else 0
    began_index = sum(c.size for c in chunks[:began_chunk])
    began_row = int(steady[min(began_index, steady.size - 1)])
    excess = float(np.clip(durations - early, 0, None).sum())
    if excess < MIN_EXCESS:
        return None
    return {
        "early": float(early),
        "late": float(late),
        "ratio": float(late / early),
        "slope": slope,
        "rho": float(rho),
        # Counted among all the steps of the row's phase (or iterations of its loop).
        "began": int(np.count_nonzero(_same_series(record, began_row)[:began_row])),
        "start_time": float(steps["start"][began_row]),
        "end_time": float(steps["start"][steady[-1]] + steps["duration"][steady[-1]]),
        "excess": excess,
        "steady": steady,
        "halves": halves,
        "one_sided": one_sided,
        "medians": medians if work is None else work,
        # The windows' CPU seconds per step, where they, not the wall times, made the trend.
        "work": work,
        # Each window's time span (since the run's start): what the memory did meanwhile.
        "spans": spans,
    }


def _rises(medians: np.ndarray) -> tuple[float, tuple[float, float], bool] | None:
    """Whether ten windows' values rise as what accumulates per step makes them: the last at
    least `MIN_RATIO` times the first, in rank order, each half rising (or, for a rise of
    `MIN_ONE_SIDED_RATIO` or more, no split into two flat parts). Their rank correlation,
    the halves' rises and whether one half is flat; None where they do not."""
    early, late = medians[0], medians[-1]
    if not early > 0 or late < MIN_RATIO * early:
        return None
    rho = _rank_correlation(medians)
    if rho < MIN_RANK_CORRELATION:
        return None
    halves = _half_rises(medians)
    one_sided = min(halves) < MIN_HALF_RISE * (late - early)
    if one_sided and (late < MIN_ONE_SIDED_RATIO * early or _splits_into_flat_parts(medians)):
        return None
    return rho, halves, one_sided


def _work_medians(
    record: Record, spans: list[tuple[float, float]], steady: np.ndarray
) -> np.ndarray | None:
    """Each window's CPU seconds per step: the process's CPU time over the window's span
    (from the load samples, `machine_load.work_per_step`) per step that started in it; None
    where a window cannot be read (no load samples: not Linux, or a run too short)."""
    values = []
    for span in spans:
        work = work_per_step(record, span, steady)
        if work is None or not work > 0:
            return None
        values.append(work)
    return np.array(values)


def _beyond_a_busy_machine(found: dict) -> bool:
    """Whether a rise with nothing seen growing alongside it is more than a busy machine can
    make: `UNEXPLAINED_RATIO`, and `UNEXPLAINED_ONE_SIDED_RATIO` where one half is flat; where
    its last tenth's steps were kept waiting for CPUs among busy neighbours
    (`machine_load.kept_waiting_for_cpus`), the steps' own CPU time rising `UNEXPLAINED_RATIO`
    as well (their wall time's rise can be the neighbours'); and where its first tenth lasted
    less than `MIN_SPAN_S`, too short for the load samples to tell a neighbour's burst from a
    wait that grows, the steps' own CPU time rising with it (`MIN_RATIO`)."""
    needed = UNEXPLAINED_ONE_SIDED_RATIO if found["one_sided"] else UNEXPLAINED_RATIO
    if found["ratio"] < needed:
        return False
    load = found["load"]
    if kept_waiting_for_cpus(found["late_load"]):  # the first tenth may be read or not
        return load is not None and load.work[1] >= UNEXPLAINED_RATIO * load.work[0]
    start, end = found["spans"][0]
    if end - start >= MIN_SPAN_S:
        return True
    return load is not None and load.work[1] >= MIN_RATIO * load.work[0]


def _rank_correlation(medians: np.ndarray) -> float:
    """The windows' rank correlation with their order, the best of all ten windows and of
    nine with one left out, a window slower than the next (a neighbour's burst can fill one:
    measured, one window at 2× its neighbours under load put a 3.7× rise at 0.75); the
    other guards (2× from first to last window, each half rising) still hold a flat run."""
    order = np.arange(medians.size)
    best = _spearman(order, medians)
    # Only a window slower than the one after it can be a burst: a burst slows, never speeds.
    for left_out in np.flatnonzero(medians[:-1] > medians[1:]):
        keep = order != left_out
        best = max(best, _spearman(order[keep], medians[keep]))
    return best


def _half_rises(medians: np.ndarray) -> tuple[float, float]:
    """How much each half of the run rose within itself: the Theil-Sen slope of its window
    medians (the median of the slopes between every two of them) times its span. A burst
    that fills one window at a half's end moves it little, where the mean of two windows
    at each end would take half the burst (measured beside a neighbour's training: a
    stacking loop's second half read 0.03 of the whole rise by the two-window means, 0.29
    by this slope)."""
    half = medians.size // 2
    return _theil_sen_rise(medians[:half]), _theil_sen_rise(medians[half:])


def _splits_into_flat_parts(medians: np.ndarray) -> bool:
    """Whether some split of the windows (three at least on each side) leaves two parts that
    each rose less than `MIN_HALF_RISE` of the whole rise: flat, a jump, flat, as when a
    neighbour arrives and stays."""
    rise = medians[-1] - medians[0]
    for split in range(3, medians.size - 2):
        before, after = _theil_sen_rise(medians[:split]), _theil_sen_rise(medians[split:])
        if max(before, after) < MIN_HALF_RISE * rise:
            return True
    return False


def _theil_sen_rise(values: np.ndarray) -> float:
    i, j = np.triu_indices(values.size, k=1)
    slopes = (values[j] - values[i]) / (j - i)
    return float(np.median(slopes) * (values.size - 1))


def _same_series(record: Record, row: int) -> np.ndarray:
    steps = record.steps
    same = steps["phase"] == steps["phase"][row]
    if steps["kind"][row] == Kind.LOOP:
        same &= steps["loop"] == steps["loop"][row]
    return same


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _memory_rank_correlation(record: Record, found: dict) -> float | None:
    """The rank correlation of the windows' median step times with the process memory in
    them (the median RSS sample of each window, interpolated where a window holds none); None
    without enough memory samples over the windows."""
    rss = record.memory.get("rss")
    times = record.memory.get("time")
    spans = found["spans"]
    if rss is None or times is None or rss.size < 4 or rss[0] < 0:
        return None
    inside = (times >= spans[0][0]) & (times <= spans[-1][1])
    if np.count_nonzero(inside) < 4:
        return None
    memory = []
    for start, end in spans:
        samples = rss[(times >= start) & (times <= end)]
        at = np.median(samples) if samples.size else np.interp((start + end) / 2, times, rss)
        memory.append(float(at))
    return rounded(_spearman(np.asarray(memory), found["medians"]), 3)


def _growing_alongside(record: Record, since: float) -> list[str]:
    notes: list[str] = []
    # Keras' own train, test and predict functions trace once or twice each as they are first
    # called (a fit's validation, at its first epoch's end): nothing that grows. Nor do the
    # functions TensorFlow defines itself: a distributed dataset's iterator (MultiDevice-
    # Iterator's `_init_func`, `_next_func`, `_finalize_func` and their remote twins) traces
    # six per device for each epoch's iterator, read as "60 tracings after the rise began"
    # under a healthy MirroredStrategy `fit` beside a CPU hog. Nor does a
    # tf.data pipeline's function (TensorFlow names them `Dataset_<transformation>_<name>`),
    # traced once per pipeline built: Keras builds three for NumPy arrays at each `fit`'s
    # validation, `evaluate` and `predict`, which read as "6 tracings after the rise began"
    # under a healthy `fit` beside a CPU hog.
    keras_own = [f.name for f in record.functions if f.keras_internal]
    traces = [
        t
        for t in record.traces
        if not t.nested
        and not t.library
        and t.time >= since
        and not t.of_a_pipeline
        and not any(same_function(t.function, name) for name in keras_own)
    ]
    if len(traces) >= 3:
        notes.append(f"{len(traces)} tf.function tracings after the rise began")
    models = [m for m in record.models if m.time >= since]
    if len(models) >= 3:
        notes.append(f"{len(models)} Keras models built")
    calls = [c for c in record.keras_calls if c.start >= since and c.loop >= 0]
    if len(calls) >= 3:
        notes.append(f"{len(calls)} Keras API calls from a loop")
    rss = record.memory.get("rss")
    times = record.memory.get("time")
    if rss is not None and rss.size >= 4 and rss[0] >= 0:
        growth = float(rss[-1] - rss[np.searchsorted(times, since)])
        if growth > 50 * (1 << 20):
            notes.append(f"process memory +{growth / (1 << 20):.0f} MiB")
    return notes
