"""A small multi-worker job on this machine: one process per worker, each running
``python -m tfdiag_magic profile --json reports/ SCRIPT`` with its own ``TF_CONFIG`` over free
localhost ports, as a cluster (Kubernetes' TFJob, SLURM) would start them on several machines.
For trying the multi-worker tools in a notebook or a class, and for the tests; every process
is waited for, within a time limit, and ended if it outlives it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds tfdiag_magic


@dataclass
class WorkerRun:
    """How one worker's process ended, and what it printed (stdout and stderr together)."""

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


def run_local_job(
    script: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    workers: int = 2,
    env_of: dict[int, dict[str, str]] | None = None,
    timeout_s: float = 240.0,
    options: tuple[str, ...] = (),
) -> list[WorkerRun]:
    """Run `script` as every worker of a `workers`-worker job, in `folder` (the reports go to
    ``folder/reports/``); `env_of` adds environment variables per worker index. Returns each
    worker's exit status and output once all have ended; a worker still running after
    `timeout_s` is killed, with every other, and its output ends with a line that says so.
    `options` go to each worker's ``profile`` command (``("--ops",)`` asks for each worker's
    ops window)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(workers)]}
    processes: list[subprocess.Popen[str]] = []
    try:
        for index in range(workers):
            env = dict(os.environ)
            task = {"type": "worker", "index": index}
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            paths = [str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
            env["PYTHONPATH"] = os.pathsep.join(paths)
            env.update((env_of or {}).get(index, {}))
            command = [sys.executable, "-m", "tfdiag_magic", "profile", "--json", "reports/"]
            command.extend(options)
            command.append(str(Path(script).resolve()))
            processes.append(
                subprocess.Popen(
                    command,
                    cwd=folder,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        deadline = time.monotonic() + timeout_s
        runs = []
        for index, process in enumerate(processes):
            try:
                output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                # A worker still running (one waiting in a collective for a peer that never
                # comes runs forever): every worker is stopped, and each run says what it
                # printed, so that the hang can be read.
                for other in processes:
                    if other.poll() is None:
                        other.kill()
                output, _ = process.communicate()
                output += f"\ntfdiag_magic: worker {index} ran past {timeout_s:g} s: killed\n"
            runs.append(WorkerRun(index, process.returncode, output))
        return runs
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
