"""Loads TensorFlow and Keras on first use, with one clear message when they are missing, and
reads what the tool needs of TensorFlow's runtime without changing it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

INSTALL_HINT = (
    "tfdiag_magic needs TensorFlow 2.16 or newer with Keras 3. Install one TensorFlow build, "
    "for example:\n"
    "    pip install tensorflow-cpu          # CPU only\n"
    "    pip install 'tensorflow[and-cuda]'  # NVIDIA GPUs on Linux\n"
    "or install this package with an extra: pip install 'tfdiag_magic[cpu]' / '[gpu]'."
)


class TensorFlowMissingError(ImportError):
    """TensorFlow or Keras cannot be imported; the message says what to install."""


def import_tensorflow() -> ModuleType:
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise TensorFlowMissingError(f"{INSTALL_HINT}\n(import tensorflow failed: {exc})") from None
    try:
        import keras
    except ImportError as exc:
        raise TensorFlowMissingError(f"{INSTALL_HINT}\n(import keras failed: {exc})") from None
    if not str(getattr(keras, "__version__", "0")).startswith(("3.", "4.")):
        raise TensorFlowMissingError(
            f"{INSTALL_HINT}\n(found Keras {keras.__version__}; Keras 3 is needed)"
        )
    return tf


def read_losses(values: list[Any]) -> list[float]:
    """Read many scalar loss tensors with one stack and one copy to the host."""
    # The op itself, not `tf.stack`: its conversion checks each value in Python, a call per
    # loss; these are all tensors already (a value that is not raises, and the caller reads
    # them one by one).
    from tensorflow.python.ops import gen_array_ops

    # Padded to a power of two (with the last value): the op's kernel is made, and kept, for
    # each count of values it stacks, so a count of its own at every read would cost a new
    # kernel (milliseconds, and memory kept) each time; a few sizes cover every read.
    count = len(values)
    padded = 1 << max(count - 1, 0).bit_length()
    stacked = gen_array_ops.pack(values + values[-1:] * (padded - count), axis=0).numpy()
    if stacked.shape != (padded,):  # not all scalars: the caller reads them one by one
        raise ValueError("losses are not all scalars")
    return stacked[:count].astype(float).tolist()


def global_seed() -> int | None:
    """The global seed `tf.random.set_seed` set in this process (eager mode's), or None.

    Setting it makes TensorFlow's context: where none exists, none was set, and none is made
    (see `device_settings`)."""
    from tensorflow.python.eager import context

    if context.context_safe() is None:
        return None
    seed = context.global_seed()
    return None if seed is None else int(seed)


def device_settings() -> Any:
    """What the device settings are read from: TensorFlow's context where the code has made
    it, else a context of the tool's own, never made TensorFlow's. It lists the same physical
    devices, and holds the settings nothing could have changed yet (visible devices and memory
    growth are set on TensorFlow's context, and setting them makes it). While TensorFlow's does
    not exist, TensorFlow counts as in graph mode and prints its deprecation warnings."""
    from tensorflow.python.eager import context

    return context.context_safe() or context.Context()
