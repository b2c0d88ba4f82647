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
from .patching import Patcher

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

    converted.__wrapped__ = original  # type: ignore[attr-defined]
    converted.__doc__ = original.__doc__
    converted.__name__ = getattr(original, "__name__", "converted")
    return converted
