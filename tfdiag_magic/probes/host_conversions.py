"""Host-conversion probe: what converting a batch of the run's NumPy arrays costs.

The bytes each step was fed from NumPy are recorded as the run goes: the step probes read a
step call's NumPy arguments, and the conversions the cell's loops make themselves
(``tf.convert_to_tensor(x[i:j])`` before a step) are marked in their code
(`instrument_conversions`). Nothing of TensorFlow is patched for it.

After the run (`finish`) this probe times the conversion of one typical batch of the run, for
the record's facts (``host_conversion_s``), when steps were fed NumPy arrays at all.
"""

from __future__ import annotations

from time import perf_counter

import numpy as np

from ..record import Record
from ..recorder import Recorder

CONVERSION_BUDGET = 0.1  # seconds the post-run timing of a batch's conversion may take


class HostConversionProbe:
    name = "host_conversions"

    def install(self, recorder: Recorder) -> None:
        """Nothing to install: the bytes are recorded by the step probes and the loops."""

    def remove(self) -> None:
        """Nothing was installed."""

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
