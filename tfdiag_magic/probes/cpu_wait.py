"""How long the process's threads waited for a CPU during the run (``facts["cpu_wait_s"]``),
and how much of the run its CPU work filled (``facts["cpu_share"]``).

Linux counts, for each thread, the time it ran on a CPU and the time it was ready to run and
waiting in a CPU's run queue (the first two fields of ``/proc/self/task/<tid>/schedstat``).
Summed over the process's threads at the run's start and end, the wait's difference is the time
a busy machine, not the code, kept the run's work waiting: a comparison of two runs reads it as
noise (experiments/noise.py). Threads that ended during the run take their counts with them, so
both are lower bounds.

The CPU share is the larger of the run's own thread's CPU time over the run's wall time less
that thread's own run-queue wait, and all threads' CPU time over the wall time of every CPU the
process may use, at most 1: near 1 when the steps are CPU work (in Python or in TensorFlow's
threads), near 0 when they sleep or wait for a device. Time the run's thread spent ready but
waiting for a CPU is left out of its wall time: a neighbour that takes the CPU from a step
doing CPU work does not make that work read as sleep. A comparison widens its floor by the
share, as CPU work drifts between runs where sleeps do not.

Read twice per run, from files only: nothing of the run's is touched. None where the kernel
does not provide the counts (not Linux, or a kernel that keeps no scheduler statistics and
writes zeros there): a comparison then keeps its widest floor.
"""

from __future__ import annotations

import os
import threading
import time
from typing import NamedTuple

from ..record import Record
from ..recorder import Recorder

_TASKS = "/proc/self/task"


class ThreadTimes(NamedTuple):
    """Seconds the process's living threads waited in run queues and ran, and the seconds one
    of them (the run's own) ran and waited."""

    waited: float
    ran: float
    thread_ran: float
    thread_waited: float = 0.0


class CpuWaitProbe:
    name = "cpu wait"

    def __init__(self) -> None:
        self._start: ThreadTimes | None = None
        self._started_at = 0.0
        self._thread = 0
        self._waited: float | None = None
        self._share: float | None = None

    def install(self, recorder: Recorder) -> None:
        del recorder
        self._thread = threading.get_native_id()
        self._start = thread_times(self._thread)
        self._started_at = time.perf_counter()

    def remove(self) -> None:
        wall = time.perf_counter() - self._started_at
        end = thread_times(self._thread)
        start = self._start
        if start is None or end is None:
            return
        self._waited = max(0.0, end.waited - start.waited)
        if wall > 0:
            ready = wall - max(0.0, end.thread_waited - start.thread_waited)
            ran = max(0.0, end.thread_ran - start.thread_ran)
            own = ran / ready if ready > 0 else 1.0
            every = max(0.0, end.ran - start.ran) / (wall * _usable_cpus())
            self._share = min(1.0, max(own, every))

    def finish(self, record: Record) -> None:
        if self._waited is not None:
            record.facts["cpu_wait_s"] = round(self._waited, 6)
        if self._share is not None:
            record.facts["cpu_share"] = round(self._share, 4)


def threads_cpu_wait() -> float | None:
    """Seconds the process's living threads have waited in run queues, or None."""
    times = thread_times()
    return None if times is None else times.waited


def thread_times(thread: int | None = None) -> ThreadTimes | None:
    """The process's threads' run-queue and CPU seconds, and `thread`'s CPU and run-queue
    seconds, or None."""
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return None
    waited = ran = own = own_waited = 0
    for task in tasks:
        try:
            with open(f"{_TASKS}/{task}/schedstat", encoding="ascii") as file:
                fields = file.read().split()
            running = int(fields[0])
            waiting = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile, or no statistics
        ran += running
        waited += waiting
        if task == str(thread):
            own, own_waited = running, waiting
    # A kernel that keeps no statistics writes zeros: no thread of this process ever ran.
    if not ran:
        return None
    return ThreadTimes(waited / 1e9, ran / 1e9, own / 1e9, own_waited / 1e9)


def _usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
