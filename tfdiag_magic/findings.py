"""A finding: one diagnosed problem of a run, with a stable code and the numbers it rests on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]


@dataclass
class Finding:
    code: str  # stable, e.g. "retracing"; the JSON report and the docs use it
    severity: Severity
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    rewrite: str | None = None  # the user's cell, rewritten to fix it, when there is one

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
