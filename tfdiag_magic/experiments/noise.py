"""How far apart two runs' speeds must be before a verdict says "faster" or "slower".

Two runs of the same cell differ by noise: a neighbour on a shared CPU, the scheduler, caches.
A verdict must tell that from an effect. Where both runs have per-step intervals (start to
start), the ratio of their mean intervals gets a 95 % interval from a moving-block bootstrap
(blocks keep the slow stretches a neighbour causes together, which a plain bootstrap would
scatter and so understate); a change counts only when that interval excludes 1 and the ratio
itself is at least `STEP_NOISE` away from 1. A cell's wall time is one number per run with no
spread to read, so it needs `WALL_TIME_NOISE`: the same cells, run four times on a 2-CPU
machine, were compared by wall time at 0.95×-1.35×.

The bootstrap draws from its own seeded generator: the user's random state is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STEP_NOISE = 0.05
WALL_TIME_NOISE = 0.35
RESAMPLES = 1000
MAX_POINTS = 2000  # longer series are first averaged in contiguous chunks
MIN_INTERVALS = 8  # fewer: no spread to read, the fixed band alone decides
SEED = 20261123


@dataclass(frozen=True)
class Band:
    """A speed ratio (> 1: faster) and the range it could be from noise alone."""

    ratio: float
    low: float
    high: float

    @property
    def measurable(self) -> bool:
        """Whether the change is more than noise."""
        return not (self.low <= 1.0 <= self.high)

    @property
    def half_width(self) -> float:
        """The noise band as a share of 1 (0.07: ±7 %)."""
        return max(abs(self.low - 1.0), abs(self.high - 1.0)) if not self.measurable else 0.0


def fixed_band(ratio: float, noise: float) -> Band:
    """The band of a ratio with no spread to read: ±`noise` around 1."""
    low, high = 1.0 - noise, 1.0 + noise
    if ratio <= low or ratio >= high:
        return Band(ratio, ratio, ratio)
    return Band(ratio, low, high)


def interval_band(ratio: float, before: np.ndarray | None, after: np.ndarray | None) -> Band:
    """The band of `ratio`, a speed-up read from mean intervals: `before` and `after` are the
    runs' steady start-to-start intervals in time order. The bootstrap's relative spread is
    applied to `ratio` (a throughput ratio also carries the batch sizes, which are exact)."""
    if (
        before is None
        or after is None
        or before.size < MIN_INTERVALS
        or after.size < MIN_INTERVALS
        or not np.isfinite(ratio)
    ):
        return fixed_band(ratio, STEP_NOISE)
    rng = np.random.default_rng(SEED)
    first = _resampled_means(_chunked(before), rng)
    second = _resampled_means(_chunked(after), rng)
    point = float(before.mean() / after.mean())
    spread = first / second / point
    low_factor, high_factor = np.percentile(spread, [2.5, 97.5])
    low, high = ratio * float(low_factor), ratio * float(high_factor)
    # The ratio must also clear the fixed floor: two runs' means can differ by a few percent
    # for reasons no single run shows (a neighbour that came between them).
    if (ratio >= 1.0 + STEP_NOISE and low > 1.0) or (ratio <= 1.0 - STEP_NOISE and high < 1.0):
        return Band(ratio, low, high)
    return Band(ratio, min(low, 1.0 - STEP_NOISE), max(high, 1.0 + STEP_NOISE))


def _chunked(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.size <= MAX_POINTS:
        return values
    chunks = np.array_split(values, MAX_POINTS)
    return np.array([chunk.mean() for chunk in chunks])


def _resampled_means(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Means of `RESAMPLES` moving-block bootstrap resamples of `values`."""
    n = values.size
    block = max(1, round(n ** (1 / 3)))
    blocks = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(RESAMPLES, blocks))
    index = (starts[:, :, None] + np.arange(block)).reshape(RESAMPLES, -1)[:, :n]
    return values[index].mean(axis=1)
