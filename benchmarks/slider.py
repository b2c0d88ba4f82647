"""Time a range-slider move on the dashboard of a 100 000- and a 1 000 000-step run.

Run: ``.venv/bin/python benchmarks/slider.py [STEPS ...]`` (default: 100000 1000000);
``--text-tiles`` instead compares, in one process and interleaved, moves with the figures' text
pasted from kept tiles (`views/text_stamps.py`, as the dashboard draws) and drawn by
matplotlib each time (4 rounds of 21 moves each way, per size); ``--lean-axes`` the same for
the axes drawn without measuring their tick labels (`dash_figures.draw_axis`) and by
matplotlib's `Axis.draw`.

For each size: the synthetic record of ``benchmarks/render.py`` (no TensorFlow), its dashboard,
then the slider moved as a hand moves it, to windows of three kinds, REPEATS of each in turn:
wide (most of the run), half, and narrow (3 000 steps). A move is what the widget runs when the
slider's value changes, with the Steps tab open: the window's statistics, the step-time plot,
the table's page.
Printed per kind: the median wall time and the median CPU time of this process. The machine
may be shared: under load, wall time is CPU time plus waiting for a CPU, so the load average is
printed with them. Last, the median of all moves against the target: 50 ms at 100 000 steps,
100 ms at 1 000 000.
"""

from __future__ import annotations

import os
import statistics
import sys
from time import perf_counter, process_time

from render import synthetic_result

from tfdiag_magic.views import dash_figures
from tfdiag_magic.views.dashboard import Dashboard

REPEATS = 7
TARGET_MS = {100_000: 50.0, 1_000_000: 100.0}
NARROW = 3000


def windows(last: int) -> list[tuple[str, tuple[int, int]]]:
    """REPEATS windows of each kind, the kinds in turn, every window a new one."""
    moves = []
    for i in range(REPEATS):
        moves.append(("wide", (1000 + 17 * i, last - 1000 - 23 * i)))
        moves.append(("half", (last // 4 + 37 * i, 3 * last // 4 - 53 * i)))
        start = (last - NARROW) * (i + 1) // (REPEATS + 1)
        moves.append(("narrow", (start, start + NARROW)))
    return moves


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (1 min) {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def bench(steps: int) -> float:
    result = synthetic_result(steps)
    dashboard = Dashboard(result)
    try:
        dashboard.tab.selected_index = dashboard.titles.index("Steps")
        last = dashboard.slider.max
        print(f"{result.record.step_count} steps ({steps} training); {load()}")
        start = perf_counter()
        dashboard.slider.value = (500, last - 500)  # the first move builds nothing more
        print(f"  first move                     {(perf_counter() - start) * 1e3:7.1f} ms")
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        for kind, window in windows(last):
            start, start_cpu = perf_counter(), process_time()
            dashboard.slider.value = window
            wall.setdefault(kind, []).append((perf_counter() - start) * 1e3)
            cpu.setdefault(kind, []).append((process_time() - start_cpu) * 1e3)
        for kind in wall:
            print(
                f"  {kind:<6} windows, median of {REPEATS}: {statistics.median(wall[kind]):7.1f} ms"
                f"  (CPU {statistics.median(cpu[kind]):.1f} ms, "
                f"min {min(wall[kind]):.1f} ms, max {max(wall[kind]):.1f} ms)"
            )
        every = [t for times in wall.values() for t in times]
        every_cpu = [t for times in cpu.values() for t in times]
        median = statistics.median(every)
        target = TARGET_MS.get(steps)
        verdict = "" if target is None else f"  target {target:.0f} ms -> "
        if target is not None:
            verdict += "ok" if median <= target else "OVER"
        print(
            f"  window change, all {len(every)} moves: median {median:.1f} ms "
            f"(CPU {statistics.median(every_cpu):.1f} ms){verdict}; {load()}"
        )
        return median
    finally:
        dashboard.close()


class _Unstamped:
    """Stands for `TextStamps`: no tiles, matplotlib draws every text each time."""

    @staticmethod
    def install(renderer: object) -> None:
        return None


def _matplotlib_axis(axis: object, renderer: object) -> None:
    """Stands for `draw_axis`: matplotlib's own `Axis.draw`, every tick label measured."""
    axis.draw(renderer)  # type: ignore[attr-defined]


# What each A/B compares: the module attribute switched, the dashboard's and the stand-in.
AB = {
    "--text-tiles": ("TextStamps", _Unstamped, "text from tiles", "text drawn each time"),
    "--lean-axes": ("draw_axis", _matplotlib_axis, "axes unmeasured", "axes by matplotlib"),
}


def interleaved(steps: int, option: str, rounds: int = 4) -> None:
    """Median CPU time of a move with the dashboard's way and with matplotlib's (the `AB`
    entry of `option`), interleaved round by round (the order alternating), so that the
    machine's drift falls on both alike."""
    name, stand_in, label_ours, label_theirs = AB[option]
    result = synthetic_result(steps)
    ours = getattr(dash_figures, name)
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for round_ in range(rounds):
            for mine in (True, False) if round_ % 2 else (False, True):
                setattr(dash_figures, name, ours if mine else stand_in)
                dash_figures._warm_figures.clear()  # figures built again, one way or the other
                dashboard = Dashboard(result)
                try:
                    dashboard.tab.selected_index = dashboard.titles.index("Steps")
                    last = dashboard.slider.max
                    dashboard.slider.value = (500, last - 500)
                    for _kind, window in windows(last):
                        start = process_time()
                        dashboard.slider.value = window
                        times[mine].append((process_time() - start) * 1e3)
                finally:
                    dashboard.close()
    finally:
        setattr(dash_figures, name, ours)
        dash_figures._warm_figures.clear()
    for mine, label in ((True, label_ours), (False, label_theirs)):
        print(
            f"{steps} steps, {label:<21} median {statistics.median(times[mine]):6.1f} ms CPU"
            f" over {len(times[mine])} moves; {load()}"
        )


def main() -> int:
    sizes = [int(arg) for arg in sys.argv[1:] if not arg.startswith("--")]
    for steps in sizes or [100_000, 1_000_000]:
        options = [option for option in AB if option in sys.argv]
        for option in options:
            interleaved(steps, option)
        if not options:
            bench(steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
