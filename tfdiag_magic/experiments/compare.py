"""A run compared with an earlier one (``%%tfprofile --compare NAME``): table, verdict, findings.

"Faster" is measured on the most specific number both runs have, and the verdict names it:

1. samples per second in steady state, when both runs' main phase is the same and both know
   their batch size;
2. else the steady time per step (start to start), when both runs' main phase is the same and
   its steps are of the same kind (both Keras batches, both tf.function calls, ...);
3. else the cell's wall time.

A difference reads "faster" or "slower" only when it is more than noise (`noise.py`): with
per-step intervals in both runs, when the fastest steps moved by at least 15% with a bootstrap
interval that excludes 1; by wall time alone, at least 35%. Otherwise the verdict says "no
measurable change", and within how much. A run that failed is not timed against one that
completed: the verdict says which failed. Memory is mentioned when its peak moved by
`MEMORY_NOTE` (10%) or more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..units import seconds, size
from .headline import Headline, Run, finished_record, headline_of
from .noise import WALL_TIME_NOISE, Band, fixed_band, interval_band

if TYPE_CHECKING:
    import pandas as pd


MEMORY_NOTE = 0.10
ADDED_NOTE_BYTES = 64 * (1 << 20)  # as much as host-memory-growth asks for

MEASURES = {
    "samples/s": "samples/s in steady state",
    "step interval": "time per step in steady state (start to start)",
    "wall time": "the cell's wall time",
}

# (metric, Headline field, unit) in the order of the table
METRICS: tuple[tuple[str, str, str], ...] = (
    ("wall time", "wall_time", "s"),
    ("steps", "steps", ""),
    ("steady step time", "step_time", "s"),
    ("time per step (start to start)", "step_interval", "s"),
    ("throughput", "throughput", ""),
    ("compute share", "compute_share", ""),
    ("data wait share", "data_wait_share", ""),
    ("other share", "other_share", ""),
    ("peak host memory", "peak_host", "bytes"),
    ("host memory added by the run", "host_added", "bytes"),
    ("peak device memory", "peak_device", "bytes"),
    ("findings", "findings", ""),
)


@dataclass
class Comparison:
    """This run against `baseline` (the name it was stored under with ``-o``)."""

    baseline: str
    before: Headline
    after: Headline
    measure: str | None  # "samples/s", "step interval", "wall time"; None: not timed
    speedup: float | None  # > 1: this run is faster by that factor on `measure`
    verdict: str
    band: Band | None = None  # the range `speedup` could take from noise alone
    resolved: list[str] = field(default_factory=list)  # finding codes gone in this run
    new: list[str] = field(default_factory=list)  # finding codes this run has and the baseline not
    persisting: list[str] = field(default_factory=list)

    @property
    def frame(self) -> pd.DataFrame:
        """A row per metric: before, after, and the change (after / before - 1)."""
        import pandas as pd

        rows = self.rows()
        frame = pd.DataFrame(
            [[r["before"], r["after"], r["change"]] for r in rows],
            index=pd.Index([r["metric"] for r in rows], name="metric"),
            columns=["before", "after", "change"],
        )
        frame.attrs["baseline"] = self.baseline
        return frame

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for metric, name, unit in METRICS:
            before, after = getattr(self.before, name), getattr(self.after, name)
            if name == "throughput":
                unit = self.after.throughput_unit or self.before.throughput_unit
                if self.before.throughput_unit != self.after.throughput_unit:
                    before = after = None  # samples/s against steps/s is no comparison
            if name == "findings":
                before, after = len(before), len(after)
            rows.append(
                {
                    "metric": metric,
                    "unit": unit,
                    "before": before,
                    "after": after,
                    "change": _change(before, after),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "measure": self.measure,
            "measure_text": MEASURES.get(self.measure or ""),
            "speedup": self.speedup,
            "noise_band": [self.band.low, self.band.high] if self.band is not None else None,
            "verdict": self.verdict,
            "resolved": list(self.resolved),
            "new": list(self.new),
            "persisting": list(self.persisting),
            "rows": self.rows(),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }

    def __str__(self) -> str:
        return f"Compared with {self.baseline}: {self.verdict}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def _change(before: Any, after: Any) -> float | None:
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return None
    if before == 0:
        return None
    return float(after) / float(before) - 1.0


def compare(baseline: Run, result: Run, name: str) -> Comparison:
    """`result` against `baseline`, stored under `name`."""
    before = headline_of(finished_record(baseline), baseline.findings)
    after = headline_of(finished_record(result), result.findings)
    return compare_headlines(before, after, name)


def compare_headlines(before: Headline, after: Headline, name: str) -> Comparison:
    measure, band = _speed(before, after)
    speedup = band.ratio if band is not None else None
    resolved = [c for c in before.findings if c not in after.findings]
    new = [c for c in after.findings if c not in before.findings]
    persisting = [c for c in after.findings if c in before.findings]
    parts = [_speed_text(before, after, measure, band)]
    parts.extend(_memory_text(before, after))
    verdict = ", ".join(p for p in parts if p)
    notes = []
    if resolved:
        notes.append("resolved: " + ", ".join(resolved))
    if new:
        notes.append("new: " + ", ".join(new))
    if notes:
        verdict += "; " + "; ".join(notes)
    return Comparison(
        baseline=name,
        before=before,
        after=after,
        measure=measure,
        speedup=speedup,
        verdict=verdict,
        band=band,
        resolved=resolved,
        new=new,
        persisting=persisting,
    )


def _speed(before: Headline, after: Headline) -> tuple[str | None, Band | None]:
    """The measure both runs share, and the speed-up on it with its noise band."""
    if before.failed or after.failed:
        return None, None
    same_phase = before.phase is not None and before.phase == after.phase
    waits = (before.cpu_wait_per_step, after.cpu_wait_per_step)
    shares = (before.cpu_share, after.cpu_share)
    if (
        same_phase
        and before.throughput_unit == after.throughput_unit == "samples/s"
        and before.throughput
        and after.throughput
    ):
        ratio = after.throughput / before.throughput
        return "samples/s", interval_band(ratio, before.intervals, after.intervals, waits, shares)
    if same_phase and before.kind == after.kind and before.step_interval and after.step_interval:
        ratio = before.step_interval / after.step_interval
        return "step interval", interval_band(
            ratio, before.intervals, after.intervals, waits, shares
        )
    if before.wall_time > 0 and after.wall_time > 0:
        return "wall time", fixed_band(before.wall_time / after.wall_time, WALL_TIME_NOISE)
    return None, None


def factor(ratio: float) -> str:
    """2.0 -> "2.0×"; 1.37 -> "1.37×"; 12.3 -> "12×"."""
    if ratio >= 10:
        return f"{ratio:.0f}×"
    if ratio >= 2:
        return f"{ratio:.1f}×"
    return f"{ratio:.2f}×"


def _speed_text(before: Headline, after: Headline, measure: str | None, band: Band | None) -> str:
    if after.failed and before.failed:
        return f"both runs failed (baseline: {before.error_type}; this run: {after.error_type})"
    if after.failed:
        return f"this run failed with {after.error_type} (the baseline completed)"
    if before.failed:
        return f"completes now (the baseline failed with {before.error_type}); not timed"
    if measure is None or band is None:
        return "speed not comparable (no time was measured)"
    by = f"by {MEASURES[measure]}"
    speedup = band.ratio
    if not band.measurable:
        busy = (
            f": a busy machine, its threads waited {seconds(band.cpu_wait)} a step for a CPU"
            if band.cpu_wait is not None
            else ""
        )
        return (
            f"no measurable change in speed ({factor(speedup)} {by},"
            f" within the noise of ±{band.half_width:.0%}{busy})"
        )
    if band.mean_agrees:
        return f"{factor(_inverse(speedup))} {_direction(speedup)} {by}"
    fast = band.deciding
    return (
        f"{factor(_inverse(fast))} {_direction(fast)} at its fastest steps (the 10th"
        f" percentile of the time per step); {factor(speedup)} {by}, blurred by a busy machine"
    )


def _direction(ratio: float) -> str:
    return "faster" if ratio > 1 else "slower"


def _inverse(ratio: float) -> float:
    """How many times faster or slower: 0.5 -> 2.0."""
    return ratio if ratio > 1 else 1 / ratio


def _memory_text(before: Headline, after: Headline) -> list[str]:
    notes = []
    for label, name in (("peak host memory", "peak_host"), ("peak device memory", "peak_device")):
        change = _change(getattr(before, name), getattr(after, name))
        if change is not None and abs(change) >= MEMORY_NOTE:
            notes.append(f"{label} {_signed_percent(change)}")
    # What the run itself added: small amounts move by allocator noise, so only when one of
    # the two runs added at least ADDED_NOTE_BYTES.
    first, second = before.host_added, after.host_added
    change = _change(first, second)
    if (
        change is not None
        and first is not None
        and second is not None
        and abs(change) >= MEMORY_NOTE
        and max(first, second) >= ADDED_NOTE_BYTES
        and not any(n.startswith("peak host") for n in notes)
    ):
        notes.append(f"host memory added by the run {size(first)} → {size(second)}")
    return notes


def _signed_percent(change: float) -> str:
    value = round(100 * change)
    return f"+{value}%" if value > 0 else f"−{-value}%"
