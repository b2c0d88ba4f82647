"""The dashboard of a merged multi-worker job in a notebook: an Overview tab (a line per worker
and the job's findings) and a Workers tab (each worker's time per step and input wait along its
steps, aligned by step index). ipywidgets is imported only when one is built."""

from __future__ import annotations

from typing import Any

from .html import PANEL_STYLE, STYLE, findings_html
from .live import WIDGET_VIEW
from .workers import workers_html, workers_plots

TABS = ("Overview", "Workers")


class WorkersDashboard:
    """The widgets of one merged result's dashboard."""

    def __init__(self, report: dict[str, Any]) -> None:
        import ipywidgets as w

        style = f"<style>{STYLE}{PANEL_STYLE}</style>"
        findings = findings_html(report, buttons=False) or (
            "<p>No job findings: no worker held the others back.</p>"
        )
        self.overview = w.HTML(workers_html(report, full_page=False))
        self.workers = w.HTML(
            f'{style}<div class="tfdiag tfdiag-workers-tab">{workers_plots(report)}'
            f"<h4>Findings</h4>{findings}</div>"
        )
        self.tab = w.Tab(children=[self.overview, self.workers], titles=TABS)
        self.root = w.VBox([self.tab])

    def close(self) -> None:
        for widget in (self.overview, self.workers, self.tab, self.root):
            widget.close()


def workers_bundle(report: dict[str, Any], static: dict[str, Any]) -> tuple[dict, Any]:
    """`static` (the text and HTML of the merged report) with the dashboard's widget view
    beside it, and the dashboard."""
    dashboard = WorkersDashboard(report)
    data = dict(static)
    data[WIDGET_VIEW] = dashboard.root._repr_mimebundle_()[WIDGET_VIEW]
    return data, dashboard
