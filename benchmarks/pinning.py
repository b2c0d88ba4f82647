"""Pin a benchmark process to one CPU, every thread of it.

On a small virtual machine, threads that move between CPUs are the largest noise in a ~1 ms
step: TensorFlow's thread pools and tf.data's threads are created at import and first use,
so pinning only the main thread leaves them free.
"""

from __future__ import annotations

import contextlib
import os


def pin_every_thread(cpus: set[int]) -> None:
    """Run every thread of this process, those that exist and those to come, on `cpus`."""
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that has just ended
            os.sched_setaffinity(int(task), cpus)
