"""A parameter sweep (``%%tfprofile --sweep NAME=V1,V2,...``): one full run per value.

`run_sweep` calls the magic's ``run_one(value)`` for each value in turn. A run that raises an
Exception (an OOM at the largest batch, any error) is a failed row and the sweep goes on; a
KeyboardInterrupt (or another BaseException) ends the sweep with the rows it has, and the caller
re-raises it after showing them. ``gc.collect()`` runs between runs. A failed run keeps its
error as text (type, message, formatted traceback); the exception's traceback is dropped before
the next run, so the frames holding the failed run's model and batches are freed before the next
value allocates (a smaller value after an out-of-memory run must not run out as well). Only the
last run's traceback is kept, for the caller to raise it again when no value completed.

The recommendation is the fastest value whose run completed: by samples per second in steady
state when every completed run knows its batch size, else by the cell's wall time (steps per
second would favour the smallest batch whenever the batch size cannot be seen). It comes with
its margin over the runner-up and its peak memory.
"""

from __future__ import annotations

import gc
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..units import seconds, size
from .compare import factor
from .headline import Headline, Run, finished_record, headline_of
from .noise import WALL_TIME_NOISE, fixed_band, interval_band
from .sweep_spec import SweepSpec, value_label

if TYPE_CHECKING:
    import pandas as pd


RunOne = Callable[[Any], "tuple[Run, BaseException | None]"]

COLUMNS = (
    "value",
    "status",
    "failed",
    "error",
    "steps",
    "step_time",
    "step_interval",
    "batch_size",
    "throughput",
    "throughput_unit",
    "peak_host",
    "peak_device",
    "wall_time",
    "findings",
)


@dataclass
class SweepRun:
    """The run of one value."""

    value: Any
    result: Run
    headline: Headline
    status: str  # "ok", "failed" (an exception) or "interrupted"
    traceback: str = ""  # the formatted traceback of a run that did not complete

    @property
    def label(self) -> str:
        return value_label(self.value)

    def row(self) -> dict[str, Any]:
        h = self.headline
        return {
            "value": self.value,
            "status": self.status,
            "failed": self.status != "ok",
            "error": h.error,
            "steps": h.steps,
            "step_time": h.step_time,
            "step_interval": h.step_interval,
            "batch_size": h.batch_size,
            "throughput": h.throughput,
            "throughput_unit": h.throughput_unit,
            "peak_host": h.peak_host,
            "peak_device": h.peak_device,
            "wall_time": h.wall_time,
            "findings": list(h.findings),
        }


@dataclass
class Recommendation:
    """The fastest value whose run completed, and by how much."""

    variable: str
    value: Any
    measure: str  # "samples/s" or "wall time"
    score: float  # samples/s, or seconds of wall time
    runner_up: Any = None
    has_runner_up: bool = False
    margin: float | None = None  # > 1: how many times better than the runner-up
    within_noise: bool = False
    noise: float = 0.0  # the noise band the margin fell within (0.07: ±7%), when it did
    peak_host: int | None = None
    peak_device: int | None = None
    failed: list[tuple[str, str]] = field(default_factory=list)  # (value label, error type)
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "variable": self.variable,
            "value": value_label(self.value),
            "measure": self.measure,
            "score": self.score,
            "runner_up": value_label(self.runner_up) if self.has_runner_up else None,
            "margin": self.margin,
            "within_noise": self.within_noise,
            "peak_host": self.peak_host,
            "peak_device": self.peak_device,
            "failed": [{"value": v, "error": e} for v, e in self.failed],
            "text": self.text,
        }

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)


@dataclass
class Sweep:
    """The runs of a sweep, in the order of the values."""

    spec: SweepSpec
    runs: list[SweepRun] = field(default_factory=list)
    interrupted: bool = False
    overridden_lines: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the profiler's own failures between runs

    @property
    def variable(self) -> str:
        return self.spec.name

    @property
    def not_run(self) -> list[Any]:
        return list(self.spec.values[len(self.runs) :])

    @property
    def frame(self) -> pd.DataFrame:
        """A row per value that ran (see `COLUMNS`); ``attrs["variable"]`` names the variable."""
        import pandas as pd

        frame = pd.DataFrame([run.row() for run in self.runs], columns=list(COLUMNS))
        frame.attrs["variable"] = self.variable
        return frame

    def recommendation(self) -> Recommendation | None:
        return recommend(self)

    def shown(self) -> SweepRun | None:
        """The run the report shows: the recommended one, else the last one."""
        best = self.recommendation()
        if best is not None:
            for run in self.runs:
                if run.status == "ok" and run.value is best.value:
                    return run
        return self.runs[-1] if self.runs else None

    def to_dict(self) -> dict[str, Any]:
        best = self.recommendation()
        shown = self.shown()
        rows = []
        for run in self.runs:
            row = run.row()
            row["value"] = run.label
            row["value_json"] = _json_value(run.value)
            rows.append(row)
        return {
            "variable": self.variable,
            "values": self.spec.labels,
            "rows": rows,
            "recommendation": best.to_dict() if best is not None else None,
            "shown": shown.label if shown is not None else None,
            "interrupted": self.interrupted,
            "not_run": [value_label(v) for v in self.not_run],
            "overridden_lines": list(self.overridden_lines),
        }


def _json_value(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return value


def run_sweep(
    spec: SweepSpec,
    run_one: RunOne,
    on_run: Callable[[SweepRun, int], None] | None = None,
    overridden_lines: list[int] | None = None,
) -> tuple[Sweep, BaseException | None]:
    """Run every value; returns the sweep and the interruption that ended it early, if any."""
    sweep = Sweep(spec=spec, overridden_lines=list(overridden_lines or []))
    stop: BaseException | None = None
    failure: BaseException | None = None  # the previous run's error, traceback still on
    for index, value in enumerate(spec.values):
        try:
            if index:
                if failure is not None:
                    drop_traceback(failure)
                    failure = None
                gc.collect()  # the previous run's model and tensors, before the next allocates
            result, error = run_one(value)
        except Exception:
            raise  # not the cell's error (the run returns those): a fault of the profiler
        except BaseException as exc:  # interrupted outside the cell: no row for this value
            sweep.interrupted = True
            stop = exc
            break
        if error is None:
            status = "ok"
        elif isinstance(error, Exception):
            status = "failed"
            failure = error
        else:
            status = "interrupted"
        try:
            run = SweepRun(value, result, _headline(sweep, result), status, error_text(error))
            sweep.runs.append(run)
            if on_run is not None:
                on_run(run, index)
        except Exception as exc:  # a row or progress line that fails: the sweep goes on
            sweep.problems.append(f"sweep row of {value_label(value)} failed: {_line(exc)}")
        except BaseException as exc:  # an interrupt between runs ends the sweep, as in one
            sweep.interrupted = True
            stop = exc
            break
        if status == "interrupted":
            sweep.interrupted = True
            stop = error
            break
    gc.collect()
    return sweep, stop


def _headline(sweep: Sweep, result: Run) -> Headline:
    try:
        return headline_of(finished_record(result), result.findings)
    except Exception as exc:  # the row still says how the run ended
        sweep.problems.append(f"sweep headline failed: {_line(exc)}")
        record = result.record
        error = record.error if record is not None else None
        return Headline(
            phase=None,
            kind=None,
            steps=0,
            step_time=None,
            step_interval=None,
            batch_size=None,
            throughput=None,
            throughput_unit="",
            compute_share=None,
            data_wait_share=None,
            other_share=None,
            peak_host=None,
            host_added=None,
            peak_device=None,
            wall_time=record.wall_time if record is not None else 0.0,
            failed=error is not None,
            error=f"{error.type}: {error.message}" if error is not None else None,
            error_type=error.type if error is not None else None,
        )


def _line(error: BaseException) -> str:
    message = " ".join(str(error).split())[:300]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def error_text(error: BaseException | None) -> str:
    """The formatted traceback of `error` (with its causes), as Python would print it."""
    if error is None:
        return ""
    try:
        return "".join(traceback.format_exception(error))
    except Exception:  # an exception whose str() fails: its type is still worth keeping
        return type(error).__name__


def drop_traceback(error: BaseException) -> None:
    """Free the frames `error` holds (and those of its causes and contexts): their locals are
    the failed run's model, batches and tensors. The error's type and message stay."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)


def recommend(sweep: Sweep) -> Recommendation | None:
    ok = [run for run in sweep.runs if run.status == "ok"]
    if not ok:
        return None
    by_samples = all(
        r.headline.throughput_unit == "samples/s" and r.headline.throughput for r in ok
    )
    if by_samples:
        ranked = sorted(ok, key=lambda r: -(r.headline.throughput or 0.0))
        score = float(ranked[0].headline.throughput or 0.0)
        measure = "samples/s"
    else:
        ranked = sorted(ok, key=lambda r: r.headline.wall_time)
        score = float(ranked[0].headline.wall_time)
        measure = "wall time"
    best = ranked[0]
    rec = Recommendation(
        variable=sweep.variable,
        value=best.value,
        measure=measure,
        score=score,
        peak_host=best.headline.peak_host,
        peak_device=best.headline.peak_device,
        failed=[
            (r.label, r.headline.error_type or r.status) for r in sweep.runs if r.status != "ok"
        ],
    )
    if len(ranked) > 1:
        second = ranked[1]
        rec.runner_up, rec.has_runner_up = second.value, True
        if by_samples:
            other = second.headline.throughput or 0.0
            rec.margin = score / other if other > 0 else None
            if rec.margin is not None:
                band = interval_band(
                    rec.margin,
                    second.headline.intervals,
                    best.headline.intervals,
                    (second.headline.cpu_wait_per_step, best.headline.cpu_wait_per_step),
                    (second.headline.cpu_share, best.headline.cpu_share),
                )
        else:
            rec.margin = second.headline.wall_time / score if score > 0 else None
            if rec.margin is not None:
                band = fixed_band(rec.margin, WALL_TIME_NOISE)
        if rec.margin is not None:
            rec.within_noise = not band.measurable
            rec.noise = band.half_width
    rec.text = _text(sweep, rec)
    return rec


def _text(sweep: Sweep, rec: Recommendation) -> str:
    name = sweep.variable
    label = value_label(rec.value)
    if rec.measure == "samples/s":
        head = f"{name}={label}: {rec.score:,.0f} samples/s in steady state"
    else:
        head = f"{name}={label}: the shortest wall time, {seconds(rec.score)}"
    if rec.has_runner_up and rec.margin is not None:
        other = f"{name}={value_label(rec.runner_up)}"
        if rec.within_noise:
            head += f", within the noise (±{rec.noise:.0%}) of {other}: either will do"
        else:
            head += f", {factor(rec.margin)} the runner-up ({other})"
    memory = []
    if rec.peak_host is not None:
        memory.append(f"peak host memory {size(rec.peak_host)}")
    if rec.peak_device is not None:
        memory.append(f"peak device memory {size(rec.peak_device)}")
    if memory:
        head += "; " + ", ".join(memory)
    text = head + "."
    failed = [f"{name}={v} ({e})" for v, e in rec.failed]
    if failed:
        text += " Did not complete: " + ", ".join(failed) + "."
    if sweep.not_run:
        text += " Not run: " + ", ".join(value_label(v) for v in sweep.not_run) + "."
    return text
