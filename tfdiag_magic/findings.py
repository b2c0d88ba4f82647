"""A finding: one diagnosed problem of a run, with a stable code and the numbers it rests on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass
class Finding:
    """One diagnosed problem. `evidence` holds the measured numbers the finding rests on."""

    code: str  # stable, e.g. "retracing"; the JSON report and the docs use it
    severity: Severity
    title: str  # one line, with the headline number
    detail: str = ""  # what was measured and why it matters, in a few sentences
    fix: str = ""  # what to change, in words
    evidence: dict[str, Any] = field(default_factory=dict)
    rewrite: str | None = None  # the user's cell, rewritten to fix it, when there is one
    diff: str | None = None  # unified diff from the cell to `rewrite`
    impact: float = 0.0  # seconds of the run this problem accounts for (estimate; for ordering)
    # The code of the finding that explains this one (its root cause), with the measured link
    # in `evidence`; None for a finding of its own. Fixing the cause makes this one go.
    caused_by: str | None = None
    # How `rewrite` was made: (rewrite function, facts), so that the rewrites of several
    # findings can be composed into one cell (`diagnose.combined`); not part of the report.
    recipe: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["recipe"]
        return data

    def sort_key(self) -> tuple[int, float]:
        return SEVERITY_ORDER.get(self.severity, 3), -self.impact
