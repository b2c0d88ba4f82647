"""`GPUReport`: what ``%tfgpu`` shows and ``%tfgpu -o NAME`` stores.

The facts, the problems found in them and the verdict, with the views a user reaches for:
text in a terminal (``_repr_pretty_``), HTML in a notebook (``_repr_html_``), ``to_dict()`` and
``to_json()``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..diagnose.gpu_rules import problems, verdict
from .facts import SCHEMA, collect_facts


@dataclass
class GPUReport:
    """The GPU doctor's answer: `verdict` first, then `problems` (with fixes) and `facts`."""

    facts: dict[str, Any]
    problems: list[dict[str, Any]] = field(default_factory=list)
    verdict: str = ""

    @classmethod
    def from_facts(cls, facts: dict[str, Any]) -> GPUReport:
        found = problems(facts)
        return cls(facts=facts, problems=found, verdict=verdict(facts, found))

    @property
    def codes(self) -> list[str]:
        """The codes of the problems found, most severe first."""
        return [p["code"] for p in self.problems]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "problems": self.problems,
            "facts": self.facts,
        }

    def to_json(self, path: str | Path | None = None, indent: int | None = 2) -> str:
        text = json.dumps(self.to_dict(), indent=indent, allow_nan=False)
        if path is not None:
            from ..files import write_text_atomic

            write_text_atomic(path, text + "\n")
        return text

    def text(self) -> str:
        from .render import render_text

        return render_text(self.to_dict())

    def to_html(self) -> str:
        from .render import render_html

        return render_html(self.to_dict())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("<GPUReport>" if cycle else self.text())

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        return f"<GPUReport: {self.verdict}>"


def collect_report(tf: ModuleType | None = None) -> GPUReport:
    """Read every fact (importing TensorFlow if needed, never initialising it) and diagnose."""
    return GPUReport.from_facts(collect_facts(tf, full=True))
