"""One fixed cell: every finding's rewrite applied in turn to the cell, root causes first.

Each finding's fix is made again on the cell as the fixes before it left it (from how it was
made: the rewrite function and its facts, `Finding.recipe`), not pasted from its own rewrite
of the original: so the tf.data pipeline that one fix builds still gets the tensor step that
another makes. A fix that no longer applies to the changed cell is left out (the cell already
has it, or another fix took its place); every rewrite parses and compiles its result.
"""

from __future__ import annotations

from ..findings import Finding
from .evidence import rewrite


def combined_rewrite(findings: list[Finding], source: str | None) -> str | None:
    """The cell with every applicable fix made; None unless two or more fixes went in (one
    is the finding's own rewrite)."""
    if not source:
        return None
    ordered = [f for f in findings if f.caused_by is None] + [
        f for f in findings if f.caused_by is not None
    ]
    current, applied = source, 0
    for finding in ordered:
        if finding.rewrite is None or finding.recipe is None:
            continue
        function, facts = finding.recipe
        changed = rewrite(function, current, **facts)
        if changed is not None:
            current, applied = str(changed), applied + 1
    return current if applied >= 2 else None
