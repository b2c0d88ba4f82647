"""The dashboard's widgets, its numbers and its static fallback, without a frontend.

ipywidgets work in a plain process (their messages go nowhere), so the dashboard is built here
from real profiled runs and from records made by hand, and driven as a user would: moving the
range slider, toggling series, switching tabs. A record of 100 000 steps must render in under
a second; the statistics of a window are compared with NumPy on the exact columns.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import profiled, run_cell
from tfdiag_magic.findings import Finding
from tfdiag_magic.record import PHASES
from tfdiag_magic.result import ProfileResult
from tfdiag_magic.views.dash_model import step_series, window_stats
from tfdiag_magic.views.dashboard import TAB_TITLES, WIDGET_VIEW, Dashboard, dashboard_bundle
from tfdiag_magic.views.downsample import MinMaxBuckets, minmax_columns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from render import synthetic_record, synthetic_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def html_values(dashboard: Dashboard) -> list[str]:
    return [w.value for w in dashboard._widgets if isinstance(getattr(w, "value", None), str)]


@pytest.fixture
def fit_result(ip) -> ProfileResult:
    result, r = profiled(
        ip,
        "import numpy as np, keras\n"
        "x = np.random.default_rng(0).normal(size=(256, 4)).astype('float32')\n"
        "y = x.sum(axis=1, keepdims=True)\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(x, y, batch_size=8, epochs=3, validation_split=0.25, verbose=0)\n",
    )
    assert result.success
    return r


def test_dashboard_of_a_fit_has_six_tabs_and_plots(fit_result):
    dashboard = Dashboard(fit_result)
    try:
        assert dashboard.tab.titles == TAB_TITLES
        assert len(dashboard.tab.children) == 6
        assert dashboard.steps_image.value.tobytes().startswith(PNG_MAGIC)
        assert dashboard.memory_image.value.tobytes().startswith(PNG_MAGIC)
        # No GPU on this machine: the GPU tab says so in a sentence instead of a plot.
        assert dashboard.gpu_image.layout.display == "none"
        assert "No NVML samples" in dashboard.gpu_note.value
        assert dashboard.slider.max == 72 + 24 - 1  # 72 train and 24 validation steps
        assert "train" in dashboard.window.value and "eval" in dashboard.window.value
    finally:
        dashboard.close()


def test_moving_the_range_recomputes_exact_window_statistics(fit_result):
    dashboard = Dashboard(fit_result)
    try:
        before = dashboard.window.value
        png_before = dashboard.steps_image.value
        dashboard.slider.value = (30, 60)
        assert dashboard.window.value != before
        assert "Steps 30–60" in dashboard.window.value
        assert dashboard.steps_image.value != png_before  # zoomed
        series = step_series(fit_result.record)
        part = slice(30, 61)
        train = series.phase[part] == PHASES.index("train")
        steady = series.duration[part][train & ~series.warm[part]]
        stats = dashboard.stats["phases"]["train"]
        assert stats["count"] == int(train.sum())
        assert stats["median"] == pytest.approx(float(np.median(steady)))
        assert stats["p90"] == pytest.approx(float(np.percentile(steady, 90)))
        # The table follows the window.
        assert ">30</td>" in dashboard.table.value or "<td>30</td>" in dashboard.table.value
    finally:
        dashboard.close()


def test_toggles_redraw_the_step_plot_and_tabs_redraw_when_opened(fit_result):
    dashboard = Dashboard(fit_result)
    try:
        first = dashboard.steps_image.value
        dashboard.toggles["log"].value = not dashboard.toggles["log"].value
        logged = dashboard.steps_image.value
        assert logged != first
        dashboard.toggles["phase:eval"].value = False
        assert dashboard.options.phases == {"train"}
        assert dashboard.steps_image.value != logged
        memory = dashboard.memory_image.value
        dashboard.slider.value = (10, 20)  # on the Overview tab: Memory is redrawn when opened
        assert dashboard.memory_image.value == memory
        dashboard.tab.selected_index = TAB_TITLES.index("Memory")
        assert dashboard.memory_image.value != memory
    finally:
        dashboard.close()


def test_cell_output_bundle_carries_widget_view_static_html_and_text(fit_result):
    data, dashboard = dashboard_bundle(fit_result)
    try:
        assert data[WIDGET_VIEW]["model_id"] == dashboard.root.model_id
        assert data["text/plain"].startswith("tfdiag_magic: 72 training steps")
        assert data["text/html"].count('src="data:image/png;base64,') == 2
        assert "VBox(" not in data["text/html"]
    finally:
        dashboard.close()


def test_findings_tab_shows_evidence_diff_rewrite_and_buttons_most_important_first(fit_result):
    fit_result.findings = [
        Finding(code="minor", severity="info", title="a small thing", impact=9.0),
        Finding(
            code="retracing",
            severity="warning",
            title="train_step traced on every call",
            detail="Each trace took 40 ms.",
            fix="Give it an input_signature.",
            evidence={"traces": 72, "<b>key</b>": "<i>value</i>"},
            rewrite="print('fixed')  # </textarea><script>alert(1)</script>\n",
            diff="--- cell\n+++ rewrite\n@@ -1 +1 @@\n-print('slow')\n+print('fixed')\n",
            impact=2.9,
        ),
    ]
    dashboard = Dashboard(fit_result)
    try:
        findings_tab = dashboard.tab.children[TAB_TITLES.index("Findings")]
        html = [child.value for child in findings_tab.children]
        assert "retracing" in html[0] and "minor" in html[1]  # warning before info
        first = html[0]
        assert "Each trace took 40 ms." in first and "input_signature" in first
        assert '<span class="add">+print(&#x27;fixed&#x27;)</span>' in first
        assert "tfdiag-insert" in first and "tfdiag-copy" in first
        assert "&lt;b&gt;key&lt;/b&gt;" in first and "&lt;i&gt;value&lt;/i&gt;" in first
        assert "<script" not in first.lower() and "</textarea><script" not in first
        assert "Estimated cost in this run: 2.9 s" in first
    finally:
        dashboard.close()


def test_user_text_is_escaped_in_every_view(ip):
    setup = run_cell(
        ip,
        "import tensorflow as tf\n"
        "def double(v):\n    return v * 2\n"
        "double.__name__ = double.__qualname__ = \"<script>alert('name')</script>\"\n"
        "double = tf.function(double)\n",
    )
    assert setup.success
    result, r = profiled(
        ip,
        "for s in range(2):  # <script>alert('comment')</script>\n"
        "    double(tf.constant(1.0))\n"
        "raise ValueError(\"<script>alert('error')</script>\")\n",
    )
    assert isinstance(result.error_in_exec, ValueError)
    assert any("<script>" in f.name for f in r.record.functions)
    assert "<script>" in r.record.loops[0].source
    data, dashboard = dashboard_bundle(r)
    try:
        views = {
            "widgets": "\n".join(html_values(dashboard)),
            "fallback": data["text/html"],
            "page": r.to_html(full_page=True),
        }
        for name, html in views.items():
            assert "<script" not in html.lower(), name
            assert "&lt;script&gt;alert(&#x27;error&#x27;)&lt;/script&gt;" in html, name
        for name in ("fallback", "page"):
            assert "&lt;script&gt;alert(&#x27;name&#x27;)&lt;/script&gt;" in views[name], name
            assert "&lt;script&gt;alert(&#x27;comment&#x27;)&lt;/script&gt;" in views[name], name
    finally:
        dashboard.close()


def test_a_failed_run_still_gets_its_dashboard_with_the_error(ip):
    result, r = profiled(
        ip,
        "import tensorflow as tf\n"
        "f = tf.function(lambda v: v + 1)\n"
        "for i in range(5):\n"
        "    f(tf.constant(1.0))\n"
        "raise RuntimeError('stopped here')\n",
    )
    assert isinstance(result.error_in_exec, RuntimeError)
    dashboard = Dashboard(r)
    try:
        assert "RuntimeError" in dashboard.header.value and "stopped here" in dashboard.header.value
        assert dashboard.steps_image.value.tobytes().startswith(PNG_MAGIC)
    finally:
        dashboard.close()


def test_an_empty_run_renders_without_plots(ip):
    result, r = profiled(ip, "x = 1\n")
    assert result.success
    data, dashboard = dashboard_bundle(r)
    try:
        assert r.record.step_count == 0
        assert dashboard.slider.disabled
        assert "No steps were recorded" in dashboard.steps_note.value
        assert "No steps were recorded" in data["text/html"]
    finally:
        dashboard.close()


def test_100k_steps_render_with_their_two_plots_and_a_timeline():
    # How long it takes is benchmarks/render.py's to measure (a timed test flakes under load).
    result = synthetic_result(100_000)
    data, dashboard = dashboard_bundle(result)
    dashboard.close()
    assert data["text/html"].count("data:image/png;base64,") == 2
    assert data["text/html"].count('<svg class="tfdiag-timeline"') == 1


def test_window_statistics_are_exact_on_100k_steps():
    record = synthetic_record(100_000)
    series = step_series(record)
    stats = window_stats(series, 12_345, 67_890)
    part = slice(12_345, 67_891)
    train = series.phase[part] == PHASES.index("train")
    steady = series.duration[part][train & ~series.warm[part]]
    assert stats["phases"]["train"]["median"] == float(np.median(steady))
    assert stats["phases"]["train"]["max"] == float(series.duration[part][train].max())
    assert stats["phases"]["train"]["steady_count"] == steady.size


def test_minmax_columns_keep_every_extreme_and_few_points():
    rng = np.random.default_rng(1)
    x = np.arange(100_000, dtype=np.float64)
    y = rng.normal(size=x.size)
    y[77_777] = 50.0
    y[12_345] = -50.0
    px, py = minmax_columns(x, y, 1000)
    assert px.size <= 4000
    assert py.max() == 50.0 and py.min() == -50.0
    assert np.all(np.diff(px[0::4]) > 0)  # columns in order
    # Every column's extremes are the exact extremes of its values.
    column = (x * 1000 / (x[-1] - x[0])).astype(int).clip(0, 999)
    assert py[1::4].tolist() == [y[column == c].min() for c in np.unique(column)]


def test_minmax_buckets_summarise_a_growing_series():
    buckets = MinMaxBuckets(16)
    values = np.arange(1000, dtype=np.float64)
    for chunk in np.array_split(values, 37):
        buckets.add(chunk)
    assert buckets.count() == 1000
    assert len(buckets.lows) <= 16
    assert min(buckets.lows) == 0.0 and max(buckets.highs) == 999.0
    assert buckets.lows == sorted(buckets.lows)


def test_config_switch_is_a_configurable_of_the_shell(ip):
    from tfdiag_magic.config import settings_of

    settings = settings_of(ip)
    assert settings in ip.configurables
    run_cell(ip, "%config TFProfile.widgets = False")
    try:
        assert settings.widgets is False
    finally:
        run_cell(ip, "%config TFProfile.widgets = True")
    assert settings.widgets is True


def test_memory_plot_draws_the_cpu_tensor_series_on_its_own(fit_result):
    from dataclasses import replace

    from tfdiag_magic.views.dash_figures import memory_png

    record = fit_result.record
    # This small fit holds no tensors between steps (the series reads 0); give it some.
    tensors = np.arange(record.memory["rss"].size, dtype=np.int64) << 20
    # With RSS unknown, the allocator's series alone is drawn; with neither, no plot.
    no_rss = {
        **record.memory,
        "rss": np.full_like(record.memory["rss"], -1),
        "cpu_tensors": tensors,
    }
    series = step_series(replace(record, memory=no_rss))
    assert memory_png(series, 0, series.count - 1).startswith(PNG_MAGIC)
    neither = {**no_rss, "cpu_tensors": np.full_like(tensors, -1)}
    series = step_series(replace(record, memory=neither))
    assert memory_png(series, 0, series.count - 1) is None


def test_dashboards_stay_bounded_and_closed_ones_leave_the_widget_registry():
    """ipywidgets keeps a widget until it is closed, and a dashboard holds its whole result:
    re-displaying one result shows the same dashboard again (no new widgets), a changed result
    gets a new one beside the old, many runs keep at most MAX_OPEN_DASHBOARDS, and every widget
    of a closed dashboard is gone from the registry (so its result can go)."""
    import gc
    import weakref

    from ipywidgets.widgets.widget import _instances

    from tfdiag_magic.views import dashboard as dash

    dash.close_dashboards()
    before = len(_instances)
    result = synthetic_result(200)
    data, first = dashboard_bundle(result)
    widgets_shown = len(_instances)
    for _ in range(3):
        again, same = dashboard_bundle(result)
        assert same is first and again[WIDGET_VIEW] == data[WIDGET_VIEW]
    assert dash.open_dashboards() == 1
    assert len(_instances) == widgets_shown, "a re-display built new widgets"
    # The result changed: a new dashboard shows it, and the earlier output keeps its own.
    result.findings = [*result.findings[1:]]
    changed = dashboard_bundle(result)[1]
    assert changed is not first and not first.closed and dash.open_dashboards() == 2
    first_ids = {w.model_id for w in first._widgets} | {w.model_id for w in changed._widgets}

    kept = weakref.ref(result)
    del result, first, same, changed
    for _ in range(dash.MAX_OPEN_DASHBOARDS + 3):
        dashboard_bundle(synthetic_result(50))
    assert dash.open_dashboards() == dash.MAX_OPEN_DASHBOARDS
    assert not first_ids & set(_instances), "the oldest dashboard's widgets stay open"
    gc.collect()
    assert kept() is None, "a result whose dashboard was closed is still alive"
    dash.close_dashboards()
    assert dash.open_dashboards() == 0
    assert len(_instances) == before
