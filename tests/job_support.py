"""Starting a real multi-worker TensorFlow job on localhost for the tests: one process per
worker, free ports, each its own ``TF_CONFIG``, bounded in time, every process ended."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

JOBS = Path(__file__).with_name("jobs")
JOB_TIMEOUT_S = 240


@dataclass
class WorkerRun:
    index: int
    returncode: int
    output: str


def free_ports(count: int) -> list[int]:
    """Ports free now on localhost (held open together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_job(
    script: str,
    workdir: Path,
    workers: int = 2,
    env_of: dict[int, dict[str, str]] | None = None,
    profile_args: tuple[str, ...] = ("--json", "reports/"),
) -> list[WorkerRun]:
    """Run `script` (in tests/jobs) as every worker of a job under
    ``python -m tfdiag_magic profile``, in `workdir`; returns each worker's exit and output."""
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(workers)]}
    processes = []
    try:
        for index in range(workers):
            env = dict(os.environ)
            env.update(
                TF_CONFIG=json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": index}}
                ),
                TF_CPP_MIN_LOG_LEVEL="2",
                PYTHONPATH=str(JOBS.parents[1]),
            )
            env.update((env_of or {}).get(index, {}))
            command = [sys.executable, "-m", "tfdiag_magic", "profile", *profile_args]
            command.append(str(JOBS / script))
            processes.append(
                subprocess.Popen(
                    command,
                    cwd=workdir,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        runs = []
        for index, process in enumerate(processes):
            output, _ = process.communicate(timeout=JOB_TIMEOUT_S)
            runs.append(WorkerRun(index, process.returncode, output))
        return runs
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
