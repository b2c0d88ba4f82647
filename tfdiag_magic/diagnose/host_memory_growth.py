"""host-memory-growth: the process's memory grows steadily with every step."""

from __future__ import annotations

import ast
import itertools
import re
from collections import Counter

import numpy as np

from ..findings import Finding
from ..record import Kind, ModelBuilt, Record
from ..rewrite import detach_appends
from ..units import size
from .eager_kernels import PY_FUNCTION, RANDOM, KernelCall, kernel_per_call_calls
from .evidence import first_rewrite, loop_label, rounded, with_rewrite
from .growth import Growth, growth_within, is_steady_rise, rise_between_reads, steady_growth
from .where import (
    Place,
    clip,
    code_text,
    growth_place,
    line_label,
    loop_extents,
    models_built_at,
)

CODE = "host-memory-growth"
TITLE = "Process memory grows with every step"
DOC = """\
## What it detects
Host memory rises in proportion to the number of steps done, and is still rising at the end of
the run: something is kept per step and never released. Two measures are read: the process's
resident memory (RSS), and the bytes in use by the CPU allocator that holds TensorFlow's
tensors: TensorFlow's own count where its oneDNN CPU allocator keeps one (x86 CPUs with
AVX-512), else the C heap's bytes in use (glibc's `mallinfo2`), from which TensorFlow's default
CPU allocator takes every tensor (AVX2-only CPUs such as many AMD EPYC, or
`TF_ENABLE_ONEDNN_OPTS=0`; it counts NumPy arrays too). The second sees memory kept per step
even when RSS stays flat because the process reuses memory it freed before, as when a leaking
cell is run a second time: its old list of tensors is freed and the new run refills the same
pages. With neither (another C library and no oneDNN count) only RSS is read, and a leaking
cell run a second time in the same process may go unseen.

Growth is judged within each model's own steady span: the run is cut where a Keras model is
built, each span ends with its last step, and in a cell that caches a dataset in memory each
span starts at its second epoch. One slope is fitted through all spans at once, each span at
its own level, so memory that comes with building a model or with a cache's first pass (a jump
between spans) is not read as growth per step, while memory kept on every step still is.

## Why it hurts
A run that keeps memory per step ends in swapping or in the kernel being killed ("The kernel
appears to have died"), usually hours in. What is kept is usually one of: tensors appended to a
Python list (`losses.append(loss)` keeps every loss tensor and what it references), graphs from
retracing, models built per step, NumPy arrays accumulated for logging, or a `tf.data` cache
filling (which stops growing after one epoch, so it is not reported).

One cause keeps memory with nothing kept by the code at all: an eager TensorFlow random op
(`tf.random.normal`, `tf.random.uniform`, `tf.random.shuffle`, `tf.random.categorical`,
`tf.nn.dropout`, `tf.image.random_*`) called without a `seed=` while a global seed is set
(`tf.random.set_seed`). TensorFlow then draws a new op seed for every call
(`random_seed.get_seed` → `context.internal_operation_seed`); the seeds are attributes of the
op, so every call makes a new kernel, which the eager runtime keeps in its cache. Measured on
TensorFlow 2.21 here: RSS +35 MiB per 1000 calls of `tf.random.normal([100])` (and as much for
`uniform`, `shuffle`, `categorical`, `nn.dropout`, `image.random_flip_left_right`), each call
about ten times slower (2.4 ms against 0.19 ms); +0 without the global seed, +0 with `seed=1`
on the op, +0 from a `tf.random.Generator`, +0.06 MiB per 1000 calls of a tf.function making
the op. The bytes TensorFlow's CPU allocator has in use do not move: only RSS shows it. An
eager `tf.py_function` does the same without any seed: each call registers the Python function
under a new token, an attribute of the op (+36 MiB per 1000 calls, 2.6 ms a call; 0.11 MiB
inside a tf.function; none calling the Python function itself, none from `tf.numpy_function`).

## Evidence we show
Which measure grew (where both did, the one that grew more per step: RSS misses pages reused
from freed memory, the allocator's count misses what is not a tensor), bytes per step (a
least-squares fit of memory against steps done, after the first tenth of each span), the total
growth within the spans, how many spans were judged, and how well steps explain it (R²).

Where it grew: every memory sample records the line of the cell or script that was running
when it was taken (the innermost frame of the profiled code on the stack, a line of a function
the code defines included). The growth between two consecutive samples of the fitted part is
credited half to the line running at each, and the lines inside a loop of the code are summed
into that loop, whose iterations take turns at the samples. The loop (or the line outside any
loop) with the largest credit is the finding's place, shown with its share of the growth and
the line of it credited most (`where`, `where_line`, `where_share`). A loop that finished
before the growth began has no sample inside the growth and is never named. When five or more
Keras models were built during the growth, the place is the lines that built them (built or
loaded, `models_built_at`) and the finding says the growth follows them. When the code running
at the place calls a random op without a `seed=` eagerly and the run ended with a global seed
set, that op is named as the cause (`seedless_random_ops`, `global_seed`); so is an eager
`tf.py_function` there (`eager_py_functions`).

## Fix
Keep Python numbers, not tensors: `losses.append(float(loss))`; write logs to disk; clear
lists; fix the retracing or model-building findings if they are reported too.

For an eager random op under a global seed: give the op a seed of its own
(`tf.random.normal(shape, seed=1)`; successive calls still draw new numbers, and a run is
still repeatable), draw from a `tf.random.Generator` (`rng = tf.random.Generator.from_seed(1)`,
`rng.normal(shape)`), or make the random tensor inside the tf.function.

For an eager `tf.py_function`: call the Python function itself (eagerly it needs no wrapper);
keep `tf.py_function` inside a tf.function or a `tf.data` map, where it is made once.

For growth that follows models built: run each model of a search in its own process, or build
the model once, before the loop.

## Threshold
At least 64 MiB of growth within the steady spans (each at least 20 steps long), R² ≥ 0.8
against steps done, and the last third of each span still growing at half the overall rate or
more (a span's last three samples where its last third of steps holds fewer: samples come every
50 ms, and one epoch of 94 steps over a filling cache held two there). Two models fitted on
`cache().prefetch()` datasets of 1,280 images (64 and 80 pixels) rose by steps over the whole
run (185 MiB, R² 0.87: the old whole-run reading called it a leak) and stayed flat within each
model's epochs after the first; the same cell with a callback keeping a 1-1.6 MiB kernel per
batch grew 124-152 MiB within the spans (R² ≥ 0.94).
A TensorFlow process on this machine moves by a few MiB between samples while healthy
(allocator caches), so 64 MiB is well clear of that. The same bar holds for the CPU
allocator's bytes in use: in a healthy loop they return to the same level after every step.

Two runs grow steadily without keeping anything per step that can be told apart, and the
finding is then an info note that says which:
- the cell caches a dataset in memory (`.cache()` without a file name) and the run made a
  single pass over it (one epoch): the cache fills during that pass and would stop growing at
  the next one, which this run cannot show (12,000 cached 48×48×3 images grew RSS by 282 MiB
  over one epoch of `fit`, in step with the batches, R² 1.0);
- five or more Keras models were built while memory grew, and their spans are too short to
  judge (under 20 steps each): the memory comes with each model
  built (weights, optimizer state, traced functions), not with each step. A search that calls
  `keras.backend.clear_session()` before each model still grew 4.1–5.7 MiB per model here
  with a 12→32→1 MLP (20 models, 85 MiB) and 16.5–23 MiB with a 12→1024→1024→1 MLP, which
  reads as a steady rise per step;

A run that builds one to four models after its first step, or caches in memory, and leaves no
span of 20 steps after its builds and first epochs gets no finding: its growth across the run
may come with the models or the cache, and there is nothing to judge it by (the TensorFlow
image-classification tutorial, two models fitted 9 steps each on in-memory caches, grew 65 MiB
so in one of nine runs, healthy).

RSS can also rise with nothing kept: the allocators keep pages freed and reused (glibc's
arenas warming up over a run's first epochs, fragmentation across threads). Where the
`cpu_tensors` series is the C heap's bytes in use (every tensor, NumPy array and C++ object
passes through it), a rise of RSS that the heap's bytes in use share for under a quarter, and
that Python's own objects (`sys.getallocatedblocks`, counted at 512 bytes a block, their
largest) cannot explain for a quarter either, is no finding. Measured on a 2-vCPU AMD EPYC
without oneDNN: a healthy `fit` on a dataset cached in memory rose 68 MiB of RSS over the 81
steps after its cache's first epoch (R² 0.91) with the heap's bytes in use moving 20 KiB and
Python's blocks 383 (beside a CPU hog); the keras-io denoising autoencoder (two `fit`s of 72
steps) rose 140 MiB, R² 0.84, and in a longer run levelled off after about six epochs with the
heap flat (177-184 MiB); a loop keeping 16,384 Python floats a step rose the heap by a quarter
of its RSS and Python's blocks by one per float, and stays a warning. Where TensorFlow
keeps its own count (oneDNN), that count sees tensors alone: the heap's bytes in use are read
beside it, and none of the three may explain a quarter of the rise. Measured on a 2-vCPU AMD EPYC
with AVX-512 (oneDNN): keras-io's FeatureSpace example (24,000 rows, 3 epochs of `fit`) rose
83-138 MiB of RSS in three runs, and was called a leak in one run of two before this rule (103
MiB, R² 0.81), with TensorFlow's count at 0 throughout, the heap between 129 and 168 MiB and
Python's blocks up by about 3,000 (1.5 MiB at 512 bytes a block); over 8 epochs its RSS
levelled off (562, 790, 806, 877, 909, 875, 882 MiB).

Figures are a cause too: pyplot keeps every figure until it is closed, and one drawn and saved
each epoch (TensorFlow's DCGAN tutorial: 16 generated images a figure) is kept whole. Where the
run left 5 or more of the figures it made open (counted at its start and end), the finding
names them and asks to close each (`plt.close(fig)`): a review measured the tutorial's growth
at 68-83 MiB over 15 epochs, and 19-41 MiB, flat after epoch 5, with each figure closed.

The random-op and `tf.py_function` causes are named only on a growth that passes the bars
above, only where the code the growth is credited to makes the call eagerly (not inside a
tf.function; a random op without a `seed=`), and for a random op only when a global seed was
set at the end of the run. A cell making one
`tf.random.normal` a step for 2,400 steps of a compiled training step grew 37 KiB per step
(R² 1.0), the 35 KiB per call measured alone.
"""

MEASURES = {
    "rss": "process memory (RSS)",
    # TensorFlow's own count where its CPU allocator keeps one (oneDNN), else the C heap's
    # bytes in use, where TensorFlow's default CPU allocator takes tensors from (probes/memory).
    "cpu_tensors": "bytes in use by the CPU allocator that holds TensorFlow's tensors",
}

MIN_TOTAL = 64 * (1 << 20)
# A scalar loss tensor kept in a list costs about 0.9 KiB of RSS (100,000 of them, measured
# here); 64 KiB per step is tensors far larger than scalars.
LARGE_PER_STEP = 64 * (1 << 10)
# Figures the run made and never closed, named as the growth's cause. Measured by a review:
# TensorFlow's DCGAN tutorial (a figure of 16 generated images saved each epoch, never closed)
# grew 68-83 MiB over 15 epochs; with `plt.close(fig)`, 19-41 MiB, flat after epoch 5.
MIN_FIGURES_LEFT_OPEN = 5
# RSS rising while the C heap's bytes in use and Python's objects grow by less than this share
# of it is freed memory the allocators hold, not memory kept (`_freed_memory_held`).
HELD_SHARE = 0.25
PYTHON_BLOCK_MAX = 512  # bytes: Python's object allocator serves requests up to this size
# Models built while memory grew, from which on the growth is read as per model.
MIN_MODELS_ALONG = 5


def check(record: Record, source: str | None) -> Finding | None:
    caches = bool(source) and _caches_in_memory(source)
    spans = _steady_spans(record, caches)
    # Each measure is a lower bound on what is kept: RSS misses pages reused from freed memory,
    # the allocator's count misses what is not a tensor. Growth within the models' spans is
    # preferred to growth across them, and of two, the measure that rose more per step.
    within_rises: list[tuple[Growth, str]] = []
    whole_rises: list[tuple[Growth, str]] = []
    for key in MEASURES:
        values = record.memory.get(key)
        if values is None:
            continue
        whole = steady_growth(record, values)
        # Judged within each model's own steady span: memory that comes with a model built,
        # or with a cache's first pass, lies between the spans, not within them. Also where
        # many models were built: spans long enough to judge tell a leak from the models.
        within = growth_within(record, values, spans)
        if is_steady_rise(within, MIN_TOTAL):
            within_rises.append((within, key))
        elif within is None and is_steady_rise(whole, MIN_TOTAL):
            whole_rises.append((whole, key))
        # judged, and flat within the spans: nothing kept per step by this measure
    within_spans = bool(within_rises)
    rises = within_rises or whole_rises
    growth, measure = max(rises, key=lambda rise: rise[0].per_step) if rises else (None, "")
    if growth is None:
        return None
    models = _models_built_during(record, growth.start_time, growth.end_time)
    single_pass = _single_pass_over_cache(record, source)
    # The run could not be cut into spans long enough to judge (1-4 models built, a cache's
    # first epoch) and nothing names a cause: the growth across them may come with what lies
    # between them, and a note saying only "cannot tell" came and went on a healthy tutorial
    # (two models of 9 steps on in-memory caches, 65 MiB in one of nine runs, tests/test_corpus).
    if not within_spans and len(spans) != 1 and not single_pass and len(models) < MIN_MODELS_ALONG:
        return None
    # Many models built, and no span long enough to judge the steps apart from them: the
    # growth is read as theirs. Judged rising within the spans, it is the steps' own.
    along_models = len(models) >= MIN_MODELS_ALONG and not within_spans
    built_at = models_built_at(models) if along_models else []
    values = record.memory[measure]
    place = growth_place(
        record, values, growth.start_time, growth.end_time, spans if within_spans else None
    )
    if built_at:
        where = line_label(built_at[0][0], record.lines.get(built_at[0][0], ""))
    elif place is not None:
        where = place.label
    else:
        where = _busiest_loop(record, growth.start_time, growth.end_time)
    kernel_calls = _kernel_calls(record, place) if not built_at else []
    evidence = {
        "measure": MEASURES[measure],
        "bytes_per_step": rounded(growth.per_step),
        "growth_bytes": rounded(growth.total),
        "steps": growth.steps,
        "r2": rounded(growth.r2, 3),
        "start_bytes": rounded(growth.start_value),
        "end_bytes": rounded(growth.end_value),
        "where": where,
        "models_built_while_growing": len(models),
        "single_pass_over_memory_cache": single_pass,
        "judged_within_spans": len(spans) if within_spans else 0,
    }
    if place is not None:
        evidence.update(place.evidence())
    if along_models:
        evidence["bytes_per_model"] = rounded(growth.total / len(models))
    if built_at:
        evidence["models_built_at"] = {
            line_label(line, record.lines.get(line, "")): count for line, count in built_at
        }
    if any(c.kind == RANDOM for c in kernel_calls):
        evidence["global_seed"] = record.facts.get("global_seed")
        evidence["seedless_random_ops"] = [
            f"line {c.line}: {c.name}" for c in kernel_calls if c.kind == RANDOM
        ]
    if any(c.kind == PY_FUNCTION for c in kernel_calls):
        evidence["eager_py_functions"] = [
            f"line {c.line}: {c.name}" for c in kernel_calls if c.kind == PY_FUNCTION
        ]
    note = "" if within_spans else _not_per_step_note(record, growth, models, built_at, single_pass)
    if built_at:
        located = ""  # the note says where the models were built
    elif place is not None:
        located = " " + place.sentence()
    else:
        located = f" It grew while {where} ran." if where != "the cell" else ""
    figures = _figures_left_open(record)
    if figures:
        evidence["figures_left_open"] = figures
    if kernel_calls:
        cause, fix = _kernel_cause(kernel_calls, record.facts.get("global_seed"))
    elif figures and not along_models:
        cause = (
            f" {figures} matplotlib figures made during the run were still open at its end:"
            " pyplot keeps every figure, with its canvas and what was drawn on it, until it is"
            " closed (saving it does not close it)."
        )
        fix = (
            "Close each figure once it is saved or shown: `plt.close(fig)` (or"
            " `plt.close('all')` after each round of plots). Then keep Python numbers rather"
            " than tensors in lists (`float(loss)`) if the memory still grows."
        )
    elif along_models:
        cause = ""
        fix = (
            "This memory comes with the models built, not with the steps. If they are built on"
            " purpose (a search, cross-validation folds), run each in its own process to give"
            " its memory back (even `keras.backend.clear_session()` leaves some per model);"
            " if not, build the model once, before the loop."
        )
    else:
        cause = (
            f" {size(growth.per_step)} per step is far more than a scalar: look for large"
            " tensors kept on every step (gradients, activations, batches), and keep a"
            " number computed from them (a norm, a mean) instead."
            if growth.per_step >= LARGE_PER_STEP and not note
            else ""
        )
        fix = (
            "Keep Python numbers rather than tensors in lists (`float(loss)`), and do not"
            " create tf.functions, models or layers per step."
        )
    judged = spans if within_spans else [(-np.inf, np.inf)]
    if not kernel_calls and _freed_memory_held(record, measure, growth, judged):
        return None  # freed memory the allocators hold: nothing the code keeps
    finding = Finding(
        code=CODE,
        severity="info" if note else "warning",
        title=(
            f"{'Process memory' if measure == 'rss' else 'Memory allocated on the CPU'} grew"
            f" {size(growth.total)} ({size(growth.per_step)} per step)"
        ),
        detail=(
            f"{MEASURES[measure].capitalize()} rose from {size(growth.start_value)} to"
            f" {size(growth.end_value)} over {growth.steps} steps, in step with the steps"
            f" (R² {growth.r2:.2f}), and was still rising at the end"
            + (": something is kept on every step." if not note else ".")
            + located
            + cause
            + note
        ),
        fix=fix,
        evidence=evidence,
        impact=0.0,
    )
    if kernel_calls:
        return finding  # keeping numbers rather than tensors is not this growth's fix
    return with_rewrite(finding, source, first_rewrite(source, (detach_appends, {})))


def _figures_left_open(record: Record) -> int:
    """The matplotlib figures the run made and left open, where at least
    `MIN_FIGURES_LEFT_OPEN`: a figure a round (an epoch's samples drawn and saved, as in
    TensorFlow's DCGAN tutorial) that is never closed is kept whole."""
    facts = record.facts
    at_end, at_start = facts.get("figures_open"), facts.get("figures_open_at_start")
    if not isinstance(at_end, int) or not isinstance(at_start, int):
        return 0
    left = at_end - at_start
    return left if left >= MIN_FIGURES_LEFT_OPEN else 0


def _freed_memory_held(
    record: Record, measure: str, growth: Growth, spans: list[tuple[float, float]]
) -> bool:
    """Whether RSS rose and the C heap's bytes in use, Python's objects and (where it keeps
    one) TensorFlow's own count of its CPU tensors did not, within the same spans: nothing
    is kept, the allocators hold pages freed and reused (their warm-up, fragmentation across
    threads). False where that cannot be told."""
    counted_by = record.facts.get("cpu_tensors_counted_by")
    if measure != "rss" or counted_by not in ("heap", "tensorflow"):
        return False
    memory = record.memory
    # Where TensorFlow keeps its own count, it sees tensors alone: the heap is read beside it.
    heap_values = memory.get("cpu_tensors") if counted_by == "heap" else memory.get("heap")
    blocks = memory.get("python_blocks")
    if heap_values is None or blocks is None:
        return False
    rises = [_rise_within(record, heap_values, spans), _rise_within(record, blocks, spans)]
    if rises[1] is not None:
        rises[1] *= PYTHON_BLOCK_MAX  # Python's blocks counted at their largest size
    if counted_by == "tensorflow":
        rises.append(_rise_within(record, memory["cpu_tensors"], spans))
    # None of them explains a quarter of the rise.
    share = HELD_SHARE * growth.total
    return all(rise is not None and rise <= share for rise in rises)


def _rise_within(
    record: Record, values: np.ndarray, spans: list[tuple[float, float]]
) -> float | None:
    """What `values` rose within `spans`: fitted as RSS is, or where its reads were paced
    too far apart for a fit (a heap slow to walk), between its first and last reads."""
    fitted = growth_within(record, values, spans)
    return fitted.total if fitted is not None else rise_between_reads(record, values, spans)


def _busiest_loop(record: Record, start: float, end: float) -> str:
    """Without the lines of the samples (a record made elsewhere): the loop of the cell that
    ran most of the steps during the growth, never a loop of its own iterations only."""
    steps = record.steps
    during = (steps["kind"] != Kind.LOOP) & (steps["loop"] >= 0)
    if start <= end:
        during &= (steps["start"] >= start) & (steps["start"] <= end)
    loops = steps["loop"][during]
    if not loops.size:
        return "the cell"
    return loop_label(record, Counter(loops.tolist()).most_common(1)[0][0])


def _kernel_calls(record: Record, place: Place | None) -> list[KernelCall]:
    """The eager calls that make a kernel per call and ran where memory grew: `tf.py_function`,
    and random ops without an op seed when a global seed was set (see eager_kernels)."""
    if place is None:
        return []
    code = code_text(record)
    if not code:
        return []
    first = place.loop_line if place.loop_line is not None else place.line
    last = first
    for begin, end in loop_extents(code):
        if begin == first:
            last = end
    seeded = record.facts.get("global_seed") is not None
    found = kernel_per_call_calls(code, first, last, record.facts.get("namespace_modules"))
    return [c for c in found if c.kind != RANDOM or seeded]


def _kernel_cause(calls: list[KernelCall], seed: object) -> tuple[str, str]:
    """The cause, as sentences of the detail, and its fix."""
    parts, fixes = [], []
    random = [c for c in calls if c.kind == RANDOM]
    py_functions = [c for c in calls if c.kind == PY_FUNCTION]
    if random:
        names = ", ".join(f"`{c.name}` (line {c.line})" for c in random[:3])
        more = f" and {len(random) - 3} more" if len(random) > 3 else ""
        parts.append(
            f" The code running there calls {names}{more} eagerly without a `seed=` while a"
            f" global seed is set (`tf.random.set_seed({seed})`): TensorFlow then gives every"
            " call a new op seed, and so a new kernel, which its eager runtime caches and keeps"
            " (35 MiB per 1000 calls measured on TensorFlow 2.21, none without the global seed)."
        )
        fixes.append(
            "Give each random op a seed of its own (`tf.random.normal(shape, seed=1)`:"
            " successive calls still draw new numbers), draw from a `tf.random.Generator`"
            " (`rng = tf.random.Generator.from_seed(1)`, then `rng.normal(shape)`), or make"
            " the random tensor inside a tf.function."
        )
    if py_functions:
        names = ", ".join(f"`{c.name}` (line {c.line})" for c in py_functions[:3])
        parts.append(
            f" The code running there calls {names} eagerly: every call registers the Python"
            " function under a new token and makes a new kernel, which TensorFlow keeps"
            " (36 MiB per 1000 calls measured on TensorFlow 2.21)."
        )
        fixes.append(
            "Outside a graph, call the Python function itself rather than through"
            " `tf.py_function`; keep `tf.py_function` for code inside a tf.function or a"
            " `tf.data` map, where it is made once."
        )
    return "".join(parts), " ".join(fixes)


def _models_built_during(record: Record, start: float, end: float) -> list[ModelBuilt]:
    if not (start <= end):  # NaN: the samples carry no times
        return []
    return [m for m in record.models if start <= m.time <= end]


def _not_per_step_note(
    record: Record,
    growth: Growth,
    models: list[ModelBuilt],
    built_at: list[tuple[int, int]],
    single_pass: bool,
) -> str:
    """Why the growth may not be kept per step ("" when nothing says so)."""
    if len(models) >= MIN_MODELS_ALONG:
        places = [
            f"line {line} (`{clip(record.lines[line])}`)"
            if record.lines.get(line)
            else f"line {line}"
            for line, _ in built_at[:3]
        ]
        if len(places) == 1:
            at = f" at {places[0]}"
        else:
            at = (
                " ("
                + ", ".join(f"{n} at {p}" for (_, n), p in zip(built_at[:3], places, strict=True))
                + ")"
            )
        return (
            f" The growth follows {len(models)} Keras models built{at} while it grew"
            f" ({size(growth.total / len(models))} per model): memory that comes with each"
            " model built (its weights, optimizer state and traced functions) rises with the"
            " steps too, so this run cannot tell a per-step leak from it. Even a loop that"
            " calls `keras.backend.clear_session()` before each model grows per model (4-23"
            " MiB measured, more for larger models)."
        )
    if single_pass:
        return (
            " The cell caches a dataset in memory (`.cache()`) and the run made one pass over"
            " it: a cache fills during its first pass and stops growing after, so this growth"
            " may be the cache. Run two epochs to tell: a cache stays flat in the second."
        )
    return ""


_MEMORY_CACHE = re.compile(r"\.cache\(\s*(?:(['\"])\1)?\s*\)")


def _single_pass_over_cache(record: Record, source: str | None) -> bool:
    """Whether the cell caches a tf.data dataset in memory and the run's steps all belong to
    one epoch (a Keras epoch, or one iteration of the outer loop of a custom loop)."""
    if not source or not _caches_in_memory(source):
        return False
    steps = record.steps
    work = steps["kind"] != Kind.LOOP
    return np.unique(steps["epoch"][work]).size <= 1


def _caches_in_memory(source: str) -> bool:
    """`.cache()` or `.cache("")` somewhere in the cell (a file name caches on disk)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return bool(_MEMORY_CACHE.search(source))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "cache"
        ):
            arguments = list(node.args) + [k.value for k in node.keywords]
            if not arguments or all(
                isinstance(a, ast.Constant) and a.value == "" for a in arguments
            ):
                return True
    return False


def _steady_spans(record: Record, caches: bool) -> list[tuple[float, float]]:
    """The spans of the run (start, end in seconds) within which memory is judged: cut where a
    Keras model was built after the first step, each ending with its last step (what the cell
    frees or keeps after its steps is not growth per step), and, when the cell caches a
    dataset in memory, each starting at its second epoch (the cache fills during the first)."""
    steps = record.steps
    starts = steps["start"]
    if starts.size == 0:
        return [(-np.inf, np.inf)]
    ends = starts + steps["duration"]
    work = steps["kind"] != Kind.LOOP
    cuts = sorted(m.time for m in record.models if m.time > starts.min())
    bounds = [-np.inf, *cuts, np.inf]
    spans: list[tuple[float, float]] = []
    for begin, end in itertools.pairwise(bounds):
        rows = (starts >= begin) & (starts < end)
        if not rows.any():
            continue
        last = min(end, float(ends[rows].max()))
        if caches:
            inside = rows & work & (steps["epoch"] >= 0)
            if not inside.any():
                continue
            epochs = steps["epoch"][inside]
            later = np.flatnonzero(epochs != epochs[0])
            if later.size == 0:
                continue  # one epoch: the cache's first pass, nothing after it to judge
            begin = float(starts[inside][later[0]])
        spans.append((begin, last))
    return spans
