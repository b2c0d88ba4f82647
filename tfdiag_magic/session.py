"""One profiling run: install the probes, let the caller run its code, remove every probe.

The same session serves ``%%tfprofile``, ``python -m tfdiag_magic profile`` and the
``with tfdiag_magic.profile():`` block. Probes are removed in a ``finally`` whatever the code
did (an exception, a KeyboardInterrupt), with Ctrl-C held off until they are all out, and the
partial record is still turned into a result. A stage after the run that fails (the record's
details, the diagnosis) is a line of the result's `problems`, never an error of the run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import perf_counter
from types import ModuleType, TracebackType
from typing import Any

import numpy as np

from . import active
from .early_environment import set_early
from .probes import Probe
from .probes.adapt_calls import AdaptProbe
from .probes.cpu_wait import CpuWaitProbe
from .probes.dataset_waits import DatasetWaitProbe
from .probes.device_config import DeviceConfigProbe
from .probes.gc_pauses import GCProbe
from .probes.host_conversions import HostConversionProbe
from .probes.keras_calls import KerasProbe
from .probes.keras_models import KerasModelProbe
from .probes.learning import LearningProbe
from .probes.logged_warnings import WarningsProbe
from .probes.loops import LoopHooks, LoopProbe
from .probes.memory import MemoryProbe
from .probes.model_calls import ModelCallProbe
from .probes.nvml_probe import NVMLProbe
from .probes.ops_window import OpsWindowProbe
from .probes.optimizer_updates import OptimizerProbe
from .probes.tf_functions import TFFunctionProbe
from .probes.traceback_frames import PACKAGE_DIR, TracebackFramesProbe, tool_files
from .probes.worker import WorkerProbe
from .record import KINDS, TOOL_VERSION, Kind, LoopInfo, Record
from .recorder import Recorder
from .result import ProfileResult, failure_line
from .tf_runtime import device_settings, global_seed, import_tensorflow, read_losses


@dataclass
class SessionOptions:
    memory_interval: float = 0.05  # seconds between host/GPU memory samples
    nvml_interval: float = 0.1  # seconds between NVML samples (when a GPU exists)
    nvml: bool = True
    ops: bool = False  # the ops window: TensorFlow's profiler over a few steady steps
    # Files of what launched the run that a plain run has not on its stack (the command line's
    # runpy and entry point): left out of the stacks TensorFlow prints, as the tool's own are.
    launcher_files: tuple[str, ...] = ()


class Session:
    """A profiling run, used as a context manager around the code to profile.

    `loops` are the loops of the code that `instrument.instrument_loops` rewrote and
    `loop_hooks` what that code calls (`code_runner.PreparedCode.hooks`, activated for the
    run); `namespace` is the globals the code runs in.
    """

    def __init__(
        self,
        options: SessionOptions | None = None,
        *,
        source: str | None = None,
        loops: list[LoopInfo] | None = None,
        namespace: dict[str, Any] | None = None,
        label: str = "",
        filename: str | None = None,
        loop_hooks: LoopHooks | None = None,
    ) -> None:
        self.options = options or SessionOptions()
        self.source = source
        self.loops = loops or []
        self.loop_hooks = loop_hooks
        self.namespace = namespace
        # The filename the code was compiled under: memory samples and model builds record
        # the line of it that was running (None: the code's lines are not looked for).
        self.filename = filename
        self.result = ProfileResult(label=label)
        self._probes: list[Probe] = []  # installed and not removed yet
        self._finishers: list[Probe] = []  # the run's probes, in the order they were installed
        self._rec: Recorder | None = None
        self._partial_record: Record | None = None  # kept if building the record fails

    def __enter__(self) -> ProfileResult:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        __tracebackhide__ = True
        self.stop(exc)

    def start(self) -> ProfileResult:
        """Install every probe; returns the result object that `stop()` fills."""
        # The code's own settings for TensorFlow first, where this import starts it.
        early = set_early(self.source)
        tf = import_tensorflow()
        rec = Recorder(memory_interval=self.options.memory_interval)
        rec.loops = list(self.loops)
        rec.code_file = self.filename
        rec.read_losses = read_losses
        rec.t0_wall = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
        try:
            active.claim(rec)  # in the try: an interrupt right after it must release it
            gpus = [d.name for d in device_settings().list_physical_devices("GPU")]
            self._facts = _environment_facts(tf, gpus)
            self._facts["namespace_modules"] = _namespace_modules(self.namespace)
            self._facts["figures_open_at_start"] = _open_figures()
            if early:
                self._facts["environment_set_before_tensorflow"] = early
            probes: list[Probe] = [
                MemoryProbe(gpus),
                WarningsProbe(),
                GCProbe(),
                TFFunctionProbe(),
                OptimizerProbe(),
                KerasProbe(),
                KerasModelProbe(),
                AdaptProbe(),
                LearningProbe(),
                DeviceConfigProbe(),
                HostConversionProbe(),
                DatasetWaitProbe(),
                WorkerProbe(),
                NVMLProbe(self.options.nvml_interval if self.options.nvml else None),
                TracebackFramesProbe(self.options.launcher_files),
                CpuWaitProbe(),  # installed late and removed early: close to the run itself
            ]
            if self.loop_hooks is not None:  # the code's loops, and their eager model calls
                probes.append(LoopProbe(self.loop_hooks, self.namespace))
                probes.append(ModelCallProbe())
            if self.options.ops:
                probes.append(OpsWindowProbe(self.source))
            self._finishers = probes  # every probe writes its part of the record
            for probe in probes:
                probe.install(rec)
                self._probes.append(probe)
        except BaseException:
            with interrupts_deferred():
                try:
                    self._remove_probes()
                finally:
                    active.release(rec)
            raise
        self._rec = rec
        return self.result

    @property
    def running(self) -> bool:
        """Whether the session has started and not stopped (its probes are installed)."""
        return self._rec is not None

    @property
    def recorder(self) -> Recorder | None:
        """The recorder of the running session; None before `start` and after `stop`."""
        return self._rec

    def add_listener(self, callback: Callable[[Recorder], None] | None) -> None:
        """Have `callback(recorder)` called on the main thread after each memory sample taken at
        the end of a step, while the session runs (the live view); None removes it."""
        if self._rec is None:
            raise RuntimeError("the session is not running")
        self._rec.on_sample = callback

    def stop(self, exc: BaseException | None = None) -> ProfileResult:
        """Remove every probe and build the record; `exc` is what ended the code, if anything.

        Never raises once the session has started: whatever fails here (an error or a
        KeyboardInterrupt in a stage after the run) is a line of `result.problems`, and the
        result always gets a record, the partial one at worst.
        """
        __tracebackhide__ = True
        rec = self._rec
        if rec is None:
            raise RuntimeError("the session was stopped without being started")
        self._rec = None
        result = self.result
        try:
            # Held off: an interrupt half-way would leave patches installed and the recorder
            # claimed, and every later run would be refused.
            with interrupts_deferred():
                try:
                    if exc is not None:
                        self._stage("error details", rec.set_error, exc)
                        self._stage("error details", self._note_a_tool_error, exc)
                finally:
                    try:
                        self._stage("probe removal", self._remove_probes)
                    finally:
                        active.release(rec)
        except BaseException as error:  # the Ctrl-C held off above, delivered now
            result.add_problem("probe removal", error)
        try:
            record = self._stage("record", self._build_record, rec)
            if record is None:
                record = self._fallback_record(rec)
        finally:
            rec.release_user_objects()  # a result kept in the notebook keeps none of them
        result.record = record
        from .diagnose import diagnose
        from .diagnose.combined import combined_rewrite

        result.findings = self._stage("diagnosis", diagnose, record, result.add_problem) or []
        result.combined_rewrite = self._stage(
            "the combined rewrite", combined_rewrite, result.findings, record.source
        )
        return result

    def _note_a_tool_error(self, exc: BaseException) -> None:
        """Where the exception that ended the run was raised inside the tool's own code (not
        its public `step` API, nor an attribute lookup its proxies answer), a line of the
        result's problems says so: the code did not raise it."""
        place = raised_in_the_tool(exc)
        if place:
            self.result.problems.append(
                failure_line("the run", exc) + f" (raised inside the profiler, {place}: a defect"
                " of tfdiag_magic, not of the code; the rest of the report holds up to there)"
            )

    def _stage(self, name: str, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)`, or None with a line in the result's problems when it fails."""
        try:
            return function(*args)
        except BaseException as error:  # also an interrupt: the run itself is over
            self.result.add_problem(name, error)
            return None

    def _fallback_record(self, rec: Recorder) -> Record:
        """The record when building it failed: what `_build_record` had made, else what the
        recorder still holds about the run (its error, the time it took)."""
        record = self._partial_record
        if record is None:
            record = Record(
                error=rec.error,
                wall_time=perf_counter() - rec.t0,
                loops=list(rec.loops),
            )
        record.started_at = rec.t0_wall
        record.source = self.source
        if not record.facts:
            record.facts = dict(getattr(self, "_facts", {}))
        return record

    def _remove_probes(self) -> None:
        errors: list[BaseException] = []
        while self._probes:
            probe = self._probes.pop()
            try:
                probe.remove()
            except BaseException as error:  # remove the rest before reporting
                errors.append(error)
        if errors:
            raise errors[0]

    def _build_record(self, rec: Recorder) -> Record:
        record = rec.finish()
        self._partial_record = record  # what a failure below still leaves to report
        record.started_at = rec.t0_wall
        record.source = self.source
        record.facts = dict(self._facts)
        # Set by the run or before it: an eager random op without a seed of its own then makes
        # a new kernel, kept by TensorFlow, on every call (diagnose/eager_kernels.py).
        record.facts["global_seed"] = self._stage("record (global seed)", global_seed)
        # The Keras policy the code trained under: one it set itself is in force at the end,
        # where the start read the default (`mixed-precision-available` reads both).
        record.facts["mixed_precision_policy_at_start"] = record.facts.get("mixed_precision_policy")
        record.facts["mixed_precision_policy"] = self._stage("record (policy)", _keras_policy)
        # Figures pyplot still holds: each keeps its canvas until closed (host-memory-growth).
        record.facts["figures_open"] = self._stage("record (figures)", _open_figures)
        # Each probe writes its own part (the function table, GC pauses, NVML samples, facts);
        # one that fails is a line of the problems, and the others' parts are still kept.
        for probe in self._finishers:
            self._stage(f"record ({probe.name} probe)", probe.finish, record)
        _attribute_events(record)
        _spread_over_fused_groups(record, rec.fused_groups)
        if record.ops_window is not None:
            from .ops_summary import keep_compressed, summarise_ops

            self._stage("record (ops window trace)", keep_compressed, record.ops_window)
            self._stage("record (ops window)", summarise_ops, record)
            record.ops_window.xspace = b""  # read or not, the raw trace is not kept
        return record


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold off Ctrl-C (SIGINT) inside the block; one that came is delivered at its end.

    Only on the main thread (where Python delivers signals) and when SIGINT has a Python
    handler (IPython's, ipykernel's or Python's default one).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            previous(signal.SIGINT, None)


MAX_NAMESPACE_MODULES = 200


def _namespace_modules(namespace: dict[str, Any] | None) -> dict[str, str]:
    """The modules the user's namespace binds before the run (``tf`` -> ``tensorflow``), so a
    rewrite of a cell that uses ``tf`` imported in an earlier cell knows what ``tf`` is."""
    if not namespace:
        return {}
    found: dict[str, str] = {}
    for name, value in list(namespace.items()):
        if isinstance(value, ModuleType) and not name.startswith("_"):
            found[name] = value.__name__
            if len(found) >= MAX_NAMESPACE_MODULES:
                break
    return found


def _environment_facts(tf: Any, gpus: list[str]) -> dict[str, Any]:
    import keras

    build = {}
    try:
        info = tf.sysconfig.get_build_info()
        build = {k: str(info[k]) for k in ("cuda_version", "cudnn_version") if k in info}
    except Exception:
        pass
    return {
        "tfdiag_magic": TOOL_VERSION,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras_backend": keras.backend.backend(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "built_with_cuda": bool(tf.test.is_built_with_cuda()),
        "build": build,
        "gpus": gpus,
        "functions_run_eagerly": bool(tf.config.functions_run_eagerly()),
        "mixed_precision_policy": _policy_name(keras),
        "gpu": _gpu_facts(tf),
        "threads": threading.active_count(),
    }


def _keras_policy() -> str | None:
    """Keras' global policy now, where Keras is imported (None otherwise)."""
    keras = sys.modules.get("keras")
    return _policy_name(keras) if keras is not None else None


def _open_figures() -> int | None:
    """How many figures pyplot holds open: none where the code has not imported it (read
    only, nothing imported); None where it cannot be read."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return 0
    try:
        return len(pyplot.get_fignums())
    except Exception:  # a pyplot of another shape: no count, and the run goes on
        return None


def _policy_name(keras: Any) -> str | None:
    try:
        return str(keras.mixed_precision.global_policy().name)
    except Exception:
        return None


def _gpu_facts(tf: Any) -> dict[str, Any]:
    """The GPU set-up as the GPU doctor reads it (TensorFlow's view and the driver's)."""
    try:
        from .gpu.session_facts import session_facts
    except ImportError:
        return {}
    try:
        return session_facts(tf)
    except Exception:
        return {}


def _attribute_events(record: Record) -> None:
    """Fill the per-step columns that come from other tables: tracing and GC pauses.

    An event belongs to every row whose time span holds it. Rows of one kind do not overlap
    (iterations of one loop follow each other; an eager update step can hold the function
    calls it made), so each kind, and each loop, is searched on its own.

    A row is marked traced for the building of a graph it runs, never for a tf.data
    transformation's function (`TraceEvent.of_a_pipeline`): tf.data traces that as the
    pipeline is built, and a pipeline built inside a step is built at every such step (a
    `predict` on an array in a loop builds Keras' pipeline each call, three tracings): its cost
    is the steady one, and warm-up rows are left out of the steady state.
    """
    steps = record.steps
    n = steps["start"].shape[0]
    steps["traced"] = np.zeros(n, dtype=bool)
    steps["gc_time"] = np.zeros(n, dtype=np.float32)
    if n == 0:
        return
    trace_times = np.array([t.time for t in record.traces if not t.of_a_pipeline], dtype=np.float64)
    gc_times = record.gc.get("time", np.zeros(0))
    gc_durations = record.gc.get("duration", np.zeros(0))
    is_loop = steps["kind"] == Kind.LOOP
    groups = [
        np.flatnonzero(steps["kind"] == kind) for kind in range(len(KINDS)) if KINDS[kind] != "loop"
    ]
    for loop_id in np.unique(steps["loop"][is_loop]):
        groups.append(np.flatnonzero(is_loop & (steps["loop"] == loop_id)))
    for rows in groups:
        if rows.size == 0:
            continue
        starts = steps["start"][rows]
        ends = starts + steps["duration"][rows]
        for times, weights, column in (
            (trace_times, None, "traced"),
            (gc_times, gc_durations, "gc_time"),
        ):
            if times.size == 0:
                continue
            slot = np.searchsorted(starts, times, side="right") - 1
            inside = (slot >= 0) & (times <= ends[np.clip(slot, 0, None)])
            hit_rows = rows[slot[inside]]
            if column == "traced":
                steps["traced"][hit_rows] = True
            else:
                np.add.at(steps["gc_time"], hit_rows, weights[inside].astype(np.float32))


def _spread_over_fused_groups(record: Record, groups: list[tuple[float, int]]) -> None:
    """Steps that shared one host call share its events: tracing in the call marks them all."""
    if not groups:
        return
    steps = record.steps
    starts = steps["start"]
    traced = steps["traced"]
    for start, size in groups:
        first = int(np.searchsorted(starts, start, side="left"))
        rows = slice(first, first + size)
        if traced[rows].any():
            traced[rows] = True


# Raised inside the package on purpose, for the code's own mistakes: the `step` API's bad
# arguments (markers.py), and a missing attribute asked of a proxy (`__getattr__`).
_THE_CODES_TO_RAISE = ("markers.py",)


def raised_in_the_tool(exc: BaseException) -> str:
    """``probes/tf_functions.py line 503``: where `exc` was raised, where that is the tool's own
    code (`tool_files`: its examples, which a user runs as their own, left out); "" otherwise
    (the code's, a library's, or the tool's on purpose)."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    path = os.path.abspath(code.co_filename)
    if code.co_name == "__getattr__" or path not in tool_files():
        return ""
    relative = os.path.relpath(path, PACKAGE_DIR)
    if relative in _THE_CODES_TO_RAISE:
        return ""
    return f"{relative} line {tb.tb_lineno}"
