"""Model-call probe: the time a loop of the code spends in eager Keras model calls.

`keras.Model.__call__` (Keras' `Layer.__call__`, which every model inherits) is wrapped for the
run. A model call made on the run's thread while one of the code's loops runs, outside any
step, Keras API call or tf.function, and not inside another model's call, is timed and added
to the open loops' totals (`Recorder.model_called`). A loop whose time goes to a model's
forward passes (text generated one token at a time, a prediction fed back as the next input)
is no Python loop over data (`diagnose.python_preprocessing`).

Inside a loop whose steps run eagerly the call is passed on untimed, after a few attribute
reads: such a loop is judged by its steps (an eager training step calls its model on every
step). Inside a loop whose steps are compiled (a tf.function's call, a Keras step) an eager
call is outside them (a metric's second forward pass on the batch), and timed.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from ..record import Record
from ..recorder import Recorder
from .patching import Patcher, wraps_exactly


class ModelCallProbe:
    name = "model_calls"

    def __init__(self) -> None:
        self._patcher = Patcher()

    def install(self, recorder: Recorder) -> None:
        import keras

        original = keras.Model.__call__
        self._patcher.replace(keras.Model, "__call__", _timed_call(recorder, original))

    def remove(self) -> None:
        self._patcher.restore()

    def finish(self, record: Record) -> None:
        """Nothing left to add: the calls are in the loops' totals."""


def _timed_call(rec: Recorder, original: Any) -> Any:
    here, clock = rec.here, perf_counter
    inside = [False]  # a model called inside another model's timed call is part of it

    # Named `self` as Keras names it, and signed as the original (`wraps_exactly`).
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        __tracebackhide__ = True
        loops = rec.open_loops
        if (
            not loops
            or (loops[-1].has_steps and not loops[-1].compiled_steps)
            or inside[0]
            or rec.step_depth
            or rec.driver_depth
            or rec.top_function is not None
            or not here.main
        ):
            return original(self, *args, **kwargs)
        inside[0] = True
        start = clock()
        try:
            return original(self, *args, **kwargs)
        finally:
            inside[0] = False
            rec.model_called(clock() - start)

    return wraps_exactly(__call__, original)
