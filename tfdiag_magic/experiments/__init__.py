"""Experiments over a profiled cell: compare a run with an earlier one, sweep a variable.

- `headline`: the comparable numbers of one run (step time, throughput, time split, memory).
- `compare`: a run against a baseline run: a table, a verdict, resolved and new findings.
- `sweep_spec`: parsing ``NAME=V1,V2,...``.
- `override`: making a sweep's value win over the cell's own top-level assignment.
- `sweep`: running the cell once per value, the table of runs and the recommendation.

Nothing here imports TensorFlow: these are pure functions of records and results.
"""

from __future__ import annotations

from .compare import Comparison, compare
from .headline import Headline, headline_of
from .sweep import Recommendation, Sweep
from .sweep_spec import SweepSpec, SweepSpecError, parse_sweep_spec

__all__ = [
    "Comparison",
    "Headline",
    "Recommendation",
    "Sweep",
    "SweepSpec",
    "SweepSpecError",
    "compare",
    "headline_of",
    "parse_sweep_spec",
]
