"""Helpers for running cells in the test shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_cell(ip, source: str):
    """Run a cell as IPython would and return its ExecutionResult."""
    return ip.run_cell(source, store_history=True)


def profiled(ip, body: str, options: str = "-q -o r"):
    """Run ``%%tfprofile OPTIONS`` over `body`; return (ExecutionResult, ProfileResult)."""
    result = run_cell(ip, f"%%tfprofile {options}\n{body}")
    return result, ip.user_ns.get("r")


def profiled_script(folder: Path, name: str, source: str) -> tuple[dict, str, Path]:
    """Profile `source` as the script `folder/name` in a process of its own (``python -m
    tfdiag_magic profile``): memory measures that depend on what a process did before (freed
    memory reused, kernels cached) start fresh. Returns (JSON report, stdout, script path);
    fails the test, with the script's stderr, if it did not exit 0."""
    script = folder / name
    script.write_text(source)
    report_path = folder / f"{script.stem}.json"
    done = subprocess.run(
        [sys.executable, "-m", "tfdiag_magic", "profile", "--json", str(report_path), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report_path.read_text()), done.stdout, script


# An op that fails when its graph runs: TensorFlow's message lists where the op was "defined
# at" (most recent call last), through the tool's call of the tf.function and the cell's
# runner (tests/test_faithful_cells.py, and as a script tests/test_faithful_cli.py).
FAILING_OP_IN_A_FUNCTION = """\
import tensorflow as tf

@tf.function
def pick(x):
    return tf.gather(x, 5)

for step in range(2):
    pick(tf.range(3))
"""


# The deepest recursion Python allows from where the code runs, found by halving: a tool's
# frames under the code would make it shallower (tests/test_faithful_cli.py, _cells.py).
DEEPEST_RECURSION = """\
def go(n):
    return 0 if n == 0 else 1 + go(n - 1)

def deepest():
    low, high = 0, 5000
    while low < high:
        middle = (low + high + 1) // 2
        try:
            go(middle)
            low = middle
        except RecursionError:
            high = middle - 1
    return low
"""
