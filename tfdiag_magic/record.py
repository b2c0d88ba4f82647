"""The facts of one profiling run: a columnar per-step log plus the run's other tables.

A `Record` is what a session produces and what the diagnosis and the views consume. It knows
nothing of TensorFlow: every column is a NumPy array and every other fact a plain value, so a
record can be built by hand in tests and saved or compared without a TensorFlow runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

# The version of tfdiag_magic that writes records (``facts["tfdiag_magic"]``): the package's
# ``__version__``, kept here so that the session, below the package's front, can read it.
TOOL_VERSION = "0.1.0"


class Phase(IntEnum):
    """Step phases, stored in the ``phase`` column. ``LOOP`` rows are iterations of the cell's own
    loops; ``FUNCTION`` rows are top-level tf.function calls that update no weights (an
    evaluation or helper function)."""

    TRAIN = 0
    EVAL = 1
    PREDICT = 2
    LOOP = 3
    FUNCTION = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def of(cls, label: str) -> Phase:
        """The phase named `label` ("train", "eval", ...)."""
        return cls[label.upper()]


class Kind(IntEnum):
    """What produced a step row, stored in the ``kind`` column: a Keras fit/evaluate/predict
    batch, a ``*_on_batch`` call, a tf.function call, an eager optimizer update, an explicit
    ``step()`` marker, or a loop iteration."""

    KERAS = 0
    ON_BATCH = 1
    TF_FUNCTION = 2
    EAGER_UPDATE = 3
    MARKER = 4
    LOOP = 5

    @property
    def label(self) -> str:
        return self.name.lower()


PHASES: tuple[str, ...] = tuple(phase.label for phase in Phase)
"""The phases' labels, in code order (the ``phase`` column's categories)."""

KINDS: tuple[str, ...] = tuple(kind.label for kind in Kind)
"""The kinds' labels, in code order (the ``kind`` column's categories)."""

STEP_COLUMNS: dict[str, type] = {
    "start": np.float64,  # seconds since the run started
    "duration": np.float64,  # seconds inside the step itself
    "data_wait": np.float64,  # seconds waiting for input just before the step; NaN: not observable
    "phase": np.uint8,  # a Phase
    "kind": np.uint8,  # a Kind
    "epoch": np.int32,  # Keras epoch, or the outer loop's iteration for nested custom loops; -1
    # The loss the step reported, NaN and Inf included; NaN also where `no_loss` is set.
    "loss": np.float32,
    # The step reported no loss: it returned none (a step function returning nothing, a
    # Keras `train_step` whose logs have no "loss" key, a GAN's d_loss/g_loss), it was an inner
    # step of a fused call (the call's loss is on its last row), or the value could not be read
    # as a number. Where it is False, a NaN in `loss` is a NaN the user's code computed.
    # (Named for its absence so that a record built by hand with zeros reads as reported.)
    "no_loss": np.bool_,
    "eager": np.bool_,  # the step ran eagerly (no graph)
    "fused": np.uint16,  # steps that shared one host call (Keras steps_per_execution); 1 otherwise
    "loop": np.int16,  # id of the innermost loop of the cell this step ran in; -1 for none
    "traced": np.bool_,  # a tf.function was traced during the step (not a tf.data function)
    "callback_time": np.float32,  # seconds in Keras callbacks around the step
    "gc_time": np.float32,  # seconds of Python GC pauses during the step
    "host_bytes": np.float64,  # bytes of NumPy arrays the cell passed into the step's call
    "batch": np.float32,  # samples in the step's batch, when known; NaN otherwise
}


def empty_columns(columns: dict[str, type]) -> dict[str, np.ndarray]:
    """Zero-length arrays for every column, with the right dtypes."""
    return {name: np.zeros(0, dtype=dtype) for name, dtype in columns.items()}


DROPPED_SUMS: tuple[str, ...] = (
    "count",  # rows
    "duration",  # seconds inside the steps
    "data_wait",  # seconds of input wait (NaN waits left out)
    "data_wait_count",  # rows whose input wait was observable (not NaN)
    "callback_time",
    "eager",  # rows that ran eagerly
    "host_bytes",
    "loss_count",  # rows that reported a loss
    "loss_nonfinite",  # rows that reported a NaN or infinite loss
)
"""The per-phase sums kept for rows that a long run's step table no longer holds."""


@dataclass
class DroppedSteps:
    """Step rows that were recorded but are not in the step table, as exact per-phase sums.

    A long run's table keeps its first `full_rows` rows, then one row in `stride` (a uniform
    sample, which medians and percentiles come from); every row left out is added here, so
    counts and totals over the whole run stay exact while the table's memory stays bounded.
    """

    full_rows: int  # rows kept at full resolution, from the first
    stride: int  # past them, one row in `stride` is kept
    # name in DROPPED_SUMS -> a value per phase (index into PHASES)
    sums: dict[str, np.ndarray] = field(
        default_factory=lambda: {name: np.zeros(len(PHASES)) for name in DROPPED_SUMS}
    )

    @property
    def count(self) -> int:
        return int(self.sums["count"].sum())

    def total(self, name: str, phase: str | None = None) -> float:
        """The sum `name` over the dropped rows of `phase` (of every phase for None)."""
        values = self.sums[name]
        return float(values.sum() if phase is None else values[Phase.of(phase)])


DATASET_FUNCTION = "Dataset_"  # how TensorFlow names a tf.data transformation's function


@dataclass
class TraceEvent:
    """One tracing of a tf.function (a new concrete function was built)."""

    time: float
    duration: float
    function: str
    signature: str
    nested: bool
    # The traced Python function is Keras' or TensorFlow's own (`is_keras_internal`): a
    # distributed dataset's iterator functions, traced for each iterator made, or Keras' train
    # function; False for the code's own functions, models and methods.
    library: bool = False
    # Where the traced Python function is defined (its code's file and first line), () where not
    # known: two functions of one name (a cell's `train_step`, a later cell's other one) apart.
    defined_at: tuple[str, int] | tuple[()] = ()

    @property
    def of_a_pipeline(self) -> bool:
        """A function given to a tf.data transformation (``ds.map(f)``, Keras' own pipelines
        over arrays): tf.data traces it as the pipeline is built, once per pipeline."""
        return self.function.startswith(DATASET_FUNCTION)


@dataclass(frozen=True)
class InputStageWork:
    """One stage of a tf.data iterator as the iterator's own runtime (autotune) model measured
    it: what tf.data ran after its own rewrites (a fused map and batch is one `MapAndBatch`)."""

    name: str  # tf.data's runtime name: "Root", "ParallelMapV2", "MapAndBatch", "Shuffle"...
    depth: int  # stages between it and the iterator (0: the root, whose elements are batches)
    elements: int  # elements it produced
    seconds: float  # its own processing time, its inputs' left out, summed over its threads
    parallelism: float = 0.0  # its autotuned parallelism; 0: not a parallel stage


@dataclass
class FunctionStats:
    """Calls and tracings of one Python function wrapped by tf.function during the run."""

    name: str
    calls: int
    traces: int
    objects: int  # distinct tf.function objects seen for this Python function
    keras_internal: bool  # Keras' own train/test/predict function, or TensorFlow's own
    updates_weights: bool  # an optimizer update was traced inside it
    # Optimizer updates one call made, on average, where the calls were seen to make more than
    # one (a tf.function over a whole epoch): each update is then a step of the table. 0: one
    # step per call, or not known (a function traced before the run).
    updates_per_call: float = 0.0
    # A function given a tf.data or distributed iterator, reading it inside (``next(iterator)``
    # in `train_step(iterator)`): seconds its calls' GetNext blocked, over `input_span` seconds
    # of `input_elements` calls, measured in-run from the iterator's tf.data model (NaN: not
    # measured; `probes/input_meter.py`), and (calls done, wait, span) along the run.
    input_wait: float = float("nan")
    input_span: float = 0.0
    input_elements: int = 0
    input_series: list[tuple[int, float, float]] = field(default_factory=list)
    input_stages: tuple[InputStageWork, ...] = ()  # as `KerasCall.input_stages`, the first meter's
    # Where the Python function is defined (file, first line), as `TraceEvent.defined_at`: the
    # table has a row per function, two of one name apart; () where not known.
    defined_at: tuple[str, int] | tuple[()] = ()


@dataclass
class WarningRecord:
    """A warning that TensorFlow, Keras or Python's warnings module emitted during the run."""

    time: float
    step: int  # steps recorded before it was emitted
    source: str  # "warnings" or the logger name
    category: str
    message: str


@dataclass
class LoopInfo:
    """A loop of the profiled cell whose iterations are recorded as ``loop`` rows."""

    id: int
    lineno: int
    source: str
    iterations: int = 0  # iterations run, in all runs of the loop
    seconds: float = 0.0  # time in its bodies (waits for items excluded)
    wait: float = 0.0  # time waiting for its items
    has_steps: bool = False  # a step (not a loop iteration) ran inside it
    rows_dropped: int = 0  # iterations counted but not kept as rows (see recorder)
    function: str = ""  # qualified name of the function or method it is in; "": the top level
    # Eager Keras model calls made in its bodies outside any step, and their seconds (see
    # `probes.model_calls`): a loop spent in forward passes is no Python loop over data.
    model_calls: int = 0
    model_seconds: float = 0.0
    # The CPU time of the thread that ran the loop, over its runs that ended: a loop whose
    # bodies sleep or wait for I/O takes little of it. -1: not measured.
    cpu_seconds: float = -1.0
    # From its items running out to the statement after it, over its runs: the `for` statement
    # drops its iterator then, and its clean-up runs there (a tf.data iterator's destructor
    # waits for its autotune thread; a generator's pipeline finalises it). Not a wait of its
    # items, nor a body's work: shown on its own.
    release_seconds: float = 0.0
    # Of those releases, where the loop ran steps and the kernel counts the thread's time: how
    # many were measured, how many the thread slept through for `RELEASE_STALL_S` or more (a
    # tf.data iterator's shut-down waiting for its autotune thread), and those ones' seconds
    # asleep and on a CPU (`epoch-start-stall`).
    releases_measured: int = 0
    releases_stalled: int = 0
    release_asleep: float = 0.0
    release_cpu: float = 0.0
    # All the measured releases' seconds asleep and on a CPU, stalled or not.
    releases_asleep_all: float = 0.0
    releases_cpu_all: float = 0.0
    # Where it drew from a tf.data iterator: that pipeline's stages, as the last iterator's
    # runtime model read them whole (`probes.loop_stage_work`; as `KerasCall.input_stages`).
    input_stages: tuple[InputStageWork, ...] = ()


@dataclass(slots=True)  # slots: a run keeps up to KERAS_CALLS_KEPT of them (see recorder)
class KerasCall:
    """A Keras API call the cell made itself (fit, evaluate, predict, compile)."""

    api: str
    start: float
    duration: float
    steps: int  # step rows recorded inside the call
    step_time: float  # seconds inside those steps
    loop: int  # innermost loop of the cell the call was made in; -1 for none
    model: str  # the model's name
    batch_size: float  # NaN when unknown
    data: str  # what the data argument was: "numpy", "tensor", "dataset", "generator", ...
    line: int = -1  # the line of the profiled code that made the call, as tracebacks count
    # The float type Keras cast the call's pandas x and y to before slicing them ("": none).
    x_cast: str = ""
    y_cast: str = ""
    # The line of the profiled code's outermost frame where it is not `line`: the call made in
    # a function of the code's own (``compile_and_fit(model, window)`` calling ``model.fit``).
    caller_line: int = -1
    dense_layers: int = 0  # Dense/Conv/attention-style layers of the model (Tensor Core work)
    layers: int = 0
    # Layers that carry state from batch to batch (a stateful RNN): the batch size is then the
    # number of sequences the model carries, part of what it learns
    stateful_layers: int = 0
    data_time: float = float("nan")  # seconds a generator / PyDataset took to make the batches
    data_items: int = 0  # batches the generator or PyDataset made
    data_workers: int = 1  # threads a PyDataset's batches were made on (its `workers`)
    # fit on tf.data: seconds the training steps' GetNext calls blocked, measured in-run from
    # the iterator's autotune model over `input_span` seconds of training cycles that consumed
    # `input_elements` elements (NaN: not measured)
    input_wait: float = float("nan")
    input_span: float = 0.0
    input_elements: int = 0
    # The part of those measured on the call's first iterator (its first epoch), when a later
    # one was measured too; NaN and 0 otherwise. A `cache()` fills during the first epoch.
    first_epoch_wait: float = float("nan")
    first_epoch_span: float = 0.0
    first_epoch_elements: int = 0
    # The stages of the last iterator measured, as its runtime model last read them (the
    # root first, then depth first from the output towards the sources); () if not read.
    input_stages: tuple[InputStageWork, ...] = ()


@dataclass(slots=True)
class KerasCallGroup:
    """Keras calls past the ones a run keeps one by one, summed: every call of one API on one
    build of one model, with one kind of data, from one loop of the cell (a reinforcement
    learning loop calling `predict` per environment step makes millions of calls). Counts and
    sums are exact; a call's own times and its data measures are only in the kept calls.

    Past a bound on the number of groups, further kinds of call are summed per API in a group
    with ``model == ""`` and ``built == OTHER_CALLS``, which stands for no one model.
    """

    api: str
    model: str  # the model's name; "" for the calls of many models (see above)
    built: int  # index in `Record.models` of the model's build before the calls; -1: before
    data: str
    loop: int
    calls: int = 0
    first_start: float = float("inf")
    last_start: float = float("-inf")
    duration: float = 0.0  # seconds in the calls
    longest: float = 0.0  # the longest call's seconds
    steps: int = 0  # step rows recorded inside the calls
    step_time: float = 0.0  # seconds inside those steps
    data_time: float = 0.0  # seconds the generators / PyDatasets of the calls took (timed ones)
    data_items: int = 0

    def add(self, call: KerasCall) -> None:
        self.calls += 1
        self.first_start = min(self.first_start, call.start)
        self.last_start = max(self.last_start, call.start)
        self.duration += call.duration
        self.longest = max(self.longest, call.duration)
        self.steps += call.steps
        self.step_time += call.step_time
        if call.data_time == call.data_time:  # not NaN: the call's data was timed
            self.data_time += call.data_time
            self.data_items += call.data_items


OTHER_CALLS = -2
"""`KerasCallGroup.built` of the groups that sum the calls of many models."""


@dataclass(frozen=True)
class DatasetStage:
    """One transformation or source of a tf.data pipeline, as its dataset object describes it
    (read without taking an element; see `probes.dataset_structure`)."""

    kind: str  # tf.data's name for it, version left out: "MapDataset", "PrefetchDataset"...
    depth: int = 0  # transformations between it and the pipeline's output (0: the output)
    branch: bool = False  # below a stage with several inputs (zip, concatenate...)
    function: str = ""  # the user's function it runs (map, interleave...): "load", "lambda"
    parallel: bool = False  # asked to run on several threads (num_parallel_calls, reads)
    # A map the code left one element at a time that tf.data's own rewrite runs in parallel
    # (`map_parallelization`, on by default, for a function that holds no state, unless the
    # map is fused with the `batch` right after it: `map_and_batch_fusion` keeps it serial).
    auto_parallel: bool = False
    # The pipeline's output stage, which tf.data follows with a prefetch of its own
    # (`inject_prefetch`, on by default, after a last stage that runs synchronously).
    auto_prefetch: bool = False
    stateful: bool = False  # its function holds state: TensorFlow never parallelises it itself
    python: bool = False  # its function runs Python: tf.py_function, numpy_function, generator
    random: bool = False  # its function draws random numbers (an augmentation)
    reads_files: tuple[str, ...] = ()  # file-reading ops it runs ("ReadFile", "TFRecordDataset")
    to_file: bool = False  # a cache to a file rather than to memory
    # Its function is TensorFlow's or Keras' own (the map `sample_from_datasets` adds, a
    # utility's loader), not one the code wrote: nothing the user could pass options to.
    library: bool = False


@dataclass(frozen=True)
class DatasetStructure:
    """A tf.data dataset the run's training consumed: given to a Keras call or iterated by a
    loop of the cell, read once, before its first element, from its transformations (never by
    iterating it). Stages are listed from the output towards the sources, depth first."""

    time: float  # seconds since the run started, when it was first given to `api`/`loop`
    api: str  # "fit", "evaluate", "predict" or "loop"
    loop: int  # the loop that iterates it, or the one the Keras call was made in; -1: none
    stages: tuple[DatasetStage, ...]
    complete: bool = True  # every stage was read (False: the pipeline was longer than read)


@dataclass(frozen=True)
class EpochStart:
    """The time between an epoch's start (its callbacks' `on_epoch_begin` done) and its first
    training batch, in a top-level `fit`: Keras makes the epoch's iterator over the data then,
    and lets the last one go. Where the kernel counts it, how much of that time the run's
    thread was on a CPU or waiting for one; the rest it slept (`epoch-start-stall`)."""

    time: float  # seconds since the run started, at the epoch's start
    epoch: int
    wall: float
    on_cpu: float  # NaN where the kernel keeps no per-thread counts
    cpu_wait: float  # NaN likewise
    # The epoch's validation (fit's `evaluate`, from its call to its first batch), not the
    # epoch's own start: Keras lets the last validation's iterator go and makes a new one
    validation: bool = False
    # The fit's end: from its last epoch's callbacks to its return (its `on_train_end`
    # callbacks left out), where Keras lets the validation's and the training's iterators go.
    fit_end: bool = False

    @property
    def asleep(self) -> float:
        """Seconds the thread neither ran nor waited for a CPU (NaN where not counted)."""
        return max(self.wall - self.on_cpu - self.cpu_wait, 0.0)


@dataclass
class ModelBuilt:
    """A Keras model constructed during the run."""

    time: float
    name: str
    cls: str
    loop: int  # innermost loop of the cell it was built in; -1 for none
    rss: int  # process memory right after it was built (bytes; -1 when unknown)
    line: int = -1  # the line of the cell or script that built it (see `Record.lines`); -1


@dataclass(frozen=True)
class LogitsMetric:
    """A metric `fit` showed that counts a model's output above `threshold` as class 1, while
    the model's loss reads its outputs as logits (probes/logits_metrics.py)."""

    metric: str  # its name, as fit shows it ("accuracy")
    kind: str  # its class ("BinaryAccuracy", "Precision", "Recall")
    threshold: float  # what it counts an output as class 1 above (0.5 by default)
    loss: str  # the loss's class, built with from_logits=True
    output_layer: str  # the layer making the model's output, its activation linear
    shown_last: float  # the last value fit showed for it (NaN: none)


@dataclass(frozen=True)
class PinnedNormalization:
    """BatchNormalization layers inside a part of a functional model that the graph calls with
    ``training=False``, whose moving statistics changed during a fit all the same: Keras 3's
    `fit` passes ``training=True`` over it (probes/inference_mode.py)."""

    part: str  # the layer or model called with training=False
    layers: int  # BatchNormalization layers in it
    moved: int  # of them, those whose moving mean or variance changed during the fit
    trainable: int  # of them, those trainable at the fit's end
    largest_change: float  # the largest change of a layer's statistics, relative to their size
    fit: int  # which of the model's fits in the run moved them (1: its first)
    nested: bool  # some of the layers lie inside a layer or model of the part, not in it


@dataclass(frozen=True)
class EpochLogs:
    """One epoch's values of a key a custom `train_step` returned that no metric of the model
    holds: Keras 3 shows the last batch's as the epoch's (probes/step_logs.py)."""

    model: str
    key: str  # as fit shows it ("d_loss")
    epoch: int
    batches: int  # the epoch's batches whose value was read
    shown: float  # the last batch's value: what fit showed and History holds
    mean: float  # the mean over the epoch's batches
    least: float
    largest: float
    # "train" (an epoch of fit), "validation" (fit's evaluate after an epoch; `key` as fit shows
    # it, "val_" first) or "evaluate" (a top-level evaluate; `epoch` its count from 0)
    phase: str = "train"


@dataclass(frozen=True)
class AdaptCall:
    """One `adapt()` of a Keras preprocessing layer the code made (probes/adapt_calls.py): each
    reads all of its data, a whole pass over a tf.data pipeline given one."""

    time: float  # seconds since the run started, at the call
    wall: float  # seconds it took
    cpu: float  # the process's CPU seconds meanwhile (tf.data's threads' included)
    layer: str  # the layer's class ("StringLookup", "Normalization")
    data: str  # "dataset", "array" (an array or tensor) or "iterable"
    # The first adapt call of the run whose pipeline shares a dataset with this one's (its own
    # index where none does, or where its data is no tf.data dataset)
    shared: int
    stages: tuple[DatasetStage, ...] = ()  # the dataset's, from its output towards its sources
    line: int = -1  # the line of the cell or script that made it (-1: unknown)
    caller: int = -1  # the outermost such line (where a helper of the code's own was called)
    loop: int = -1  # the innermost loop of the code it was made in (-1: none)
    by_feature_space: bool = False  # made by `FeatureSpace.adapt`, one per feature's layer
    finished: bool = True  # False where it raised (or was interrupted): no whole pass known


@dataclass
class TrainedState:
    """What trained during the run, and whether its weights moved: a Keras model that ran
    training batches (fit, train_on_batch; `kind` "model"), or an optimizer whose `apply` a
    custom loop called (`kind` "optimizer"). Read at first sight and at the end of the run."""

    kind: str  # "model" or "optimizer"
    name: str  # the model's or the optimizer's name
    optimizer: str  # the optimizer's class ("" when the model has none)
    steps: int  # model: training batches it ran; optimizer: -1 (its iterations count them)
    iterations_first: int  # the optimizer's `iterations` at first sight (-1: unknown)
    iterations_last: int  # and at the end (-1: unknown)
    learning_rate: float  # at the end (NaN: unknown)
    variables: int  # trainable variables at first sight
    variables_read: int  # of them, the ones small enough to fingerprint
    variables_changed: int  # of the fingerprinted ones, those whose values differ at the end
    variables_last: int  # trainable variables at the end
    variables_new: int  # of those, the ones not there at first sight (built during the run)
    weights: int  # all of the model's weights at the end, trainable or not (optimizer: -1)
    # model: the class of the code's that defines its `train_step` ("": Keras' own step)
    custom_train_step: str = ""
    # model: the "loss" its fits showed for each epoch (their `History`), at most SHOWN_LOSSES
    shown_losses: tuple[float, ...] = ()
    # model: the class of the code's that defines its `test_step` ("": Keras' own step)
    custom_test_step: str = ""
    # model: the "val_loss" its fits showed for each epoch that validated, at most SHOWN_LOSSES
    shown_val_losses: tuple[float, ...] = ()
    # model: its metrics that threshold its logits as if they were probabilities, at its last fit
    logits_metrics: tuple[LogitsMetric, ...] = ()
    # model: BatchNormalization layers called with training=False that its fits moved
    pinned_moved: tuple[PinnedNormalization, ...] = ()


@dataclass
class ConfigCall:
    """A device-configuration call that TensorFlow refused because the runtime was running."""

    time: float
    call: str
    message: str


@dataclass
class ErrorInfo:
    """The exception that ended the run, and where in the run it happened."""

    type: str
    message: str
    step: int  # index of the step that was running (or would have run next)
    phase: str | None  # phase of the step that was running, if one was
    batch: int | None = None  # batch size of the step that failed, where it was known


KEPT_TRACE_BYTES = 16 << 20  # the largest compressed ops-window trace a record keeps


@dataclass
class OpsCapture:
    """TensorFlow's own profiler trace of a few steady steps (``--ops``), as the ops window
    captured it, and once read (`ops_summary.summarise_ops`), its summary."""

    status: str  # "captured", or "skipped" (`note` says why)
    note: str = ""  # why the window was skipped, or what was unusual about it
    start: float = float("nan")  # seconds since the run began, when the profiler started
    stop: float = float("nan")  # and when it stopped
    # One reading of both clocks: the profiler's (wall clock, ns) and the run's (seconds since
    # it began), taken together when the window started; they map the trace onto the steps.
    anchor_ns: int = 0
    anchor_s: float = 0.0
    start_cost: float = 0.0  # seconds the profiler's start took
    stop_cost: float = 0.0  # seconds its stop (collecting and writing the trace) took
    trace_bytes: int = 0  # size of the trace file
    xspace: bytes = b""  # the serialized trace, until it is read
    # The trace gzip-compressed, kept for `to_tensorboard` (TensorBoard's profile plugin reads
    # it) where it compresses to KEPT_TRACE_BYTES or less; b"" otherwise.
    trace_gz: bytes = b""
    summary: dict[str, Any] | None = None  # the JSON report's ``ops``


@dataclass
class Record:
    """Everything measured in one run. Times are seconds since the run started."""

    steps: dict[str, np.ndarray] = field(default_factory=lambda: empty_columns(STEP_COLUMNS))
    # time, step, rss, cpu_tensors, line, gpu:<dev>:current / peak. `line` is the line of the
    # profiled cell or script that was running when the sample was taken (its innermost
    # frame on the stack; -1: none), numbered as tracebacks number it.
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    nvml: dict[str, np.ndarray] = field(default_factory=dict)  # time, <dev>:util, <dev>:mem_used...
    gc: dict[str, np.ndarray] = field(default_factory=dict)  # time, duration, generation, collected
    traces: list[TraceEvent] = field(default_factory=list)
    functions: list[FunctionStats] = field(default_factory=list)
    warnings: list[WarningRecord] = field(default_factory=list)
    warnings_dropped: int = 0
    loops: list[LoopInfo] = field(default_factory=list)
    error: ErrorInfo | None = None
    wall_time: float = 0.0
    started_at: str = ""  # ISO 8601, local time
    source: str | None = None  # the profiled cell or script, when there is one
    facts: dict[str, Any] = field(default_factory=dict)  # versions, devices, sampler status
    keras_calls: list[KerasCall] = field(default_factory=list)  # the first ones, one by one
    keras_call_groups: list[KerasCallGroup] = field(default_factory=list)  # the later ones
    models: list[ModelBuilt] = field(default_factory=list)
    # The text of each line that `memory["line"]` or a model build points at (stripped):
    # line numbers count as tracebacks count them (a cell's ``%%tfprofile`` line included).
    lines: dict[int, str] = field(default_factory=dict)
    config_calls: list[ConfigCall] = field(default_factory=list)
    callback_seconds: dict[str, float] = field(default_factory=dict)  # callback class -> s
    epoch_hook_seconds: float = 0.0  # in Keras callbacks' on_epoch_begin/end (all fits)
    # Each epoch start of the top-level fits, from the epoch's callbacks to its first batch
    epoch_starts: list[EpochStart] = field(default_factory=list)
    # Epochs of fits whose step returned values no metric holds (`last-batch-logs`)
    epoch_logs: list[EpochLogs] = field(default_factory=list)
    trained: list[TrainedState] = field(default_factory=list)  # what trained, see TrainedState
    adapt_calls: list[AdaptCall] = field(default_factory=list)  # preprocessing layers' adapt()
    datasets: list[DatasetStructure] = field(default_factory=list)  # tf.data pipelines consumed
    # Rows a long run's table left out, as exact sums (None: the table holds every row).
    dropped: DroppedSteps | None = None
    # Where the table is reduced: each row's index among all rows recorded (None: 0, 1, 2...)
    step_index: np.ndarray | None = None
    ops_window: OpsCapture | None = None  # with ``--ops``: the profiler trace's window

    @property
    def step_count(self) -> int:
        """Rows in the step table (fewer than `steps_recorded` where the table is reduced)."""
        return int(self.steps["start"].shape[0])

    @property
    def reduced(self) -> bool:
        """The step table holds a sample of the rows past `dropped.full_rows`, not all."""
        return self.dropped is not None and self.dropped.count > 0

    @property
    def steps_recorded(self) -> int:
        """Rows recorded in the run, every phase, the ones the table left out included."""
        return self.step_count + (self.dropped.count if self.dropped is not None else 0)

    @property
    def keras_calls_made(self) -> int:
        """Top-level Keras calls of the run: the kept ones and the ones summed in groups."""
        return len(self.keras_calls) + sum(group.calls for group in self.keras_call_groups)

    def gpu_memory(self) -> dict[str, np.ndarray]:
        """Each GPU's sampled memory in use (bytes; -1 where it could not be read), by device:
        the ``gpu:<device>:current`` series of `memory`."""
        prefix, suffix = "gpu:", ":current"
        return {
            key[len(prefix) : -len(suffix)]: values
            for key, values in self.memory.items()
            if key.startswith(prefix) and key.endswith(suffix)
        }

    def phase_mask(self, phase: str) -> np.ndarray:
        return self.steps["phase"] == Phase.of(phase)

    def phase_counts(self) -> dict[str, int]:
        """Rows recorded per phase, exact also where the table is reduced."""
        counts = np.bincount(self.steps["phase"], minlength=len(PHASES))[: len(PHASES)]
        if self.dropped is not None:
            counts = counts + self.dropped.sums["count"].astype(np.int64)
        return {name: int(counts[i]) for i, name in enumerate(PHASES) if counts[i]}

    def phase_total(self, name: str, phase: str) -> float:
        """The sum `name` (one of DROPPED_SUMS) over every row of `phase` recorded, exact also
        where the table is reduced: the table's rows plus the rows it left out."""
        steps = self.steps
        rows = self.phase_mask(phase)
        if name == "count":
            kept = float(np.count_nonzero(rows))
        elif name == "data_wait":
            kept = float(np.nansum(steps["data_wait"][rows]))
        elif name == "data_wait_count":
            kept = float(np.count_nonzero(~np.isnan(steps["data_wait"][rows])))
        elif name == "eager":
            kept = float(np.count_nonzero(steps["eager"][rows]))
        elif name == "loss_count":
            kept = float(np.count_nonzero(~steps["no_loss"][rows]))
        elif name == "loss_nonfinite":
            reported = rows & ~steps["no_loss"]
            kept = float(np.count_nonzero(~np.isfinite(steps["loss"][reported])))
        else:
            kept = float(steps[name][rows].sum(dtype=np.float64))
        return kept + (self.dropped.total(name, phase) if self.dropped is not None else 0.0)

    def nbytes(self) -> int:
        """Bytes held by the columnar tables (the part that grows with the number of steps)."""
        tables = (self.steps, self.memory, self.nvml, self.gc)
        index = self.step_index.nbytes if self.step_index is not None else 0
        return sum(int(a.nbytes) for table in tables for a in table.values()) + int(index)

    def to_dataframe(self):  # -> pandas.DataFrame
        """The per-step table, a row per step, with phase and kind as categoricals."""
        import pandas as pd

        data: dict[str, Any] = dict(self.steps)
        data["phase"] = pd.Categorical.from_codes(self.steps["phase"].astype(np.int8), PHASES)
        data["kind"] = pd.Categorical.from_codes(self.steps["kind"].astype(np.int8), KINDS)
        frame = pd.DataFrame(data)
        if self.step_index is not None:  # a reduced table: each row's index among all rows
            frame.index = pd.Index(self.step_index)
        frame.index.name = "step"
        return frame
