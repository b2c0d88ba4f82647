"""Host-conversion probe: NumPy arrays the cell turns into tensors itself, between steps.

``tf.convert_to_tensor`` and ``tf.constant`` are wrapped where the cell looks them up (the
``tensorflow`` module). A call made by the cell's own code, outside any step or Keras call,
with a NumPy array adds the array's bytes to the next step's ``host_bytes``. Calls made by
TensorFlow or Keras internally happen inside steps or Keras calls and are not counted.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..recorder import Recorder
from .patching import Patcher, wraps_exactly

_NAMES = ("convert_to_tensor", "constant")


class HostConversionProbe:
    name = "host_conversions"

    def __init__(self) -> None:
        self._patcher = Patcher()

    def install(self, recorder: Recorder) -> None:
        import tensorflow as tf

        for name in _NAMES:
            original = getattr(tf, name, None)
            if original is not None:
                self._patcher.replace(tf, name, _watch(recorder, original))

    def remove(self) -> None:
        self._patcher.restore()


def _watch(rec: Recorder, original: Any) -> Any:
    def converted(value: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if (
            isinstance(value, np.ndarray)
            and not rec.step_depth
            and not rec.driver_depth
            and threading.get_ident() == rec.thread_id
        ):
            rec.pending_host_bytes += value.nbytes
        return original(value, *args, **kwargs)

    # `value` is the first parameter of both tf.convert_to_tensor and tf.constant; the rest
    # of their signatures is kept by `wraps_exactly`.
    return wraps_exactly(converted, original)
