"""Paced reads (`paced_read`): a slow read is made rarely enough to keep its cost under a
hundredth of the time, a fast one is never skipped."""

from __future__ import annotations

import time

from tfdiag_magic.probes.paced_read import READ_SHARE, PacedReader


def _call_for(reader: PacedReader[int], seconds: float, every: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        reader()
        time.sleep(every)
    return time.perf_counter() - start


def test_a_slow_read_is_made_once_per_hundred_times_its_cost():
    def slow() -> int:
        time.sleep(0.004)  # never shorter: each read costs 4 ms at least
        return 7

    reader = PacedReader(slow, -1)
    values = [reader() for _ in range(3)]
    assert values == [7, -1, -1]  # the first is read, the next ones come too soon
    elapsed = _call_for(reader, 0.6, 0.001)
    # A read of 4 ms or more sets the next one 0.4 s or more later.
    assert 1 <= reader.reads <= 2 + elapsed / (0.004 / READ_SHARE), reader.summary()
    assert reader.skipped >= 50, reader.summary()
    summary = reader.summary()
    assert summary["reads"] == reader.reads and summary["seconds"] >= 0.004 * reader.reads


def test_a_fast_read_is_hardly_ever_skipped():
    """A read of a microsecond sets the next one 0.1 ms later, sooner than the next call: none
    is skipped, but where the two last reads both lost their CPU to a neighbour (the smaller
    of them sets the pace). On three test workers on 2 CPUs, 4 of 90 calls were skipped once."""
    reader = PacedReader(lambda: 3, -1)
    _call_for(reader, 0.2, 0.002)
    assert reader.reads >= 20 and reader.skipped <= 0.1 * reader.reads, reader.summary()
