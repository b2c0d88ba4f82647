"""Optimizer probe: finds the functions that update weights, and times eager updates as steps.

Keras optimizers funnel every update through `BaseOptimizer.apply` (``apply_gradients`` calls
it). Called while a tf.function is traced, it marks that function as a training step. Called
eagerly by the cell itself (a GradientTape loop), the update is a training step of its own: it
runs from the end of the previous step, or the start of the loop iteration, to the update's end.
"""

from __future__ import annotations

import math
import weakref
from time import perf_counter
from typing import Any

from ..record import Kind, Phase, Record
from ..recorder import Recorder
from .patching import Patcher, defining_class, wraps_exactly


class OptimizerProbe:
    name = "optimizer"

    def __init__(self) -> None:
        self._patcher = Patcher()

    def install(self, recorder: Recorder) -> None:
        from keras.src.optimizers.base_optimizer import BaseOptimizer

        owner = defining_class(BaseOptimizer, "apply")
        self._patcher.replace(owner, "apply", self._wrapper(recorder, vars(owner)["apply"]))

    def remove(self) -> None:
        self._patcher.restore()

    def finish(self, record: Record) -> None:
        """Nothing left to add: the eager updates are the recorder's steps."""

    @staticmethod
    def _wrapper(rec: Recorder, original: Any) -> Any:
        import tensorflow as tf
        from tensorflow.python.eager import context

        train, kind = Phase.TRAIN, Kind.EAGER_UPDATE
        updated, ref, here = rec.updated, weakref.ref, rec.here
        add_step, clock = rec.add_step, perf_counter

        # Named `self` as in BaseOptimizer.apply, and signed as it (`wraps_exactly`).
        def apply(self: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            optimizer = self
            top = rec.top_function
            if top is not None:
                # Traced inside a tf.function the cell called: that function trains. (With
                # tf.distribute the replica code runs, and is traced, on other threads.)
                entry = rec.functions.get(id(top))
                if entry is not None:
                    entry.updates = True
                    entry.watch(optimizer)  # its updates per call are counted (tf_functions)
            if not here.main:
                return original(optimizer, *args, **kwargs)
            if ref(optimizer) not in updated:  # a membership test per update, no call
                variables = args[1] if len(args) > 1 else kwargs.get("trainable_variables")
                rec.first_update(optimizer, variables)
            nested = rec.optimizer_depth or top is not None or rec.driver_depth or rec.step_depth
            if not nested:
                try:  # what `tf.executing_eagerly()` reads, without its three calls
                    nested = not context._context._thread_local_data.is_eager
                except AttributeError:  # no context yet, or another TensorFlow
                    nested = not tf.executing_eagerly()
            if nested:
                rec.optimizer_depth += 1
                try:
                    return original(optimizer, *args, **kwargs)
                finally:
                    rec.optimizer_depth -= 1
            wait = rec.pending_wait
            rec.pending_wait = math.nan
            start = rec.anchor
            rec.optimizer_depth += 1
            try:
                result = original(optimizer, *args, **kwargs)
            except BaseException as exc:
                rec.note_failure(exc, train)
                raise
            finally:
                rec.optimizer_depth -= 1
            end = clock()
            add_step(train, kind, start, end, wait, -1, rec.graph_calls == 0)  # marks it
            return result

        return wraps_exactly(apply, original)
