"""The workshop notebooks' helpers: the checks of the exercises, a quiet TensorFlow import, and
the kernel's memory for the note at the end of each notebook.

An exercise is graded on what the profiler measured, never on the text of your code: the
finding the exercise is about must be gone from your run, and where the exercise promises a
speed-up or a memory saving, your run's comparison with the original must show it beyond the
noise (the ``--compare`` verdict's own test). ``check("01-input-signature")`` in a notebook
prints "Solved" with the measured improvement, or what is still wrong and a hint.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

BINDER_MEMORY_BYTES = 2 * 10**9  # what mybinder.org gives a session: 2G, as Kubernetes counts
LESS_MEMORY = 0.5  # a memory exercise is solved when the run adds at most half as much
# ... or next to nothing: run a second time in one kernel, a baseline reuses the memory its first
# run freed, and its RSS rise is small (8-12 MiB on a 2-vCPU AMD EPYC, where the solution added
# 6-7 MiB).
NOTHING_KEPT = 16 * 2**20


@dataclass(frozen=True)
class Exercise:
    """What one exercise asks: the run it reads (stored with ``-o``), the run it is compared
    with, the finding that must be gone, and what else the fix must show."""

    run: str
    resolves: str
    hint: str
    baseline: str | None = None
    faster: bool = False  # a speed-up beyond the comparison's noise band
    less_memory: bool = False  # the run adds at most LESS_MEMORY of the baseline's host memory
    also_absent: tuple[str, ...] = ()  # findings a wrong fix would bring in
    # `input-bound` may stay when the pipeline has nothing left to add (no Python stage, none
    # one element at a time, prefetched) and the run is not measurably slower than the
    # baseline: on a machine whose few cores the pipeline shares with the training step, that
    # is all there is (on a 2-CPU machine a complete pipeline still waited 34 % of the time
    # where the generator waited 36-40 %).
    pipeline_done_counts: bool = False


@dataclass(frozen=True)
class Reading:
    """An exercise on reading a GPU doctor's report (``%tfgpu -o NAME``): the answers, in
    variables of the notebook, must agree with the facts the doctor read on this machine."""

    report: str
    answers: tuple[str, ...]  # the variables; see `_gpu_truths` for what each one asks
    hint: str


@dataclass(frozen=True)
class JobExercise:
    """An exercise on a multi-worker job: the merged result (`tfdiag_magic.merge`) stored in
    `run` must have every worker finished and the job's finding `resolves` gone."""

    run: str
    resolves: str
    hint: str


EXERCISES: dict[str, Exercise | Reading | JobExercise] = {
    "00-compile-the-loop": Exercise(
        run="practice_after",
        baseline="practice_before",
        resolves="eager-step",
        faster=True,
        hint="Move the body of the inner loop into a function, put @tf.function on it, and "
        "call it in the loop.",
    ),
    "01-input-signature": Exercise(
        run="with_signature",
        baseline="slow_loop",
        resolves="retracing",
        faster=True,
        also_absent=("eager-step",),
        hint="Give @tf.function an input_signature: one tf.TensorSpec per argument, with None "
        "for the batch dimension; step becomes tf.TensorSpec([], tf.int32). Python ints "
        "passed for it are then converted to tensors, and the signature never changes.",
    ),
    "01-keep-numbers": Exercise(
        run="my_kept",
        baseline="kept",
        resolves="host-memory-growth",
        less_memory=True,
        hint="Keep a Python number per step, not the tensors: float(loss), and for the plot "
        "of the gradient norms float(tf.linalg.global_norm(grads)).",
    ),
    "02-loop-over-dataset": Exercise(
        run="my_loop",
        baseline="hand_fed",
        resolves="per-step-host-conversion",
        hint="Build a tf.data.Dataset from the arrays once, before the loop (shuffle, batch, "
        "prefetch), and loop over it: `for xb, yb in dataset:` gives tensors, nothing left "
        "to convert.",
    ),
    "03-cache": Exercise(
        run="my_cache",
        baseline="parallel",
        resolves="input-bound",
        faster=True,
        hint="Add .cache() right after the map that loads the images, and move the shuffle "
        "after the cache: load, cache, shuffle, batch, prefetch.",
    ),
    "03-augment-in-tf-data": Exercise(
        run="my_pipeline",
        baseline="generator",
        resolves="input-bound",
        pipeline_done_counts=True,
        hint="Write augment(image, label) with tf operations (tf.cast, tf.pad with "
        "mode='REFLECT', tf.image.random_crop, tf.image.random_flip_left_right, "
        "tf.random.uniform, tf.random.normal, tf.clip_by_value), then "
        "Dataset.from_tensor_slices((photos, labels)).shuffle(...).repeat().map(augment, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(64).prefetch(tf.data.AUTOTUNE).",
    ),
    "04-debug-with-tf-print": Exercise(
        run="my_debug",
        baseline="debug_loop",
        resolves="eager-step",
        faster=True,
        hint="Turn the switch off (run_functions_eagerly(False)) and print with tf.print, "
        "which runs on every call of the compiled step: Python's print runs only while the "
        "function is traced, where tensors have no value yet (no .numpy()).",
    ),
    "05-mini-batches": Exercise(
        run="my_batches",
        baseline="one_by_one",
        resolves="small-batch",
        faster=True,
        hint="Take the shuffled order once, then step through it 64 at a time: "
        "`batch = order[start:start + 64]` for start in range(0, 1024, 64), and train on "
        "x[batch], y[batch].",
    ),
    "06-read-the-shape": Exercise(
        run="curve_fit",
        resolves="oom",
        hint="Read the shape in the error: [262144, 262144] is one number for every pair of "
        "points. curve(t) has the shape (262144, 1) and signal (262144,); subtracting them "
        "broadcasts to a square. Give both the same shape: signal[:, None], or curve(t)[:, 0].",
    ),
    "07-read-the-report": Reading(
        report="gpu",
        answers=("machine_has_gpu", "build_has_cuda"),
        hint="The NVIDIA driver (NVML) section says whether the machine has a GPU: "
        "gpu.facts['nvml'] has 'available' and 'devices'. The TensorFlow section says "
        "whether the build has CUDA: gpu.facts['tensorflow']['built_with_cuda'].",
    ),
    "08-unblock-the-job": JobExercise(
        run="my_job",
        resolves="straggler",
        hint="Start the job as the slow one was started (worker 1 still with SLOW_INPUT_S), "
        'and give worker 1 the cache too: {"STEPS": "200", "SLOW_INPUT_S": "0.02", '
        '"CACHE_INPUT": "1"}. Then merge its reports into my_job.',
    ),
}


@dataclass
class Grade:
    """The answer of a check: solved or not, and why, in words."""

    exercise: str
    solved: bool
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = "Solved" if self.solved else "Not yet"
        return "\n".join([f"{head} ({self.exercise}): {self.lines[0]}", *self.lines[1:]])

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


# Every check's latest answer, by exercise (the tests read it).
GRADES: dict[str, Grade] = {}


def check(exercise: str, namespace: dict[str, Any] | None = None) -> Grade:
    """Grade `exercise` on the runs stored in the notebook (`namespace`: the user's variables,
    by default those of the running IPython shell)."""
    spec = EXERCISES[exercise]
    grade = Grade(exercise, False)
    try:
        namespace = _user_namespace(namespace)
        if isinstance(spec, Reading):
            grade.solved, grade.lines = _judge_reading(spec, namespace)
        elif isinstance(spec, JobExercise):
            grade.solved, grade.lines = _judge_job(spec, namespace)
        else:
            grade.solved, grade.lines = _judge(spec, namespace)
    except Exception as error:  # a check must answer, whatever state the kernel is in
        grade.lines = [f"the check could not read your run ({type(error).__name__}: {error})"]
    if not grade.solved:
        grade.lines.append(f"Hint: {spec.hint}")
    GRADES[exercise] = grade
    return grade


def _user_namespace(namespace: dict[str, Any] | None) -> dict[str, Any]:
    if namespace is not None:
        return namespace
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else {}


def _judge_job(spec: JobExercise, namespace: dict[str, Any]) -> tuple[bool, list[str]]:
    job = namespace.get(spec.run)
    if type(job).__name__ != "MergedResult":
        return False, [f"run your cell above first: it stores the merged job as `{spec.run}`."]
    for worker in job.workers:
        if worker.report.get("error"):
            return False, [f"{worker.name} stopped with {worker.report['error']['type']}."]
    steps = {worker.steps for worker in job.workers}
    if len(job.workers) < 2 or len(steps) != 1:
        return False, [f"the job's workers ran {sorted(steps)} steps: run every worker to the end."]
    found = {f.code: f for f in job.findings}
    if spec.resolves in found:
        return False, [f"`{spec.resolves}` is still there: {found[spec.resolves].title}."]
    waits = ", ".join(
        f"{w.name} {w.input_wait_share:.0%}" for w in job.workers if w.input_wait_share is not None
    )
    return True, [f"`{spec.resolves}` is gone; input wait per worker: {waits}."]


def _is_run(value: Any) -> bool:
    return type(value).__name__ == "ProfileResult" and getattr(value, "record", None) is not None


def _judge(spec: Exercise, namespace: dict[str, Any]) -> tuple[bool, list[str]]:
    run = namespace.get(spec.run)
    if not _is_run(run):
        return False, [f"run your cell above first: its first line stores the run as `{spec.run}`."]
    baseline = namespace.get(spec.baseline) if spec.baseline else None
    if spec.baseline and not _is_run(baseline):
        return False, [
            f"run the cell that stores `{spec.baseline}` first: yours is compared with it."
        ]
    findings = {f.code: f for f in run.findings}
    settled: list[str] = []
    if spec.resolves in findings:
        settled = _pipeline_done(spec, findings[spec.resolves], run, baseline)
        if not settled:
            return False, [f"`{spec.resolves}` is still there: {findings[spec.resolves].title}."]
    error = run.record.error
    if error is not None:
        return False, [f"your cell stopped with {error.type}: {_error_line(error)}"]
    brought = [code for code in spec.also_absent if code in findings]
    if brought:
        code = brought[0]
        return False, [
            f"`{spec.resolves}` is gone, but your change brought `{code}`: {findings[code].title}."
        ]
    if baseline is None:
        solved, lines = _judge_alone(spec, run)
    else:
        solved, lines = _judge_against(spec, run, baseline)
    if solved and settled:  # the finding stayed: say why it counts, not that it is gone
        lines[0] = settled[0] + lines[0].removeprefix(f"`{spec.resolves}` is gone.")
    return solved, lines


def _pipeline_done(spec: Exercise, finding: Any, run: Any, baseline: Any) -> list[str]:
    """Why an `input-bound` that stays still counts (see `Exercise.pipeline_done_counts`);
    [] when it does not."""
    if not spec.pipeline_done_counts or not _is_run(baseline):
        return []
    pipeline = finding.evidence.get("pipeline") or {}
    if pipeline.get("python") or pipeline.get("one_at_a_time") or not pipeline.get("prefetched"):
        return []
    comparison = _comparison(spec, run, baseline)
    band = comparison.band
    if band is not None and band.measurable and (comparison.speedup or 0) < 1:
        return []  # a complete pipeline that made the training measurably slower
    share = finding.evidence.get("wait_share")
    waited = f"stays at {share:.0%} of the training time" if isinstance(share, float) else "stays"
    return [
        f"`{finding.code}` {waited}, but your pipeline has nothing left to add (no Python"
        " stage, parallel, prefetched): on this machine its work shares the CPU cores with the"
        " training step. With more cores, `map` would spread it over them."
    ]


def _judge_alone(spec: Exercise, run: Any) -> tuple[bool, list[str]]:
    """An exercise without a baseline (the original failed): the run must have trained."""
    from tfdiag_magic.experiments.headline import headline_of

    after = headline_of(run.record, run.findings)
    if after.steps == 0:
        return False, ["your cell ran without error but recorded no training step."]
    return True, [
        f"`{spec.resolves}` is gone: your cell completed {after.steps} {after.phase} steps in "
        f"{after.wall_time:.1f} s, at a peak host memory of {_mib(after.peak_host)}."
    ]


def _comparison(spec: Exercise, run: Any, baseline: Any) -> Any:
    """The run's comparison with the exercise's baseline: the one ``--compare`` made, or one
    made now."""
    from tfdiag_magic.experiments.compare import compare

    comparison = run.comparison
    if comparison is None or comparison.baseline != spec.baseline:
        comparison = compare(baseline, run, spec.baseline)
    return comparison


def _judge_against(spec: Exercise, run: Any, baseline: Any) -> tuple[bool, list[str]]:
    comparison = _comparison(spec, run, baseline)
    before, after = comparison.before, comparison.after
    if after.phase != before.phase or _work(after) < 0.25 * _work(before):
        return False, [
            f"`{spec.resolves}` is gone, but your run trained much less than `{spec.baseline}` "
            f"({after.steps} {after.phase or 'no'} steps against {before.steps}): keep the "
            "training, change how it runs."
        ]
    lines = [
        f"`{spec.resolves}` is gone. Measured against `{spec.baseline}`: {comparison.verdict}."
    ]
    band = comparison.band
    if spec.faster and not (
        band is not None and band.measurable and comparison.speedup and comparison.speedup > 1
    ):
        lines[0] = (
            f"`{spec.resolves}` is gone, but your run is not measurably faster than "
            f"`{spec.baseline}`: {comparison.verdict}. (On a busy machine, run both cells again.)"
        )
        return False, lines
    if spec.less_memory:
        kept, now = before.host_added, after.host_added
        if kept is None or now is None or now > max(LESS_MEMORY * kept, NOTHING_KEPT):
            lines[0] = (
                f"`{spec.resolves}` is gone, but your run still adds {_mib(now)} of host memory "
                f"({_mib(kept)} in `{spec.baseline}`)."
            )
            return False, lines
        lines.append(f"Host memory the run added: {_mib(kept)} before, {_mib(now)} now.")
    return True, lines


def _gpu_truths(report: Any) -> dict[str, bool]:
    """What the doctor read: whether the NVIDIA driver sees a GPU in this machine, and whether
    the installed TensorFlow was built with CUDA."""
    nvml = report.facts.get("nvml") or {}
    tensorflow = report.facts.get("tensorflow") or {}
    return {
        "machine_has_gpu": bool(nvml.get("available") and nvml.get("devices")),
        "build_has_cuda": bool(tensorflow.get("built_with_cuda")),
    }


def hardware_first(report: Any) -> None:
    """Print first whether this machine has an NVIDIA GPU at all, from the doctor's facts
    (`report`: what ``%tfgpu -o NAME`` stored): without one, no TensorFlow package gives
    TensorFlow a GPU, whatever fixes the report lists for its build."""
    nvml = report.facts.get("nvml") or {}
    system = (report.facts.get("platform") or {}).get("system")
    if _gpu_truths(report)["machine_has_gpu"]:
        count = len(nvml.get("devices") or [])
        print(
            f"This machine has {count} NVIDIA GPU(s) that the driver sees: the report's problems "
            "and fixes say why TensorFlow does or does not use it."
        )
        return
    print(f"This machine has no NVIDIA GPU that a driver can see ({_no_gpu_reason(nvml)}).")
    if system == "Darwin":
        print(
            "On a Mac, TensorFlow reaches the Apple GPU through tensorflow-metal: see the report."
        )
        return
    print(
        "Training runs on the CPU here, and no TensorFlow package changes that. The report's "
        "fix of reinstalling TensorFlow with CUDA is what to do on a machine that has an "
        "NVIDIA GPU and its driver."
    )


def _no_gpu_reason(nvml: dict[str, Any]) -> str:
    if not nvml.get("available"):
        return str(nvml.get("reason") or "NVML, the driver's library, is not available")
    return "the driver lists no GPU"


def _judge_reading(spec: Reading, namespace: dict[str, Any]) -> tuple[bool, list[str]]:
    report = namespace.get(spec.report)
    if type(report).__name__ != "GPUReport":
        return False, [f"run `%tfgpu -o {spec.report}` first: your answers are checked on it."]
    truths = _gpu_truths(report)
    wrong = []
    for name in spec.answers:
        answer = namespace.get(name, ...)
        if not isinstance(answer, bool):
            return False, [f"`{name}` is not True or False yet (it is {answer!r})."]
        if answer != truths[name]:
            wrong.append(name)
    if wrong:
        return False, [f"{', '.join(f'`{n}`' for n in wrong)}: not what the doctor read here."]
    said = ", ".join(f"{name} = {truths[name]}" for name in spec.answers)
    return True, [f"the doctor read the same on this machine: {said}."]


def _work(headline: Any) -> float:
    """Samples the main phase trained on (steps where the batch size is unknown)."""
    return headline.steps * (headline.batch_size or 1)


def _error_line(error: Any) -> str:
    """The line of an error's message that says what went wrong: TensorFlow wraps an error
    raised while tracing in "in user code:" and a traceback, and repeats it on its last line."""
    lines = [line.strip() for line in str(error.message).splitlines() if line.strip()]
    own = [line for line in lines if line.startswith(f"{error.type}:")]
    line = own[-1][len(error.type) + 1 :].strip() if own else (lines[0] if lines else "")
    return line[:300]


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value / 2**20:.0f} MiB"


# -- TensorFlow's start-up banner ------------------------------------------------------------

# TensorFlow 2.21 logs "oneDNN custom operations are on" once from libtensorflow_framework and
# once more from its profiler plugin (_pywrap_profiler_plugin.so), both at `import tensorflow`
# and whatever TF_CPP_MIN_LOG_LEVEL says; only TF_ENABLE_ONEDNN_OPTS=0 silences them, by
# switching oneDNN off. These are the lines of that banner; any other line is passed on.
BANNER = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
    "This TensorFlow binary is optimized to use available CPU instructions",
    "To enable the following instructions:",
)


def import_tensorflow() -> Any:
    """``import tensorflow`` without its start-up banner (INFO lines, not errors); whatever
    else TensorFlow writes to stderr while it is imported still shows."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode("utf-8", "replace")
    kept = [line for line in text.splitlines() if line.strip() and not _is_banner(line)]
    if kept:
        print("\n".join(kept), file=sys.stderr)
    return tensorflow


def _is_banner(line: str) -> bool:
    return any(part in line for part in BANNER)


# -- the kernel's memory ---------------------------------------------------------------------


def peak_memory_bytes() -> int:
    """The highest resident memory this process has had (its peak RSS)."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def shared_library_bytes() -> int:
    """Resident memory mapped from files (RssFile: TensorFlow's libraries, mostly, about 430 MB
    on Linux), which every kernel of one machine shares: one copy in memory, however many
    kernels import TensorFlow. 0 where the system does not say."""
    return _status_bytes("RssFile") or 0


def private_peak_bytes() -> int:
    """The peak less the libraries mapped from files: about what this kernel alone holds at
    its peak, the memory that two kernels each need of their own."""
    return max(peak_memory_bytes() - shared_library_bytes(), 0)


def _status_bytes(field_name: str) -> int | None:
    """A memory field of /proc/self/status (Linux), in bytes; None where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def kernel_memory() -> None:
    """Print this kernel's peak memory against what one Binder session may use."""
    peak, shared = peak_memory_bytes(), shared_library_bytes()
    print(
        f"This kernel has used up to {peak / 10**6:,.0f} MB of memory "
        f"({peak / BINDER_MEMORY_BYTES:.0%} of the 2 GB a Binder session gets)"
        + (
            f", {shared / 10**6:,.0f} MB of it TensorFlow's libraries, which kernels share."
            if shared
            else "."
        )
    )
