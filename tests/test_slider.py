"""The range slider's fast path: the same numbers and the same picture as the straightforward
computation, at a cost that does not grow with the run.

A window's statistics come from `WindowIndex` (slices of arrays laid out once, medians from one
sorted order); they are compared, float for float, with `window_stats` on real profiled runs and
on long synthetic ones. The Steps plot is kept between windows (`StepsFigure`); a window's PNG
is compared, byte for byte, with one drawn on a fresh figure. The guards count what a window
change must not do any more (build a figure, partition a long window, thin by a pass over every
step) rather than time it: counts hold on a busy machine, times do not.
"""

from __future__ import annotations

import io
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import profiled
from tfdiag_magic.views import dash_figures, dash_model
from tfdiag_magic.views.dash_figures import StepsFigure, encode_png, steps_png
from tfdiag_magic.views.dash_model import WindowIndex, step_series, window_stats
from tfdiag_magic.views.dash_plots import StepPlotOptions
from tfdiag_magic.views.dashboard import Dashboard
from tfdiag_magic.views.downsample import column_extremes, minmax_columns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from render import synthetic_record, synthetic_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

FIT = (
    "import numpy as np, keras\n"
    "x = np.random.default_rng(0).normal(size=(256, 4)).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True)\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
    "model.compile(optimizer='sgd', loss='mse')\n"
    "model.fit(x, y, batch_size=8, epochs=3, validation_split=0.25, verbose=0)\n"
)
# A loop of the cell's own over a tf.function: loop rows with data waits, function rows without.
LOOP = (
    "import tensorflow as tf\n"
    "step = tf.function(lambda v: v * 2.0)\n"
    "batches = [tf.constant(float(i)) for i in range(120)]\n"
    "for batch in batches:\n"
    "    step(batch)\n"
)


def windows(count: int, rng: np.random.Generator, random: int = 40) -> list[tuple[int, int]]:
    last = count - 1
    edges = [(0, last), (0, 0), (last, last), (1, last - 1), (last // 2, last // 2 + 1)]
    pairs = [tuple(sorted(int(v) for v in rng.integers(0, count, 2))) for _ in range(random)]
    return edges + pairs  # type: ignore[return-value]


@pytest.mark.parametrize("body", [FIT, LOOP], ids=["fit", "custom-loop"])
@pytest.mark.parametrize("sorted_order", [False, True], ids=["partition", "sorted-order"])
def test_window_index_gives_window_stats_exactly_on_real_runs(ip, monkeypatch, body, sorted_order):
    if sorted_order:  # the sorted-order medians on every phase, however short
        monkeypatch.setattr(dash_model, "ORDER_INDEX_MIN", 1)
    result, r = profiled(ip, body)
    assert result.success
    series = step_series(r.record)
    assert series.count > 50
    index = WindowIndex(series)
    every = [(lo, hi) for lo in range(0, series.count, 7) for hi in range(lo, series.count, 11)]
    for lo, hi in every + windows(series.count, np.random.default_rng(0)):
        assert index.stats(lo, hi) == window_stats(series, lo, hi), (lo, hi)


def test_window_index_gives_window_stats_exactly_on_long_runs():
    record = synthetic_record(150_000)
    # Some steps whose input wait was not seen, and a step of zero time.
    rng = np.random.default_rng(3)
    record.steps["data_wait"][rng.integers(0, record.step_count, 5000)] = np.nan
    record.steps["duration"][777] = 0.0
    series = step_series(record)
    index = WindowIndex(series)
    assert index.phases["train"].sortable  # 142 000 steady steps: medians from the sorted order
    for lo, hi in windows(series.count, rng):
        assert index.stats(lo, hi) == window_stats(series, lo, hi), (lo, hi)


@pytest.mark.parametrize("size", [*range(1, 40), 100, 101, 1000, 1001, 4567])
def test_medians_and_percentiles_from_sorted_values_are_numpys_bit_for_bit(size):
    rng = np.random.default_rng(size)
    for values in (rng.random(size), rng.integers(0, 5, size).astype(np.float64) * 0.1):
        ordered = np.sort(values)

        def kth(k: int, ordered: np.ndarray = ordered) -> float:
            return ordered[k]

        assert dash_model._median_of_sorted(kth, size) == float(np.median(values))
        for q in (90, 50, 10, 99):
            expected = float(np.percentile(values, q))
            assert dash_model._percentile_of_sorted(kth, size, q) == expected


def test_column_extremes_are_minmax_columns_without_a_pass_over_x():
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(2000, 30_000))
        if trial % 3 == 0:
            x = np.sort(rng.choice(10**6, n, replace=False)).astype(np.float64)
        elif trial % 3 == 1:
            x = np.sort(np.round(rng.random(n) * 300) - 0.5)  # repeated values
        else:
            x = np.sort(rng.random(n) * 1e4)
        y = rng.normal(size=n)
        columns = int(rng.integers(5, 1300))
        lo, hi = float(x[0]) - rng.random() * 3, float(x[-1]) + rng.random() * 3
        if x.size <= 4 * columns:
            continue
        px, py = minmax_columns(x, y, columns, lo, hi)
        expected = (px[0::4], py[0::4], px[3::4], py[3::4], py[1::4], py[2::4])
        for got, want in zip(column_extremes(x, y, columns, lo, hi), expected, strict=True):
            assert np.array_equal(got, want), trial


def test_png_encoder_round_trips():
    from PIL import Image

    rgba = np.random.default_rng(0).integers(0, 256, (37, 53, 4), dtype=np.uint8)
    png = encode_png(rgba)
    assert png.startswith(PNG_MAGIC)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png))), rgba)


def test_a_kept_figure_draws_what_a_fresh_one_draws_whatever_came_before():
    series = step_series(synthetic_record(30_000))
    last = series.count - 1
    phases = set(series.phases)
    views = [
        ((0, last), StepPlotOptions(phases=phases, log=True)),  # bands
        ((500, 900), StepPlotOptions(phases=phases, log=False)),  # lines
        ((2800, 3300), StepPlotOptions(phases=phases, log=True)),  # both phases, an epoch
        ((0, last), StepPlotOptions(phases={"train"}, median=False, data_wait=False)),
        ((10, 10), StepPlotOptions(phases=phases, log=True)),
        ((0, last), StepPlotOptions(phases=set(), log=False)),
    ]
    figure = StepsFigure(WindowIndex(series))
    try:
        first = [figure.png(lo, hi, options) for (lo, hi), options in views]
        again = [figure.png(lo, hi, options) for (lo, hi), options in reversed(views)][::-1]
        fresh = [steps_png(series, lo, hi, options) for (lo, hi), options in views]
    finally:
        figure.release()
    assert all(png.startswith(PNG_MAGIC) for png in first)
    assert len(set(first)) == len(views)
    assert first == again == fresh


def test_kept_figures_stay_few_and_one_let_go_is_built_again():
    series = step_series(synthetic_record(5_000))
    options = StepPlotOptions(phases=set(series.phases), log=True)
    figures = [StepsFigure(WindowIndex(series)) for _ in range(dash_figures.MAX_WARM_FIGURES + 2)]
    try:
        pictures = [f.png(100, 4000, options) for f in figures]
        assert len(dash_figures._warm_figures) <= dash_figures.MAX_WARM_FIGURES
        assert all(live.released for live in figures[0]._figures.values())
        assert figures[0].png(100, 4000, options) == pictures[0]
    finally:
        for f in figures:
            f.release()
    assert not any(id(live) in dash_figures._warm_figures for f in figures for live in f._figures)


class _Counting:
    """Counts calls of functions (by name), with the size of their first argument."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        self.sizes: dict[str, list[int]] = {}
        self.monkeypatch = monkeypatch

    def watch(self, owner: object, name: str, label: str) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.calls[label] += 1
            if args and hasattr(args[0], "size"):
                self.sizes.setdefault(label, []).append(int(np.size(args[0])))
            return original(*args, **kwargs)

        self.monkeypatch.setattr(owner, name, counted)


def test_a_window_change_builds_no_figure_and_never_sorts_or_thins_the_whole_run(monkeypatch):
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    result = synthetic_result(100_000)
    dashboard = Dashboard(result)
    try:
        last = dashboard.slider.max
        counting = _Counting(monkeypatch)
        for name in ("median", "percentile", "partition", "sort", "argsort"):
            counting.watch(np, name, name)
        counting.watch(Figure, "__init__", "Figure")
        counting.watch(Axes, "__init__", "Axes")
        counting.watch(dash_figures, "minmax_columns", "minmax_columns")
        counting.watch(dash_model, "window_stats", "window_stats")
        counting.watch(dash_model, "step_numbers", "step_numbers")
        before = dashboard.steps_image.value
        for i, window in enumerate([(100, last - 100), (1000, 90_000), (0, last), (5000, 5600)]):
            dashboard.slider.value = window
            assert f"Steps {window[0]}–{window[1]}" in dashboard.window.value, i
        assert dashboard.steps_image.value != before
        assert bytes(dashboard.steps_image.value).startswith(PNG_MAGIC)
        # No figure or axes built again, no thinning by a pass over each step, no mask over
        # the run per phase, and no sort at all: the sorted order was made with the dashboard.
        for name in ("Figure", "Axes", "minmax_columns", "window_stats", "step_numbers"):
            assert counting.calls[name] == 0, name
        assert counting.calls["sort"] == counting.calls["argsort"] == 0
        # Medians by partition only for the short phase (5 000 validation steps), never for
        # the 95 000 training steps of a long window.
        partitioned = [
            n
            for name in ("median", "percentile", "partition")
            for n in counting.sizes.get(name, [])
        ]
        assert partitioned and max(partitioned) < dash_model.ORDER_INDEX_MIN
    finally:
        dashboard.close()
    assert not dashboard.steps_figure._figures  # closing the dashboard lets its figures go


def test_the_dashboard_shows_the_static_reports_picture_of_its_window():
    result = synthetic_result(20_000)
    dashboard = Dashboard(result)
    try:
        dashboard.slider.value = (1234, 15_000)
        expected = steps_png(dashboard.series, 1234, 15_000, dashboard.options)
        assert bytes(dashboard.steps_image.value) == expected
        assert dashboard.stats == window_stats(dashboard.series, 1234, 15_000)
    finally:
        dashboard.close()


def _with_gpus(steps: int) -> object:
    """A synthetic run with two GPUs: NVML samples, TensorFlow's device memory, CPU tensors."""
    from dataclasses import replace

    record = synthetic_record(steps)
    rng = np.random.default_rng(11)
    end = float(record.steps["start"][-1])
    times = np.sort(rng.random(steps // 20) * end)
    nvml = {"time": times}
    for device in ("gpu0", "gpu1"):
        nvml[f"{device}:util"] = rng.random(times.size) * 100
        nvml[f"{device}:mem_used"] = (2 + rng.random(times.size)) * 2**30
        nvml[f"{device}:power_w"] = 80 + rng.random(times.size) * 200
    nvml["gpu1:util"][::7] = np.nan  # samples that could not be read
    samples = record.memory["rss"].size
    memory = {
        **record.memory,
        "cpu_tensors": np.arange(samples, dtype=np.int64) << 16,
        "gpu:GPU:0:current": (np.arange(samples, dtype=np.int64) << 18) + 2**30,
    }
    return replace(record, nvml=nvml, memory=memory)


def test_memory_and_gpu_plots_kept_draw_what_fresh_ones_draw():
    from tfdiag_magic.views.dash_figures import GpuFigure, MemoryFigure, gpu_png, memory_png

    series = step_series(_with_gpus(20_000))
    last = series.count - 1
    windows_seen = [(0, last), (300, 900), (5000, 5003), (12_000, last), (7, 7)]
    memory, gpu = MemoryFigure(series), GpuFigure(series)
    try:
        kept = [(memory.png(lo, hi), gpu.png(lo, hi)) for lo, hi in windows_seen]
        again = [(memory.png(lo, hi), gpu.png(lo, hi)) for lo, hi in reversed(windows_seen)]
    finally:
        memory.release()
        gpu.release()
    fresh = [(memory_png(series, lo, hi), gpu_png(series, lo, hi)) for lo, hi in windows_seen]
    assert all(m.startswith(PNG_MAGIC) and g.startswith(PNG_MAGIC) for m, g in kept)
    assert len({m for m, _ in kept}) == len(windows_seen)
    assert len({g for _, g in kept}) == 3  # windows with fewer than 2 samples show them all
    assert kept == again[::-1] == fresh


def test_a_window_change_on_the_memory_and_gpu_tabs_builds_no_figure(monkeypatch):
    from matplotlib.figure import Figure

    from tfdiag_magic.result import ProfileResult

    dashboard = Dashboard(ProfileResult(label="gpus", record=_with_gpus(20_000)))
    try:
        counting = _Counting(monkeypatch)
        counting.watch(Figure, "__init__", "Figure")
        for tab in ("Memory", "GPU"):
            dashboard.tab.selected_index = dashboard.titles.index(tab)
            image = dashboard.memory_image if tab == "Memory" else dashboard.gpu_image
            before = image.value
            dashboard.slider.value = (1000, 9000) if tab == "Memory" else (2000, 15_000)
            assert image.value != before and bytes(image.value).startswith(PNG_MAGIC), tab
        assert counting.calls["Figure"] == 0
    finally:
        dashboard.close()
