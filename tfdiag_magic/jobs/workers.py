"""One worker of a job, as its JSON report (schema 1) tells it: its name, its steady step, and
how much of its training time it spent waiting for input, over the run and along its steps."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class NotAReportError(ValueError):
    """A file given to merge that is not a tfdiag_magic JSON report."""


@dataclass
class Worker:
    """A worker's report, read for the merge."""

    path: str
    name: str  # "worker 1", "chief 0"; the file's name for a report without a worker
    task_type: str | None
    task_index: int | None
    steps: int  # training steps
    median_step_s: float | None  # steady training step (NaN-free: None where none)
    wall_s: float
    # Seconds of training waiting for input (the loops' next() and the in-step waits measured
    # on iterators given to functions) and the seconds they were measured over
    input_wait_s: float
    input_measured_s: float
    host_peak_bytes: float | None
    findings: list[dict[str, Any]]
    # (steps done, cumulative input wait, cumulative measured seconds) along the run
    input_series: list[tuple[float, float, float]] = field(default_factory=list)
    # The training steps' durations and intervals by step index (the report's `step_series`);
    # None for a report written before it was kept
    step_series: dict[str, Any] | None = None
    # Collective communication per step, from the worker's ops window (``--ops``); None where
    # no window was captured: then only compute and collective together are known
    collective_s: float | None = None
    wait_in_step: bool = False  # the input wait was measured inside the steps (their iterator)
    report: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def beyond_input_s(self) -> float | None:
        """The median step less the mean input wait per step: the worker's compute and its
        wait for the others in the collective, together (not separable without the ops
        window)."""
        if self.median_step_s is None or self.steps <= 0:
            return None
        # The meter's wait is spans less the pipeline's own gaps: within its noise it can
        # read a little below zero (-18 µs a step once), which is no wait at all.
        wait = max(self.input_wait_s, 0.0) / self.steps if self.wait_in_step else 0.0
        return max(self.median_step_s - wait, 0.0)

    @property
    def input_wait_share(self) -> float | None:
        if self.input_measured_s <= 0:
            return None
        return max(self.input_wait_s, 0.0) / self.input_measured_s

    def to_dict(self) -> dict[str, Any]:
        share = self.input_wait_share
        return {
            "name": self.name,
            "task_type": self.task_type,
            "task_index": self.task_index,
            "path": self.path,
            "steps": self.steps,
            "median_step_s": self.median_step_s,
            "wall_s": self.wall_s,
            "input_wait_s": self.input_wait_s,
            "input_wait_share": share,
            "host_peak_bytes": self.host_peak_bytes,
            "findings": [f["code"] for f in self.findings],
            "compute_and_collective_s": self.beyond_input_s,
            "collective_s": self.collective_s,
            "step_series": self.step_series,
        }


def read_worker(path: str | Path) -> Worker:
    """The worker of the report at `path`; `NotAReportError` for anything else."""
    path = Path(path).expanduser()
    if not path.exists():
        raise NotAReportError(f"{path}: no such file or folder")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotAReportError(f"{path}: not a readable JSON report ({exc})") from exc
    if not isinstance(report, dict) or report.get("schema") != 1 or "steps" not in report:
        raise NotAReportError(f"{path}: not a tfdiag_magic JSON report (schema 1)")
    return worker_of(report, str(path))


def worker_of(report: dict[str, Any], path: str) -> Worker:
    worker = (report.get("environment") or {}).get("worker") or {}
    task_type = worker.get("task_type")
    task_index = worker.get("task_index")
    name = f"{task_type} {task_index}" if task_type is not None else Path(path).name
    train = report["steps"]["phases"].get("train") or {}
    median = train.get("median") if train.get("steady_count") else train.get("median_all")
    wait, measured, series = _input_wait(report)
    host = (report.get("memory") or {}).get("host_rss") or {}
    return Worker(
        path=path,
        name=name,
        task_type=task_type,
        task_index=task_index,
        steps=int(report["steps"].get("count") or 0),
        median_step_s=_number(median),
        wall_s=float(report.get("wall_time") or 0.0),
        input_wait_s=wait,
        input_measured_s=measured,
        host_peak_bytes=_number(host.get("peak")),
        findings=list(report.get("findings") or []),
        input_series=series,
        step_series=report.get("step_series"),
        collective_s=_collective(report),
        wait_in_step=_measured_in_steps(report),
        report=report,
    )


def _measured_in_steps(report: dict[str, Any]) -> bool:
    return any(
        f.get("input_elements") and f.get("input_span") for f in report.get("functions") or []
    )


def _collective(report: dict[str, Any]) -> float | None:
    """Seconds of collective communication per step in the worker's ops window, if captured."""
    ops = report.get("ops") or {}
    if ops.get("status") != "captured":
        return None
    return _number((ops.get("split") or {}).get("collective"))


def _input_wait(report: dict[str, Any]) -> tuple[float, float, list[tuple[float, float, float]]]:
    """The worker's input wait: measured inside its steps on the iterators its functions were
    given, where they were (the distributed guides' `train_step(iterator)`), else its loops'
    waits for the next batch against its training time."""
    measured = [
        f for f in report.get("functions") or [] if f.get("input_elements") and f.get("input_span")
    ]
    if measured:
        best = max(measured, key=lambda f: f["input_elements"])
        series = [(float(s), float(w), float(t)) for s, w, t in best.get("input_series") or []]
        return float(best["input_wait"]), float(best["input_span"]), series
    train = report["steps"]["phases"].get("train") or {}
    wait = float(train.get("data_wait") or 0.0)  # None: no wait was seen
    busy = float(train.get("total_time") or 0.0)
    return wait, wait + busy, []


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None
