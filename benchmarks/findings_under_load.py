"""How often each workshop notebook's findings fire on a busy machine: every notebook run N
times with a CPU hog on one core (a Python busy loop pinned to the last CPU, as a neighbour on
Binder or a shared runner), and, for each run the notebook stores, how often its expected
finding fired and how often its fix resolved it.

Run: ``.venv/bin/python benchmarks/findings_under_load.py [-n 3] [--quiet] [NOTEBOOK ...]``

The expectations are tests/test_notebooks.py's (EXPECTED_FINDINGS, EXPECTED_RESOLVED), run the
way that test runs them (a real Jupyter kernel of this virtualenv, nbclient, the report cell).
``--quiet`` runs without the hog, for a baseline. A notebook run that fails counts as a miss for
all its findings. Each notebook takes 1-2 minutes a run on a 2-CPU machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.kernels import write_kernel_spec  # noqa: E402
from tests.test_notebooks import (  # noqa: E402
    EXPECTED_FINDINGS,
    EXPECTED_RESOLVED,
    KERNEL_NAME,
    NOTEBOOKS,
    execute,
)


def start_hog() -> subprocess.Popen:
    """A busy loop pinned to this machine's last CPU (it pins itself)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = f"import os; os.sched_setaffinity(0, {{{cpus[-1]}}})\n" if cpus else ""
    return subprocess.Popen([sys.executable, "-c", pin + "while True: pass"])


def tally(notebook: str, runs: int, kernels: Path, hog: bool) -> tuple[Counter, Counter, list]:
    """(findings fired, fixes that resolved, seconds per run) over `runs` runs."""
    fired: Counter = Counter()
    resolved: Counter = Counter()
    seconds: list[float] = []
    for _ in range(runs):
        neighbour = start_hog() if hog else None
        start = time.perf_counter()
        try:
            _, report, _ = execute(NOTEBOOKS / notebook, kernels)
        except Exception as error:  # a failed run is a miss for everything it should show
            print(f"  {notebook}: run failed: {type(error).__name__}: {str(error)[:300]}")
            report = {}
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait(timeout=10)
        seconds.append(time.perf_counter() - start)
        for name, code in EXPECTED_FINDINGS[notebook].items():
            fired[name, code] += code in report.get(name, {}).get("findings", [])
        for name, code in EXPECTED_RESOLVED[notebook].items():
            comparison = report.get(name, {}).get("comparison") or {}
            resolved[name, code] += code in comparison.get("resolved", [])
    return fired, resolved, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook file names (default: all)")
    parser.add_argument("-n", "--runs", type=int, default=3, help="runs per notebook")
    parser.add_argument("--quiet", action="store_true", help="no CPU hog (a baseline)")
    args = parser.parse_args()
    notebooks = args.notebooks or sorted(EXPECTED_FINDINGS)
    unknown = sorted(set(notebooks) - set(EXPECTED_FINDINGS))
    if unknown:
        parser.error(f"no expectations for {unknown}; known: {sorted(EXPECTED_FINDINGS)}")
    load = "quiet" if args.quiet else "CPU hog on one core"
    print(f"{args.runs} runs per notebook, {load}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as folder:
        kernels = write_kernel_spec(Path(folder), KERNEL_NAME, "tfdiag_magic load benchmark")
        for notebook in notebooks:
            fired, resolved, seconds = tally(notebook, args.runs, kernels, not args.quiet)
            print(f"{notebook}  ({min(seconds):.0f}-{max(seconds):.0f} s a run)")
            for (name, code), count in fired.items():
                print(f"  {name}: {code} fired {count}/{args.runs}")
            for (name, code), count in resolved.items():
                print(f"  {name}: {code} resolved by the fix {count}/{args.runs}")
            if not fired and not resolved:
                print("  (no findings expected)")


if __name__ == "__main__":
    main()
