"""Adapt probe: each `adapt()` of a Keras preprocessing layer that the code makes, how long it
took and what it read (`record.AdaptCall`), for `repeated-adapt-passes`.

Each preprocessing class's own `adapt` is wrapped for the run (`StringLookup.adapt` calls
`IndexLookup.adapt`: a call counts once, at its outermost wrapper). `FeatureSpace.adapt`
adapts each feature's layer over a `map` of the dataset it is given, one after the other: those
calls count, each marked as made by it. A call given a tf.data dataset reads it whole, every
stage from its source: the probe notes the dataset's stages (`dataset_structure.read_stages`,
without iterating it) and which earlier call's pipeline shares a dataset object with this
one's (the same `train_ds` under a `map` per feature), through weak references, so that no
dataset of the code's lives longer for it. Calls from other threads pass through untouched.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from time import perf_counter, process_time
from typing import Any

from ..record import AdaptCall, Record
from ..recorder import Recorder
from .dataset_structure import read_stages, tf_dataset
from .patching import Patcher, wraps_exactly

# The layers whose `adapt` reads data, by their names in `keras.layers` and `keras.utils`.
_LAYERS = (
    "Normalization",
    "Discretization",
    "StringLookup",
    "IntegerLookup",
    "TextVectorization",
)
MAX_CALLS = 256  # adapt calls recorded per run
MAX_ANCESTORS = 64  # datasets read up a pipeline, for what two calls share


class AdaptProbe:
    name = "adapt_calls"

    def __init__(self) -> None:
        self._patcher = Patcher()
        self._depth = 0
        self._feature_space = 0  # FeatureSpace.adapt calls running (on the run's thread)
        self._calls: list[AdaptCall] = []
        # Per recorded call that read a dataset: weak references to it and the datasets it is
        # made from, and the call's group (`AdaptCall.shared`).
        self._pipelines: list[tuple[list[weakref.ref], int]] = []

    def install(self, recorder: Recorder) -> None:
        import keras

        owners: list[type] = []
        for name in _LAYERS:
            cls = getattr(keras.layers, name, None)
            if cls is None:
                continue
            for klass in cls.__mro__:  # StringLookup's own adapt and IndexLookup's
                if "adapt" in vars(klass) and klass not in owners:
                    owners.append(klass)
        for owner in owners:
            original = vars(owner)["adapt"]
            self._patcher.replace(owner, "adapt", self._wrap(recorder, original))
        feature_space = getattr(keras.utils, "FeatureSpace", None)
        if feature_space is not None and "adapt" in vars(feature_space):
            original = vars(feature_space)["adapt"]
            self._patcher.replace(feature_space, "adapt", self._container(recorder, original))

    def remove(self) -> None:
        self._patcher.restore()
        self._pipelines = []

    def finish(self, record: Record) -> None:
        record.adapt_calls = list(self._calls)

    def _wrap(self, rec: Recorder, original: Any) -> Any:
        probe = self

        def adapt(self: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if threading.get_ident() != rec.thread_id or probe._depth:
                return original(self, *args, **kwargs)
            data = args[0] if args else kwargs.get("data", kwargs.get("dataset"))
            probe._depth += 1
            began, cpu = perf_counter(), process_time()
            finished = False
            try:
                result = original(self, *args, **kwargs)
                finished = True
                return result
            finally:
                wall, cpu = perf_counter() - began, process_time() - cpu
                probe._depth -= 1
                probe._note(rec, self, data, began, (wall, cpu), finished)

        return wraps_exactly(adapt, original)

    def _container(self, rec: Recorder, original: Any) -> Any:
        """`FeatureSpace.adapt`, which marks the layers' calls it makes as its own."""
        probe = self

        def adapt(self: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if threading.get_ident() != rec.thread_id or probe._depth:
                return original(self, *args, **kwargs)
            probe._feature_space += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                probe._feature_space -= 1

        return wraps_exactly(adapt, original)

    def _note(
        self,
        rec: Recorder,
        layer: Any,
        data: Any,
        began: float,
        took: tuple[float, float],
        finished: bool,
    ) -> None:
        """Record one outermost call. Never raises: what the call read is the tool's business."""
        if len(self._calls) >= MAX_CALLS:
            return
        try:
            index = len(self._calls)
            kind, shared, stages = "iterable", index, ()
            dataset = tf_dataset(data)
            if dataset is not None:
                kind = "dataset"
                stages = read_stages(dataset)[0]
                shared = self._group(dataset, index)
            elif hasattr(data, "shape") and hasattr(data, "dtype"):
                kind = "array"
            line, caller = rec.user_lines()
            self._calls.append(
                AdaptCall(
                    time=began - rec.t0,
                    wall=took[0],
                    cpu=took[1],
                    layer=type(layer).__name__,
                    data=kind,
                    shared=shared,
                    stages=stages,
                    line=line,
                    caller=caller,
                    loop=rec.innermost_loop(),
                    by_feature_space=self._feature_space > 0,
                    finished=finished,
                )
            )
        except Exception:
            return

    def _group(self, dataset: Any, index: int) -> int:
        """The group of the first earlier call whose pipeline holds a dataset object that
        `dataset`'s does (`index` where none does); notes this call's pipeline for later ones."""
        mine = _pipeline(dataset)
        ids = {id(each) for each in mine}
        group = index
        for refs, theirs in self._pipelines:
            if any(id(obj) in ids for obj in (ref() for ref in refs) if obj is not None):
                group = theirs
                break
        with contextlib.suppress(TypeError):  # a dataset that takes no weak reference
            self._pipelines.append(([weakref.ref(each) for each in mine], group))
        return group


def _pipeline(dataset: Any) -> list[Any]:
    """`dataset` and the datasets it is made from, up to `MAX_ANCESTORS` of them."""
    found: list[Any] = []
    pending = [dataset]
    while pending and len(found) < MAX_ANCESTORS:
        current = pending.pop()
        if any(current is seen for seen in found):
            continue
        found.append(current)
        try:
            pending.extend(current._inputs())
        except Exception:  # a dataset class that does not say its inputs
            continue
    return found
