"""The interactive dashboard of a finished run (ipywidgets), and the output that carries it.

Tabs: Overview, Steps, Memory, GPU, Findings, Data, with Compare (``--compare``: before, after,
change, verdict) or Sweep (``--sweep``: the table of runs, the plot, the recommendation) first,
and selected, when the run has one, and Ops last with an ops window (``--ops``). A range
slider over the steps zooms every plot and recomputes the window's statistics from the exact
columns; series can be toggled and step time drawn on a log scale. Plots are matplotlib PNGs
(`dash_plots`), drawn for the tab that is showing and redrawn for another tab when it is
opened; their figures are kept between windows (`dash_figures`), and a window's statistics
come from a `WindowIndex`, so a slider move costs about the same on a run of a million steps
as on a short one.

`dashboard_bundle` returns the display data for a notebook output: the widget view together
with the static HTML view and the text report, so a frontend that cannot render widgets
(nbconvert, a notebook without the widget manager) shows the static report instead, and
nothing shows as blank or as ``VBox(children=...)``.
"""

from __future__ import annotations

from collections import OrderedDict
from html import escape
from typing import Any

import numpy as np

from ..config import in_kernel as in_kernel  # where the views and magics ask
from ..record import PHASES
from ..result import ProfileResult
from ..units import rate, seconds, size
from .dash_figures import GpuFigure, MemoryFigure, StepsFigure
from .dash_findings import finding_html, findings_to_show
from .dash_model import WindowIndex, step_series
from .dash_plots import StepPlotOptions, use_log
from .dash_table import csv_text, data_link, table_html
from .experiments import comparison_html, insert_cell, sweep_html, sweep_png
from .html import (
    PANEL_STYLE,
    STYLE,
    gpu_sentence,
    memory_table,
    overview_html,
    render_html,
    tabs_of,
)
from .live import WIDGET_VIEW
from .ops import ops_html
from .text import headline

TAB_TITLES = ("Overview", "Steps", "Memory", "GPU", "Findings", "Data")
PAGE_ROWS = 25
TOGGLE_LAYOUT = {"width": "auto", "margin": "0 12px 0 0"}
IMAGE_LAYOUT = {"width": "760px", "max_width": "100%", "height": "auto"}
DASHBOARD_CLASS = "tfdiag-dashboard"


def _window_html(series: Any, stats: dict[str, Any]) -> str:
    """The statistics of the selected steps, one row per phase."""
    if not stats["count"]:
        return "<p>No steps were recorded.</p>"
    e = escape
    head = (
        f"<b>Steps {stats['lo']}–{stats['hi']}</b> ({stats['count']} steps, "
        f"{seconds(stats['time_from'])} to {seconds(stats['time_to'])} into the run)"
    )
    rows = [
        "<tr><th>phase</th><th>steps</th><th>median</th><th>p90</th><th>mean</th>"
        "<th>max</th><th>steps/s</th><th>warm-up</th><th>data wait</th></tr>"
    ]
    for name, p in stats["phases"].items():
        rows.append(
            f"<tr><td>{e(name)}</td><td>{p['count']}</td><td>{seconds(p['median'])}</td>"
            f"<td>{seconds(p['p90'])}</td><td>{seconds(p['mean'])}</td>"
            f"<td>{seconds(p['max'])}</td><td>{rate(p['steps_per_second'])}</td>"
            f"<td>{p['warmup_count']}</td>"
            f"<td>{seconds(p['data_wait']) if p['data_wait'] is not None else 'in step'}</td></tr>"
        )
    memory = []
    if stats.get("rss_peak") is not None:
        memory.append(f"host RSS peak {size(stats['rss_peak'])}")
    for device, peak in stats.get("gpu_peak", {}).items():
        memory.append(f"{e(device)} peak {size(peak)}")
    tail = f'<p class="muted">In this window: {", ".join(memory)}.</p>' if memory else ""
    return f'<div class="tfdiag tfdiag-window">{head}<table>{"".join(rows)}</table>{tail}</div>'


class Dashboard:
    """The widgets of one run's dashboard; `root` is the widget to display."""

    def __init__(self, result: ProfileResult, report: dict[str, Any] | None = None) -> None:
        import ipywidgets as w

        record = result.finished_record()
        self.result = result
        self.record = record
        self.report = report if report is not None else result.report()
        self.series = series = step_series(record)
        self.index = WindowIndex(series)  # a window's statistics without a pass over the run
        # The plots, kept between windows: a slider move redraws their data, not their figures.
        self.steps_figure = StepsFigure(self.index)
        self.memory_figure = MemoryFigure(series)
        self.gpu_figure = GpuFigure(series)
        self._widgets: list[Any] = []
        self.closed = False
        self.shows = _content_of(result)
        last = max(series.count - 1, 0)
        self.options = StepPlotOptions(
            phases=set(series.phases), log=use_log(None, series.duration)
        )
        self.plots: dict[str, bytes | None] = {}
        self._dirty: set[str] = set()

        self.header = self._add(w.HTML(self._header_html()))
        self.slider = self._add(
            w.IntRangeSlider(
                value=(0, last),
                min=0,
                max=last,
                step=1,
                description="steps",
                continuous_update=False,
                disabled=series.count < 2,
                layout=w.Layout(width="98%"),
                style={"description_width": "48px"},
            )
        )
        self.slider.add_class("tfdiag-range")
        self.window = self._add(w.HTML())
        self.window.add_class("tfdiag-window-stats")

        # Overview
        self.overview = self._add(w.HTML(self._wrap(overview_html(self.report))))
        # Steps: toggles, plot
        self.toggles: dict[str, Any] = {}
        for name in series.phases:
            self.toggles[f"phase:{name}"] = w.Checkbox(
                value=True, description=name, indent=False, layout=w.Layout(**TOGGLE_LAYOUT)
            )
        for key, label in (
            ("raw", "raw"),
            ("median", "rolling median"),
            ("warmup", "warm-up"),
            ("epochs", "epochs"),
            ("data_wait", "data wait"),
            ("log", "log scale"),
        ):
            self.toggles[key] = w.Checkbox(
                value=bool(getattr(self.options, key)),
                description=label,
                indent=False,
                layout=w.Layout(**TOGGLE_LAYOUT),
            )
        for box in self.toggles.values():
            self._add(box)
            box.observe(self._on_option, names="value")
        self.steps_image = self._add(w.Image(format="png", layout=w.Layout(**IMAGE_LAYOUT)))
        self.steps_note = self._add(w.HTML())
        steps_tab = self._add(
            w.VBox(
                [
                    self._add(
                        w.HBox(list(self.toggles.values()), layout=w.Layout(flex_flow="row wrap"))
                    ),
                    self.steps_image,
                    self.steps_note,
                ]
            )
        )
        # Memory, GPU
        self.memory_image = self._add(w.Image(format="png", layout=w.Layout(**IMAGE_LAYOUT)))
        self.memory_note = self._add(w.HTML())
        memory_tab = self._add(w.VBox([self.memory_image, self.memory_note]))
        self.gpu_image = self._add(w.Image(format="png", layout=w.Layout(**IMAGE_LAYOUT)))
        self.gpu_note = self._add(w.HTML())
        gpu_tab = self._add(w.VBox([self.gpu_image, self.gpu_note]))
        # Findings
        findings = findings_to_show(self.report)
        finding_widgets = [self._add(w.HTML(self._wrap(self._finding(f)))) for f in findings] or [
            self._add(w.HTML(self._wrap("<p>No findings.</p>")))
        ]
        findings_tab = self._add(w.VBox(finding_widgets))
        # Data
        self.page = self._add(
            w.BoundedIntText(
                value=0, min=0, max=0, description="page", layout=w.Layout(width="160px")
            )
        )
        self.page.observe(lambda _change: self._draw_table(), names="value")
        previous = self._add(w.Button(description="◀", layout=w.Layout(width="40px")))
        following = self._add(w.Button(description="▶", layout=w.Layout(width="40px")))
        previous.on_click(lambda _b: self._turn(-1))
        following.on_click(lambda _b: self._turn(1))
        self.table = self._add(w.HTML())
        self.download_csv = self._add(w.Button(description="CSV", icon="download"))
        self.download_json = self._add(w.Button(description="JSON", icon="download"))
        self.download_link = self._add(w.HTML())
        self.download_csv.on_click(lambda _b: self._download("csv"))
        self.download_json.on_click(lambda _b: self._download("json"))
        data_tab = self._add(
            w.VBox(
                [
                    self._add(w.HBox([previous, self.page, following])),
                    self.table,
                    self._add(w.HBox([self.download_csv, self.download_json, self.download_link])),
                ]
            )
        )
        # Compare / Sweep, first when the run has one
        self.titles = tabs_of(self.report)
        first = []
        if self.report.get("sweep"):
            png = sweep_png(self.report["sweep"])
            self.plots["sweep"] = png
            first.append(self._add(w.HTML(self._wrap(sweep_html(self.report["sweep"], png)))))
        elif self.report.get("comparison"):
            first.append(self._add(w.HTML(self._wrap(comparison_html(self.report["comparison"])))))
        last = []
        if "Ops" in self.titles:  # an ops window (--ops)
            last.append(self._add(w.HTML(self._wrap(ops_html(self.report["ops"])))))
        self.tab = self._add(
            w.Tab(
                children=[
                    *first,
                    self.overview,
                    steps_tab,
                    memory_tab,
                    gpu_tab,
                    findings_tab,
                    data_tab,
                    *last,
                ],
                titles=self.titles,
            )
        )
        self.root = self._add(w.VBox([self.header, self.slider, self.window, self.tab]))
        self.root.add_class(DASHBOARD_CLASS)

        self._update_window()
        for name in ("steps", "memory", "gpu", "data"):
            self._draw(name)
        self.slider.observe(self._on_range, names="value")
        self.tab.observe(self._on_tab, names="selected_index")

    # -- building ------------------------------------------------------------------------------

    def _add(self, widget: Any) -> Any:
        self._widgets.append(widget)
        return widget

    @staticmethod
    def _wrap(html: str) -> str:
        return f'<div class="tfdiag">{html}</div>'

    def _finding(self, finding: dict[str, Any]) -> str:
        rewrite = finding.get("rewrite")
        cell = insert_cell(self.report, str(rewrite)) if rewrite else None
        return finding_html(finding, buttons=True, insert_as=cell)

    def _header_html(self) -> str:
        report = self.report
        parts = [f"<style>{STYLE}{PANEL_STYLE}</style>", '<div class="tfdiag">']
        parts.append(f"<h3>tfdiag_magic: {escape(headline(report))}</h3>")
        error = report.get("error")
        if error:
            parts.append(
                f'<p class="err">{escape(error["type"])}: '
                f"{escape(error['message'].strip()[:600])}</p>"
                '<p class="muted">The record holds everything up to the error.</p>'
            )
        parts.append("</div>")
        return "".join(parts)

    # -- drawing -------------------------------------------------------------------------------

    def _range(self) -> tuple[int, int]:
        lo, hi = self.slider.value
        return int(lo), int(hi)

    def _update_window(self) -> None:
        lo, hi = self._range()
        self.stats = self.index.stats(lo, hi)
        self.window.value = _window_html(self.series, self.stats)

    def _draw(self, name: str) -> None:
        lo, hi = self._range()
        if name == "steps":
            png = self.steps_figure.png(lo, hi, self.options)
            self._show(self.steps_image, self.steps_note, png, "<p>No steps were recorded.</p>")
            if png and not self.steps_figure.wait_at.size:  # no input wait was seen
                self.steps_note.value = self._wrap(
                    '<p class="muted">Data wait: '
                    f"{escape(self.report['time_split'].get('data_wait_note') or 'not measured')}"
                    ".</p>"
                )
        elif name == "memory":
            png = self.memory_figure.png(lo, hi)
            self._show(self.memory_image, None, png, "<p>No memory samples in this range.</p>")
            self.memory_note.value = self._wrap(
                ("" if png else "<p>No memory samples in this range.</p>")
                + memory_table(self.report)
            )
        elif name == "gpu":
            png = self.gpu_figure.png(lo, hi)
            self._show(self.gpu_image, self.gpu_note, png, gpu_sentence(self.report))
        elif name == "data":
            self._draw_table()
            png = None
        self.plots[name] = png
        self._dirty.discard(name)

    def _show(self, image: Any, note: Any, png: bytes | None, empty: str) -> None:
        if png:
            image.value = png
            image.layout.display = None
            if note is not None:
                note.value = ""
        else:
            image.layout.display = "none"
            if note is not None:
                note.value = self._wrap(empty)

    def _window_rows(self) -> np.ndarray:
        lo, hi = self._range()
        return self.series.rows[lo : hi + 1]

    def _draw_table(self) -> None:
        rows = self._window_rows()
        pages = max(1, -(-rows.size // PAGE_ROWS))
        self.page.max = pages - 1
        page = min(self.page.value, pages - 1)
        shown = rows[page * PAGE_ROWS : (page + 1) * PAGE_ROWS]
        caption = f"page {page + 1} of {pages}: steps of the selected range"
        self.table.value = self._wrap(table_html(self.record, shown, caption))

    def _turn(self, delta: int) -> None:
        self.page.value = int(np.clip(self.page.value + delta, 0, self.page.max))

    def _download(self, kind: str) -> None:
        if kind == "csv":
            link = data_link(csv_text(self.record), "tfdiag-steps.csv", "text/csv", "steps.csv")
        else:
            link = data_link(
                self.result.to_json(), "tfdiag-report.json", "application/json", "report.json"
            )
        self.download_link.value = f"Ready: {link}"

    # -- events --------------------------------------------------------------------------------

    def _visible(self) -> str:
        return self.titles[self.tab.selected_index or 0].lower()

    def _on_range(self, _change: dict[str, Any]) -> None:
        self._update_window()
        self.page.value = 0
        self._dirty = {"steps", "memory", "gpu", "data"}
        self._draw("data")
        visible = self._visible()
        self._draw(visible if visible in self._dirty else "steps")

    def _on_tab(self, _change: dict[str, Any]) -> None:
        visible = self._visible()
        if visible in self._dirty:
            self._draw(visible)

    def _on_option(self, _change: dict[str, Any]) -> None:
        t = self.toggles
        self.options = StepPlotOptions(
            phases={p for p in PHASES if t.get(f"phase:{p}") is not None and t[f"phase:{p}"].value},
            raw=t["raw"].value,
            median=t["median"].value,
            warmup=t["warmup"].value,
            epochs=t["epochs"].value,
            data_wait=t["data_wait"].value,
            log=t["log"].value,
        )
        self._draw("steps")

    def close(self) -> None:
        """Close every widget of the dashboard (their comms, in a kernel)."""
        for widget in reversed(self._widgets):
            # A widget's Layout and Style are widgets of their own that close() leaves open.
            for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
                if part is not None:
                    part.close()
            widget.close()
        self._widgets.clear()
        self.plots.clear()
        for figure in (self.steps_figure, self.memory_figure, self.gpu_figure):
            figure.release()
        self.closed = True
        _open_dashboards.pop(id(self), None)


def static_bundle(
    result: ProfileResult,
    plots: dict[str, bytes | None] | None = None,
    report: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The static views of a result: HTML (plots as images) and the text report. This is the
    copy a notebook saves in its output (and shows where widgets cannot): its plots are
    compact PNGs (`compact_png`), so that a saved profiled cell stays small."""
    record = result.finished_record()
    report = report if report is not None else result.report()
    from .dash_plots import compact_png
    from .html import static_plots
    from .text import render_text

    full = plots if plots is not None else static_plots(record)
    plots = {name: compact_png(png) if png else png for name, png in full.items()}

    return {
        "text/plain": render_text(report),
        "text/html": render_html(report, record, full_page=False, plots=plots),
    }


# ipywidgets keeps every widget in a process-wide registry until it is closed, and a dashboard's
# widgets hold its result (the whole record and its plots): without a bound, every run and every
# re-display of a result would stay in memory for the kernel's life, `del run` included.
MAX_OPEN_DASHBOARDS = 8
_open_dashboards: OrderedDict[int, Dashboard] = OrderedDict()


def dashboard_bundle(result: ProfileResult) -> tuple[dict[str, Any], Dashboard]:
    """Display data holding the dashboard's widget view with the static HTML and text beside it.

    Displaying a result again shows its open dashboard once more (the views stay in step), so a
    re-display costs no memory; a result changed since (findings replaced, a comparison
    attached) gets a new one, and the earlier output keeps its own. Past MAX_OPEN_DASHBOARDS,
    the oldest dashboard is closed (its output keeps the static report for frontends that
    cannot find the widget any more).
    """
    content = _content_of(result)
    dashboard = next(
        (d for d in _open_dashboards.values() if d.result is result and d.shows == content),
        None,
    )
    built = dashboard is None
    if dashboard is None:
        dashboard = Dashboard(result)
    try:
        data = static_bundle(result, plots=dashboard.plots, report=dashboard.report)
        view = dashboard.root._repr_mimebundle_()
        data[WIDGET_VIEW] = view[WIDGET_VIEW]
    except BaseException:
        if built:
            dashboard.close()
        raise
    _keep_open(dashboard)
    return data, dashboard


def _content_of(result: ProfileResult) -> tuple[Any, ...]:
    """What a dashboard of `result` shows besides the record, by identity: cheap to compare."""
    findings = result.findings
    return (
        id(result.record),
        id(findings),
        len(findings),
        *(id(f) for f in findings),
        id(result.comparison),
        id(result.experiment),
        len(result.problems),
    )


def _keep_open(dashboard: Dashboard) -> None:
    _open_dashboards.pop(id(dashboard), None)
    _open_dashboards[id(dashboard)] = dashboard  # the newest last
    while len(_open_dashboards) > MAX_OPEN_DASHBOARDS:
        _key, oldest = _open_dashboards.popitem(last=False)
        oldest.close()


def open_dashboards() -> int:
    """How many dashboards are open (their widgets alive in the kernel)."""
    return len(_open_dashboards)


def close_dashboards() -> None:
    """Close every open dashboard (the extension's unload does this)."""
    while _open_dashboards:
        _key, dashboard = _open_dashboards.popitem(last=False)
        dashboard.close()
