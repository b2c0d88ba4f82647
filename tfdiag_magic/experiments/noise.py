"""How far apart two runs' speeds must be before a verdict says "faster" or "slower".

Two runs of the same cell differ by noise: a neighbour on a shared CPU, the scheduler, caches.
A busy neighbour adds time to some steps and leaves the fastest near their cost, while a change
to the step's own work moves them all. So where both runs have per-step intervals (start to
start), the decision rests on the fastest steps: the ratio of the runs' 10th percentiles, with a
95 % interval from a moving-block bootstrap of `BLOCKS` contiguous blocks per run (blocks keep
a neighbour's slow stretches together). A change counts when that interval excludes 1 and the
ratio is beyond a floor. The speed-up a verdict names is still the mean's (what a run
delivers); where the mean did not move the same way, the verdict says so. A cell's wall time is
one number per run with no spread to read, so it needs `WALL_TIME_NOISE`: the same cells, run
four times on a 2-CPU machine, were compared by wall time at 0.95×-1.35×.

The floor is 1 + `FAST_STEPS_NOISE` + drift + busy, three parts each measured:

- `FAST_STEPS_NOISE`, 15 %: on a steady 2-CPU machine, a cell compared with itself gave
  fastest-step ratios of 0.98-1.08 in most pairs, and steps made 1.25× longer 0.78-0.80.
- drift, `CPU_DRIFT` times the busier run's CPU share (probes/cpu_wait.py: near 1 for steps of
  CPU work, near 0 for steps that sleep or wait for a device). On other machines the speed of
  CPU work itself moves between runs, in phases several runs long, with nothing waiting: on a
  2-vCPU AMD EPYC virtual machine, 15 plain runs of the same cell in one kernel, no tool
  loaded, had fastest steps of 0.40-0.65 ms (a 0.5 ms `tf.function` step; 0.45-0.64 ms with
  TensorFlow held to one thread), 1.7-3.3 ms (30 small layers) and 9.8-13.9 ms (two 1024-wide
  layers), their CPU time per step rising with them; consecutive runs read up to 1.41× apart,
  and up to 1.53× beside a CPU hog with 0.07 ms of CPU wait a step. A pure NumPy and Python
  loop there held within 13 %, and sleeps do not drift.
- busy, the share of a run's step time its threads waited for a CPU (Linux's per-thread
  run-queue time, as far as other programs' CPU time can explain it, probes/cpu_wait.py),
  times the fastest steps' ratio: a busy machine can shift every step of a run, the fastest
  included, and a wait lengthens the steps it falls in, so the fastest were held back by no
  more than that share. A wait only lengthens the run that waited, so "faster" is held back by
  the first run's wait and "slower" by the second's. With a CPU hog on one of two cores,
  ~0.35 ms steps of the same cell ran at 0.35 ms for a dozen runs and then at 0.6 ms (1.7x; CI
  once read 2.2x) while the runs' threads waited 0.1-0.3 ms per step (0.27 of 0.6 ms widens
  the floor by 0.77). A busy CI machine once read 209 ms of wait a step of 250 ms in a slow
  cell, whose rewrite ran 452x faster: that wait, read in seconds over the rewrite's 0.5 ms
  step, hid the change; as a share (0.84) it leaves tens of times. On a quiet machine the
  wait is near nothing.

So a CPU-bound cell on a quiet machine needs a 1.65× change to be called, and a cell whose steps
mostly sleep or wait for a GPU 1.15×; a verdict that is not called shows the band it fell in.

The bootstrap draws from its own seeded generator: the user's random state is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STEP_NOISE = 0.05  # without per-step intervals (a single step, hand-made headlines)
FAST_STEPS_NOISE = 0.15
FAST_PERCENTILE = 10
WALL_TIME_NOISE = 0.35
RESAMPLES = 1000
MAX_POINTS = 4000  # longer series are thinned evenly before the bootstrap
# How much the speed of a run's CPU work may move between runs (see above), times its CPU share.
CPU_DRIFT = 0.5
BUSY_NOTE = 0.05  # a CPU wait that widens the band by this much is named in the verdict
MIN_INTERVALS = 8  # fewer: no spread to read, the fixed band alone decides
BLOCKS = 8
SEED = 20261123


@dataclass(frozen=True)
class Band:
    """A speed ratio (> 1: faster), the range the deciding ratio could take from noise alone,
    and that deciding ratio: the fastest steps' where both runs have per-step intervals, else
    `ratio` itself."""

    ratio: float
    low: float
    high: float
    decided_by: float | None = None  # the fastest steps' ratio; None: `ratio` decided
    # Seconds per step the threads of the run whose slowness would fake the change waited for
    # a CPU, where that widened the band by `BUSY_NOTE` or more (the verdict says so).
    cpu_wait: float | None = None

    @property
    def deciding(self) -> float:
        return self.ratio if self.decided_by is None else self.decided_by

    @property
    def measurable(self) -> bool:
        """Whether the change is more than noise."""
        return not (self.low <= 1.0 <= self.high)

    @property
    def half_width(self) -> float:
        """The noise band as a share of 1 (0.07: ±7 %) when the change is not measurable."""
        return max(abs(self.low - 1.0), abs(self.high - 1.0)) if not self.measurable else 0.0

    @property
    def mean_agrees(self) -> bool:
        """Whether the mean moved the way the deciding ratio did, by more than the floor."""
        if self.deciding > 1.0:
            return self.ratio >= 1.0 + STEP_NOISE
        return self.ratio <= 1.0 - STEP_NOISE


def fixed_band(ratio: float, noise: float) -> Band:
    """The band of a ratio with no spread to read: ±`noise` around 1."""
    low, high = 1.0 - noise, 1.0 + noise
    if ratio <= low or ratio >= high:
        return Band(ratio, ratio, ratio)
    return Band(ratio, low, high)


def interval_band(
    ratio: float,
    before: np.ndarray | None,
    after: np.ndarray | None,
    cpu_wait: tuple[float | None, float | None] = (None, None),
    cpu_share: tuple[float | None, float | None] = (None, None),
) -> Band:
    """The band of `ratio`, a speed-up read from mean intervals, decided by the fastest steps:
    `before` and `after` are the runs' steady start-to-start intervals in time order. `ratio`
    may carry the runs' batch sizes too (a throughput ratio); they are exact, and scale the
    fastest steps' ratio the same way. `cpu_wait` is each run's time per step its threads
    waited for a CPU (None: not known): the fastest steps of a run may have been slowed by as
    much, so the floor on the side that run's slowness would fake widens by it. `cpu_share` is
    the share of each run its CPU work filled (None: not known, taken as all of it): the floor
    widens by `CPU_DRIFT` times the larger."""
    if (
        before is None
        or after is None
        or before.size < MIN_INTERVALS
        or after.size < MIN_INTERVALS
        or not np.isfinite(ratio)
    ):
        return fixed_band(ratio, STEP_NOISE)
    scale = ratio / float(before.mean() / after.mean())  # the batch sizes' part of `ratio`
    rng = np.random.default_rng(SEED)
    first = _resampled_fast(_thinned(before), rng)
    second = _resampled_fast(_thinned(after), rng)
    fast = scale * _fast(before) / _fast(after)
    low, high = (scale * np.percentile(first / second, [2.5, 97.5])).tolist()
    # A wait only lengthens the run that waited: a run that came out faster was not made
    # faster by its own wait, so "faster" is held back by the first run's wait alone and
    # "slower" by the second's. A wait is a share of its run's time: its fastest steps, the ones
    # the ratio reads, were held back by that share of their length at most (a wait lengthens
    # the steps it falls in), so the ratio they would have read without it is `fast` times
    # (1 - the first run's share), or over (1 - the second's).
    waited_before, waited_after = (_wait(w) for w in cpu_wait)
    held_before, held_after = _held(waited_before, before), _held(waited_after, after)
    busy_faster = held_before * fast
    busy_slower = held_after / fast
    drift = CPU_DRIFT * max(_share(share) for share in cpu_share)
    floor_low = 1.0 / (1.0 / (1.0 - FAST_STEPS_NOISE) + drift + busy_slower)
    floor_high = 1.0 + FAST_STEPS_NOISE + drift + busy_faster
    if (low > 1.0 and fast >= floor_high) or (high < 1.0 and fast <= floor_low):
        return Band(ratio, low, high, fast)
    busy, waited = (busy_faster, waited_before) if fast >= 1.0 else (busy_slower, waited_after)
    widened = waited if busy >= BUSY_NOTE else None
    return Band(ratio, min(low, floor_low), max(high, floor_high), fast, widened)


def _wait(wait: float | None) -> float:
    return float(wait) if wait is not None and np.isfinite(wait) and wait > 0 else 0.0


def _held(wait: float, intervals: np.ndarray) -> float:
    """The share of a run's step intervals its threads waited for a CPU, at most 1."""
    mean = float(np.mean(intervals))
    return min(1.0, wait / mean) if mean > 0 else 1.0


def _share(share: float | None) -> float:
    if share is None or not np.isfinite(share):
        return 1.0
    return min(1.0, max(0.0, float(share)))


def _fast(values: np.ndarray) -> float:
    return float(np.percentile(values, FAST_PERCENTILE))


def _thinned(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.size <= MAX_POINTS:
        return values
    return values[:: -(-values.size // MAX_POINTS)]


def _resampled_fast(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The fastest steps' interval (10th percentile) of `RESAMPLES` moving-block bootstrap
    resamples of `values`."""
    n = values.size
    block = max(1, n // BLOCKS)
    blocks = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(RESAMPLES, blocks))
    index = (starts[:, :, None] + np.arange(block)).reshape(RESAMPLES, -1)[:, :n]
    return np.percentile(values[index], FAST_PERCENTILE, axis=1)
