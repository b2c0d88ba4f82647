"""`ProfileResult`: what ``%%tfprofile -o NAME`` stores and ``profile()`` returns.

A thin object over the `Record` of a run and its findings, with the views a user reaches for:
the per-step DataFrame, the text summary, the JSON and HTML reports. A run made with
``--compare NAME`` also carries `.comparison`; a sweep (``--sweep NAME=V1,V2,...``) carries
`.sweep` (a DataFrame, a row per value), `.recommendation` and `.runs`, and its record is the
recommended run's (the last run's when none completed).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .findings import Finding
from .record import Record

if TYPE_CHECKING:
    from .experiments.compare import Comparison
    from .experiments.sweep import Recommendation, Sweep


class Presenter(Protocol):
    """How a result shows itself. The views (the layer above) install theirs when imported, so
    a result renders without this module importing them (``import tfdiag_magic`` does)."""

    def text(self, result: ProfileResult) -> str: ...

    def html(self, result: ProfileResult, full_page: bool) -> str: ...

    def bundle(self, result: ProfileResult) -> dict[str, Any] | None: ...


_presenters: list[Presenter] = []


def use_presenter(presenter: Presenter) -> None:
    """Render every result with `presenter` from now on."""
    _presenters[:] = [presenter]


def _presenter() -> Presenter:
    if not _presenters:
        raise RuntimeError("no views to render a result with: import tfdiag_magic first")
    return _presenters[0]


class ProfileResult:
    """The record of one profiling run. Filled in when the run ends (even when it failed)."""

    def __init__(self, label: str = "", record: Record | None = None) -> None:
        self.label = label
        self.record: Record | None = record
        self.findings: list[Finding] = []
        # Every finding's fix in one cell, composed so that no fix undoes another (None with
        # fewer than two fixes: a finding's own rewrite is the cell then).
        self.combined_rewrite: str | None = None
        self.comparison: Comparison | None = None  # with --compare NAME
        self.experiment: Sweep | None = None  # with --sweep NAME=V1,V2,...
        self.stored_as: str | None = None  # the variable of the user namespace that holds it
        # "<stage> failed: <error>" for each stage of the profiler that failed after the code
        # ran (record details, diagnosis, a view, a file): the rest of the result still holds.
        self.problems: list[str] = []
        self._frame: Any = None

    def add_problem(self, stage: str, error: BaseException) -> str:
        """Note that `stage` of the profiler failed with `error`; returns the line noted."""
        line = failure_line(stage, error)
        self.problems.append(line)
        return line

    def finished_record(self) -> Record:
        """The run's record; a clear error while the run has not finished."""
        if self.record is None:
            raise RuntimeError("the profiling run has not finished yet; read it after the run")
        return self.record

    @property
    def steps(self):  # -> pandas.DataFrame
        """A row per recorded step: start, duration, data_wait, phase, epoch, loss, ..."""
        if self._frame is None:
            self._frame = self.finished_record().to_dataframe()
        return self._frame

    @property
    def ops(self):  # -> pandas.DataFrame | None
        """The ops window's top ops (``--ops``), a row per op: name, type, where (host,
        device, input, collective, input pipeline), count, self_time (s), per_step (s),
        share (of the window's step time the op was running); None without a window."""
        capture = self.finished_record().ops_window
        if capture is None or capture.summary is None:
            return None
        import pandas as pd

        columns = ["name", "type", "where", "count", "self_time", "per_step", "share"]
        return pd.DataFrame(capture.summary["top_ops"], columns=columns)

    @property
    def error(self):
        return self.finished_record().error

    @property
    def sweep(self):  # -> pandas.DataFrame | None
        """A sweep's table, a row per value that ran (None when the run was no sweep)."""
        return self.experiment.frame if self.experiment is not None else None

    @property
    def recommendation(self) -> Recommendation | None:
        """A sweep's recommendation: the fastest value that completed, with its margin."""
        return self.experiment.recommendation() if self.experiment is not None else None

    @property
    def runs(self) -> list[ProfileResult]:
        """A sweep's runs, one `ProfileResult` per value that ran (this run alone otherwise)."""
        if self.experiment is None:
            return [self]
        return [run.result for run in self.experiment.runs]

    def report(self) -> dict[str, Any]:
        """The JSON report as a dict (schema 1)."""
        from .report import build_report

        report = build_report(
            self.finished_record(),
            self.findings,
            comparison=self.comparison.to_dict() if self.comparison is not None else None,
            sweep=self.experiment.to_dict() if self.experiment is not None else None,
            stored_as=self.stored_as,
        )
        report["combined_rewrite"] = self.combined_rewrite
        report["combined_diff"] = None
        source = self.finished_record().source
        if self.combined_rewrite is not None and source:
            from .rewrite.common import unified_diff

            report["combined_diff"] = unified_diff(source, self.combined_rewrite)
        report["problems"] = list(self.problems)
        return report

    def to_json(self, path: str | Path | None = None, indent: int | None = 2) -> str:
        """The JSON report; with `path`, also written there (``~`` expanded, folders made,
        atomically: an existing file is replaced only by a complete report)."""
        import json

        from .files import write_text_atomic

        text = json.dumps(self.report(), indent=indent, allow_nan=False)
        if path is not None:
            write_text_atomic(path, text + "\n")
        return text

    def summary(self) -> str:
        """The text report."""
        return _presenter().text(self)

    def to_html(self, full_page: bool = True) -> str:
        """The HTML report: a whole page, or a fragment for a notebook's output."""
        return _presenter().html(self, full_page)

    def write_html(self, path: str | Path) -> Path:
        """Write the self-contained HTML report to `path` as `to_json` writes; returns the
        path written (``~`` expanded)."""
        from .files import write_text_atomic

        return write_text_atomic(path, self.to_html(full_page=True))

    def to_chrome_trace(
        self, path: str | Path, pid: int = 0, process_name: str | None = None
    ) -> Path:
        """Write the run's timeline (steps, input waits, tracings, GC pauses, memory) as Trace
        Event JSON for Perfetto or chrome://tracing, as `to_json` writes; returns the path."""
        from .export.chrome_trace import chrome_trace_events, trace_metadata, write_chrome_trace

        record = self.finished_record()
        events = chrome_trace_events(record, pid, process_name or self.label or "tfdiag_magic")
        return write_chrome_trace(path, events, trace_metadata(record, self.label))

    def to_tensorboard(self, logdir: str | Path) -> Path:
        """Write the per-step series as TensorBoard scalars (``tfdiag/...``) to `logdir`."""
        from .export.tensorboard import write_tensorboard

        return write_tensorboard(logdir, self.finished_record())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        if cycle or self.record is None:
            printer.text("<ProfileResult (running)>")
        else:
            printer.text(self.summary())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict | None:
        """In a Jupyter kernel with widgets on, the dashboard with the static views beside it;
        elsewhere None, and IPython uses `_repr_html_` and `_repr_pretty_`."""
        if self.record is None:
            return None
        return _presenter().bundle(self)

    def _repr_html_(self) -> str | None:
        if self.record is None:
            return None
        return self.to_html(full_page=False)

    def __repr__(self) -> str:
        if self.record is None:
            return "<ProfileResult (running)>"
        record = self.record
        counts = ", ".join(f"{k}={v}" for k, v in record.phase_counts().items()) or "no steps"
        error = f", error={record.error.type}" if record.error else ""
        extra = ""
        if self.experiment is not None:
            extra = f", sweep of {self.experiment.variable} over {len(self.experiment.runs)} values"
        elif self.comparison is not None:
            extra = f", vs {self.comparison.baseline}: {self.comparison.verdict}"
        return f"<ProfileResult {counts}, {record.wall_time:.2f} s{error}{extra}>"


def failure_line(stage: str, error: BaseException) -> str:
    """``<stage> failed: <error>`` in one line (a KeyboardInterrupt reads "interrupted")."""
    message = " ".join(str(error).split())[:300]
    kind = type(error).__name__
    if isinstance(error, KeyboardInterrupt):
        return f"{stage} failed: interrupted (KeyboardInterrupt)"
    return f"{stage} failed: {kind}: {message}" if message else f"{stage} failed: {kind}"
