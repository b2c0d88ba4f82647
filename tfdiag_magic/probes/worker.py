"""Which worker of a multi-worker job a run is (``facts["worker"]``).

Read from the environment at the run's end, as TensorFlow's cluster resolvers read it when the
strategy is made (a script often sets ``TF_CONFIG`` itself, before making its strategy):
``TF_CONFIG`` (`TFConfigClusterResolver`; Kubernetes' TFJob sets it), else SLURM's task
variables (`SlurmClusterResolver`: ``SLURM_PROCID`` of ``SLURM_NTASKS``). None for a run on
one machine. Nothing is imported or called: a job's collectives are left alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..record import Record
from ..recorder import Recorder

# Task types that run training steps in TensorFlow's multi-worker strategies.
_TRAINING_TASKS = ("chief", "worker")


class WorkerProbe:
    name = "worker"

    def install(self, recorder: Recorder) -> None:
        del recorder

    def remove(self) -> None:
        pass

    def finish(self, record: Record) -> None:
        identity = worker_identity(os.environ)
        if identity is not None:
            record.facts["worker"] = identity


def worker_identity(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """{"task_type", "task_index", "workers", "source"} of this process in its job, or None."""
    text = environ.get("TF_CONFIG", "").strip()
    if text:
        try:
            config = json.loads(text)
            task = config.get("task") or {}
            cluster = config.get("cluster") or {}
            task_type, index = str(task["type"]), int(task.get("index", 0))
            workers = sum(len(cluster.get(kind) or []) for kind in _TRAINING_TASKS)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return {
            "task_type": task_type,
            "task_index": index,
            "workers": workers,
            "source": "TF_CONFIG",
        }
    try:
        index, tasks = int(environ["SLURM_PROCID"]), int(environ["SLURM_NTASKS"])
    except (KeyError, ValueError):
        return None
    if tasks < 2:
        return None
    return {"task_type": "worker", "task_index": index, "workers": tasks, "source": "SLURM"}
