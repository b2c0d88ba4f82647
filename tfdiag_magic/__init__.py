"""tfdiag_magic: measure TensorFlow/Keras training where it runs, in the notebook.

``%load_ext tfdiag_magic`` registers ``%%tfprofile`` and ``%tfgpu`` (the GPU doctor).
``from tfdiag_magic import step`` marks steps by hand; ``with tfdiag_magic.profile() as
result:`` profiles a block of a script.
Importing this package does not import TensorFlow; the first profiling run does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import views  # noqa: F401 (installs the views results render with)
from .markers import step
from .record import TOOL_VERSION

__version__ = TOOL_VERSION

if TYPE_CHECKING:
    from .jobs.merged import MergedResult
    from .session import Session

__all__ = [
    "__version__",
    "load_ipython_extension",
    "merge",
    "profile",
    "step",
    "timelines",
    "unload_ipython_extension",
]


def profile(*, memory_interval: float = 0.05, nvml: bool = True, ops: bool = False) -> Session:
    """Profile a block: ``with profile() as result: ...``; `result` is filled when it ends.

    Steps are recorded from Keras calls, tf.function calls, eager optimizer updates and
    ``step()`` markers (a block's own loops are instrumented only by ``%%tfprofile`` and
    ``python -m tfdiag_magic profile``). `ops`: TensorFlow's profiler over a few steady steps
    (``--ops``).
    """
    from .session import Session, SessionOptions

    return Session(
        SessionOptions(memory_interval=memory_interval, nvml=nvml, ops=ops), label="profile()"
    )


def merge(paths: Any) -> MergedResult:
    """Merge the JSON reports of a multi-worker job's workers (report files, or folders of
    ``*.tfdiag.json``): a result with a line per worker and the `straggler` finding, shown as
    text (``summary()``), HTML and JSON (``to_json(path)``) as a run's result is."""
    from .jobs.merged import merge as merge_reports

    return merge_reports(paths)


def timelines(*results: Any) -> Any:
    """The step timelines of profiled runs (``%%tfprofile -o NAME`` results) on one time scale,
    each labelled by the name it was stored under: shown as an SVG in a notebook, as text
    elsewhere."""
    from .views.timeline import Timelines

    rows = []
    for index, result in enumerate(results):
        report = result.report()
        rows.append((report.get("stored_as") or f"run {index + 1}", report.get("timeline")))
    return Timelines(rows)


def load_ipython_extension(ipython: Any) -> None:
    from .gpu.magic import load as load_gpu
    from .magics import load

    load(ipython)
    load_gpu(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .gpu.magic import unload as unload_gpu
    from .magics import unload

    unload_gpu(ipython)  # stops a running %tfgpu --watch and joins its thread
    unload(ipython)
