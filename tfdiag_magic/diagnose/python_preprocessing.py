"""python-preprocessing: element-by-element Python loops over data dominate the cell."""

from __future__ import annotations

from ..findings import Finding
from ..record import LoopInfo, Record
from ..rewrite import vectorise_element_loop
from ..units import seconds, share
from .evidence import (
    first_rewrite,
    loop_label,
    loop_line,
    rounded,
    source_line_offset,
    with_rewrite,
)

CODE = "python-preprocessing"
TITLE = "Python loops over data items dominate the cell"
DOC = """\
## What it detects
A loop of the cell that runs thousands of iterations with no training, evaluation or
tf.function step inside, and takes a large share of the cell's time: Python handling data one
element (or one sample) at a time — normalising pixels, building features, decoding records.
The time counted is the loop's bodies and, where a Python iterator makes the items (a
generator, `DataFrame.iterrows`), its waits for them; a loop over a tf.data dataset (its
iterator too, or either in `enumerate` or `zip`) waits for the pipeline's compiled work, which
is not counted.

## Why it hurts
Each Python iteration costs tens to hundreds of nanoseconds of interpreter work before any
arithmetic; NumPy or TensorFlow do the same arithmetic on a whole array in compiled code, one
call for all elements — typically 10–100× faster on the CPU (NumPy's vectorisation, not the
GPU: NumPy runs on the CPU). Per-sample Python work inside the training loop also leaves the
model waiting for data.

## Evidence we show
The loop's line, its iterations, the time in it and its share of the cell, and the time per
iteration.

## Fix
Vectorise: operate on whole arrays (`x = x.astype("float32") / 255.0`, `np.where`,
broadcasting) instead of per-element loops; per-sample work that cannot be vectorised belongs
in a `tf.data` pipeline (`map(..., num_parallel_calls=tf.data.AUTOTUNE)`), which runs it in
parallel and overlaps it with training.

## Threshold
At least 1,000 iterations, at least 0.5 s, and at least 25% of the cell's wall time, with no
step inside the loop, and less than half of the loop's time inside eager Keras model calls
made in it (a loop of forward passes, such as text generated one token at a time, is the
model's work, not Python's over data). The loop's thread must also have been on the CPU for at
least a fifth of that time while the loop ran: a loop whose bodies sleep (the tf.data performance
guide's stand-in for a training step, `time.sleep(0.01)`) or wait for a disk or a network
does no Python work to vectorise.
"""

MIN_ITERATIONS = 1000
MIN_SECONDS = 0.5
MIN_SHARE = 0.25
MAX_MODEL_SHARE = 0.5  # of the loop's time, in eager model calls made in its bodies
# The CPU time of the loop's thread while it ran, against its Python time: pixel-by-pixel work
# read 0.54 beside a full test run on 2 vCPUs, a loop of 1 ms sleeps 0.05 (the guide's 10 ms
# sleeps over a dataset, whose `next()` takes 0.5-0.8 ms of CPU there, about 0.07).
MIN_CPU_SHARE = 0.2


def python_seconds(record: Record, loop: LoopInfo) -> float:
    """The loop's Python time: its bodies', and its waits for items where a Python iterator
    makes them (a generator, ``DataFrame.iterrows``); a tf.data pipeline's wait is the
    pipeline's compiled work (its own ``map`` already), not Python's."""
    over_dataset = any(seen.api == "loop" and seen.loop == loop.id for seen in record.datasets)
    return loop.seconds if over_dataset else loop.seconds + loop.wait


def check(record: Record, source: str | None) -> Finding | None:
    work = {loop.id: python_seconds(record, loop) for loop in record.loops}
    candidates = [
        loop
        for loop in record.loops
        if not loop.has_steps
        and loop.iterations >= MIN_ITERATIONS
        and work[loop.id] >= MIN_SECONDS
        and work[loop.id] >= MIN_SHARE * record.wall_time
        and loop.model_seconds < MAX_MODEL_SHARE * work[loop.id]
        and (loop.cpu_seconds < 0 or loop.cpu_seconds >= MIN_CPU_SHARE * work[loop.id])
    ]
    if not candidates:
        return None
    # The outermost such loop holds the others' time: report the one with the most time, and
    # prefer the earliest line among loops with the same time (an outer loop over samples).
    loop = max(candidates, key=lambda item: (work[item.id], -item.lineno))
    total = work[loop.id]
    inner = _inner_iterations(record, loop, candidates)
    evidence = {
        "loop": loop_label(record, loop.id),
        "iterations": loop.iterations,
        "inner_iterations": inner,
        "seconds": rounded(total),
        "share_of_cell": rounded(total / record.wall_time, 3) if record.wall_time else None,
        "per_iteration_s": rounded(total / loop.iterations),
        "model_calls": loop.model_calls,  # eager model calls made in it, below half its time
        "model_calls_s": rounded(loop.model_seconds),
        # its thread's CPU seconds while it ran (None: not measured)
        "cpu_s": rounded(loop.cpu_seconds) if loop.cpu_seconds >= 0 else None,
    }
    finding = Finding(
        code=CODE,
        severity="warning",
        title=(
            f"A Python loop over data took {seconds(total)}, {share(total, record.wall_time)}"
            f" of the run ({loop.iterations:,} iterations)"
        ),
        detail=(
            f"The loop at {evidence['loop']} ran {loop.iterations:,} iterations at"
            f" {seconds(total / loop.iterations)} each, with no training step inside it."
        ),
        fix="Operate on whole arrays with NumPy or TensorFlow ops instead of element by element;"
        " put per-sample work that cannot be vectorised in a tf.data `map` with"
        " `num_parallel_calls`.",
        evidence=evidence,
        impact=total,
    )
    return with_rewrite(
        finding,
        source,
        first_rewrite(
            source, (vectorise_element_loop, {"loop_lineno": loop_line(record, loop.id)})
        ),
    )


def _inner_iterations(record: Record, outer: LoopInfo, loops: list[LoopInfo]) -> int:
    """Iterations of the busiest loop nested in `outer` (0: none), whatever its own time.

    Nesting is read from the cell (the loops' line spans); without it, a candidate loop after
    `outer` that took no longer counts as nested.
    """
    offset = source_line_offset(record)
    end = _loop_ends(record.source).get(outer.lineno - offset)
    if end is not None:
        end += offset
        inner = [item for item in record.loops if outer.lineno < item.lineno <= end]
    else:
        inner = [
            item for item in loops if item.lineno > outer.lineno and item.seconds <= outer.seconds
        ]
    return max((item.iterations for item in inner), default=0)


def _loop_ends(source: str | None) -> dict[int, int]:
    """Line of each for/while loop of the cell -> its last line (empty if it does not parse).

    The recorded loop lines count from the cell's first line, as the parsed source does.
    """
    import ast

    if not source:
        return {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {
        node.lineno: node.end_lineno or node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While))
    }
