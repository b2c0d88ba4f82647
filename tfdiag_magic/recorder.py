"""The live side of a run: the state the probes share and the growing columns they append to.

Probes call into one `Recorder` from the hot path (once or twice per step), so every method here
does a few clock reads and array appends and nothing more; a loop iteration only notes two clock
reads, and its rows are written with NumPy in batches (`write_iterations`). Slow facts (process
memory, GPU memory) are sampled at most every `memory_interval` seconds. `finish()` turns the
appended columns into a `Record`; nothing in this module imports TensorFlow.

The step table's memory is bounded: its first `full_rows` rows are kept as they came; past
them, whenever the buffer holds `tail_rows` more, it is thinned to one row in `stride` (a
uniform sample, `stride` doubling as the run goes on) and every row left out is added to exact
per-phase sums, so counts and totals stay exact however long the run.
"""

from __future__ import annotations

import linecache
import math
import sys
import threading
import weakref
from array import array
from collections.abc import Callable
from time import perf_counter, thread_time
from typing import Any, NamedTuple

import numpy as np

from .record import (
    DROPPED_SUMS,
    OTHER_CALLS,
    PHASES,
    STEP_COLUMNS,
    DroppedSteps,
    EpochLogs,
    EpochStart,
    ErrorInfo,
    KerasCall,
    KerasCallGroup,
    Kind,
    LoopInfo,
    Phase,
    Record,
    WarningRecord,
)

_POST_RUN_COLUMNS = ("traced", "gc_time")  # filled from other tables after the run
# The hot path writes a step as one run of float64s into a single buffer (one place in memory
# per step, instead of one per column); `finish` turns the rows into typed columns.
ROW_FIELDS = (
    "start",
    "duration",
    "data_wait",
    "phase",
    "kind",
    "epoch",
    "loss",
    "eager",
    "fused",
    "loop",
    "callback_time",
    "host_bytes",
    "batch",
    "no_loss",
)
WIDTH = len(ROW_FIELDS)
_LOSS = ROW_FIELDS.index("loss")
_NO_LOSS = ROW_FIELDS.index("no_loss")
_DURATION = ROW_FIELDS.index("duration")
_PHASE = ROW_FIELDS.index("phase")
_CALLBACK = ROW_FIELDS.index("callback_time")
_START = ROW_FIELDS.index("start")
_WAIT = ROW_FIELDS.index("data_wait")
_EAGER = ROW_FIELDS.index("eager")
_HOST_BYTES = ROW_FIELDS.index("host_bytes")
_TRAIN = int(Phase.TRAIN)
_LOOP_KIND = int(Kind.LOOP)
_LOOP_PHASE = int(Phase.LOOP)
_SUM = {name: i for i, name in enumerate(DROPPED_SUMS)}
_EPOCH = ROW_FIELDS.index("epoch")
_LOOP_ID = ROW_FIELDS.index("loop")
# The step table keeps its first FULL_ROWS rows as they came (29 MB of float64 rows); past them
# the buffer holds at most TAIL_ROWS more before it is thinned, so a run of any length holds
# (FULL_ROWS + TAIL_ROWS) * WIDTH * 8 bytes (37 MB) of rows at the most.
FULL_ROWS = 1 << 18
TAIL_ROWS = 1 << 16
# The newest rows a thinning leaves as they are: a Keras batch's callbacks add their time to the
# batch's row after it was appended, also when a callback's own predict appended rows since.
KEEP_RAW = 1024
MAX_WARNINGS = 1000
# Top-level Keras calls kept one by one (about 0.4 kB each); later ones are summed per API,
# model build, data kind and loop (`KerasCallGroup`), in at most KERAS_CALL_GROUPS groups.
KERAS_CALLS_KEPT = 10_000
KERAS_CALL_GROUPS = 1000
# A loop that has run this many iterations without a step inside any of them (an element-wise
# Python loop) is counted from then on, not recorded row by row: the totals stay exact and
# the record stays small however many millions of iterations it makes.
LOOP_ROW_LIMIT = 10_000
# A loop's iterator release during which the run's thread slept this long is a stalled one (an
# epoch's start in fit likewise: diagnose/epoch_start_stall.py's MIN_STALL_S).
RELEASE_STALL_S = 0.05
# A loop's totals where it never ran (see `OpenLoop.totals`).
_NO_TOTALS = (0, 0.0, 0.0, 0, 0, 0.0, -1.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0)
_NEW_TOTALS = (0, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0)  # a loop's, as it begins
LINE_TEXT = 200  # characters of a line's text kept in `Record.lines`
MAX_LINE_TEXTS = 1000  # lines whose text is kept (a cell or script has far fewer that run)
LOSS_BATCH = 4096  # at most this many losses wait; all are read at every memory sample
# A loop's iterations wait for their rows in pairs of clock reads (`OpenLoop.times`): at most
# LOOP_PAIRS of them, and at most LOOP_FLUSH_S seconds after the first (the live view's lag).
LOOP_PAIRS = 64
LOOP_FLUSH_S = 0.25
NAN = math.nan
_LOOP_FLOATS = 2 * LOOP_PAIRS
_NO_TIMES = array("d", bytes(8 * _LOOP_FLOATS))
# A loop row as `add_step` would write it for (Phase.LOOP, Kind.LOOP, one step); `start`,
# `duration`, `data_wait`, `epoch` and `loop` are each iteration's own.
_LOOP_ROW = np.array(
    [0.0, 0.0, 0.0, _LOOP_PHASE, _LOOP_KIND, -1, NAN, 0.0, 1, -1, 0.0, 0.0, NAN, 1.0]
)


class _Here(threading.local):
    """Per-thread flag: `main` is set to True on the recorder's thread only."""

    main = False


class OpenLoop:
    """An iteration-tracking state for one loop of the cell while it runs.

    An iteration is noted as two clock reads in `times` (when the loop asked for its item, when
    it got it); the rows of the iterations that ended are written from there in a batch
    (`Recorder.write_iterations`), when `times` is full, every `LOOP_FLUSH_S` at the most, and
    before anything reads the rows in the middle of a run.
    """

    __slots__ = (
        "clocks_ran_out",
        "compiled_steps",
        "cpu_start",
        "due",
        "end_wait",
        "fetching",
        "has_steps",
        "index",
        "loop_id",
        "n",
        "outer_wait",
        "ran_out_at",
        "reader",
        "times",
        "totals",
    )

    def __init__(self, loop_id: int, totals: list[Any], outer_wait: float = NAN) -> None:
        self.loop_id = loop_id
        # the loop's [iterations, seconds, wait, dropped, model calls, their seconds, its
        # thread's CPU seconds over its runs that ended, the seconds from its items running out
        # to its end (its iterator's release); of the releases of a loop that ran steps: those
        # measured, those asleep `RELEASE_STALL_S` or more, those ones' seconds asleep and on a
        # CPU, and all the measured ones' seconds asleep and on a CPU]
        self.totals = totals
        # The input wait no step had taken when the loop began: the next step's again if the
        # loop ends without one (a helper's loop between a batch and its step).
        self.outer_wait = outer_wait
        self.index = -1
        # (asked, got) of the iterations whose rows are not written yet, in slots written by
        # index; `n` floats are used, and the last pair is the open iteration's (none: n == 0).
        self.times = _NO_TIMES[:]  # a copy of zeros: a loop begun anew costs a memcpy
        self.n = 0
        self.due = -math.inf  # when the rows are written at the latest (see `next_item`)
        self.has_steps = False  # a step has run inside this loop (its id is in loops_with_steps)
        # Its first step was compiled (a tf.function's call, a Keras step): an eager model call
        # in its body is then outside its steps, and timed (`probes.model_calls`).
        self.compiled_steps = False
        self.fetching = False  # its iterator is being asked for the next item, timed as its wait
        self.end_wait = 0.0  # the wait of the `next()` that found no item (see `items_ran_out`)
        self.ran_out_at = NAN  # when that `next()` returned: its iterator is released after
        # The thread's seconds on a CPU and in a run queue then, where the loop ran steps (an
        # epoch's loop over its data, whose iterator's release can sleep): None otherwise.
        self.clocks_ran_out: tuple[float, float] | None = None
        # the CPU time of the thread running the loop (the run's) as this run of it began
        self.cpu_start = thread_time()
        # What reads its tf.data iterator's runtime model as its rows are written (a
        # `probes.loop_stage_work.LoopStageReader`), or None: it does not draw from one.
        self.reader: Any = None


class StepMark(NamedTuple):
    """Where the run stood when the mark was taken (see `Recorder.step_mark`)."""

    steps: int  # rows recorded before the mark
    seconds: float  # seconds inside those rows


class StepRows(NamedTuple):
    """Rows of the step table that a reader has not read yet (see `Recorder.rows_since`)."""

    rows: np.ndarray  # (n, WIDTH) float64, ROW_FIELDS order, in the order they were recorded
    position: int  # rows recorded up to the last of them: the next call's `position`
    dropped: np.ndarray  # rows per phase recorded past `position` that the table left out

    def column(self, name: str) -> np.ndarray:
        """The field `name` of `ROW_FIELDS` ("start", "duration", "phase", ...) of each row,
        as float64 (a view of `rows`): readers need not know the rows' layout."""
        return self.rows[:, ROW_FIELDS.index(name)]


class Recorder:
    """Shared state of one profiling run, appended to by the probes."""

    def __init__(
        self,
        memory_interval: float = 0.05,
        full_rows: int | None = None,
        tail_rows: int | None = None,
    ) -> None:
        self.t0 = perf_counter()
        self.thread_id = threading.get_ident()
        # `here.main` is True on this thread only: the hot path's thread test is an attribute
        # read, not a call (a thread-local's class attribute is what other threads see).
        self.here = _Here()
        self.here.main = True
        self.memory_interval = memory_interval
        self._rows = array("d")  # WIDTH float64 per step, in ROW_FIELDS order
        # The table's layout (see `_thin`): rows [0, full_rows) as they came, then `_sampled`
        # rows of the thinned region (the rows full_rows + k * _stride of the run), then the
        # rows from `_raw_start` on, as they came, at row index - `_raw_offset` in `_rows`.
        # Before the first thinning every row is where it came: _raw_start = _raw_offset = 0.
        # None: the module's limits, read here so that a test can set them for a whole session
        self.full_rows = full_rows = FULL_ROWS if full_rows is None else full_rows
        self.tail_rows = tail_rows = TAIL_ROWS if tail_rows is None else tail_rows
        self._keep_raw = min(KEEP_RAW, tail_rows // 4)
        self._stride = 1
        self._sampled = 0
        self._raw_start = 0
        self._raw_offset = 0
        self._thin_at = full_rows + tail_rows - 1  # the row index at which the buffer is full
        self._layout = 0  # odd while a thinning moves rows (a reader on another thread retries)
        self._dropped = np.zeros((len(DROPPED_SUMS), len(PHASES)))  # sums of rows left out
        self._unseen = np.zeros(len(PHASES), dtype=np.int64)  # left out before a reader read
        self._read_upto = 0  # the position `rows_since` handed out last
        self._seconds_upto = 0  # `_seconds_before` is the seconds inside rows before this one
        self._seconds_before = 0.0
        self._handed_over = False  # `finish` turned the rows into a Record
        self.functions: dict[int, Any] = {}  # id(tf.function) -> FunctionEntry, see tf_functions
        self.retired_functions: list[Any] = []  # entries of functions that are gone
        self.traces: list[Any] = []  # TraceEvent, appended while tracing
        self.trace_count = 0  # len(traces), read by the hot path without a call
        self.optimizer_depth = 0
        self.fused_groups: list[tuple[float, int]] = []  # (start, steps) of each fused call
        self.t0_wall = ""
        self.count = 0  # rows recorded (the rows a thinning left out included)
        # Nesting: steps inside a Keras call or inside another step are not steps of their own.
        self.driver_depth = 0
        self.step_depth = 0
        self.driver_eager = False
        self.keras_epoch = -1
        self.top_function: Any = None  # the tf.function being called at top level, if any
        self.graph_calls = 0  # top-level graph calls since the last training step ended
        # Input waits from the cell's loops, waiting to be attributed to the next step.
        self.pending_wait = NAN
        # Seconds the loops' last `next()` waited to find no item: [all loops', nested loops']
        self.ran_out_wait = [0.0, 0.0]
        self._step_since_item = True  # a training step since the last loop item (or the start)
        self.anchor = self.t0  # when the work of the next eager step can have begun (absolute)
        self.open_loops: list[OpenLoop] = []
        self.loops: list[LoopInfo] = []
        # id -> [iterations, seconds, wait, dropped, model calls, their seconds]
        self.loop_totals: dict[int, list[float]] = {}
        self.loops_with_steps: set[int] = set()
        # Losses that are device values are read in batches, long after their step ended, so
        # reading them never makes the host wait for the device inside a step.
        # Device values and their rows in slots written by index (no call per step); the first
        # `_loss_n` slots are used.
        self._loss_values: list[Any] = [None] * LOSS_BATCH
        self._loss_rows = array("q", bytes(8 * LOSS_BATCH))
        self._loss_n = 0
        # Reads many values at once; None for a value that is no number (see `_read_each`).
        self.read_losses: Callable[[list[Any]], list[float | None]] = _read_each
        # Memory samples, taken from the hot path at most every memory_interval seconds.
        self._next_memory = 0.0
        self.mem_time = array("d")
        self.mem_rss = array("q")
        self.mem_tensors = array("q")  # bytes TensorFlow's CPU allocator has in use
        # Blocks Python's own allocator has handed out (`sys.getallocatedblocks`, which walks
        # its pools: microseconds to milliseconds, see `paced_read`): Python objects, whose
        # arenas neither count above sees.
        self.mem_python_blocks = array("q")
        # The C heap's bytes in use where `mem_tensors` is TensorFlow's own count (oneDNN's
        # allocator: tensors alone), -1 elsewhere (there `mem_tensors` is the heap already).
        self.mem_heap = array("q")
        # Where the profiled code was at each sample: the line of its innermost frame on the
        # sampling thread's stack (-1: none). `code_file` is the filename the code was
        # compiled under (a cell's, a script's path); None: lines are not looked for.
        self.mem_line = array("i")
        # What the machine did meanwhile (probes/cpu_wait.py's `load_reader`): at each sample,
        # the process's CPU seconds, the seconds the CPUs it may use have been busy, every
        # program's, and its threads' wait in run queues; NaN where not read.
        self.mem_cpu_self = array("d")
        self.mem_cpus_busy = array("d")
        self.mem_threads_waited = array("d")  # seconds its threads waited in run queues
        self.load_reader: Callable[[], tuple[float, float, float] | None] | None = None
        # The run's thread's seconds on a CPU and in a run queue (probes/cpu_wait.py's
        # `this_thread_times`), read where a loop that ran steps runs out of items and where it
        # ends: its iterator's release; None where the kernel keeps no counts.
        self.thread_clocks: Callable[[], tuple[float, float] | None] | None = None
        self.code_file: str | None = None
        self.gpu_memory: dict[str, tuple[array, array]] = {}
        self.rss_reader: Callable[[], int] | None = None
        self.gpu_reader: Callable[[], dict[str, tuple[int, int]]] | None = None
        self.tensor_reader: Callable[[], int] | None = None
        self.blocks_reader: Callable[[], int] = sys.getallocatedblocks
        self.heap_reader: Callable[[], int] | None = None
        self.warnings: list[WarningRecord] = []
        self.warnings_dropped = 0
        # Calls and events that the diagnosis reads besides the steps (see record.py).
        self.keras_calls: list[KerasCall] = []  # the first top-level Keras API calls of the cell
        self.keras_calls_kept = KERAS_CALLS_KEPT  # read here: a test can lower it for a session
        self.keras_call_groups: dict[tuple[str, str, int, str, int], KerasCallGroup] = {}
        self._latest_build: dict[str, int] = {}  # model name -> index in `models` (see below)
        self._builds_seen = 0
        self.models: list[Any] = []  # ModelBuilt
        self.config_calls: list[Any] = []  # ConfigCall, device settings that failed
        self.datasets: list[Any] = []  # DatasetStructure (probes/dataset_structure.py)
        self.callback_seconds: dict[str, float] = {}  # Keras callback class -> seconds
        self.epoch_hook_seconds = 0.0  # in the callbacks' on_epoch_begin/end, every fit's
        self.epoch_starts: list[EpochStart] = []  # the top-level fits' (see `EpochStart`)
        self.epoch_logs: list[EpochLogs] = []  # see `EpochLogs` (probes/step_logs.py)
        self.pending_host_bytes = 0.0  # NumPy bytes the cell converted since the last step
        self.keras_batch = NAN  # batch size of the running fit/evaluate/predict, when known
        # The running top-level `fit`'s callback list (its ``params``: epochs, steps) and the
        # index of its last batch, set by the Keras probe; `fit_progress()` reads them.
        self.fit_callbacks: Any = None
        self.fit_batch = -1
        # What trained, for the learning probe (probes/learning.py): Keras models that ran
        # training batches (fit, train_on_batch), by weak reference, with the batches each ran,
        # and the optimizers whose `apply` was called. The Keras and optimizer probes test a
        # weak reference's membership per step (no call); at first sight they call
        # `first_training` / `first_update`, which hand the object to the hooks, if any.
        self.trained: dict[weakref.ref[Any], int] = {}
        self.updated: set[weakref.ref[Any]] = set()
        self.on_first_training: Callable[[Any], None] | None = None
        self.on_first_update: Callable[[Any, Any], None] | None = None
        self.on_fit_done: Callable[[Any], None] | None = None
        self.on_fit_started: Callable[[Any], None] | None = None
        self.error: ErrorInfo | None = None
        # The last exception that left a step, by identity and type (the exception itself
        # would keep every frame it passed through, and their locals, alive: a failed fit's
        # model and batches that the code's `except` lets go), its phase and batch size.
        self._failure: tuple[int, type, int, float] | None = None
        # Called on the main thread after each memory sample taken at the end of a step (at
        # most every memory_interval): the live view. It must be quick and never raise.
        self.on_sample: Callable[[Recorder], None] | None = None

    # -- steps ---------------------------------------------------------------------------------

    def add_step(
        self,
        phase: int,
        kind: int,
        start: float,
        end: float,
        data_wait: float,
        epoch: int,
        eager: bool,
        loss: Any = None,
        fused: int = 1,
        host_bytes: float = 0.0,
        batch: float = NAN,
        callback_time: float = 0.0,
    ) -> None:
        """Append one step (or `fused` steps sharing one host call) that ran from start to end,
        with the seconds Keras callbacks took around it (on its last row, when fused).

        A step of phase ``train`` is a training step, and this is the one way to mark one: the
        work of an eager optimizer step after it cannot begin earlier than its `end` (see
        `anchor`), and the cell's loops start counting items towards the next one (see
        `next_item`). This runs once per step: it reads no clock, and the common step (one
        row, outside the cell's loops or inside loops that had a step already, no NumPy
        conversion pending) touches nothing but the row buffer and a few fields; everything
        else is in the methods it calls otherwise.
        """
        if self.pending_host_bytes and kind != _LOOP_KIND:
            host_bytes += self.pending_host_bytes
            self.pending_host_bytes = 0.0
        open_loops = self.open_loops
        if not open_loops:
            loop_id = -1
        elif open_loops[-1].has_steps:  # a step inside loops that had one: no call
            inner = open_loops[-1]
            loop_id = inner.loop_id
            if epoch < 0 and open_loops[0] is not inner:
                epoch = open_loops[0].index
        else:
            loop_id, epoch = self._loop_of_step(epoch, eager)
        index = self.count + fused - 1  # the (last) row's
        # "No loss" is its own flag, never a NaN: a NaN loss is a finding, a missing one is not.
        # Types are compared, not tested with isinstance: no call on the hot path (a float or
        # int subclass, NumPy's float64, is read later with the device values, as a number).
        if loss is None:
            number, missing = NAN, 1.0
        elif type(loss) is float or type(loss) is int:
            number, missing = loss, 0.0
        else:  # a device value, read later; `settle_losses` flags it if it cannot be read
            number, missing = NAN, 0.0
            waiting = self._loss_n
            self._loss_values[waiting] = loss
            self._loss_rows[waiting] = index
            self._loss_n = waiting + 1
        if fused == 1:
            self._rows.extend(
                (
                    start - self.t0,
                    end - start,
                    data_wait,
                    phase,
                    kind,
                    epoch,
                    number,
                    eager,
                    1,
                    loop_id,
                    callback_time,
                    host_bytes,
                    batch,
                    missing,
                )
            )
        else:
            self._fused_rows(
                phase, kind, start, end, data_wait, epoch, number, eager, fused, loop_id,
                callback_time, host_bytes, batch, missing,
            )  # fmt: skip
        self.count = index + 1
        if phase == _TRAIN:  # a training step ended
            self.anchor = end
            self.graph_calls = 0
            self._step_since_item = True
        if self._loss_n == LOSS_BATCH:  # every slot holds a loss: read all but this step's
            self.settle_losses(keep_newest=True)
        if index >= self._thin_at:  # the buffer is full: thin it (one compare per step)
            self._thin()
        if end >= self._next_memory:
            self.sample_memory(end)
            if self.on_sample is not None:
                self.on_sample(self)

    def _fused_rows(
        self,
        phase: int,
        kind: int,
        start: float,
        end: float,
        data_wait: float,
        epoch: int,
        number: float,
        eager: bool,
        fused: int,
        loop_id: int,
        callback_time: float,
        host_bytes: float,
        batch: float,
        missing: float,
    ) -> None:
        """The rows of a host call that ran `fused` steps (`add_step`): each an equal share of
        the call; its wait and input bytes on the first row, its loss and callback time on
        the last."""
        t0 = self.t0
        share = (end - start) / fused
        if self.count < self.full_rows + self.tail_rows:  # only full-resolution rows use it
            self.fused_groups.append((start - t0, fused))
        rows = self._rows
        for i in range(fused):
            rows.extend(
                (
                    start - t0 + i * share,
                    share,
                    data_wait if i == 0 else NAN,
                    phase,
                    kind,
                    epoch,
                    number if i == fused - 1 else NAN,
                    eager,
                    fused,
                    loop_id,
                    callback_time if i == fused - 1 else 0.0,
                    host_bytes if i == 0 else 0.0,
                    batch,
                    missing if i == fused - 1 else 1.0,  # the call's loss is on its last row
                )
            )

    def _loop_of_step(self, epoch: int, eager: bool) -> tuple[int, int]:
        """The innermost open loop of the cell around a step, and the step's epoch (the
        outermost loop's iteration, when the step has none of its own and loops are nested);
        the loops around the step are marked as having steps, compiled ones unless it ran
        `eager`."""
        open_loops = self.open_loops
        inner = open_loops[-1]
        if epoch < 0 and open_loops[0] is not inner:
            epoch = open_loops[0].index
        if not inner.has_steps:  # the loops around this step have steps
            for state in open_loops:  # their iterations so far are judged as without steps
                if not state.has_steps:
                    self.write_iterations(state)
            for state in open_loops:
                if not state.has_steps:
                    state.compiled_steps = not eager
                state.has_steps = True
                self.loops_with_steps.add(state.loop_id)
        return inner.loop_id, epoch

    def step_mark(self) -> StepMark:
        """A mark of where the run stands, for `steps_since` and `seconds_since` (exact across
        thinnings, unlike a row index)."""
        self.write_open_loops()
        self._advance_seconds()
        return StepMark(self.count, self._seconds_before)

    def steps_since(self, mark: StepMark) -> int:
        """Rows recorded since `mark` was taken."""
        self.write_open_loops()
        return self.count - mark.steps

    def seconds_since(self, mark: StepMark) -> float:
        """Seconds inside the rows recorded since `mark` was taken."""
        self.write_open_loops()
        self._advance_seconds()
        return self._seconds_before - mark.seconds

    def fit_progress(self) -> tuple[int, int] | None:
        """(training steps done, total) of the running top-level `fit`, where its callbacks'
        ``params`` give the epochs and steps per epoch; None elsewhere. Read when the live
        view redraws, not per step."""
        params = getattr(self.fit_callbacks, "params", None) or {}
        epochs, steps, epoch = params.get("epochs"), params.get("steps"), self.keras_epoch
        if not isinstance(epochs, int) or not isinstance(steps, int) or epoch < 0:
            return None
        return min(epoch * steps + self.fit_batch + 1, epochs * steps), epochs * steps

    def step_seconds(self, first_row: int) -> float:
        """Seconds inside the steps appended since row `first_row` (`self.count` then).

        Exact unless a thinning since then left out rows that came after `full_rows`; then the
        left-out part is estimated from the kept sample. `step_mark` is exact in every case.
        """
        if first_row >= self.count:
            return 0.0
        if first_row >= self._raw_start:  # every row since is in the buffer, as it came
            table = np.frombuffer(self._rows, dtype=np.float64)
            begin = (first_row - self._raw_offset) * WIDTH
            return float(table[begin + _DURATION :: WIDTH].sum())
        self._advance_seconds()
        table = np.frombuffer(self._rows, dtype=np.float64)
        durations = table[_DURATION::WIDTH]
        full = self.full_rows
        if first_row < full:  # the rows before it are all kept: exact
            return self._seconds_before - float(durations[:first_row].sum())
        first_kept = full + -(-(first_row - full) // self._stride)
        sample_end = full + self._sampled
        estimate = float(durations[first_kept:sample_end].sum()) * self._stride
        return estimate + float(durations[sample_end:].sum())

    def add_keras_call(self, call: KerasCall) -> None:
        """Keep `call`, or past `keras_calls_kept` calls, add it to the sums of its kind."""
        if len(self.keras_calls) < self.keras_calls_kept:
            self.keras_calls.append(call)
            return
        groups = self.keras_call_groups
        key = (call.api, call.model, self._build_of(call.model), call.data, call.loop)
        group = groups.get(key)
        if group is None and len(groups) >= KERAS_CALL_GROUPS:
            key = (call.api, "", OTHER_CALLS, "", -1)
            group = groups.get(key)
        if group is None:
            group = groups[key] = KerasCallGroup(*key)
        group.add(call)

    def _build_of(self, name: str) -> int:
        """Index in `models` of the latest build of a model named `name` (-1: none), as the
        diagnosis tells builds apart (after `clear_session()` names repeat)."""
        latest = self._latest_build
        for index in range(self._builds_seen, len(self.models)):
            latest[self.models[index].name] = index
        self._builds_seen = len(self.models)
        return latest.get(name, -1)

    def note_failure(self, exc: BaseException, phase: int, batch: float = NAN) -> None:
        """An exception left a step of `phase` (of `batch` samples, where known); if it ends
        the run, that step is where."""
        self._failure = (id(exc), type(exc), phase, batch)

    def take_wait(self) -> float:
        """The input wait not yet attributed to a step, which the caller's step now owns."""
        wait = self.pending_wait
        self.pending_wait = NAN
        return wait

    def settle_losses(self, keep_newest: bool = False) -> None:
        """Read the losses waiting to be read into the loss column; a value that cannot be
        read as a number is no loss (`no_loss` set), not a NaN one.

        With `keep_newest`, the loss of the step that just ended stays queued: on a GPU that
        step may still be running, and reading its loss now would wait for it.
        """
        n = self._loss_n
        if not n or (keep_newest and n == 1):
            return
        read = n - 1 if keep_newest else n
        values = self._loss_values[:read]
        rows = np.array(self._loss_rows[:read], dtype=np.int64)
        newest = self._loss_values[n - 1], self._loss_rows[n - 1]
        self._loss_values[:n] = [None] * n  # the values read go now: the slots hold no tensor
        if keep_newest:
            self._loss_values[0], self._loss_rows[0] = newest
        self._loss_n = n - read
        try:
            numbers: list[float | None] = list(self.read_losses(values))
        except Exception:
            numbers = _read_each(values)
        # Rows waiting are never thinned (`_thin` reads them first): each is where it came.
        at = (rows - self._raw_offset) * WIDTH
        table = np.frombuffer(self._rows, dtype=np.float64)
        if None in numbers:  # values that could not be read as numbers: no loss
            unread = np.array([number is None for number in numbers])
            table[at[unread] + _NO_LOSS] = 1.0
            at = at[~unread]
            numbers = [number for number in numbers if number is not None]
        table[at + _LOSS] = numbers
        del table  # the buffer can grow again

    # -- bounded memory ------------------------------------------------------------------------

    def _advance_seconds(self) -> None:
        """Add the rows recorded since the last call to `_seconds_before` (they are all in the
        buffer as they came: `_thin` calls this before it moves any)."""
        start = self._seconds_upto
        if start >= self.count:
            return
        table = np.frombuffer(self._rows, dtype=np.float64)
        begin = (start - self._raw_offset) * WIDTH
        self._seconds_before += float(table[begin + _DURATION :: WIDTH].sum())
        self._seconds_upto = self.count

    def _thin(self, final: bool = False) -> None:
        """Make room in the buffer: keep one row in `_stride` of the rows past `full_rows`
        (the stride doubles while the kept ones are more than half of `tail_rows`) and add
        the rest to the exact sums. The newest `KEEP_RAW` rows stay (all of them at the end,
        `final`, when the last rows are thinned like the others to keep the sample uniform).
        """
        self.settle_losses()  # every waiting loss is read into its row before rows move
        self._advance_seconds()
        self._layout += 1
        try:
            rows = self._compact(0 if final else self._keep_raw)
            del self._rows[rows * WIDTH :]
        finally:
            self._layout += 1
        self._thin_at = self.count + self.full_rows + self.tail_rows - rows - 1

    def _compact(self, keep_raw: int) -> int:
        """Move the kept rows into place (see `_thin`); returns the rows the buffer keeps."""
        table = np.frombuffer(self._rows, dtype=np.float64).reshape(-1, WIDTH)
        full, count, offset = self.full_rows, self.count, self._raw_offset
        lo = max(self._raw_start, full)
        hi = max(count - keep_raw, lo)
        chunk = table[lo - offset : hi - offset]
        keep = np.zeros(chunk.shape[0], dtype=bool)
        keep[(full - lo) % self._stride :: self._stride] = True  # rows full + k * stride
        self._drop(chunk[~keep], lo + np.flatnonzero(~keep))
        kept = chunk[keep]
        end = full + self._sampled
        table[end : end + kept.shape[0]] = kept
        self._sampled += kept.shape[0]
        while self._sampled > self.tail_rows // 2:
            sample = table[full : full + self._sampled]
            odd = np.arange(1, self._sampled, 2)
            self._drop(sample[1::2], full + odd * self._stride)
            halved = sample[0::2].copy()
            table[full : full + halved.shape[0]] = halved
            self._sampled = halved.shape[0]
            self._stride *= 2
        end = full + self._sampled
        newest = table[hi - offset : count - offset].copy()
        table[end : end + newest.shape[0]] = newest
        self._raw_start, self._raw_offset = hi, hi - end
        return end + newest.shape[0]

    def _drop(self, rows: np.ndarray, indices: np.ndarray) -> None:
        """Add `rows` (recorded as rows `indices` of the run) to the sums of rows left out."""
        if rows.shape[0] == 0:
            return
        phase = rows[:, _PHASE].astype(np.intp)
        n = len(PHASES)
        sums = self._dropped

        def add(name: str, weights: np.ndarray | None = None) -> None:
            sums[_SUM[name]] += np.bincount(phase, weights, minlength=n)[:n]

        wait = rows[:, _WAIT]
        seen = ~np.isnan(wait)
        reported = rows[:, _NO_LOSS] == 0.0
        add("count")
        add("duration", rows[:, _DURATION])
        add("data_wait", np.where(seen, wait, 0.0))
        add("data_wait_count", seen.astype(np.float64))
        add("callback_time", rows[:, _CALLBACK])
        add("eager", rows[:, _EAGER])
        add("host_bytes", rows[:, _HOST_BYTES])
        add("loss_count", reported.astype(np.float64))
        add("loss_nonfinite", (reported & ~np.isfinite(rows[:, _LOSS])).astype(np.float64))
        unseen = indices >= self._read_upto
        if unseen.any():
            self._unseen += np.bincount(phase[unseen], minlength=n)[:n]

    def rows_since(self, position: int) -> StepRows:
        """The rows recorded from row `position` on that the table holds (a copy), and how
        many rows per phase it left out past `position` since the last call; `position` is
        the previous call's (0 at first). Safe on another thread while the run appends: a
        call that meets a thinning returns nothing new, and the next one reads on from there.
        """
        layout = self._layout
        count = self.count
        nothing = StepRows(np.zeros((0, WIDTH)), position, np.zeros(len(PHASES), np.int64))
        if self._handed_over or layout % 2 or position >= count:
            return nothing
        full = self.full_rows
        if position >= self._raw_start:
            first = position - self._raw_offset
        elif position < full:
            first = position
        else:
            first = full + -(-(position - full) // self._stride)
        end = count - self._raw_offset
        # A slice of an array.array is a copy: no buffer of the recorder's stays exported, so
        # the hot path can keep appending.
        chunk = self._rows[first * WIDTH : end * WIDTH]
        if self._layout != layout or len(chunk) != (end - first) * WIDTH:
            return nothing  # a thinning moved the rows meanwhile
        dropped, self._unseen = self._unseen, np.zeros(len(PHASES), np.int64)
        self._read_upto = count
        return StepRows(np.frombuffer(chunk).reshape(-1, WIDTH), count, dropped)

    @property
    def rows_held(self) -> int:
        """Rows the buffer holds now (at most `full_rows + tail_rows`, plus one fused call)."""
        return len(self._rows) // WIDTH

    def _step_indices(self, rows: int) -> np.ndarray:
        """Each row's index among all the rows recorded, for the `rows` rows in the buffer."""
        full = self.full_rows
        raw = np.arange(self._raw_start, self._raw_start + rows - full - self._sampled)
        sample = full + np.arange(self._sampled) * self._stride
        return np.concatenate((np.arange(full), sample, raw)).astype(np.int64)

    # -- loops ---------------------------------------------------------------------------------

    def begin_loop(self, loop_id: int) -> OpenLoop:
        """A loop of the cell starts (again, if it runs inside itself): its own new state,
        innermost of the loops open now; `end_loop` closes it."""
        totals = self.loop_totals.get(loop_id)
        if totals is None:
            totals = self.loop_totals[loop_id] = list(_NEW_TOTALS)
        state = OpenLoop(loop_id, totals, self.pending_wait)
        self.open_loops.append(state)
        return state

    def loop_state(self, loop_id: int) -> OpenLoop:
        """The state of the innermost open loop `loop_id` (a ``while`` loop that ticks), begun
        here if that loop is not open."""
        for state in reversed(self.open_loops):
            if state.loop_id == loop_id:
                return state
        return self.begin_loop(loop_id)

    def model_called(self, seconds: float) -> None:
        """An eager Keras model call made in the body of the innermost open loop, outside any
        step, took `seconds`: counted for every open loop (an outer loop's time holds it)."""
        for state in self.open_loops:
            totals = state.totals
            totals[4] += 1
            totals[5] += seconds

    def loop_advanced(self, now: float, wait: float) -> None:
        """The code got its next item at `now` after waiting `wait` seconds, outside the
        instrumented loops (a tf.data iterator stepped by hand: `probes.dataset_waits`); the
        waits add up for the next step, as `next_item` adds a loop's."""
        if self._step_since_item:
            self.anchor = now
            self._step_since_item = False
        pending = self.pending_wait
        self.pending_wait = wait if pending != pending else pending + wait

    def next_item(self, state: OpenLoop, before: float, after: float | None) -> None:
        """A loop of the cell asked for its next item at `before` and got it at `after`: the
        iteration open in `state` (if any) ends at `before` and the next one begins. With
        `after` None, no item came (the loop ended or raised): the open iteration ends.

        The loop's hot path: one call per iteration, which notes the two times in the loop's
        slots; the rows are written from them in a batch (`write_iterations`). Until a step
        takes them, waits add up, and the next eager step's work is taken to begin after the
        first of these items: with gradient accumulation, one optimizer update follows several
        micro-batches, and its step holds all of them.
        """
        state.fetching = False
        n = state.n
        if after is None:
            if n:
                self.write_iterations(state, before)
            return
        open_loops = self.open_loops
        if (
            n == _LOOP_FLOATS
            or before >= state.due
            or (open_loops[-1] if open_loops else None) is not state
        ):
            self._iterations_due(state, before)
            n = 0
        times = state.times
        times[n] = before
        times[n + 1] = after
        state.n = n + 2
        state.index += 1
        if self._step_since_item:
            self.anchor = after
            self._step_since_item = False
        wait = after - before
        pending = self.pending_wait
        self.pending_wait = wait if pending != pending else pending + wait

    def _iterations_due(self, state: OpenLoop, now: float) -> None:
        """`next_item` off its hot path: the rows of `state`'s iterations (and those of loops
        open inside it, a generator's, whose epoch is about to change) are written, memory is
        sampled when it is time, and the next time this must happen is set."""
        for inner in reversed(self.open_loops):
            if inner is state:
                break
            self.write_iterations(inner)
        self.write_iterations(state, now)
        reader = state.reader
        if reader is not None:  # its iterator has just handed out an item: it is idle
            reader.due(state.index + 2)  # the items of this run of the loop, the new one's too
        if now >= self._next_memory:
            self.sample_memory(now)
            if self.on_sample is not None:
                self.on_sample(self)
        state.due = min(now + LOOP_FLUSH_S, self._next_memory)

    def write_iterations(self, state: OpenLoop, end: float | None = None) -> None:
        """Write the rows of `state`'s iterations that ended: all of them, the open one ending
        at `end`, or (`end` None) all but the open one. Past `LOOP_ROW_LIMIT` iterations, a
        loop without steps is counted, not recorded row by row."""
        n = state.n if end is not None else state.n - 2
        if n <= 0:
            return
        times = np.array(state.times[: state.n])  # a copy: the slots are written again below
        asked, got = times[0:n:2], times[1:n:2]
        ends = np.empty_like(got)
        ends[:-1] = asked[1:]
        ends[-1] = end if end is not None else times[n]
        iterations = got.shape[0]
        totals = state.totals
        before = totals[0]
        totals[0] += iterations
        totals[1] += float((ends - got).sum())
        totals[2] += float((got - asked).sum())
        rows = iterations
        if not state.has_steps and state.loop_id not in self.loops_with_steps:
            rows = max(0, min(iterations, LOOP_ROW_LIMIT - before))
            totals[3] += iterations - rows
        if rows:
            open_loops = self.open_loops
            outer = open_loops[0] if open_loops else state
            block = np.empty((rows, WIDTH))
            block[:] = _LOOP_ROW
            block[:, _START] = got[:rows] - self.t0
            block[:, _DURATION] = ends[:rows] - got[:rows]
            block[:, _WAIT] = got[:rows] - asked[:rows]
            block[:, _EPOCH] = -1 if outer is state else outer.index
            block[:, _LOOP_ID] = state.loop_id
            self._rows.frombytes(block.tobytes())
            self.count += rows
        # The open iteration's pair moves to the first slots.
        kept = state.n - n
        state.times[0:kept] = state.times[n : state.n]
        state.n = kept
        if rows and self.count - 1 >= self._thin_at:  # the buffer is full: thin it
            self._thin()

    def write_open_loops(self) -> None:
        """Write the rows of every open loop's ended iterations (a reader is about to count
        or sum the rows recorded so far). Only on the recorder's thread, which alone writes
        rows (a model compiled on another thread takes a mark too)."""
        if not self.here.main:
            return
        for state in self.open_loops:
            if state.n > 2:
                self.write_iterations(state)

    def items_ran_out(self, state: OpenLoop, wait: float) -> None:
        """The loop of `state` asked for an item and, after `wait` seconds, found there was
        none: its items ran out (a reader's slow end, a generator's clean-up). The wait is the
        loop's (`LoopInfo.wait`), counted in `ran_out_wait` (all loops', those nested in
        another loop's), and, where the loop ran steps, the next step's data wait: the step
        after the loop (the next epoch's first) could not start before it."""
        state.totals[2] += wait
        state.end_wait += wait
        state.ran_out_at = perf_counter()
        if state.has_steps and self.thread_clocks is not None:  # once an epoch, not per step
            state.clocks_ran_out = self.thread_clocks()
        totals = self.ran_out_wait
        totals[0] += wait
        if self.open_loops and self.open_loops[0] is not state:
            totals[1] += wait

    def end_loop(self, loop_id: int) -> None:
        """The loop's waits that no step took are dropped, but for the wait of its last
        `next()` where it ran steps (`items_ran_out`); a wait from before it began that no step
        has taken since is the next step's again."""
        now = perf_counter()
        wait = NAN
        for state in reversed(self.open_loops):
            if state.loop_id == loop_id:
                if state.n:
                    self.next_item(state, now, None)
                state.totals[6] += thread_time() - state.cpu_start
                if state.ran_out_at == state.ran_out_at:  # its items ran out: then released
                    state.totals[7] += now - state.ran_out_at
                    if state.clocks_ran_out is not None:
                        self._note_release(state, now - state.ran_out_at)
                self.open_loops.remove(state)
                if not state.has_steps:
                    wait = state.outer_wait
                elif state.end_wait:
                    wait = state.end_wait
                break
        self.pending_wait = wait

    def _note_release(self, state: OpenLoop, wall: float) -> None:
        """A release of the iterator of a loop that ran steps, measured: where its thread slept
        `RELEASE_STALL_S` or more (neither on a CPU nor waiting for one), a stalled one."""
        before = state.clocks_ran_out
        after = self.thread_clocks() if self.thread_clocks is not None else None
        if before is None or after is None:
            return
        totals = state.totals
        totals[8] += 1
        on_cpu = after[0] - before[0]
        asleep = wall - on_cpu - (after[1] - before[1])
        totals[12] += max(asleep, 0.0)
        totals[13] += on_cpu
        if asleep >= RELEASE_STALL_S:
            totals[9] += 1
            totals[10] += asleep
            totals[11] += on_cpu

    def close_all_loops(self) -> None:
        now = perf_counter()
        while self.open_loops:
            state = self.open_loops[-1]
            if state.n:
                self.next_item(state, now, None)
            if threading.get_ident() == self.thread_id:  # the loops' thread's CPU clock
                state.totals[6] += thread_time() - state.cpu_start
            else:  # another thread's clock says nothing of the loop's: not measured
                state.totals[6] = -math.inf
            self.open_loops.pop()

    # -- memory --------------------------------------------------------------------------------

    def sample_memory(self, now: float | None = None) -> None:
        if now is None:
            now = perf_counter()
        self._next_memory = now + self.memory_interval
        self.settle_losses(keep_newest=True)
        self.mem_time.append(now - self.t0)
        self.mem_rss.append(self.rss_reader() if self.rss_reader else -1)
        self.mem_tensors.append(self.tensor_reader() if self.tensor_reader else -1)
        self.mem_python_blocks.append(self.blocks_reader())
        self.mem_heap.append(self.heap_reader() if self.heap_reader else -1)
        self.mem_line.append(self.user_line())
        load = self.load_reader() if self.load_reader is not None else None
        self.mem_cpu_self.append(load[0] if load is not None else NAN)
        self.mem_cpus_busy.append(load[1] if load is not None else NAN)
        self.mem_threads_waited.append(load[2] if load is not None else NAN)
        if self.gpu_reader is not None:
            for device, (current, peak) in self.gpu_reader().items():
                columns = self.gpu_memory.get(device)
                if columns is None:
                    # Devices that appear late get -1 for the samples taken before.
                    columns = (
                        array("q", [-1] * (len(self.mem_time) - 1)),
                        array("q", [-1] * (len(self.mem_time) - 1)),
                    )
                    self.gpu_memory[device] = columns
                columns[0].append(current)
                columns[1].append(peak)
            for current_col, peak_col in self.gpu_memory.values():
                while len(current_col) < len(self.mem_time):
                    current_col.append(-1)
                    peak_col.append(-1)

    def user_line(self) -> int:
        """The line of the profiled code running now on this thread: that of the innermost
        frame of `code_file` on the stack (a line of the cell or script, or of a function it
        defines); -1 when none is (or no `code_file` is set)."""
        return self.user_lines(outermost_too=False)[0]

    def user_lines(self, outermost_too: bool = True) -> tuple[int, int]:
        """The lines of the profiled code running now on this thread: that of the innermost
        frame of `code_file` on the stack, and that of its outermost (where the code called a
        function of its own that made the call: ``compile_and_fit(model, window)`` around a
        ``model.fit``); (-1, -1) when none is (or no `code_file` is set). Without
        `outermost_too`, the walk ends at the innermost (the second is then that line too).

        The one place the tool reads the stack: where the user's code is, at a memory sample
        (every `memory_interval` at most), a long GC pause, a model build or a Keras call,
        never per step. A walk of a few dozen frames, a few microseconds.
        """
        code_file = self.code_file
        innermost = outermost = -1
        if code_file is None:
            return innermost, outermost
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == code_file:
                outermost = frame.f_lineno or -1
                if innermost < 0:
                    innermost = outermost
                    if not outermost_too:
                        break
            frame = frame.f_back
        return innermost, outermost

    # -- warnings and errors -------------------------------------------------------------------

    def innermost_loop(self) -> int:
        """Id of the innermost loop of the cell running now; -1 outside the cell's loops."""
        return self.open_loops[-1].loop_id if self.open_loops else -1

    def add_warning(self, source: str, category: str, message: str) -> None:
        if len(self.warnings) >= MAX_WARNINGS:
            self.warnings_dropped += 1
            return
        self.warnings.append(
            WarningRecord(
                time=perf_counter() - self.t0,
                step=self.count,
                source=source,
                category=category,
                message=message[:2000],
            )
        )

    def set_error(self, exc: BaseException) -> None:
        """Keep the exception that ended the run and the step it happened at.

        The step is counted within the phase of the step that was running (the failing step's
        index in that phase); when no step was running, it is the number of training steps done.
        """
        message = str(exc)
        if not message and isinstance(exc, KeyboardInterrupt):
            message = "interrupted"
        phase: str | None = None
        batch: int | None = None
        if self._failure is not None and _caused_by(exc, *self._failure[:2]):
            phase = PHASES[self._failure[2]]
            size = self._failure[3]
            batch = int(size) if size == size and size > 0 else None
        code = Phase.of(phase or "train")
        phases = np.frombuffer(self._rows, dtype=np.float64)[_PHASE::WIDTH]
        left_out = int(self._dropped[_SUM["count"], code])
        self.error = ErrorInfo(
            type=type(exc).__name__,
            message=_clip_message(message),
            step=int(np.count_nonzero(phases == code)) + left_out,
            phase=phase,
            batch=batch,
        )

    # -- the end -------------------------------------------------------------------------------

    def finish(self) -> Record:
        """Close what is still open and return the columns as a Record (steps sorted by start)."""
        self.close_all_loops()
        self.settle_losses()
        self.sample_memory()  # the last sample, with every reader still set
        self.rss_reader = self.gpu_reader = self.tensor_reader = self.load_reader = None
        self.heap_reader = None
        self.thread_clocks = None
        left_out: DroppedSteps | None = None
        index: np.ndarray | None = None
        if self._stride > 1:  # thinned: the last rows are thinned like the others
            self._thin(final=True)
            left_out = DroppedSteps(
                full_rows=self.full_rows,
                stride=self._stride,
                sums={name: self._dropped[i].copy() for i, name in enumerate(DROPPED_SUMS)},
            )
            index = self._step_indices(len(self._rows) // WIDTH)
            # Fused groups are spread over consecutive rows: only full-resolution rows have them.
            first_thinned = self._rows[self.full_rows * WIDTH + _START]
            self.fused_groups = [g for g in self.fused_groups if g[0] < first_thinned]
        steps = self._columns()
        # Loop rows are appended when the iteration ends, after the steps inside it. One
        # column is sorted at a time, so only one extra column is alive at once.
        order = np.argsort(steps["start"], kind="stable")
        if order.size and np.any(order[1:] < order[:-1]):
            for name in steps:
                steps[name] = steps[name][order]
            if index is not None:
                index = index[order]
        del order
        starts = steps["start"]
        mem_time = np.array(self.mem_time, dtype=np.float64)
        memory: dict[str, np.ndarray] = {
            "time": mem_time,
            # the number of steps that had started when the sample was taken
            "step": np.searchsorted(starts, mem_time, side="right").astype(np.int64),
            "rss": np.array(self.mem_rss, dtype=np.int64),
            # bytes of tensors held by TensorFlow's CPU allocator; -1 where not known
            "cpu_tensors": np.array(self.mem_tensors, dtype=np.int64),
            # blocks handed out by Python's object allocator (small objects)
            "python_blocks": np.array(self.mem_python_blocks, dtype=np.int64),
            # the C heap's bytes in use where `cpu_tensors` is TensorFlow's own count; -1 else
            "heap": np.array(self.mem_heap, dtype=np.int64),
        }
        # the line of the profiled code running at each sample (see `user_line`); -1: none
        memory["line"] = np.array(self.mem_line, dtype=np.int32)
        # the process's CPU seconds, and its CPUs' busy seconds (every program's); NaN: not read
        memory["cpu_self"] = np.array(self.mem_cpu_self, dtype=np.float64)
        memory["cpus_busy"] = np.array(self.mem_cpus_busy, dtype=np.float64)
        # the seconds the process's threads had waited in run queues since the first read,
        # summed from each thread's rise between reads (LoadReader); NaN: not read
        memory["threads_waited"] = np.array(self.mem_threads_waited, dtype=np.float64)
        for device, (current, peak) in self.gpu_memory.items():
            memory[f"gpu:{device}:current"] = np.array(current, dtype=np.int64)
            memory[f"gpu:{device}:peak"] = np.array(peak, dtype=np.int64)
        memory["step"] = self._rows_started(memory["step"], index)
        for warning in self.warnings:
            started = np.searchsorted(starts, [warning.time], side="right")
            warning.step = int(self._rows_started(started, index)[0])
        for loop in self.loops:
            totals = self.loop_totals.get(loop.id, _NO_TOTALS)
            iterations, seconds, wait, dropped, model_calls, model_seconds = totals[:6]
            cpu, release, measured, stalled, asleep, on_cpu, all_asleep, all_cpu = totals[6:14]
            loop.cpu_seconds = float(cpu) if cpu >= 0 else -1.0
            loop.release_seconds = float(release)
            loop.releases_measured, loop.releases_stalled = int(measured), int(stalled)
            loop.release_asleep, loop.release_cpu = float(asleep), float(on_cpu)
            loop.releases_asleep_all, loop.releases_cpu_all = float(all_asleep), float(all_cpu)
            loop.model_calls = int(model_calls)
            loop.model_seconds = float(model_seconds)
            loop.iterations = int(iterations)
            loop.seconds = float(seconds)
            loop.wait = float(wait)
            loop.rows_dropped = int(dropped)
            loop.has_steps = loop.id in self.loops_with_steps
        return Record(
            steps=steps,
            memory=memory,
            traces=list(self.traces),
            loops=list(self.loops),
            warnings=list(self.warnings),
            warnings_dropped=self.warnings_dropped,
            error=self.error,
            wall_time=perf_counter() - self.t0,
            keras_calls=list(self.keras_calls),
            keras_call_groups=list(self.keras_call_groups.values()),
            models=list(self.models),
            lines=self._line_texts(),
            config_calls=list(self.config_calls),
            callback_seconds=dict(self.callback_seconds),
            epoch_hook_seconds=self.epoch_hook_seconds,
            epoch_starts=list(self.epoch_starts),
            epoch_logs=list(self.epoch_logs),
            datasets=list(self.datasets),
            dropped=left_out,
            step_index=index,
        )

    def first_training(self, model: Any) -> None:
        """`model` is about to run its first training batch of the run (once per model)."""
        self.trained[weakref.ref(model)] = 0
        if self.on_first_training is not None:
            self.on_first_training(model)

    def fit_started(self, model: Any) -> None:
        """A top-level `fit` of `model` is about to run its first batch (after
        `first_training` where it is the model's first)."""
        if self.on_fit_started is not None:
            self.on_fit_started(model)

    def fit_done(self, model: Any) -> None:
        """A top-level `fit` of `model` ended: what it trained is read now, as the code may
        set the weights back afterwards (to compare runs from the same start)."""
        if self.on_fit_done is not None:
            self.on_fit_done(model)

    def first_update(self, optimizer: Any, variables: Any) -> None:
        """`optimizer.apply` is called for the first time in the run, on `variables` (None:
        the optimizer's own), outside Keras' fit and ``*_on_batch`` (those are `trained`)."""
        self.updated.add(weakref.ref(optimizer))
        if self.on_first_update is not None and not self.driver_depth:
            self.on_first_update(optimizer, variables)

    def release_user_objects(self) -> None:
        """Drop the references to the user's objects (tf.functions, the running fit's
        callbacks, loss values not read yet), once the record is built or given up on: a
        result kept in the notebook must not keep them alive."""
        self.functions.clear()
        self.retired_functions.clear()
        self.fit_callbacks = None
        self._loss_values = [None] * LOSS_BATCH
        self._loss_n = 0
        self.on_first_training = self.on_first_update = self.on_fit_done = None
        self.on_fit_started = None

    def _columns(self) -> dict[str, np.ndarray]:
        """The buffer as typed columns; the float64 buffer is released before they are
        sorted, so it and its copies are never alive together."""
        table = np.frombuffer(self._rows, dtype=np.float64).reshape(-1, WIDTH)
        steps = {
            name: table[:, ROW_FIELDS.index(name)].astype(dtype)
            if name in ROW_FIELDS
            else np.zeros(table.shape[0], dtype=dtype)
            for name, dtype in STEP_COLUMNS.items()
        }
        del table
        self._rows = array("d")
        self._handed_over = True
        return steps

    def _line_texts(self) -> dict[int, str]:
        """The text of each line of the profiled code that a memory sample, a model build or a
        kept Keras call points at (stripped, at most LINE_TEXT characters), from the source
        Python compiled (IPython keeps a cell's in `linecache`; a script's is read from its
        file)."""
        if self.code_file is None:
            return {}
        numbers = set(self.mem_line) | {m.line for m in self.models}
        numbers |= {call.line for call in self.keras_calls}
        numbers |= {call.caller_line for call in self.keras_calls}
        texts: dict[int, str] = {}
        for number in sorted(n for n in numbers if n > 0)[:MAX_LINE_TEXTS]:
            text = linecache.getline(self.code_file, number).strip()
            if text:
                texts[number] = text[:LINE_TEXT]
        return texts

    @staticmethod
    def _rows_started(positions: np.ndarray, index: np.ndarray | None) -> np.ndarray:
        """Rows recorded up to each of `positions` (rows of the start-sorted table)."""
        if index is None or index.size == 0:
            return positions
        reached = np.maximum.accumulate(index) + 1
        return np.where(positions > 0, reached[np.clip(positions - 1, 0, None)], 0)


def _caused_by(exc: BaseException, origin: int, kind: type) -> bool:
    """Whether `exc` is the exception of identity `origin` and type `kind`, or was raised while
    handling it (its context chain)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if id(current) == origin and type(current) is kind:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _read_each(values: list[Any]) -> list[float | None]:
    numbers: list[float | None] = []
    for value in values:
        try:
            numbers.append(float(value))
        except Exception:  # a non-scalar, or a value that cannot be read: no loss
            numbers.append(None)
    return numbers


MESSAGE_HEAD = 2000
MESSAGE_TAIL = 6000


def _clip_message(message: str) -> str:
    """An error message short enough to keep, with its start and its end.

    TensorFlow puts the Python traceback of an op's definition before the line that matters
    ("OOM when allocating tensor with shape[...]"), so the end of a long message is kept too.
    """
    if len(message) <= MESSAGE_HEAD + MESSAGE_TAIL:
        return message
    return f"{message[:MESSAGE_HEAD]}\n[…]\n{message[-MESSAGE_TAIL:]}"
