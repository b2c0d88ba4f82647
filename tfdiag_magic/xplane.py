"""Read TensorFlow's profiler trace (an XSpace, the ``.xplane.pb`` file) into op events.

The trace's planes are the host's threads (``/host:CPU``) and each GPU (``/device:GPU:N``).
Every event here gets an absolute wall-clock time (the profiler's clock is CLOCK_REALTIME,
`tsl::profiler::GetCurrentTimeNanos`, which ``time.time_ns()`` reads too), its self time (its
duration less the events nested directly inside it on the same line), and a category: input
wait, host op, function-call op, device kernel, device copy, collective. Framework events
(executor, thread pool, eager dispatch) count towards their parents' self time and are then
dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

HOST_PLANE = "/host:CPU"
DEVICE_PREFIX = "/device:GPU:"
# Lines of tf.data's own threads: the pipeline's producers, working ahead in the background.
# Only the consumer's wait (GetNext on the step's thread) is the step's input time.
PRODUCER_LINES = ("tf_data_private_threadpool", "tf_data_iterator_resource")
# Op types that run a function: their time is their body's ops, run on other lines.
CONTAINER_TYPES = frozenset(
    {
        "StatefulPartitionedCall",
        "PartitionedCall",
        "While",
        "StatelessWhile",
        "If",
        "StatelessIf",
        "Case",
        "StatelessCase",
        "MultiDeviceIteratorGetNextFromShard",
    }
)
INPUT_TYPES = frozenset(
    {"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional", "OptionalGetValue"}
)
COLLECTIVE_PREFIXES = ("Collective", "Nccl", "nccl", "AllReduce", "AllGather", "ReduceScatter")
# A year 2001 wall-clock time in nanoseconds: a line timestamp below it is relative to the
# profile's start (TensorFlow normalises them so), above it already absolute.
ABSOLUTE_NS = 10**18


class Category(IntEnum):
    """What an op event is, for the step's time split and the op table."""

    INPUT = 0  # waiting for the next batch (IteratorGetNext on the consumer's thread)
    HOST_OP = 1  # a TensorFlow op's kernel on a host thread
    CONTAINER = 2  # an op that runs a function (its time is its body's)
    DEVICE_OP = 3  # a kernel on a GPU
    MEMCPY = 4  # a copy to, from or on a GPU, or a memset of its memory
    COLLECTIVE = 5  # communication between devices or workers
    PIPELINE = 6  # an op on tf.data's own threads: the input pipeline working ahead


@dataclass
class OpEvents:
    """The op events of one trace, columnar; times in wall-clock nanoseconds."""

    start: np.ndarray  # int64
    end: np.ndarray  # int64
    self_ns: np.ndarray  # int64: duration less the events nested directly inside
    category: np.ndarray  # uint8, a Category
    name: list[str]  # the op's name ("sequential/dense/MatMul"), or the kernel's
    op_type: list[str]  # the op's type ("MatMul"; a copy's direction: "MemcpyH2D")
    device: np.ndarray  # bool: on a GPU plane
    profile_start: int  # ns, when the profiler started
    profile_stop: int  # ns, when it stopped

    def __len__(self) -> int:
        return int(self.start.shape[0])


def parse_xspace(data: bytes) -> Any:
    """The XSpace protobuf message of a serialized ``.xplane.pb``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    return space


def split_op(text: str) -> tuple[str, str] | None:
    """``"sequential/dense/MatMul:MatMul"`` -> (name, type); None for a framework event
    (``ExecutorState::Process``, ``EagerLocalExecute: MatMul``). An annotation nested as
    ``outer::inner`` (a GPU kernel's) is read by its innermost part."""
    text = text.rsplit("::", 1)[-1]
    name, colon, op_type = text.rpartition(":")
    if not colon or not name or not op_type or " " in text or "#" in op_type:
        return None
    return name, op_type


def _stat_text(plane: Any, stat: Any) -> str:
    if stat.HasField("ref_value"):
        return plane.stat_metadata[stat.ref_value].name
    return stat.str_value


def _profile_span(space: Any) -> tuple[int, int]:
    for plane in space.planes:
        values = {plane.stat_metadata[s.metadata_id].name: s.uint64_value for s in plane.stats}
        if "profile_start_time" in values:
            return int(values["profile_start_time"]), int(values.get("profile_stop_time", 0))
    return 0, 0


def _self_times(starts: list[int], ends: list[int]) -> list[int]:
    """Each event's duration less those of the events nested directly inside it (events of
    one line, as the line lists them)."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i]))
    own = [ends[i] - starts[i] for i in range(len(starts))]
    stack: list[int] = []
    for i in order:
        while stack and ends[stack[-1]] <= starts[i]:
            stack.pop()
        if stack and ends[i] <= ends[stack[-1]]:
            own[stack[-1]] -= ends[i] - starts[i]
        stack.append(i)
    return own


def _category(op_type: str, name: str, device: bool, consumer: bool) -> Category | None:
    if op_type.startswith(COLLECTIVE_PREFIXES) or name.startswith(COLLECTIVE_PREFIXES):
        return Category.COLLECTIVE
    if device:
        return Category.MEMCPY if _memory_operation(op_type) else Category.DEVICE_OP
    if not consumer:
        return Category.PIPELINE
    if op_type in INPUT_TYPES or name.startswith("IteratorGetNext"):
        return Category.INPUT
    if op_type in CONTAINER_TYPES or op_type.startswith("__inference"):
        return Category.CONTAINER
    return Category.HOST_OP


def _memory_operation(name: str) -> bool:
    """A GPU copy or memset (CUPTI names them ``MemcpyH2D``, ``MemcpyOther``, ``Memset 3``),
    not a kernel."""
    lowered = name.lower()
    return lowered.startswith("memset") or "memcpy" in lowered


def _device_op(plane: Any, event: Any, event_name: str) -> tuple[str, str]:
    """A GPU event's (name, type): the TensorFlow op that launched it (its ``tf_op`` stat, or
    the annotation in ``level 0``), else the kernel's own name; a copy's type is its kind.
    XLA's kernels carry ``tf_op`` "XlaModule:", no op: they keep their kernel's name."""
    if _memory_operation(event_name):
        return event_name, event_name
    for stat in event.stats:
        key = plane.stat_metadata[stat.metadata_id].name
        if key in ("tf_op", "level 0"):
            op = split_op(_stat_text(plane, stat))
            if op is not None:
                return op
    return event_name, event_name


def read_events(space: Any) -> OpEvents:
    """The op events of an XSpace (see the module's docstring)."""
    begin, stop = _profile_span(space)
    columns: dict[str, list[Any]] = {
        key: [] for key in ("start", "end", "self", "category", "name", "type", "device")
    }
    for plane in space.planes:
        device = plane.name.startswith(DEVICE_PREFIX)
        if plane.name != HOST_PLANE and not device:
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            base = line.timestamp_ns + (begin if line.timestamp_ns < ABSOLUTE_NS else 0)
            events = list(line.events)
            starts = [base + e.offset_ps // 1000 for e in events]
            ends = [s + e.duration_ps // 1000 for s, e in zip(starts, events, strict=True)]
            own = _self_times(starts, ends)
            consumer = not line.name.startswith(PRODUCER_LINES)
            for event, start, end, own_ns in zip(events, starts, ends, own, strict=True):
                text = names.get(event.metadata_id, "")
                if device:
                    op: tuple[str, str] | None = _device_op(plane, event, text)
                else:
                    op = split_op(text)
                    if op is None and text.startswith("IteratorGetNext"):
                        op = ("IteratorGetNext", "IteratorGetNext")
                if op is None:
                    continue
                category = _category(op[1], op[0], device, consumer)
                if category is None:
                    continue
                columns["start"].append(start)
                columns["end"].append(end)
                columns["self"].append(own_ns)
                columns["category"].append(int(category))
                columns["name"].append(op[0])
                columns["type"].append(op[1])
                columns["device"].append(device)
    return OpEvents(
        start=np.array(columns["start"], dtype=np.int64),
        end=np.array(columns["end"], dtype=np.int64),
        self_ns=np.array(columns["self"], dtype=np.int64),
        category=np.array(columns["category"], dtype=np.uint8),
        name=columns["name"],
        op_type=columns["type"],
        device=np.array(columns["device"], dtype=bool),
        profile_start=begin,
        profile_stop=stop,
    )
