"""``%tfgpu --memory-growth``: turn memory growth on while TensorFlow still allows it.

Memory growth is a device setting: TensorFlow accepts it only before its runtime is
initialised (the first op, the first ``list_logical_devices``, the first model). Before that,
this turns it on for every GPU; after it, it explains that the kernel must be restarted and
gives the cell to run first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

from .tensorflow_facts import runtime_initialized

MEMORY_GROWTH_CELL = """\
# Run this first, right after a kernel restart: memory growth can only be set before anything
# initialises TensorFlow's GPU runtime (afterwards it raises RuntimeError). It stops TensorFlow
# from reserving all GPU memory up front; it does not defragment memory.
import tensorflow as tf

for gpu in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(gpu, True)
"""


@dataclass
class MemoryGrowthOutcome:
    """What ``--memory-growth`` did. `status`: enabled, already-on, no-gpu or too-late."""

    status: str
    message: str
    gpus: list[str] = field(default_factory=list)
    initialized: bool | None = None
    cell: str | None = None

    def text(self) -> str:
        return self.message + (f"\n\n{self.cell}" if self.cell else "")


def _too_late(gpus: list[str], initialized: bool | None) -> MemoryGrowthOutcome:
    none_seen = (
        " TensorFlow sees no GPU in this kernel anyway (see %tfgpu for why)." if not gpus else ""
    )
    return MemoryGrowthOutcome(
        status="too-late",
        message=(
            "TensorFlow's runtime is already initialised in this kernel, so its device settings "
            "can no longer change; memory growth stays as it is." + none_seen + " Restart the "
            "kernel and run this cell before anything else (or set TF_FORCE_GPU_ALLOW_GROWTH=true "
            "in the environment that starts Jupyter):"
        ),
        gpus=gpus,
        initialized=initialized,
        cell=MEMORY_GROWTH_CELL,
    )


def enable_memory_growth(tf: ModuleType) -> MemoryGrowthOutcome:
    """Turn memory growth on for every GPU TensorFlow sees, if the runtime allows it still."""
    initialized = runtime_initialized()
    devices = tf.config.list_physical_devices("GPU")
    names = [d.name for d in devices]
    if devices and all(tf.config.experimental.get_memory_growth(d) is True for d in devices):
        return MemoryGrowthOutcome(
            status="already-on",
            message=f"Memory growth is already on for {', '.join(names)}.",
            gpus=names,
            initialized=initialized,
        )
    if initialized:
        return _too_late(names, initialized)
    if not devices:
        return MemoryGrowthOutcome(
            status="no-gpu",
            message=(
                "TensorFlow sees no GPU, so there is no memory growth to turn on; nothing was "
                "changed and the runtime is still not initialised. %tfgpu says why no GPU is "
                "visible."
            ),
            gpus=[],
            initialized=initialized,
        )
    try:
        for device in devices:
            tf.config.experimental.set_memory_growth(device, True)
    except RuntimeError:  # initialised meanwhile (another thread), or the check could not tell
        return _too_late(names, runtime_initialized())
    return MemoryGrowthOutcome(
        status="enabled",
        message=(
            f"Memory growth is on for {', '.join(names)}: TensorFlow will take GPU memory as it "
            "needs it instead of reserving almost all of it when the runtime starts."
        ),
        gpus=names,
        initialized=initialized,
    )
