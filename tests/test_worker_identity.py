"""Which worker of a job a run is, read from the environment as TensorFlow's cluster resolvers
read it (`probes/worker.py`)."""

from __future__ import annotations

import json

from tfdiag_magic.probes.worker import worker_identity


def test_tf_config_names_the_task_and_counts_the_training_tasks():
    config = {
        "cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]},
        "task": {"type": "worker", "index": 1},
    }
    assert worker_identity({"TF_CONFIG": json.dumps(config)}) == {
        "task_type": "worker",
        "task_index": 1,
        "workers": 3,  # chief and workers train; a parameter server does not
        "source": "TF_CONFIG",
    }


def test_slurm_tasks_when_there_is_no_tf_config():
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4"}
    assert worker_identity(env) == {
        "task_type": "worker",
        "task_index": 3,
        "workers": 4,
        "source": "SLURM",
    }
    assert worker_identity({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None  # one task


def test_no_worker_for_a_run_on_one_machine_or_a_config_that_is_not_one():
    assert worker_identity({}) is None
    assert worker_identity({"TF_CONFIG": "{not json"}) is None
    assert worker_identity({"TF_CONFIG": json.dumps({"cluster": {}})}) is None  # no task
    assert worker_identity({"TF_CONFIG": "  "}) is None
