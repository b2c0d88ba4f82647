"""`MergedResult`: the reports of a job's workers in one result, with the `straggler` finding
(`merge(paths)`, ``python -m tfdiag_magic merge reports/``)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from ..findings import Finding
from . import straggler
from .workers import NotAReportError, Worker, read_worker

REPORT_GLOB = "*.tfdiag.json"


def report_paths(paths: list[str | Path]) -> list[Path]:
    """The report files named by `paths`: files as given, folders by their ``*.tfdiag.json``."""
    found: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            found.extend(sorted(path.glob(REPORT_GLOB)))
        else:
            found.append(path)
    return found


def merge(paths: list[str | Path] | str | Path) -> MergedResult:
    """Merge the JSON reports of a job's workers (files, or folders of ``*.tfdiag.json``)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = report_paths(list(paths))
    if not files:
        raise NotAReportError(f"no reports ({REPORT_GLOB}) in {', '.join(map(str, paths))}")
    workers = [read_worker(path) for path in files]
    workers.sort(key=_worker_order)
    return MergedResult(workers)


def _worker_order(worker: Worker) -> tuple[int, int, str]:
    kind = {"chief": 0, "worker": 1}.get(worker.task_type or "", 2)
    return kind, worker.task_index if worker.task_index is not None else 0, worker.name


class MergedResult:
    """A job's workers side by side, and what holds the job back."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        finding = straggler.check(workers)
        self.findings: list[Finding] = [finding] if finding is not None else []
        self._dashboard: Any = None  # the widgets of its last display in a notebook

    def report(self) -> dict[str, Any]:
        """The merged JSON report: schema 1's keys, from the first worker's report (the chief
        where there is one), with the job's findings, and ``workers``: one entry per worker
        (its name, task type and index, steps, steady step time, input wait, findings)."""
        base = dict(self.workers[0].report)
        base["findings"] = [f.to_dict() for f in self.findings]
        base["workers"] = [w.to_dict() for w in self.workers]
        base["wall_time"] = max(w.wall_s for w in self.workers)
        base["merged_from"] = [w.path for w in self.workers]
        base["input_wait_windows"] = {w.name: _windows(w) for w in self.workers}
        return base

    def to_json(self, path: str | Path | None = None, indent: int | None = 2) -> str:
        """The merged JSON report; with `path`, also written there (atomically)."""
        from ..files import write_text_atomic
        from ..report import json_safe

        text = json.dumps(json_safe(self.report()), indent=indent, allow_nan=False)
        if path is not None:
            write_text_atomic(path, text + "\n")
        return text

    def summary(self) -> str:
        """The text report: a line per worker, then the job's findings."""
        from ..views.workers import workers_text

        return workers_text(self.report())

    def to_html(self, full_page: bool = True) -> str:
        from ..views.workers import workers_html

        return workers_html(self.report(), full_page)

    def write_html(self, path: str | Path) -> Path:
        from ..files import write_text_atomic

        return write_text_atomic(path, self.to_html(full_page=True))

    def to_chrome_trace(self, path: str | Path) -> Path:
        """The workers' steps as Trace Event JSON (Perfetto, chrome://tracing), a process per
        worker, each lane from its own first step: aligned by start, never by clock."""
        from ..export.chrome_trace import worker_step_events, write_chrome_trace

        events: list[dict] = []
        for pid, worker in enumerate(self.workers):
            if worker.step_series:
                events.extend(worker_step_events(worker.step_series, pid, worker.name))
        metadata = {
            "tool": "tfdiag_magic",
            "merged_from": [w.path for w in self.workers],
            "workers": [w.name for w in self.workers],
            "without_step_series": [w.name for w in self.workers if not w.step_series],
            "aligned": "each worker from its first step; clocks are not compared",
        }
        return write_chrome_trace(path, events, metadata)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict | None:
        """In a Jupyter kernel with widgets on, the dashboard (Overview and Workers tabs) with
        the text and HTML beside it; elsewhere None, and IPython shows the HTML and text."""
        try:
            from IPython import get_ipython

            from ..config import in_kernel, settings_of
            from ..views.workers_dashboard import workers_bundle

            shell = get_ipython()
            if shell is None or not in_kernel(shell) or not settings_of(shell).widgets:
                return None
            if self._dashboard is not None:
                self._dashboard.close()
            report = self.report()
            static = {"text/plain": self.summary(), "text/html": self.to_html(full_page=False)}
            data, self._dashboard = workers_bundle(report, static)
            return data
        except Exception:  # no widgets here: the static views show instead
            return None

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("<MergedResult>" if cycle else self.summary())

    def _repr_html_(self) -> str:
        return self.to_html(full_page=False)

    def __repr__(self) -> str:
        codes = ", ".join(f.code for f in self.findings) or "no job findings"
        return f"<MergedResult of {len(self.workers)} workers: {codes}>"


def _windows(worker: Worker) -> list[list[float]]:
    """[first step, input wait share] between consecutive reads of the worker's measure."""
    out = []
    series = worker.input_series
    for (s0, w0, t0), (_, w1, t1) in itertools.pairwise(series):
        if t1 > t0:
            out.append([s0, (w1 - w0) / (t1 - t0)])
    return out
