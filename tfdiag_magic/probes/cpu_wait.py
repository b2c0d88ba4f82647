"""How long the process's threads waited for a CPU during the run (``facts["cpu_wait_s"]``),
and how much of the run its CPU work filled (``facts["cpu_share"]``); the run's own thread's
wait alone is ``facts["thread_cpu_wait_s"]``.

Linux counts, for each thread, the time it ran on a CPU and the time it was ready to run and
waiting in a CPU's run queue (the first two fields of ``/proc/self/task/<tid>/schedstat``).
Summed over the process's threads at the run's start and end, the wait's difference is the time
the run's work was kept waiting: a comparison of two runs reads what a busy machine caused of
it as noise (experiments/noise.py). Threads that ended during the run take their counts with
them, so both are lower bounds. The run's own thread's CPU time over the wall time
(``facts["thread_cpu_share"]``) bounds how much of the run a wait can have filled: what that
thread ran was not waiting (experiments/headline.py).

The CPU share is the larger of the run's own thread's CPU time over the run's wall time less
that thread's own run-queue wait, and all threads' CPU time over the wall time of every CPU the
process may use, at most 1: near 1 when the steps are CPU work (in Python or in TensorFlow's
threads), near 0 when they sleep or wait for a device. Time the run's thread spent ready but
waiting for a CPU is left out of its wall time: a neighbour that takes the CPU from a step
doing CPU work does not make that work read as sleep. A comparison widens its floor by the
share, as CPU work drifts between runs where sleeps do not.

Not every wait is a neighbour's: threads of the cell's own (a parallel ``tf.data`` map wakes
many at once) wait for each other on a quiet machine, the same in every run. So the probe also
reads, from ``/proc/stat``, the CPU time everything else used on the CPUs the process may use
during the run, the hypervisor's steal included (``facts["other_cpu_s"]``): a neighbour that
ran for that long cannot have held the run's work back for longer. A comparison counts the
smaller of the two (experiments/headline.py). On a machine whose ``/proc/stat`` counts CPUs the
process shares with many others (a container on a large host), that time is large and the
wait counts whole.

The probe also gives the recorder its `load_reader`: at each memory sample (every 50 ms at
most), the process's CPU seconds and the seconds its CPUs have been busy, every program's
and the seconds its threads have waited in run queues (``Record.memory["cpu_self"]``,
``["cpus_busy"]``, ``["threads_waited"]``): between two samples, what the other programs took
of the CPUs, what the run's own work took, and how long its work was kept waiting for a CPU.
A rise in step time that came with no more CPU per step, while the steps' wait for a CPU grew
with it, is a busy machine's (diagnose/machine_load.py). The reads are paced to 1 % of the
time at most (`paced_read`): ``/proc/stat`` has a line per CPU, 30 µs on two CPUs, and the
threads' counts a file each, about 17 µs a thread.

The totals are read twice per run, from files only: nothing of the run's is touched. None
where the kernel does not provide the counts (not Linux, or a kernel that keeps no scheduler
statistics and writes zeros there): a comparison then keeps its widest floor.
"""

from __future__ import annotations

import math
import os
import resource
import threading
import time
from typing import NamedTuple

from ..record import Record
from ..recorder import Recorder
from .paced_read import PacedReader

_TASKS = "/proc/self/task"
_STAT = "/proc/stat"
# /proc/stat counts in clock ticks, by sampling: on a quiet 2-CPU machine, its busy time less
# the process's own (counted exactly) read -0.02 to +0.01 s over runs of 0.25-1.4 s. So this
# many ticks a CPU are added to the other programs' time.
_TICK_MARGIN = 1


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
        self._thread_cpu: float | None = None
        self._thread_waited: float | None = None  # the run's own thread's run-queue wait
        self._busy_start: float | None = None
        self._own_start = 0.0
        self._other: float | None = None
        self._load: PacedReader[tuple[float, float, float] | None] | None = None

    def install(self, recorder: Recorder | None) -> None:
        """Reads the counts the run starts from; gives `recorder` (None: the run's totals
        only) its load reader."""
        if recorder is not None and cpus_busy() is not None:
            self._load = PacedReader(LoadReader(), None)
            recorder.load_reader = self._load
        if recorder is not None and this_thread_times() is not None:
            recorder.thread_clocks = this_thread_times
        self._thread = threading.get_native_id()
        self._start = thread_times(self._thread)
        self._busy_start = cpus_busy()
        self._own_start = own_cpu()
        self._started_at = time.perf_counter()

    def remove(self) -> None:
        if self._load is not None:
            self._load.read_next_call()  # the recorder's last sample reads it
        wall = time.perf_counter() - self._started_at
        end = thread_times(self._thread)
        busy = cpus_busy()
        if busy is not None and self._busy_start is not None:
            own = own_cpu() - self._own_start
            margin = _TICK_MARGIN * len(_usable_cpu_ids()) / _ticks_per_second()
            self._other = max(0.0, busy - self._busy_start - own) + margin
        start = self._start
        if start is None or end is None:
            return
        self._waited = max(0.0, end.waited - start.waited)
        self._thread_waited = max(0.0, end.thread_waited - start.thread_waited)
        if wall > 0:
            ready = wall - self._thread_waited
            ran = max(0.0, end.thread_ran - start.thread_ran)
            self._thread_cpu = min(1.0, ran / wall)
            own = ran / ready if ready > 0 else 1.0
            every = max(0.0, end.ran - start.ran) / (wall * _usable_cpus())
            self._share = min(1.0, max(own, every))

    def finish(self, record: Record) -> None:
        if self._waited is not None:
            record.facts["cpu_wait_s"] = round(self._waited, 6)
        if self._share is not None:
            record.facts["cpu_share"] = round(self._share, 4)
        if self._thread_cpu is not None:
            record.facts["thread_cpu_share"] = round(self._thread_cpu, 4)
        if self._thread_waited is not None:
            record.facts["thread_cpu_wait_s"] = round(self._thread_waited, 6)
        if self._other is not None:
            record.facts["other_cpu_s"] = round(self._other, 6)
        if self._load is not None:
            record.facts["usable_cpus"] = _usable_cpus()


class LoadReader:
    """Reads the load (`__call__`): the process's CPU seconds, the seconds the CPUs it may use
    have been busy, and the seconds its threads have waited in run queues since the first
    read, or None where ``/proc/stat`` cannot be read.

    The wait is summed from each thread's rise between two reads, so a thread that ends (a
    tf.data iterator's, at each epoch's end) keeps what it waited before the last read where
    a sum over the living threads would lose it all."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._waited = 0  # nanoseconds
        self._counted = True

    def __call__(self) -> tuple[float, float, float] | None:
        busy = cpus_busy()
        if busy is None:
            return None
        return (time.process_time(), busy, self._threads_waited())

    def _threads_waited(self) -> float:
        if not self._counted:
            return math.nan
        try:
            tasks = os.listdir(_TASKS)
        except OSError:
            self._counted = False
            return math.nan
        now: dict[str, int] = {}
        for task in tasks:
            try:
                with open(f"{_TASKS}/{task}/schedstat", encoding="ascii") as file:
                    now[task] = int(file.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile, or no statistics
        last = self._last
        self._waited += sum(value - last[task] for task, value in now.items() if task in last)
        self._last = now
        return self._waited / 1e9


def own_cpu() -> float:
    """CPU seconds the process has used, its ended threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpus_busy() -> float | None:
    """Seconds the CPUs this process may use have been busy (not idle, not waiting for I/O;
    time the hypervisor stole counts as busy), or None."""
    wanted = {f"cpu{cpu}" for cpu in _usable_cpu_ids()}
    ticks = 0
    found = 0
    try:
        with open(_STAT, encoding="ascii") as file:
            for line in file:
                name, _, rest = line.partition(" ")
                if name not in wanted:
                    continue
                # user nice system idle iowait irq softirq steal (guest time is in user)
                fields = [int(value) for value in rest.split()[:8]]
                ticks += sum(fields) - fields[3] - fields[4]
                found += 1
    except (OSError, ValueError, IndexError):
        return None
    if found != len(wanted):
        return None
    return ticks / _ticks_per_second()


def _ticks_per_second() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (AttributeError, ValueError, OSError):
        return 100


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


def this_thread_times() -> tuple[float, float] | None:
    """The calling thread's seconds on a CPU and waiting in a run queue, or None where the
    kernel keeps no counts (one small file read: for a few reads a run, not per step)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as file:
            fields = file.read().split()
        ran, waited = int(fields[0]), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None
    return (ran / 1e9, waited / 1e9) if ran else None


def _usable_cpus() -> int:
    return max(1, len(_usable_cpu_ids()))


def _usable_cpu_ids() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))
