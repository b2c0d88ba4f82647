"""Paced reads: a measure read no more often than keeps its own cost to a share of the run.

What a read costs depends on the process, not on the tool. glibc's `mallinfo2` walks every
free chunk of the C heap, and `sys.getallocatedblocks` every pool of Python's allocator:

- in a fresh process they take 3.5 and 5 µs;
- in a notebook's process after a Keras `fit`, some text and a DataFrame, 30-64 and 100-120 µs;
- in a pytest process after 42 tests of one module, 1.1 and 0.3 ms (in a CI worker later in
  its run about 8 ms a sample for the two, from the CPU time they added to a loop);
- on a C heap with 50,000 freed blocks, `mallinfo2` took 10 ms; with 200,000, 47 ms.

The recorder samples memory from the user's own thread, every 50 ms. At 8 ms a sample the reads
took 15 % of a loop's thread (a loop of 1 ms sleeps read as on the CPU a fifth of its time,
the bar of `python-preprocessing`); at 47 ms they would take half. A paced reader times
each read and skips the reads that come sooner than `1 / READ_SHARE` times its cost after the
last: its cost stays under 1 % of the time it runs in, however slow its reads get. A skipped
read gives the reader's "not read" value (-1, as before the runtime is up), which the series'
users leave out; a run's last sample is always read. The smaller of the last two reads' times
sets the pace, so one read that lost its CPU to a neighbour does not thin the samples.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Generic, TypeVar

T = TypeVar("T")

READ_SHARE = 0.01  # of the time, at most, a paced reader's reads take


class PacedReader(Generic[T]):
    """`read`, called through this object, at most as often as its cost allows."""

    __slots__ = ("last_cost", "missing", "next_at", "read", "reads", "seconds", "skipped")

    def __init__(self, read: Callable[[], T], missing: T, not_before: float = 0.0) -> None:
        self.read = read
        self.missing = missing  # what a skipped read gives
        self.next_at = not_before  # a `perf_counter` time: no read comes sooner
        self.last_cost = float("inf")  # none yet: the first read's own cost sets the pace
        self.reads = 0
        self.skipped = 0
        self.seconds = 0.0  # in all reads

    def __call__(self) -> T:
        start = perf_counter()
        if start < self.next_at:
            self.skipped += 1
            return self.missing
        value = self.read()
        cost = perf_counter() - start
        self.reads += 1
        self.seconds += cost
        self.next_at = start + min(cost, self.last_cost) / READ_SHARE
        self.last_cost = cost
        return value

    def read_next_call(self) -> None:
        """The next call reads, however soon it comes (the last sample of a run)."""
        self.next_at = 0.0

    def summary(self) -> dict[str, float | int]:
        """Reads made and skipped, and the seconds the reads took (a record's facts)."""
        return {"reads": self.reads, "skipped": self.skipped, "seconds": round(self.seconds, 6)}
