"""How long the process's threads waited for a CPU during the run (``facts["cpu_wait_s"]``).

Linux counts, for each thread, the time it was ready to run and waiting in a CPU's run queue
(the second field of ``/proc/self/task/<tid>/schedstat``). Summed over the process's threads
at the run's start and end, the difference is the time a busy machine, not the code, kept the
run's work waiting: a comparison of two runs reads it as noise (experiments/noise.py). Threads
that ended during the run take their wait with them, so it is a lower bound.

Read twice per run, from files only: nothing of the run's is touched. None where the kernel
does not provide the counts (not Linux, or a kernel that keeps no scheduler statistics and
writes zeros there): a comparison then keeps its fixed floor.
"""

from __future__ import annotations

import os

from ..record import Record
from ..recorder import Recorder

_TASKS = "/proc/self/task"


class CpuWaitProbe:
    name = "cpu wait"

    def __init__(self) -> None:
        self._start: float | None = None
        self._waited: float | None = None

    def install(self, recorder: Recorder) -> None:
        del recorder
        self._start = threads_cpu_wait()

    def remove(self) -> None:
        end = threads_cpu_wait()
        if self._start is not None and end is not None:
            self._waited = max(0.0, end - self._start)

    def finish(self, record: Record) -> None:
        if self._waited is not None:
            record.facts["cpu_wait_s"] = round(self._waited, 6)


def threads_cpu_wait() -> float | None:
    """Seconds the process's living threads have waited in run queues, or None."""
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return None
    total = 0
    ran = 0
    for task in tasks:
        try:
            with open(f"{_TASKS}/{task}/schedstat", encoding="ascii") as file:
                fields = file.read().split()
            ran += int(fields[0])
            total += int(fields[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile, or no statistics
    # A kernel that keeps no statistics writes zeros: no thread of this process ever ran.
    return total / 1e9 if ran else None
