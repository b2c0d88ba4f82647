"""Where a custom loop's added step time goes: parts of the hot path made to do nothing.

Run: ``.venv/bin/python benchmarks/loop_cost_by_part.py`` (``ROUNDS=N``, default 12;
``STEP_MS``, default 0.9, the plain step it sizes the run for).

`hot_path.py`'s ``tf.function loop`` workload (its kernel-like shell, its model, the cell that
times its own steps) runs plainly and under ``%%tfprofile -q`` (live view off): with the whole
tool, and with parts of a step's path made to do nothing for that run:

- ``no row``: `Recorder.add_step` (the step's row, its loss kept to be read later);
- ``no iteration``: `Recorder.next_item` (the loop iteration's two clock reads, its waits);
- ``bare wrapper``: the tf.function probe's wrapper replaced by one that only reads the clock
  around the call (so no row either);
- ``bare wrapper, no iteration``: both; what is left is the loop's instrumented iterator and
  everything else the magic runs;
- ``magic alone``: no probe installed at all (each one's ``install``, ``remove`` and
  ``finish`` do nothing, the loop's hooks stay idle, so the loop iterates plainly): the run's
  own machinery, the floor that no change to the hot path can remove.

Every arm runs once per round, in an order drawn at random (seeded), on one CPU; per arm, the
median step of each run, and the median over rounds of its difference from that round's plain
run: the microseconds it adds per step. Such runs record less than the tool does (an arm
without rows has no steps to report), so their reports are not read.

What it answers: how the custom loop's added time splits between the tool's wrapper around the
function call, the row, and the loop iteration (README, Overhead). On the quiet 2-CPU
development machine (0.98 ms plain steps, 12 rounds): the whole tool added 34.9 µs, without
the row 26.1, without the iteration 37.1, with the bare wrapper 14.5, and with the bare wrapper
and no iteration 14.9. So the wrapper and its row cost about 20 µs (the row about 9), and the
iteration's notes too little to tell from the noise (an earlier run of the same arms read 9.7
µs for it: differences of a few µs between arms are within the noise of 12 rounds). A later
run with the ``magic alone`` arm (0.99 ms plain steps, 12 rounds): whole tool +29.7, no row
+24.7, no iteration +33.4, bare wrapper +19.7, bare wrapper and no iteration +10.9, magic
alone +4.3.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
from pathlib import Path
from time import perf_counter
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hot_path
from fit_cost_by_probe import GROUPS, print_added
from fit_cost_by_probe import _switch as switch_probes

from tfdiag_magic.probes.loops import LoopProbe
from tfdiag_magic.probes.model_calls import ModelCallProbe
from tfdiag_magic.probes.tf_functions import TFFunctionProbe
from tfdiag_magic.recorder import Recorder

ROUNDS = int(os.environ.get("ROUNDS", "12"))
STEP_S = float(os.environ.get("STEP_MS", "0.9")) / 1e3
WORKLOAD = "tf.function loop"
ARMS = {
    "whole tool": (),
    "no row": ("row",),
    "no iteration": ("iteration",),
    "bare wrapper": ("wrapper",),
    "bare wrapper, no iteration": ("wrapper", "iteration"),
    "magic alone": ("probes",),
}
EVERY_PROBE = tuple(name for group in GROUPS.values() for name in group)
_ORIGINALS = {
    "row": Recorder.add_step,
    "iteration": Recorder.next_item,
    "wrapper": TFFunctionProbe.__dict__["_call_wrapper"],
    "loops": (LoopProbe.install, LoopProbe.remove, LoopProbe.finish),
    "model calls": (ModelCallProbe.install, ModelCallProbe.remove, ModelCallProbe.finish),
}


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _bare_wrapper(rec: Any, original: Any) -> Any:
    """A wrapper around `Function.__call__` that reads the clock around the call, no more."""

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = perf_counter()
        result = original(self, *args, **kwargs)
        del start
        perf_counter()
        return result

    return call


def _switch(parts: tuple[str, ...]) -> None:
    """Make `parts` do nothing for the next run; every other part is the package's own."""
    Recorder.add_step = _nothing if "row" in parts else _ORIGINALS["row"]
    Recorder.next_item = _nothing if "iteration" in parts else _ORIGINALS["iteration"]
    TFFunctionProbe._call_wrapper = (
        staticmethod(_bare_wrapper) if "wrapper" in parts else _ORIGINALS["wrapper"]
    )
    switch_probes(EVERY_PROBE if "probes" in parts else ())
    off = "probes" in parts
    LoopProbe.install, LoopProbe.remove, LoopProbe.finish = (
        (_nothing, _nothing, _nothing) if off else _ORIGINALS["loops"]
    )
    ModelCallProbe.install, ModelCallProbe.remove, ModelCallProbe.finish = (
        (_nothing, _nothing, _nothing) if off else _ORIGINALS["model calls"]
    )


def main() -> None:
    shell = hot_path.kernel_like_shell()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    hot_path.settings(shell).live = False
    hot_path.build(shell, 170)
    hot_path.length(shell, WORKLOAD, STEP_S)
    cell = hot_path.CELLS[WORKLOAD]
    medians: dict[str, list[float]] = {arm: [] for arm in ("plain", *ARMS)}
    rng = random.Random(5)
    for _ in range(ROUNDS):
        order = list(medians)
        rng.shuffle(order)
        for arm in order:
            _switch(ARMS.get(arm, ()))
            try:
                outcome = shell.run_cell(cell if arm == "plain" else "%%tfprofile -q\n" + cell)
            finally:
                _switch(())
            if not outcome.success:
                raise SystemExit(f"{arm}: {outcome.error_in_exec or outcome.error_before_exec}")
            medians[arm].append(statistics.median(shell.user_ns["step_times"][1:]) * 1e6)
    print_added(f"{WORKLOAD}, median step per run, {ROUNDS} rounds, one CPU", medians)


if __name__ == "__main__":
    main()
