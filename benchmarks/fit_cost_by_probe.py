"""Where `model.fit`'s added step time goes: the tool's probes switched off a group at a time.

Run: ``.venv/bin/python benchmarks/fit_cost_by_probe.py [--only | --keras-parts]``
(``ROUNDS=N``, default 14; ``STEP_MS``, default 0.9, the plain step it sizes the run for).

`hot_path.py`'s ``model.fit`` workload (its kernel-like shell, its model at batch 1, its step
timer) runs plainly and inside ``with tfdiag_magic.profile():`` with every probe, with none,
and with each group of `GROUPS` switched off; with ``--only``, each group alone on; with
``--keras-parts``, the Keras group alone, and alone with the recorder's row
(`Recorder.add_step`), the input meter's per-step work (`InputWaitMeter.step_done`) or both
made to do nothing. A probe switched off has its ``install``, ``remove`` and ``finish`` made
to do nothing for that run, so it hooks nothing. Every arm runs once per round, in an order
drawn at random (seeded), on one CPU; per arm, the median step of each run, and the median
over rounds of its difference from that round's plain run: the microseconds it adds per step.
Such runs record less than the tool does, so their reports are not read.

What it answers: whether the added time lies in one place. Measured on the quiet 2-CPU
development machine (0.82-0.84 ms plain steps, 14 rounds): every probe added 31-39 µs, none 3
µs or less; any one group switched off left 31-35 µs; alone, the Keras callbacks' group added
29 µs and the tf.function group 34 µs (without Keras' hooks, the train function's call is the
step the tool records), the memory/GC group and the others 3 µs each. So the time is the
recording of a step itself, whichever hook records it (a wrapper around Keras' batch hooks or
around the function's call, the row, the input meter), not one probe among many.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hot_path

ROUNDS = int(os.environ.get("ROUNDS", "14"))
STEP_S = float(os.environ.get("STEP_MS", "0.9")) / 1e3
# The probes `Session.start` installs, in groups by what they hook on a step's path.
GROUPS = {
    "memory, warnings, GC callbacks": ("MemoryProbe", "WarningsProbe", "GCProbe"),
    "tf.function calls, optimizer": ("TFFunctionProbe", "OptimizerProbe"),
    "Keras callbacks, models": ("KerasProbe", "KerasModelProbe"),
    "the others": (
        "LearningProbe",
        "DeviceConfigProbe",
        "HostConversionProbe",
        "DatasetWaitProbe",
        "WorkerProbe",
        "NVMLProbe",
        "CpuWaitProbe",
    ),
}


_ORIGINALS: dict[tuple[str, str], object] = {}  # each probe's own methods, kept at first use


def _switch(names: tuple[str, ...]) -> None:
    """Switch the probes `names` off, every other probe on (as the package defines them)."""
    from tfdiag_magic import session

    for group in GROUPS.values():
        for name in group:
            cls = getattr(session, name)
            for method in ("install", "remove", "finish"):
                original = _ORIGINALS.setdefault((name, method), getattr(cls, method))
                setattr(cls, method, original)
    for name in names:
        cls = getattr(session, name)
        cls.install = lambda self, rec: None
        cls.remove = lambda self: None
        cls.finish = lambda self, record: None


def _skip(row: bool, meter: bool) -> None:
    """Make the recorder's row (`Recorder.add_step`) and the input meter's per-step work
    (`InputWaitMeter.step_done`) do nothing, or do their work again."""
    from tfdiag_magic.probes.input_meter import InputWaitMeter
    from tfdiag_magic.recorder import Recorder

    for cls, method, skip in (
        (Recorder, "add_step", row),
        (InputWaitMeter, "step_done", meter),
    ):
        original = _ORIGINALS.setdefault((cls.__name__, method), getattr(cls, method))
        setattr(cls, method, (lambda self, *args, **kwargs: None) if skip else original)


def main() -> None:
    shell = hot_path.kernel_like_shell()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    hot_path.build(shell, 1)
    hot_path.length(shell, "model.fit", STEP_S)
    hot_path.settings(shell).live = False
    shell.user_ns["_switch"], shell.user_ns["_skip"] = _switch, _skip
    fit = hot_path.CELLS["model.fit"]
    body = "".join("        " + line + "\n" for line in fit.splitlines())
    every = tuple(name for group in GROUPS.values() for name in group)
    arms = {"plain": fit}
    switched = {"all probes": (), "no probe": every}
    skipped = {arm: (False, False) for arm in switched}
    if "--keras-parts" in sys.argv:  # the Keras group alone, less parts of its step
        keras_only = tuple(name for name in every if name not in GROUPS["Keras callbacks, models"])
        for label, parts in {
            "": (False, False),
            ", no row": (True, False),
            ", no input meter": (False, True),
            ", neither": (True, True),
        }.items():
            switched[f"only Keras{label}"] = keras_only
            skipped[f"only Keras{label}"] = parts
    elif "--only" in sys.argv:  # each group alone
        switched.update(
            {
                f"only {label}": tuple(name for name in every if name not in names)
                for label, names in GROUPS.items()
            }
        )
    else:
        switched.update({f"without {label}": names for label, names in GROUPS.items()})
    for arm, off in switched.items():
        row, meter = skipped.get(arm, (False, False))
        arms[arm] = (
            f"_switch({off!r})\n_skip({row}, {meter})\nimport tfdiag_magic\ntry:\n"
            f"    with tfdiag_magic.profile():\n{body}"
            "finally:\n    _switch(())\n    _skip(False, False)\n"
        )
    medians: dict[str, list[float]] = {arm: [] for arm in arms}
    rng = random.Random(3)
    for _ in range(ROUNDS):
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            outcome = shell.run_cell(arms[arm])
            if not outcome.success:
                raise SystemExit(f"{arm}: {outcome.error_in_exec or outcome.error_before_exec}")
            medians[arm].append(statistics.median(shell.user_ns["step_times"]) * 1e6)
    print_added(f"model.fit, median step per run, {ROUNDS} rounds, one CPU", medians)


def print_added(title: str, medians: dict[str, list[float]]) -> None:
    """Per arm, the median of its runs' median steps, and the median over rounds of its
    difference from that round's ``plain`` run (µs added per step)."""
    plain = medians["plain"]
    width = max(len(arm) for arm in medians) + 2
    print(title)
    print(f"{'arm':<{width}} {'median step':>12} {'µs added':>9}")
    for arm, values in medians.items():
        added = statistics.median(v - p for v, p in zip(values, plain, strict=True))
        print(f"{arm:<{width}} {statistics.median(values):>10.1f} µs {added:>+8.1f}")


if __name__ == "__main__":
    main()
