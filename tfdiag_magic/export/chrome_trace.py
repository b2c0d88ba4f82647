"""A run's timeline as Trace Event JSON, the format Perfetto (ui.perfetto.dev) and
chrome://tracing open: the steps of each phase, the input waits before them, tf.function
tracings and GC pauses as lanes of one process, and host memory as counters.

`chrome_trace_events` is a pure function of the record; its `pid` and `process_name` let the
events of several workers' runs share one file, a process lane each.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..files import write_text_atomic
from ..record import KINDS, PHASES, TOOL_VERSION, Phase, Record

MIB = 1024.0 * 1024.0

# Lanes (thread ids) of a run's process, in the order they are shown: a lane per step phase
# (a loop iteration holds the steps run inside it, so the two must not share a lane), the
# input waits of the steps and, apart, of the loop iterations (a step in a loop carries the
# wait of the iteration it ran in: the same wait, twice in the step table), then the tracings
# and the GC pauses. Memory counters belong to the process.
PHASE_TIDS = {int(phase): 1 + int(phase) for phase in Phase}
DATA_WAIT_TID = 10
LOOP_WAIT_TID = 11
TRACING_TID = 12
GC_TID = 13
COUNTER_TID = 0
LANE_NAMES = {
    **{tid: f"{Phase(code).label} steps" for code, tid in PHASE_TIDS.items()},
    DATA_WAIT_TID: "input wait",
    LOOP_WAIT_TID: "loop item wait",
    TRACING_TID: "tf.function tracing",
    GC_TID: "GC pauses",
}


def _us(seconds: float) -> float:
    """Seconds as the format's microseconds, to the nanosecond."""
    return round(seconds * 1e6, 3)


def _complete(name: str, ts: float, dur: float, pid: int, tid: int, **args: Any) -> dict:
    return {
        "name": name,
        "ph": "X",
        "ts": _us(ts),
        "dur": _us(max(dur, 0.0)),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def step_events(record: Record, pid: int) -> list[dict]:
    """A complete event per row of the step table, and one per observed input wait (> 0),
    ending where its step starts, on the input-wait lane (loop iterations': their own)."""
    steps = record.steps
    count = record.step_count
    index = record.step_index if record.step_index is not None else np.arange(count)
    loss_read = ~steps["no_loss"] & np.isfinite(steps["loss"])
    events: list[dict] = []
    rows = zip(
        index.tolist(),
        steps["start"].tolist(),
        steps["duration"].tolist(),
        steps["data_wait"].tolist(),
        steps["phase"].tolist(),
        steps["kind"].tolist(),
        steps["epoch"].tolist(),
        steps["loss"].tolist(),
        loss_read.tolist(),
        steps["eager"].tolist(),
        strict=True,
    )
    for step, start, duration, wait, phase, kind, epoch, loss, has_loss, eager in rows:
        if not (math.isfinite(start) and math.isfinite(duration)):
            continue
        args: dict[str, Any] = {"step": step, "kind": KINDS[kind], "eager": eager}
        if epoch >= 0:
            args["epoch"] = epoch
        if has_loss:
            args["loss"] = loss
        name = f"{PHASES[phase]} step {step}"
        events.append(_complete(name, start, duration, pid, PHASE_TIDS[phase], **args))
        if wait > 0 and math.isfinite(wait):
            # The wait ends where the step starts; one before the run's start is cut there.
            begin = max(start - wait, 0.0)
            lane = LOOP_WAIT_TID if phase == Phase.LOOP else DATA_WAIT_TID
            events.append(_complete("input wait", begin, start - begin, pid, lane, step=step))
    return events


def tracing_events(record: Record, pid: int) -> list[dict]:
    """A complete event per tf.function tracing (a concrete function built) in the run."""
    return [
        _complete(
            f"trace {trace.function}",
            trace.time,
            trace.duration,
            pid,
            TRACING_TID,
            function=trace.function,
            signature=trace.signature,
            nested=trace.nested,
        )
        for trace in record.traces
    ]


def gc_events(record: Record, pid: int) -> list[dict]:
    """A complete event per Python GC pause the record kept one by one (past the probe's limit
    pauses are only summed, and have no place on a timeline)."""
    gc = record.gc
    if "time" not in gc:
        return []
    pauses = zip(
        gc["time"].tolist(),
        gc["duration"].tolist(),
        gc["generation"].tolist(),
        gc["collected"].tolist(),
        strict=True,
    )
    return [
        _complete(
            f"gc gen {generation}",
            time,
            duration,
            pid,
            GC_TID,
            generation=generation,
            collected=collected,
        )
        for time, duration, generation, collected in pauses
    ]


def memory_events(record: Record, pid: int) -> list[dict]:
    """Counter events (MiB) per memory sample: the process's RSS, the bytes of tensors held by
    TensorFlow's CPU allocator and each GPU's memory in use, where read (-1: not read)."""
    memory = record.memory
    if "time" not in memory:
        return []
    series = {"host RSS (MiB)": memory.get("rss"), "CPU tensors (MiB)": memory.get("cpu_tensors")}
    series.update({f"GPU {device} in use (MiB)": v for device, v in record.gpu_memory().items()})
    times = memory["time"].tolist()
    events: list[dict] = []
    for name, values in series.items():
        if values is None:
            continue
        for time, value in zip(times, values.tolist(), strict=True):
            if value >= 0:
                events.append(
                    {
                        "name": name,
                        "ph": "C",
                        "ts": _us(time),
                        "pid": pid,
                        "tid": COUNTER_TID,
                        "args": {"MiB": round(value / MIB, 3)},
                    }
                )
    return events


def _metadata_event(name: str, pid: int, tid: int, value: Any) -> dict:
    key = "sort_index" if name.endswith("sort_index") else "name"
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def chrome_trace_events(
    record: Record, pid: int = 0, process_name: str = "tfdiag_magic"
) -> list[dict]:
    """The Trace Event list of one run, its times (µs) counted from the run's start, as
    process `pid` named `process_name`, with a named lane for each kind of event it holds."""
    timed = [
        *step_events(record, pid),
        *tracing_events(record, pid),
        *gc_events(record, pid),
    ]
    lanes = sorted({event["tid"] for event in timed})
    names = [
        _metadata_event("process_name", pid, COUNTER_TID, process_name),
        _metadata_event("process_sort_index", pid, COUNTER_TID, pid),
    ]
    for tid in lanes:
        names.append(_metadata_event("thread_name", pid, tid, LANE_NAMES[tid]))
        names.append(_metadata_event("thread_sort_index", pid, tid, tid))
    return [*names, *timed, *memory_events(record, pid)]


def trace_metadata(record: Record, label: str = "") -> dict[str, Any]:
    """What the file's ``metadata`` says of the run, for a reader to tell what it shows."""
    return {
        "tool": "tfdiag_magic",
        "version": TOOL_VERSION,
        "label": label,
        "started_at": record.started_at,
        "wall_time_s": record.wall_time,
        "steps_recorded": record.steps_recorded,
        # A long run's table keeps a sample of its rows: the trace shows the rows kept.
        "steps_in_trace": record.step_count,
        "worker": record.facts.get("worker"),
    }


def write_chrome_trace(
    path: str | os.PathLike[str], events: list[dict], metadata: dict[str, Any]
) -> Path:
    """Write `events` as a Trace Event JSON object to `path` (``~`` expanded, folders made,
    atomically); returns the path written. A NaN or infinity is refused (ValueError), never
    written."""
    import json

    trace = {"traceEvents": events, "displayTimeUnit": "ms", "metadata": metadata}
    return write_text_atomic(path, json.dumps(trace, allow_nan=False, separators=(",", ":")))


def worker_step_events(series: dict[str, Any], pid: int, process_name: str) -> list[dict]:
    """A merged job's worker as a process of the trace: its training steps from its report's
    `step_series`, each at the sum of the intervals before it, from 0 (the workers' clocks are
    never compared: every worker's lane starts at its first step). Where the series keeps one
    step in `every`, each kept step stands for `every` steps and is placed so."""
    every = int(series.get("every") or 1)
    tid = PHASE_TIDS[int(Phase.TRAIN)]
    events = [
        _metadata_event("process_name", pid, COUNTER_TID, process_name),
        _metadata_event("process_sort_index", pid, COUNTER_TID, pid),
        _metadata_event("thread_name", pid, tid, LANE_NAMES[tid]),
    ]
    at = 0.0
    steps, durations, intervals = series["step"], series["duration"], series["interval"]
    for step, duration, interval in zip(steps, durations, intervals, strict=True):
        events.append(_complete("train step", at, duration, pid, tid, step=step))
        at += (interval if interval is not None else duration) * every
    return events
