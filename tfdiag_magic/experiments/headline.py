"""The comparable numbers of one run: what a before/after comparison and a sweep put side by side.

The main phase is ``train`` when the run trained, else the phase with the most steps (eval,
predict, function calls, and the cell's loop iterations last). Its steady steps (warm-up
left out: the first step and every step that traced) give

- the step time: the median time inside a step;
- the step interval: the mean time from one step's start to the next one's, so the work between
  steps (Python, slicing, data wait, a Keras call's set-up) counts. Pauses longer than
  `PAUSE_FACTOR` times the median interval (epoch ends, validation, checkpoints) and intervals
  across epochs are left out;
- the throughput: samples per second of those intervals where the batch size of the steps is
  known, steps per second otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np

from ..findings import Finding
from ..record import KINDS, Phase, Record
from ..stats import PAUSE_FACTOR, memory_stats, time_split, warmup_mask
from ..timeline import step_timeline


class Run(Protocol):
    """What the experiments read of a profiling run (a `ProfileResult` is one): its record, None
    while it runs, and its findings."""

    record: Record | None
    findings: list[Finding]


def finished_record(run: Run) -> Record:
    """The run's record; a clear error while the run has not finished."""
    if run.record is None:
        raise RuntimeError("the profiling run has not finished yet; read it after the run")
    return run.record


PHASE_PREFERENCE = ("train", "eval", "predict", "function", "loop")


@dataclass
class Headline:
    """One run's comparable numbers. Times in seconds, memory in bytes; None: not measured."""

    phase: str | None  # the main phase
    kind: str | None  # what produced most of its steps (a Keras batch, a tf.function call, ...)
    steps: int  # steps of the main phase
    step_time: float | None  # median seconds inside a steady step
    step_interval: float | None  # mean seconds from a steady step's start to the next one's
    batch_size: float | None  # median samples per step, when the steps' batch size is known
    throughput: float | None
    throughput_unit: str  # "samples/s", "steps/s", or "" when there were no steps
    compute_share: float | None
    data_wait_share: float | None
    other_share: float | None
    peak_host: int | None  # peak host RSS
    # host RSS the run added: its peak less its first sample. The peak is the whole process's,
    # earlier cells included, so a memory fix shows here rather than there.
    host_added: int | None
    peak_device: int | None  # the largest device's peak, as TensorFlow reports it
    wall_time: float
    failed: bool
    error: str | None  # "Type: message" of what ended the run
    error_type: str | None
    findings: list[str] = field(default_factory=list)  # finding codes
    # The steady start-to-start intervals `step_interval` averages, in time order: the spread a
    # comparison reads its noise band from (not in the report).
    intervals: np.ndarray | None = field(default=None, repr=False, compare=False)
    # Seconds per step the run's threads waited for a CPU (a busy machine), None: not known.
    cpu_wait_per_step: float | None = None
    # The share of the run its CPU work filled, 0-1 (probes/cpu_wait.py), None: not known.
    cpu_share: float | None = None
    # A few steady steps laid out in time (`timeline.step_timeline`), drawn before and after.
    timeline: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "intervals"}


def main_phase(record: Record) -> str | None:
    counts = record.phase_counts()
    if not counts:
        return None
    if counts.get("train"):
        return "train"
    return max(
        (p for p in PHASE_PREFERENCE if counts.get(p)),
        key=lambda p: (counts[p], -PHASE_PREFERENCE.index(p)),
    )


def headline_of(record: Record, findings: list[Finding] | None = None) -> Headline:
    """The comparable numbers of `record` (and the codes of its findings)."""
    phase = main_phase(record)
    error = record.error
    split = time_split(record)
    wall = split.wall
    memory = memory_stats(record)
    peak_device = max((m["peak"] for m in memory.gpu.values()), default=None)
    numbers: dict[str, Any] = {
        "kind": None,
        "steps": 0,
        "step_time": None,
        "step_interval": None,
        "batch_size": None,
        "throughput": None,
        "throughput_unit": "",
    }
    if phase is not None:
        numbers.update(_phase_numbers(record, Phase.of(phase)))
    return Headline(
        phase=phase,
        compute_share=split.compute / wall if wall > 0 else None,
        data_wait_share=(split.data_wait / wall if wall > 0 else None)
        if split.data_wait_observable
        else None,
        other_share=split.other / wall if wall > 0 else None,
        peak_host=memory.host_rss.get("peak"),
        host_added=(
            memory.host_rss["peak"] - memory.host_rss["start"] if memory.host_rss else None
        ),
        peak_device=peak_device,
        wall_time=float(record.wall_time),
        failed=error is not None,
        error=f"{error.type}: {error.message.strip()}" if error is not None else None,
        error_type=error.type if error is not None else None,
        findings=[f.code for f in findings or []],
        timeline=step_timeline(record),
        cpu_wait_per_step=_cpu_wait_per_step(record, numbers["step_interval"]),
        cpu_share=_cpu_share(record),
        **numbers,
    )


def _cpu_share(record: Record) -> float | None:
    share = record.facts.get("cpu_share")
    return float(share) if isinstance(share, (int, float)) else None


def _cpu_wait_per_step(record: Record, interval: float | None) -> float | None:
    """The run's CPU wait that other programs can have caused (probes/cpu_wait.py), per second
    of the run, times its steady step interval: the wait a step took, where a cell also spends
    time outside its steps. At most the share of the run its own thread did not run."""
    waited = record.facts.get("cpu_wait_s")
    if not isinstance(waited, (int, float)) or not interval or record.wall_time <= 0:
        return None
    other = record.facts.get("other_cpu_s")
    other = float(other) if isinstance(other, (int, float)) else None
    # Another program cannot have held the run's threads back for longer than it ran.
    caused = float(waited) if other is None else min(float(waited), other)
    # The waits of threads that waited side by side add up past the wall time, but the run
    # cannot have been held back for longer than it lasted, less the time its own thread ran
    # (CPU work on the run's path, not a wait): a busy machine once read 58.5 ms of wait a step
    # for steps 40 ms apart, and called a 90x faster rewrite within the noise.
    held = min(caused / float(record.wall_time), 1.0)
    ran = record.facts.get("thread_cpu_share")
    if isinstance(ran, (int, float)) and 0.0 <= ran <= 1.0:
        held = min(held, 1.0 - float(ran))
    return held * float(interval)


def _phase_numbers(record: Record, code: int) -> dict[str, Any]:
    steps = record.steps
    rows = np.flatnonzero(steps["phase"] == code)
    rows = rows[np.argsort(steps["start"][rows], kind="stable")]
    warm = warmup_mask(record)[rows]
    kinds = np.bincount(steps["kind"][rows], minlength=len(KINDS))
    steady = rows[~warm] if (~warm).any() else rows
    durations = steps["duration"][steady]
    interval, kept, gaps = _interval(record, rows, warm)
    batches = steps["batch"][kept].astype(np.float64)
    known = ~np.isnan(batches) & (batches > 0)
    batch = float(np.median(batches[known])) if known.size and known.mean() >= 0.9 else None
    numbers: dict[str, Any] = {
        "kind": KINDS[int(kinds.argmax())],
        "steps": int(rows.size),
        "step_time": float(np.median(durations)) if durations.size else None,
        "step_interval": interval,
        "batch_size": batch,
        "intervals": gaps,
    }
    if interval is not None and interval > 0:
        if batch is not None:
            samples = float(batches[known].sum()) / known.sum()
            numbers.update(throughput=samples / interval, throughput_unit="samples/s")
        else:
            numbers.update(throughput=1.0 / interval, throughput_unit="steps/s")
    return numbers


def _interval(
    record: Record, rows: np.ndarray, warm: np.ndarray
) -> tuple[float | None, Any, np.ndarray | None]:
    """Mean start-to-start seconds of the steady steps of `rows` (in time order), the rows
    whose intervals it averages (the steps themselves when there is a single one), and those
    intervals (None for a single step)."""
    steps = record.steps
    if rows.size == 0:
        return None, rows, None
    if rows.size == 1:
        return float(steps["duration"][rows[0]]), rows, None
    starts = steps["start"][rows]
    gaps = np.diff(starts)
    owners = rows[:-1]
    usable = ~warm[:-1] & (np.diff(steps["epoch"][rows]) == 0)
    if not usable.any():  # every step traced, or one step per epoch: take what there is
        usable = np.ones(gaps.size, dtype=bool)
    gaps, owners = gaps[usable], owners[usable]
    typical = float(np.median(gaps))
    regular = gaps <= PAUSE_FACTOR * typical if typical > 0 else np.ones(gaps.size, dtype=bool)
    gaps, owners = gaps[regular], owners[regular]
    return float(gaps.mean()), owners, gaps
