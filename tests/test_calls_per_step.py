"""The tool's hot path, held by counts: the Python calls it adds per training step, and the
bytecode instructions its own code runs per step.

A count, not a time, so a busy neighbour cannot make it fail: cProfile counts every call the
main thread makes (builtins included) while a cell runs plainly and under ``%%tfprofile``, at
two lengths; the difference of the slopes is what the tool adds per step. The workloads and
the measure are `benchmarks/calls_per_step.py`'s, which prints the same numbers. Memory
samples, time-based, are kept out of the counted runs (``--memory-interval 3600``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "calls_per_step.py"
_SPEC = importlib.util.spec_from_file_location("calls_per_step", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@pytest.fixture(scope="module")
def shell():
    """The process's shell with the live view off while these tests count; on again after, as
    later tests in the process expect it (the shell is the process's one instance)."""
    shell = bench.shell_with_workloads()
    try:
        yield shell
    finally:
        shell.run_line_magic("config", "TFProfile.live = True")


@pytest.mark.parametrize("workload", list(bench.WORKLOADS))
def test_the_tool_adds_at_most_twelve_calls_per_step(shell, workload):
    row = bench.measure(shell, workload)
    assert row["plain"] > 20  # the count sees the workload's own calls: it can fail
    assert row["added"] <= bench.TARGET, row


@pytest.mark.parametrize("workload", list(bench.WORKLOADS))
def test_the_tools_own_code_runs_few_instructions_per_step(shell, workload):
    """Between real steps each instruction of the hot path costs tens of nanoseconds, so this
    count follows the time the tool adds; each workload has its bound (the benchmark's count
    for the code it guards, plus a tenth)."""
    per_step = bench.instructions_per_step(shell, workload)
    assert per_step > 50  # the count sees the tool's hot path: it can fail
    assert per_step <= bench.INSTRUCTIONS_MOST[workload], per_step
