"""What the machine did over a span of a run: the process's own CPU time and the other
programs' CPU time on the CPUs the process may use, from the recorder's load samples
(``Record.memory["cpu_self"]`` and ``["cpus_busy"]``, probes/cpu_wait.py).

A step that slows because the machine got busy does the same work, later: its CPU time stays,
its threads wait longer for a CPU, and other programs take the CPUs. A step that slows because
its work grew (a tensor concatenated onto, a list stacked) takes more CPU time itself; one that
sleeps longer waits no longer for a CPU. The samples are at most
50 ms apart, and ``/proc/stat`` counts in ticks (10 ms a CPU): a span is read between the
samples around it, and a span shorter than `MIN_SPAN_S` is not read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..record import Record
from .evidence import rounded

MIN_SPAN_S = 0.05  # five ticks of /proc/stat a CPU at least
# A window too short to read is read widened, doubling, up to this many times its length (at
# least twice `MIN_SPAN_S`: 0.8 s).
MAX_WIDENING = 8
# A rise in step time is a busy machine's when the steps' CPU time rose by less than this
# factor, and other programs took at least `BUSY_MIN_TAKEN_CPUS` and `BUSY_MIN_TAKEN_SHARE`
# of the CPUs the process gave up. Measured on a 2-vCPU AMD EPYC VM: a healthy
# MirroredStrategy custom loop (126 steps of 2 ms) with one to three CPU hogs started at its
# second epoch read its last tenth of steps 0.75-5.2x the first (3 of 8 runs with two or three
# hogs passed progressive-slowdown's bars; none of 16 more with this guard, 6 of them beside
# other programs' training too), its CPU per step 0.80-1.22x, the other programs' CPUs up by
# 0.3-1.9 as the process's fell by 0.2-1.2. Cells whose work grows (a memory bank matched
# against, a tensor concatenated onto) read 5.6-9.5x CPU per step, quiet or beside three hogs.
BUSY_MAX_WORK_RISE = 1.5
BUSY_MIN_TAKEN_CPUS = 0.25  # a neighbour's arrival, beyond /proc/stat's ticks
BUSY_MIN_TAKEN_SHARE = 0.5
# And the process's threads' wait for a CPU per step rose by at least this share of the
# steps' rise in time (a step that sleeps longer on a machine others keep full gives its CPU
# up and they take it: measured, a loop whose iterations slept i * 20 µs longer each read "a
# busy machine" by the CPUs alone).
BUSY_MIN_WAIT_SHARE = 0.5
# ...or grew this many times over: a healthy MirroredStrategy loop beside its test's hogs and
# one more read 4.4x (0.68 to 2.98 ms) while its CPU per step rose 1.07x, the others' CPUs
# from 0.99 to 1.53, and its threads' wait for a CPU from 1.35 to 5.50 ms a step: 4.1x, but
# less than half of the steps' rise as the samples' spans read it.
BUSY_WAIT_GROWTH = 3.0
# Steps whose threads waited for a CPU this share of their time at least were kept waiting by
# neighbours: a healthy MirroredStrategy loop beside 5-7 CPU hogs on 2 vCPUs waited 0.57-0.86
# of its late steps' time (threads summed), its CPU per step 1.2-2.1x its first tenth's.
CONTENDED_WAIT_SHARE = 0.5
# The report says the machine was busy when other programs kept at least this many CPUs, and
# this share of the CPUs the process may use, busy over the run: one neighbour's half core on
# a small machine, not the background of a large host.
BUSY_RUN_CPUS = 0.5
BUSY_RUN_SHARE = 0.25


@dataclass(frozen=True)
class Load:
    """The process's and the other programs' CPU seconds between two samples."""

    start: float  # the samples' times, seconds since the run started
    end: float
    own: float  # the process's CPU seconds, all its threads
    others: float  # every other program's, on the CPUs the process may use
    # Seconds the process's threads waited in run queues (a lower bound: a thread that ended
    # took its count with it); NaN where not counted.
    waited: float = float("nan")

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def others_cpus(self) -> float:
        """CPUs the other programs kept busy, on average."""
        return self.others / self.wall

    @property
    def own_cpus(self) -> float:
        """CPUs the process kept busy, on average."""
        return self.own / self.wall


def load_over(record: Record, start: float, end: float, inside: bool = False) -> Load | None:
    """The load over the span from `start` to `end`: between the samples inside it where
    they span `MIN_SPAN_S` or more (time outside the span, such as the end of a run after its
    last step, says nothing of it), else, unless `inside`, between the last sample at or
    before `start` and the first at or after `end` (the first and last samples where the span
    reaches past them); None where the run has no load samples or they span less than
    `MIN_SPAN_S`."""
    memory = record.memory
    times, own, busy = memory.get("time"), memory.get("cpu_self"), memory.get("cpus_busy")
    if times is None or own is None or busy is None or own.size != times.size:
        return None
    read = np.flatnonzero(~np.isnan(own) & ~np.isnan(busy))
    if read.size < 2:
        return None
    at = times[read]
    after_start = int(np.searchsorted(at, start, side="left"))
    before_end = int(np.searchsorted(at, end, side="right")) - 1
    if before_end > after_start and at[before_end] - at[after_start] >= MIN_SPAN_S:
        first, last = read[after_start], read[before_end]
    elif inside:
        return None
    else:
        first = read[max(int(np.searchsorted(at, start, side="right")) - 1, 0)]
        last = read[min(int(np.searchsorted(at, end, side="left")), read.size - 1)]
    if times[last] - times[first] < MIN_SPAN_S:
        return None
    own_seconds = float(own[last] - own[first])
    others = max(0.0, float(busy[last] - busy[first]) - own_seconds)
    waits = memory.get("threads_waited")
    waited = float("nan")
    if waits is not None and waits.size == times.size:
        waited = max(0.0, float(waits[last] - waits[first]))  # NaN stays NaN
    return Load(float(times[first]), float(times[last]), own_seconds, others, waited)


@dataclass(frozen=True)
class LoadChange:
    """What the machine did in two spans of a run, per step of the steps that started there."""

    work: tuple[float, float]  # the process's CPU seconds per step
    wall: tuple[float, float]  # the spans' seconds per step
    waited: tuple[float, float]  # its threads' seconds in run queues per step (NaN: not read)
    own_cpus: tuple[float, float]  # CPUs the process kept busy
    others_cpus: tuple[float, float]  # CPUs the other programs kept busy

    def evidence(self) -> dict[str, list[float]]:
        """The numbers as a finding's evidence, early then late."""
        return {
            "cpu_seconds_per_step": [rounded(v) for v in self.work],
            "cpu_wait_per_step_s": [rounded(v) for v in self.waited],
            "other_programs_cpus": [round(v, 2) for v in self.others_cpus],
        }


@dataclass(frozen=True)
class StepsLoad:
    """What the machine did in one span of a run, per step of the steps that started there."""

    work: float  # the process's CPU seconds per step
    wall: float  # the span's seconds per step
    waited: float  # its threads' seconds in run queues per step (NaN: not read)
    own_cpus: float  # CPUs the process kept busy
    others_cpus: float  # CPUs the other programs kept busy


def steps_load(record: Record, span: tuple[float, float], rows: np.ndarray) -> StepsLoad | None:
    """The load near `span` (`_load_widened`), per step of the step table's `rows` that
    started in what was read; None without load samples or steps there."""
    load = _load_widened(record, *span)
    if load is None:
        return None
    steps = _steps_in(record, load, rows)
    if not steps:
        return None
    return StepsLoad(
        work=load.own / steps,
        wall=load.wall / steps,
        waited=load.waited / steps,
        own_cpus=load.own_cpus,
        others_cpus=load.others_cpus,
    )


def load_change(
    record: Record, early: tuple[float, float], late: tuple[float, float], rows: np.ndarray
) -> LoadChange | None:
    """The load over the spans `early` and `late` (`steps_load`); None where either cannot
    be read."""
    before, after = steps_load(record, early, rows), steps_load(record, late, rows)
    if before is None or after is None:
        return None
    return LoadChange(
        work=(before.work, after.work),
        wall=(before.wall, after.wall),
        waited=(before.waited, after.waited),
        own_cpus=(before.own_cpus, after.own_cpus),
        others_cpus=(before.others_cpus, after.others_cpus),
    )


def work_per_step(record: Record, span: tuple[float, float], rows: np.ndarray) -> float | None:
    """The process's CPU seconds per step of the step table's `rows` that started in `span`
    (`steps_load`); None without load samples or steps there."""
    load = steps_load(record, span, rows)
    return load.work if load is not None else None


def made_by_a_busy_machine(change: LoadChange | None) -> bool:
    """Whether steps that took longer in the late span than in the early one (`load_change`)
    were slowed by other programs: their process's CPU time per step rose by less than
    `BUSY_MAX_WORK_RISE` (the work did not grow), of the CPUs the process kept busy less of
    other programs took at least `BUSY_MIN_TAKEN_SHARE` (a wait for a device, a file or a
    sleep on a quiet machine leaves them idle instead), and its threads' wait for a CPU per
    step grew by `BUSY_MIN_WAIT_SHARE` of the steps' rise or `BUSY_WAIT_GROWTH` times over (a
    sleep that grows does not make them wait for a CPU). False without load samples."""
    if change is None:
        return False
    if change.work[1] >= BUSY_MAX_WORK_RISE * change.work[0]:
        return False
    given_up = change.own_cpus[0] - change.own_cpus[1]
    taken = change.others_cpus[1] - change.others_cpus[0]
    if taken < BUSY_MIN_TAKEN_CPUS or taken < BUSY_MIN_TAKEN_SHARE * given_up:
        return False
    # The steps were kept waiting for a CPU: their wait per step grew with their time. A step
    # that sleeps longer (a wait that grows) gives its CPU up as well, and on a machine that
    # others keep full they take it, but its threads wait no more for a CPU.
    rise = change.wall[1] - change.wall[0]
    waiting_rise = change.waited[1] - change.waited[0]
    if not rise > 0:
        return False
    # Or the wait grew manyfold: a step on several threads (TensorFlow's) waits for a CPU in
    # the threads that were held back, and the thread waiting for them sleeps, so its wait
    # per step can rise by less than half the step's rise while a sleep that grows leaves it
    # where it was.
    manyfold = change.waited[0] > 0 and change.waited[1] >= BUSY_WAIT_GROWTH * change.waited[0]
    return waiting_rise >= BUSY_MIN_WAIT_SHARE * rise or manyfold


def kept_waiting_for_cpus(late: StepsLoad | None) -> bool:
    """Whether a span's steps (`steps_load`) were kept waiting for a CPU among busy
    neighbours: their threads' wait for a CPU per step was at least `CONTENDED_WAIT_SHARE` of
    a step's time, and other programs kept at least `BUSY_RUN_CPUS` busy. There a step's CPU
    time is no steady measure of its work either: TensorFlow's threads spin while the ones they
    wait for are held back. False without load samples or a wait read."""
    if late is None or not late.waited >= 0:
        return False
    return late.waited >= CONTENDED_WAIT_SHARE * late.wall and late.others_cpus >= BUSY_RUN_CPUS


def _load_widened(record: Record, start: float, end: float) -> Load | None:
    """The load near the span: between the samples inside it (a span shorter than twice
    `MIN_SPAN_S` taken as that long, about its middle), or inside it widened about its middle
    (within the run), doubling, up to `MAX_WIDENING` times that length; None where no samples
    that near span `MIN_SPAN_S`. A short run's window (128 steps
    of 0.7 ms make windows of 9-40 ms, where samples come at most every 50 ms) reads diluted
    by the steps around it, where a neighbour's arrival still shows. Samples are taken at the
    ends of steps: the samples around a window can be seconds apart, over an iterator's
    shut-down between epochs (a healthy MirroredStrategy loop beside CPU hogs read its first
    tenth of 58 ms between samples 4.5 s apart), and their reading is that pause's."""
    times = record.memory.get("time")
    last = float(times[-1]) if times is not None and times.size else end
    middle, half = (start + end) / 2, max((end - start) / 2, MIN_SPAN_S)
    for _ in range(MAX_WIDENING.bit_length()):
        low = max(0.0, min(middle - half, max(last, end) - 2 * half))
        load = load_over(record, low, low + 2 * half, inside=True)
        if load is not None:
            return load
        half *= 2
    return None


def _steps_in(record: Record, load: Load, rows: np.ndarray) -> float:
    """The recorded steps of `rows` that started in `load`'s span."""
    starts = record.steps["start"][rows]
    return _steps_stood_for(record, rows[(starts >= load.start) & (starts < load.end)])


def _steps_stood_for(record: Record, rows: np.ndarray) -> float:
    """How many recorded steps `rows` stand for: one each, and where a long run's table is
    reduced (`Record.step_index`), each kept row the rows recorded up to the next kept one."""
    index = record.step_index
    if index is None or rows.size == 0:
        return float(rows.size)
    following = np.append(index[1:], index[-1] + 1)
    return float(np.sum(following[rows] - index[rows]))


def machine_during_run(record: Record) -> dict[str, float | int | bool] | None:
    """What the machine did over the whole run, for the report: the CPUs the process may use,
    the CPUs it and the other programs kept busy on average, the seconds its threads waited
    for a CPU, and whether the machine was busy (`BUSY_RUN_CPUS`, `BUSY_RUN_SHARE`); None
    without load samples."""
    load = load_over(record, -np.inf, np.inf)
    cpus = record.facts.get("usable_cpus")
    if load is None or not cpus:
        return None
    others = load.others_cpus
    return {
        "usable_cpus": int(cpus),
        "other_programs_cpus": round(others, 2),
        "this_process_cpus": round(load.own_cpus, 2),
        "seconds": round(load.wall, 3),
        "busy": others >= BUSY_RUN_CPUS and others >= BUSY_RUN_SHARE * cpus,
    }
