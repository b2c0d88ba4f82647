"""Host-conversion probe: NumPy arrays the cell turns into tensors itself, between steps.

``tf.convert_to_tensor`` and ``tf.constant`` are wrapped where the cell looks them up (the
``tensorflow`` module). A call made by the cell's own code, outside any step or Keras call,
with a NumPy array adds the array's bytes to the next step's ``host_bytes``. Calls made by
TensorFlow or Keras internally happen inside steps or Keras calls and are not counted.

After the run (`finish`) it times the conversion of one typical batch of the run, for the
record's facts (``host_conversion_s``), when steps were fed NumPy arrays at all.
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Any

import numpy as np

from ..record import Record
from ..recorder import Recorder
from .patching import Patcher, wraps_exactly

_NAMES = ("convert_to_tensor", "constant")
CONVERSION_BUDGET = 0.1  # seconds the post-run timing of a batch's conversion may take


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

    def finish(self, record: Record) -> None:
        """The seconds one typical NumPy batch of the run takes to become a tensor, measured
        now (``facts["host_conversion_s"]``), where steps were fed NumPy arrays."""
        conversion = conversion_cost(record)
        if conversion is not None:
            record.facts["host_conversion_s"] = conversion


def conversion_cost(record: Record) -> float | None:
    """Seconds to turn one typical NumPy batch of the run into a tensor, measured now.

    Only when steps were fed NumPy arrays (the ``host_bytes`` column, which the input
    inspection of the step probes fills as well as this probe); a few milliseconds at most.
    """
    fed = record.steps["host_bytes"]
    fed = fed[fed > 0]
    if fed.size == 0:
        return None
    try:
        import tensorflow as tf

        array = np.ones(max(int(np.median(fed)) // 4, 1), dtype=np.float32)
        tf.convert_to_tensor(array)  # the first conversion pays for set-up
        times: list[float] = []
        begun = perf_counter()
        # Up to 5 repeats within CONVERSION_BUDGET: a huge batch is timed once, not 5 times.
        while len(times) < 5 and (not times or perf_counter() - begun < CONVERSION_BUDGET):
            start = perf_counter()
            tf.convert_to_tensor(array).numpy()
            times.append(perf_counter() - start)
        return float(np.median(times))
    except Exception:
        return None


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
