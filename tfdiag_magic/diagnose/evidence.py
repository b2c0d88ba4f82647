"""Shared measurements for the diagnosis rules: which rows are training steps, steady-state
step times, loops of the cell, and attaching a rewrite of the cell to a finding."""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..findings import Finding
from ..record import KerasCall, Phase, Record
from ..stats import warmup_mask


def training_rows(record: Record) -> np.ndarray:
    return np.flatnonzero(record.steps["phase"] == Phase.TRAIN)


def steady_rows(record: Record, rows: np.ndarray) -> np.ndarray:
    """`rows` without warm-up (first step of a phase, tracing steps)."""
    warm = warmup_mask(record)
    return rows[~warm[rows]]


def median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def loop_line(record: Record, loop_id: int) -> int | None:
    """The loop's line in `record.source`, the text the rewrites are given.

    Recorded loop lines count the ``%%tfprofile`` line of the cell, as the notebook and
    tracebacks show them (`loop_label`); the recorded source is the cell without it.
    """
    for loop in record.loops:
        if loop.id == loop_id:
            return loop.lineno - source_line_offset(record)
    return None


def source_line_offset(record: Record) -> int:
    """Lines that recorded loop lines count before `record.source` begins: 1 when the cell ran
    under a ``%%tfprofile`` line that the source does not hold, 0 otherwise."""
    source = record.source
    heads = [(loop.lineno, loop.source.strip()) for loop in record.loops if loop.source.strip()]
    # The lines memory samples and model builds point at, with their text as compiled.
    heads += [(lineno, text) for lineno, text in record.lines.items() if text]
    if not source or not heads:
        return 0
    lines = source.splitlines()
    # The offset most heads agree with (IPython's own transforms may change a line's text:
    # a line magic is compiled as a call), 1 where both agree as much.
    matches = {
        offset: sum(
            0 < lineno - offset <= len(lines)
            and lines[lineno - offset - 1].strip().startswith(head.splitlines()[0])
            for lineno, head in heads
        )
        for offset in (1, 0)
    }
    best = max(matches, key=lambda offset: (matches[offset], offset))
    return best if matches[best] else 0


def loop_label(record: Record, loop_id: int) -> str:
    for loop in record.loops:
        if loop.id == loop_id:
            text = loop.source.strip().splitlines()[0] if loop.source.strip() else ""
            return f"line {loop.lineno}: {text[:80]}" if text else f"line {loop.lineno}"
    return "the cell" if loop_id < 0 else f"loop {loop_id}"


def call_label(record: Record, call: KerasCall) -> str:
    """Where a Keras call was made: ``line 17: model.fit(train, epochs=30)`` (the line's text
    where the run kept it), and where it was made in a function of the code's own, the line
    that called that function (``..., called from line 40: compile_and_fit(lstm, window)``);
    the model's name where the line is not known."""
    if call.line < 0:
        return f"model '{call.model}'"
    label = _line_text(record, call.line)
    if call.caller_line >= 0 and call.caller_line != call.line:
        label += f", called from {_line_text(record, call.caller_line)}"
    return label


def _line_text(record: Record, line: int) -> str:
    """``line 17: model.fit(train, epochs=30)``: the line of the profiled code and its text,
    where the run kept it (at most 80 characters)."""
    text = record.lines.get(line, "")
    return f"line {line}: {clip(text)}" if text else f"line {line}"


def clip(text: str, length: int = 80) -> str:
    """`text` cut to `length` characters, an ellipsis its last where it was cut."""
    return text if len(text) <= length else text[: length - 1] + "…"


def rounded(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


RewriteFunction = Callable[..., "str | None"]
ProblemSink = Callable[[str, BaseException], Any]

_problem_sink: contextvars.ContextVar[ProblemSink | None] = contextvars.ContextVar(
    "tfdiag_problem_sink", default=None
)


@contextlib.contextmanager
def problems_to(sink: ProblemSink | None) -> Iterator[None]:
    """Within the block, a failing rule or rewrite is also handed to `sink(stage, error)` (the
    result's "Profiler problems"), besides the line on stderr."""
    token = _problem_sink.set(sink)
    try:
        yield
    finally:
        _problem_sink.reset(token)


def report_problem(stage: str, error: BaseException) -> None:
    """A failure of the diagnosis itself: a line on stderr, and one in the report."""
    print(f"tfdiag_magic: {stage} failed: {type(error).__name__}: {error}", file=sys.stderr)
    sink = _problem_sink.get()
    if sink is not None:
        sink(stage, error)


def rewrite(function: RewriteFunction, source: str | None, /, **facts: Any) -> str | None:
    """`function` (one of `tfdiag_magic.rewrite`) run on the cell; None when it does not apply.

    A rewrite that fails is reported like a failing rule, and the finding stands on its numbers
    alone.
    """
    if not source:
        return None
    try:
        result = function(source, **facts)
    except Exception as exc:
        report_problem(f"the {function.__name__} rewrite", exc)
        return None
    if not isinstance(result, str) or result.strip() == source.strip():
        return None
    return Rewritten(result, (function, facts))


class Rewritten(str):
    """A rewritten cell that remembers how it was made (`recipe`: the function and facts),
    so the same fix can be applied again to a cell that other fixes changed already."""

    recipe: tuple[RewriteFunction, dict[str, Any]] | None

    def __new__(cls, text: str, recipe: tuple[RewriteFunction, dict[str, Any]]) -> Rewritten:
        made = super().__new__(cls, text)
        made.recipe = recipe
        return made


def with_rewrite(finding: Finding, source: str | None, new_source: str | None) -> Finding:
    """Attach the rewritten cell and its diff to the finding (and, for `combined`, how it
    was made)."""
    if source and new_source:
        from ..rewrite.common import unified_diff

        finding.rewrite = str(new_source)
        finding.diff = unified_diff(source, new_source)
        finding.recipe = getattr(new_source, "recipe", None)
    return finding


def first_rewrite(
    source: str | None, *attempts: tuple[RewriteFunction, dict[str, Any]]
) -> str | None:
    """The first of the rewrites tried in order that applies to the cell."""
    for function, facts in attempts:
        result = rewrite(function, source, **facts)
        if result is not None:
            return result
    return None
