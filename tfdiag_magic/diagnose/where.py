"""Where a measured change happened: the lines of the profiled code that were running at the
memory samples, each credited with the growth between the samples around it.

Every memory sample records the line of the cell or script that was running when it was taken
(`Record.memory["line"]`, the innermost frame of the profiled code on the stack). The growth
between two consecutive samples is credited half to the line running at each of them, so a
line gets the growth that came while it ran; a loop that finished before the growth began has
no sample inside it and gets none. Lines inside a loop of the code are also credited to that
loop (its header line): what grows per step usually comes from the whole body, whose lines
take turns at the samples.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..record import ModelBuilt, Record
from .evidence import clip, source_line_offset

OUTSIDE = -1  # samples taken while no line of the profiled code was on the stack


@dataclass
class Place:
    """The part of the profiled code that was running during a measured change."""

    line: int  # the line credited most (numbered as tracebacks number it)
    text: str  # that line's text ("" when unknown)
    share: float  # of the change, the part credited to `line` (0..1)
    loop_line: int | None = None  # the innermost loop of the code holding `line`, if any
    loop_text: str = ""
    loop_share: float = 0.0  # of the change, the part credited to that loop's lines

    @property
    def label(self) -> str:
        """``line N: text``: the loop when the line is inside one, else the line."""
        if self.loop_line is not None:
            return line_label(self.loop_line, self.loop_text)
        return line_label(self.line, self.text)

    @property
    def line_label(self) -> str:
        return line_label(self.line, self.text)

    def sentence(self, what: str = "the growth") -> str:
        """Where it happened, as a sentence ("92 % of the growth came while ... ran.")."""
        if self.loop_line is not None:
            head = (
                f"{percent(self.loop_share)} of {what} came while the loop at line"
                f" {self.loop_line} ran (`{clip(self.loop_text)}`)"
            )
            if self.line != self.loop_line:
                head += (
                    f", {percent(self.share)} of it while line {self.line} ran"
                    f" (`{clip(self.text)}`)"
                )
            return head + "."
        return (
            f"{percent(self.share)} of {what} came while line {self.line} ran"
            f" (`{clip(self.text)}`)."
        )

    def evidence(self) -> dict[str, object]:
        found: dict[str, object] = {
            "where_line": self.line_label,
            "where_share": round(self.share, 3),
        }
        if self.loop_line is not None:
            found["where_loop_share"] = round(self.loop_share, 3)
        return found


def line_label(line: int, text: str) -> str:
    return f"line {line}: {clip(text)}" if text else f"line {line}"


def percent(share: float) -> str:
    return f"{100 * share:.0f} %"


def growth_place(
    record: Record,
    values: np.ndarray,
    start: float,
    end: float,
    spans: list[tuple[float, float]] | None = None,
) -> Place | None:
    """The place credited with most of the rise of `values` (a memory series) between `start`
    and `end` (seconds into the run), over pairs of consecutive read samples both inside that
    time and inside one of `spans` (None: anywhere); None when no sample points at the code.

    Each pair's rise is shared among the lines running at its two samples and at the samples
    between them, whose value was not read (-1: a paced read skipped, see `paced_read`; their
    line is always read): two neighbouring samples share it half and half."""
    lines, times = _sample_lines(record, values)
    if lines is None or not (start <= end):
        return None
    read = np.flatnonzero((times >= start) & (times <= end) & (values >= 0))
    if read.size < 2:
        return None
    first, last = read[:-1], read[1:]
    if spans is not None:
        span_of = np.full(times.size, -1)
        for index, (begin, finish) in enumerate(spans):
            span_of[(times >= begin) & (times <= finish)] = index
        same_span = (span_of[first] == span_of[last]) & (span_of[first] >= 0)
        first, last = first[same_span], last[same_span]
    if first.size == 0:
        return None
    counts = last - first + 1  # the samples each pair's rise is shared among
    shares = (values[last] - values[first]).astype(np.float64) / counts
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    samples = np.repeat(first, counts) + offsets
    running, index = np.unique(lines[samples], return_inverse=True)
    sums = np.bincount(index.reshape(-1), weights=np.repeat(shares, counts))
    return _place(record, Counter(dict(zip(running.tolist(), sums.tolist(), strict=True))))


def running_place(record: Record, start: float, end: float) -> Place | None:
    """The place running at most of the memory samples between `start` and `end`: each sample
    counts the same, a share of the time (the samples come every `memory_interval` at most)."""
    lines, times = _sample_lines(record, None)
    if lines is None:
        return None
    inside = (times >= start) & (times <= end)
    running, counts = np.unique(lines[inside], return_counts=True)
    return _place(record, Counter(dict(zip(running.tolist(), counts.tolist(), strict=True))))


def models_built_at(models: list[ModelBuilt]) -> list[tuple[int, int]]:
    """(line, models built there) for each line of the code that built some of `models`,
    the line that built most first."""
    return Counter(m.line for m in models if m.line > 0).most_common()


def code_text(record: Record) -> str | None:
    """The profiled code with its lines numbered as the samples number them (a cell's
    ``%%tfprofile`` line counted: a blank line stands for it); None without a source."""
    if not record.source:
        return None
    return "\n" * source_line_offset(record) + record.source


def loop_extents(code: str | None) -> list[tuple[int, int]]:
    """(first line, last line) of every ``for`` and ``while`` loop of `code`, inner loops after
    the loops around them."""
    if not code:
        return []
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return sorted(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While))
    )


def innermost_loop(extents: list[tuple[int, int]], line: int) -> int | None:
    """The first line of the innermost loop holding `line` (its header line counts)."""
    found = None
    for first, last in extents:
        if first <= line <= last:
            found = first  # sorted by first line: a later hit lies inside the earlier ones
    return found


def _sample_lines(
    record: Record, values: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    lines = record.memory.get("line")
    times = record.memory.get("time")
    if lines is None or times is None or lines.size != times.size or lines.size < 2:
        return None, None
    if values is not None and values.size != lines.size:
        return None, None
    return lines.astype(np.int64), times


def _place(record: Record, credit: Counter[int]) -> Place | None:
    """The place of the largest credit among the code's lines (loops first summed), with
    shares of the total rise (credit below zero, memory given back, counts as none)."""
    total = sum(max(value, 0.0) for value in credit.values())
    own = {line: value for line, value in credit.items() if line != OUTSIDE and value > 0}
    if total <= 0 or not own:
        return None
    code = code_text(record)
    extents = loop_extents(code)
    code_lines = code.splitlines() if code else []
    by_loop: Counter[int] = Counter()
    for line, value in own.items():
        loop = innermost_loop(extents, line)
        by_loop[loop if loop is not None else -line] += value
    best_key, best_value = by_loop.most_common(1)[0]
    if best_key < 0:  # a line outside the code's loops
        line = -best_key
        return Place(line=line, text=_text(record, code_lines, line), share=own[line] / total)
    loop = best_key
    members = {line: value for line, value in own.items() if innermost_loop(extents, line) == loop}
    line = max(members, key=lambda n: (members[n], n != loop))
    return Place(
        line=line,
        text=_text(record, code_lines, line),
        share=own[line] / total,
        loop_line=loop,
        loop_text=_text(record, code_lines, loop),
        loop_share=best_value / total,
    )


def _text(record: Record, code_lines: list[str], line: int) -> str:
    text = record.lines.get(line)
    if text:
        return text
    if 0 < line <= len(code_lines):
        return code_lines[line - 1].strip()
    return ""
