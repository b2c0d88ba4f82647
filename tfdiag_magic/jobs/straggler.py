"""straggler: one worker of a synchronous job holds the others back.

Every synchronous step ends with a collective (the gradients' all-reduce) that waits for the
slowest worker. A worker whose input pipeline is slow spends its step waiting for its batch,
and the others spend theirs waiting in the collective for it: their step times are the same,
but only the straggler's time goes to its input. So the finding compares what each worker
spent waiting for input, as a share of its own measured training time, aligned by step index;
and, for jobs whose workers do not wait for each other, each worker's steady step time. Only
durations are compared, never the clocks of different machines.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..findings import Finding
from ..units import seconds, share
from .workers import Worker

CODE = "straggler"
TITLE = "One worker holds the others back"
DOC = """\
## What it detects
In a merged multi-worker job (`python -m tfdiag_magic merge reports/`), one worker that the
others wait for. Every synchronous step ends with a collective (the gradients' all-reduce) that
waits for the slowest worker: when one worker's input pipeline is slow, its steps wait for
their batch, and the other workers' steps wait as long in the collective. Their step times are
then the same; what differs is what each spent waiting for its input, as a share of its own
training time. That is measured on each worker in-run: the waits of its loops for the next
batch, or, for a `tf.function` given the iterator (`train_step(iterator)`, as TensorFlow's
multi-worker guide writes it), from the iterator's own tf.data model, read every 64 steps.
Workers are aligned by step index; the clocks of different machines are never compared.

For workers that do not wait for each other, a worker whose steady step is 1.25× the next
slowest worker's is named too, when its fastest steps (10th percentile) are 1.25× theirs as
well: a busy neighbour slows some steps of a worker, a slower worker all of them (two runs of
the same script one after the other measured 1.59× by their medians, 1.0× by their fastest
steps).

## Why it hurts
The whole job runs at the pace of its slowest worker: adding workers does not help, and the
others' hardware idles in the collective.

## Evidence we show
The worker (task type and index), its input wait share and each other worker's, the excess,
the windows of 64 steps in which it held, the step from which it held to the end, each
worker's median step, and the worker's own findings (its `input-bound` finding says what its
pipeline lacks).

## Fix
Fix that worker's input first (its own report's rewrite); where the workers' data or hosts
differ, balance them.

## Threshold
The straggler's input wait share exceeds every other worker's by 20 points of its training
time, in 75% of the aligned windows where windows were measured. Measured here
(`tests/test_multiworker.py`, two workers on localhost): a worker whose pipeline sleeps 20 ms
a batch waited 66-68% of its time, the other 0.5-1.5%; two healthy workers both waited under
1.5%.
"""
# The straggler's input wait exceeds the other workers' (the largest of them) by this share of
# its training time: two healthy workers of the same job differ by a few points.
MIN_EXCESS_SHARE = 0.2
# ... in this share of the aligned windows of steps, where windows were measured.
MIN_WINDOWS_SHARE = 0.75
MIN_WINDOW_EXCESS = 0.1  # a window counts where the straggler waits this much more
# Steady step time of a worker against the slowest of the others, for workers that do not
# wait for each other (then their step times differ).
MIN_STEP_RATIO = 1.25
MIN_STEPS = 10


def check(workers: list[Worker]) -> Finding | None:
    measured = [w for w in workers if w.steps >= MIN_STEPS]
    if len(measured) < 2:
        return None
    return _waits_for_input(measured) or _slower_steps(measured)


def _waits_for_input(workers: list[Worker]) -> Finding | None:
    shares = [w.input_wait_share for w in workers]
    if any(s is None for s in shares):
        return None
    order = np.argsort(shares)[::-1]
    slow, second = workers[int(order[0])], workers[int(order[1])]
    others = [w for w in workers if w is not slow]
    excess = slow.input_wait_share - second.input_wait_share
    if excess < MIN_EXCESS_SHARE:
        return None
    windows = _aligned_windows(slow, others)
    held = [excess_share >= MIN_WINDOW_EXCESS for _, excess_share in windows]
    if windows and sum(held) < MIN_WINDOWS_SHARE * len(windows):
        return None
    from_step = _from_step(windows)
    evidence = {
        "worker": slow.name,
        "task_type": slow.task_type,
        "task_index": slow.task_index,
        "input_wait_share": round(slow.input_wait_share, 3),
        "input_wait_share_of": {w.name: round(w.input_wait_share, 3) for w in others},
        "excess_share": round(excess, 3),
        "windows": len(windows),
        "windows_held": int(sum(held)),
        "from_step": from_step,
        "median_step_s": {w.name: w.median_step_s for w in workers},
        "its_findings": [f["code"] for f in slow.findings],
        "fires_at_excess_share": MIN_EXCESS_SHARE,
    }
    own = ", ".join(f"`{f['code']}` ({f['title']})" for f in slow.findings) or "none"
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"{slow.name} waits for its input {share(slow.input_wait_share, 1)} of its"
            f" training time, the other workers {share(second.input_wait_share, 1)} or less:"
            " they wait for it"
        ),
        detail=(
            f"Steps are synchronous: each one ends when the slowest worker reaches the"
            f" collective. {slow.name.capitalize()} spent {seconds(slow.input_wait_s)} of"
            f" {seconds(slow.input_measured_s)} waiting for its next batch"
            + (f", from step {from_step} on" if from_step is not None else "")
            + (f" (in {sum(held)} of {len(windows)} windows of steps)" if windows else "")
            + "; the other workers' steps lasted as long, spent in the collective waiting for"
            f" it. Its own findings: {own}."
        ),
        fix=(
            f"Fix {slow.name}'s input first: its own report's input findings say how"
            " (`num_parallel_calls=tf.data.AUTOTUNE`, `prefetch`, `cache`, files read in"
            " parallel). Where the workers' data differ (a shard of slower files, a busier"
            " host), balance them; every worker's speed-up waits for this one."
        ),
        evidence=evidence,
        impact=slow.input_wait_s,
    )


def _aligned_windows(slow: Worker, others: list[Worker]) -> list[tuple[float, float]]:
    """(first step, straggler's share minus the largest other's) for each window between two
    reads of the straggler's input measure, the others' read at the same step indices."""
    series = np.array(slow.input_series, dtype=np.float64).reshape(-1, 3)
    other_series = [np.array(w.input_series, dtype=np.float64).reshape(-1, 3) for w in others]
    if len(series) < 2 or any(len(s) < 2 for s in other_series):
        return []
    windows = []
    for (s0, w0, t0), (s1, w1, t1) in itertools.pairwise(series):
        if t1 <= t0:
            continue
        mine = (w1 - w0) / (t1 - t0)
        theirs = []
        for other in other_series:
            steps, wait, span = other[:, 0], other[:, 1], other[:, 2]
            if s0 < steps[0] or s1 > steps[-1]:
                continue
            dw = np.interp(s1, steps, wait) - np.interp(s0, steps, wait)
            dt = np.interp(s1, steps, span) - np.interp(s0, steps, span)
            if dt > 0:
                theirs.append(dw / dt)
        if theirs:
            windows.append((float(s0), float(mine - max(theirs))))
    return windows


def _from_step(windows: list[tuple[float, float]]) -> int | None:
    """The first step of the run of windows, to the end, in which the straggler held back."""
    start = None
    for first, excess in windows:
        start = (first if start is None else start) if excess >= MIN_WINDOW_EXCESS else None
    return int(start) if start is not None else None


def _fastest_ratio(slow: Worker, other: Worker) -> float | None:
    """The ratio of the two workers' fastest steps (the 10th percentile of their steady
    durations, the first step left out); None where a report carries no per-step series."""
    fast = []
    for worker in (slow, other):
        series = worker.step_series or {}
        durations = [d for d in (series.get("duration") or [])[1:] if d is not None]
        if len(durations) < MIN_STEPS:
            return None
        fast.append(float(np.percentile(durations, 10)))
    return fast[0] / fast[1] if fast[1] > 0 else None


def _slower_steps(workers: list[Worker]) -> Finding | None:
    timed = [w for w in workers if w.median_step_s]
    if len(timed) < 2:
        return None
    timed.sort(key=lambda w: w.median_step_s, reverse=True)
    slow, second = timed[0], timed[1]
    ratio = slow.median_step_s / second.median_step_s
    if ratio < MIN_STEP_RATIO:
        return None
    # A busy neighbour slows some of a worker's steps and leaves its fastest near their cost;
    # a slower worker is slower in all of them. Where both reports carry their steps, the
    # fastest steps must differ as much.
    fastest = _fastest_ratio(slow, second)
    if fastest is not None and fastest < MIN_STEP_RATIO:
        return None
    own = ", ".join(f"`{f['code']}`" for f in slow.findings) or "none"
    return Finding(
        code=CODE,
        severity="warning",
        title=f"{slow.name}'s steps take {ratio:.2f}× the other workers'",
        detail=(
            f"{slow.name}'s steady step took {seconds(slow.median_step_s)}, the next slowest"
            f" worker's {seconds(second.median_step_s)}. Its own findings: {own}."
        ),
        fix=(
            f"Look at {slow.name}'s own report first; where the workers' hardware or load differ,"
            " balance the work given to each."
        ),
        evidence={
            "worker": slow.name,
            "task_type": slow.task_type,
            "task_index": slow.task_index,
            "step_time_ratio": round(ratio, 3),
            "median_step_s": {w.name: w.median_step_s for w in timed},
            "its_findings": [f["code"] for f in slow.findings],
            "fastest_steps_ratio": None if fastest is None else round(fastest, 3),
            "fires_at_step_ratio": MIN_STEP_RATIO,
        },
        impact=0.0,
    )
