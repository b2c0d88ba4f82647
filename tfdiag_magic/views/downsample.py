"""Thinning long series for drawing: per pixel column, keep what a line plot would show.

A plot of 100 000 steps on 1 500 pixel columns draws each column as a vertical stroke from
its smallest to its largest value, joined to its neighbours by the first and last values.
Keeping exactly those four points per column (first, min, max, last) draws the same picture
from a few thousand points, so spikes stay visible. Statistics are never computed from the
thinned series: they use the exact columns.
"""

from __future__ import annotations

import numpy as np


def minmax_columns(
    x: np.ndarray, y: np.ndarray, columns: int, lo: float | None = None, hi: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Thin (x, y), x sorted ascending, to at most 4 points per pixel column over [lo, hi].

    NaNs in `y` are dropped first (a gap in a line plot is not a value).
    """
    keep = ~np.isnan(y)
    if not keep.all():
        x, y = x[keep], y[keep]
    if x.size <= 4 * columns or columns <= 0:
        return x, y
    lo = float(x[0]) if lo is None else lo
    hi = float(x[-1]) if hi is None else hi
    width = max(hi - lo, 1e-12)
    column = np.clip(((x - lo) * (columns / width)).astype(np.int64), 0, columns - 1)
    starts = np.flatnonzero(np.concatenate(([True], column[1:] != column[:-1])))
    ends = np.concatenate((starts[1:], [x.size])) - 1
    lows = np.minimum.reduceat(y, starts)
    highs = np.maximum.reduceat(y, starts)
    centre = (x[starts] + x[ends]) / 2.0
    out_x = np.empty(starts.size * 4, dtype=np.float64)
    out_y = np.empty(starts.size * 4, dtype=np.float64)
    out_x[0::4], out_y[0::4] = x[starts], y[starts]
    out_x[1::4], out_y[1::4] = centre, lows
    out_x[2::4], out_y[2::4] = centre, highs
    out_x[3::4], out_y[3::4] = x[ends], y[ends]
    return out_x, out_y


def thin_points(x: np.ndarray, limit: int) -> np.ndarray:
    """Indices of at most `limit` evenly spread points of `x` (for markers, not lines)."""
    if x.size <= limit:
        return np.arange(x.size)
    return np.unique(np.linspace(0, x.size - 1, limit).astype(np.int64))


class MinMaxBuckets:
    """A running summary of a growing series in at most `size` buckets of min and max.

    Values are added in order; when the buckets are full, neighbours are merged in pairs and
    each bucket then covers twice as many values. Adding costs O(new values), reading O(size):
    the live view keeps a picture of every step of a long run this way without re-reading it.
    """

    def __init__(self, size: int = 128) -> None:
        self.size = max(2, size - size % 2)
        self.per_bucket = 1
        self.lows: list[float] = []
        self.highs: list[float] = []
        self._fill = 0  # values in the last bucket

    def add(self, values: np.ndarray) -> None:
        values = values[~np.isnan(values)]
        i = 0
        while i < values.size:
            if not self.lows or self._fill == self.per_bucket:
                if len(self.lows) == self.size:
                    self._merge()
                    continue
                self.lows.append(np.inf)
                self.highs.append(-np.inf)
                self._fill = 0
            take = min(self.per_bucket - self._fill, values.size - i)
            chunk = values[i : i + take]
            self.lows[-1] = min(self.lows[-1], float(chunk.min()))
            self.highs[-1] = max(self.highs[-1], float(chunk.max()))
            self._fill += take
            i += take

    def _merge(self) -> None:
        """Every bucket is full here: merge neighbours, each bucket now covers twice as many."""
        lows, highs = self.lows, self.highs
        self.lows = [min(lows[j], lows[j + 1]) for j in range(0, len(lows) - 1, 2)]
        self.highs = [max(highs[j], highs[j + 1]) for j in range(0, len(highs) - 1, 2)]
        if len(lows) % 2:
            self.lows.append(lows[-1])
            self.highs.append(highs[-1])
        self.per_bucket *= 2
        self._fill = self.per_bucket if len(lows) % 2 == 0 else self.per_bucket // 2

    def count(self) -> int:
        if not self.lows:
            return 0
        return (len(self.lows) - 1) * self.per_bucket + self._fill


def column_starts(x: np.ndarray, columns: int, lo: float, hi: float) -> np.ndarray:
    """Where each non-empty pixel column of sorted `x` begins, as `minmax_columns` bins them.

    `minmax_columns` computes every value's column; here a binary search per column boundary
    finds the same places (the column of a value is a non-decreasing function of it) in
    O(columns * log(x.size)), whatever the number of values.
    """
    n = x.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    scale = columns / max(hi - lo, 1e-12)

    def column_of(values: np.ndarray) -> np.ndarray:
        return np.clip(((values - lo) * scale).astype(np.int64), 0, columns - 1)

    wanted = np.arange(1, columns, dtype=np.int64)
    # A guess from the inverse of column_of, exact unless rounding put it off by a value or two.
    guess = np.searchsorted(x, lo + wanted / scale).astype(np.int64)
    after_ok = (guess == n) | (column_of(x[np.minimum(guess, n - 1)]) >= wanted)
    before_ok = (guess == 0) | (column_of(x[np.maximum(guess - 1, 0)]) < wanted)
    wrong = np.flatnonzero(~(after_ok & before_ok))
    if wrong.size:  # a binary search for those: first index whose column is >= wanted
        left = np.zeros(wrong.size, dtype=np.int64)
        right = np.full(wrong.size, n, dtype=np.int64)
        target = wanted[wrong]
        while True:
            active = left < right
            if not active.any():
                break
            mid = (left + right) // 2
            below = column_of(x[np.minimum(mid, n - 1)]) < target
            left = np.where(active & below, mid + 1, left)
            right = np.where(active & ~below, mid, right)
        guess[wrong] = left
    inner = guess[(guess > 0) & (guess < n)]
    return np.concatenate(([0], np.unique(inner)))


def column_extremes(
    x: np.ndarray, y: np.ndarray, columns: int, lo: float, hi: float
) -> tuple[np.ndarray, ...]:
    """Per non-empty pixel column of (x, y) over [lo, hi]: the x and y of its first and last
    values, and its smallest and largest y (x sorted, y without NaN): `minmax_columns`'s
    columns, in a pass over `y` for each extreme and none over `x`."""
    starts = column_starts(x, columns, lo, hi)
    ends = np.concatenate((starts[1:], [x.size])) - 1
    return (
        x[starts],
        y[starts],
        x[ends],
        y[ends],
        np.minimum.reduceat(y, starts),
        np.maximum.reduceat(y, starts),
    )
