"""Device-configuration probe: settings TensorFlow refused because its runtime was running.

Memory growth, visible devices, logical (virtual) devices and thread pools can only be set
before TensorFlow initialises; afterwards the setter raises a RuntimeError. Notebooks often
catch and print it (as TensorFlow's own guide does), so the error never ends the cell: the
probe records it at the source, on TensorFlow's runtime context, whichever API called it.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from ..record import ConfigCall, Record
from ..recorder import Recorder
from .patching import Patcher, wraps_exactly

_METHODS = {
    "set_memory_growth": "tf.config.experimental.set_memory_growth",
    "set_visible_devices": "tf.config.set_visible_devices",
    "set_logical_device_configuration": "tf.config.set_logical_device_configuration",
}
_PROPERTIES = {
    "intra_op_parallelism_threads": "tf.config.threading.set_intra_op_parallelism_threads",
    "inter_op_parallelism_threads": "tf.config.threading.set_inter_op_parallelism_threads",
}


class DeviceConfigProbe:
    name = "device_config"

    def __init__(self) -> None:
        self._patcher = Patcher()

    def install(self, recorder: Recorder) -> None:
        from tensorflow.python.eager import context

        cls = context.Context
        for name, call in _METHODS.items():
            if name in vars(cls):
                self._patcher.replace(cls, name, _watch(recorder, vars(cls)[name], call))
        for name, call in _PROPERTIES.items():
            prop = vars(cls).get(name)
            if isinstance(prop, property) and prop.fset is not None:
                setter = _watch(recorder, prop.fset, call)
                self._patcher.replace(
                    cls, name, property(prop.fget, setter, prop.fdel, prop.__doc__)
                )

    def remove(self) -> None:
        self._patcher.restore()

    def finish(self, record: Record) -> None:
        """Nothing left to add: the refused settings are in the recorder's `config_calls`."""


def _watch(rec: Recorder, original: Any, call: str) -> Any:
    def watched(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return original(*args, **kwargs)
        except RuntimeError as exc:
            message = str(exc)
            if "initializ" in message:
                rec.config_calls.append(
                    ConfigCall(time=perf_counter() - rec.t0, call=call, message=message[:500])
                )
            raise

    return wraps_exactly(watched, original)
