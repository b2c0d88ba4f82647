"""Time to render the dashboard and the static HTML report of a 100 000-step run.

Run: ``.venv/bin/python benchmarks/render.py [STEPS]``.

The record is built by hand (no TensorFlow): STEPS training steps of ~2 ms with noise, spikes
and a slow drift, 10 epochs, traced warm-up steps, a validation pass per epoch, data waits,
memory samples every 50 steps. Each view is built REPEATS times; the median is printed. The
target is under one second for the dashboard with every tab drawn.
"""

from __future__ import annotations

import statistics
import sys
from time import perf_counter

import numpy as np

from tfdiag_magic.findings import Finding
from tfdiag_magic.record import KINDS, PHASES, STEP_COLUMNS, Record
from tfdiag_magic.result import ProfileResult

REPEATS = 5


def synthetic_record(steps: int = 100_000, epochs: int = 10, seed: int = 0) -> Record:
    """A run of `steps` training steps (plus 5 % validation steps), as a session would record."""
    rng = np.random.default_rng(seed)
    val_per_epoch = max(1, steps // epochs // 20)
    per_epoch = steps // epochs
    phase, epoch = [], []
    for e in range(epochs):
        phase += [PHASES.index("train")] * per_epoch + [PHASES.index("eval")] * val_per_epoch
        epoch += [e] * (per_epoch + val_per_epoch)
    n = len(phase)
    duration = 0.002 * (1 + 0.1 * rng.standard_normal(n)).clip(0.5) * np.linspace(1, 1.3, n)
    duration[rng.integers(0, n, n // 500)] *= 8  # spikes
    duration[:3] = 0.4  # tracing
    gaps = 0.0002 + 0.00005 * rng.random(n)
    start = np.concatenate(([0.0], np.cumsum(duration + gaps)[:-1]))
    columns = {name: np.zeros(n, dtype=dtype) for name, dtype in STEP_COLUMNS.items()}
    columns.update(
        start=start,
        duration=duration,
        data_wait=gaps * 0.8,
        phase=np.array(phase, dtype=np.uint8),
        kind=np.full(n, KINDS.index("tf_function"), dtype=np.uint8),
        epoch=np.array(epoch, dtype=np.int32),
        loss=np.linspace(2.0, 0.1, n).astype(np.float32),
        fused=np.ones(n, dtype=np.uint16),
        loop=np.full(n, -1, dtype=np.int16),
        traced=np.zeros(n, dtype=bool),
    )
    columns["traced"][:3] = True
    columns["traced"][per_epoch] = True
    mem_rows = np.arange(0, n, 50)
    mem_time = start[mem_rows]
    rss = (800 + 200 * np.linspace(0, 1, mem_rows.size) + rng.random(mem_rows.size)) * 2**20
    memory = {
        "time": mem_time,
        "step": mem_rows.astype(np.int64),
        "rss": rss.astype(np.int64),
    }
    wall = float(start[-1] + duration[-1] + 0.5)
    return Record(
        steps=columns,
        memory=memory,
        wall_time=wall,
        started_at="2024-01-01T00:00:00+00:00",
        source="model.fit(x, y, epochs=10)\n",
        facts={"tfdiag_magic": "bench", "gpus": [], "nvml": "NVML not available"},
    )


def synthetic_result(steps: int = 100_000) -> ProfileResult:
    result = ProfileResult(label="bench", record=synthetic_record(steps))
    result.findings = [
        Finding(
            code="retracing",
            severity="warning",
            title="train_step was traced 11 times",
            detail="Each trace costs ~0.4 s.",
            fix="Give the tf.function an input_signature.",
            evidence={"traces": 11},
            rewrite="model.fit(x, y, epochs=10, steps_per_execution=8)\n",
            diff="--- cell\n+++ rewrite\n@@ -1 +1 @@\n-model.fit(x, y, epochs=10)\n"
            "+model.fit(x, y, epochs=10, steps_per_execution=8)\n",
            impact=4.4,
        )
    ]
    return result


def timed(label: str, build) -> float:
    times = []
    for _ in range(REPEATS):
        t = perf_counter()
        build()
        times.append(perf_counter() - t)
    median = statistics.median(times)
    print(f"{label:<46} median {median * 1e3:7.1f} ms   (min {min(times) * 1e3:.1f} ms)")
    return median


def _move(dash, window: tuple[int, int]) -> None:
    dash.slider.value = window


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    result = synthetic_result(steps)
    print(f"{result.record.step_count} steps ({steps} training), {REPEATS} builds each")
    from tfdiag_magic.views.dashboard import Dashboard, dashboard_bundle

    timed("static HTML fragment (notebook fallback)", lambda: result.to_html(full_page=False))
    timed("self-contained HTML report (tabs)", lambda: result.to_html(full_page=True))
    timed("dashboard widgets alone, every tab drawn", lambda: Dashboard(result).close())
    worst = timed(
        "cell output: dashboard + static HTML + text",
        lambda: dashboard_bundle(result)[1].close(),
    )
    dash = Dashboard(result)
    last = dash.slider.max
    windows = iter([(1000 + i, last - 1000 - i) for i in range(REPEATS)])
    timed("range slider moved: window stats + Steps plot", lambda: _move(dash, next(windows)))
    dash.close()
    print(f"target: cell output under 1 s -> {'ok' if worst < 1.0 else 'OVER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
