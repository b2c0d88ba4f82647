"""``%tfgpu`` live: real TensorFlow (the CPU build here), a real IPython shell, real subprocesses.

What the doctor says on this machine and why (the CPU-only build, NVML's own state), the build
facts against TensorFlow's own answers, the options (``-o``, ``--json``, ``--memory-growth``
before and after the runtime is initialised, ``--watch`` / ``--stop`` / ``%unload_ext``),
that reading the facts never initialises the runtime, the shape and cost of ``session_facts``
that ``%%tfprofile`` reads, ``python -m tfdiag_magic gpu``, and the widget in a real kernel.
Anything that depends on the runtime not being initialised yet runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf
from IPython.core.error import UsageError

from tests.kernels import run_cells
from tfdiag_magic.diagnose.gpu_rules import problems as gpu_problems
from tfdiag_magic.gpu import watch as watch_module
from tfdiag_magic.gpu.report import GPUReport
from tfdiag_magic.gpu.session_facts import session_facts
from tfdiag_magic.gpu.tensorflow_facts import runtime_initialized

REPO = Path(__file__).resolve().parents[1]
WATCH_THREAD = watch_module.THREAD_NAME
CPU_BUILD = not tf.test.is_built_with_cuda()
needs_cpu_build = pytest.mark.skipif(not CPU_BUILD, reason="TensorFlow here is a CUDA build")


def _nvml_fails_to_start() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return True
    pynvml.nvmlShutdown()
    return False


NO_NVML = _nvml_fails_to_start()
TF_GPUS = tf.config.list_physical_devices("GPU")


def run_python(code: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter of this virtualenv (TensorFlow not yet initialised)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


SHELL = """
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "tfdiag_magic")
"""


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == WATCH_THREAD]


@pytest.fixture
def no_watch_left():
    watch_module.stop_watch()
    yield
    watch_module.stop_watch()
    assert watch_threads() == []


# -- the report on this machine --------------------------------------------------------------


@needs_cpu_build
def test_verdict_on_the_cpu_build_names_the_build_and_the_driver_state(ip):
    ip.run_line_magic("tfgpu", "-o r")
    report = ip.user_ns["r"]
    assert isinstance(report, GPUReport)
    distributions = ", ".join(sorted(report.facts["tensorflow"]["distributions"]))
    expected = f"No GPU is visible to TensorFlow: this is the CPU-only build ({distributions})"
    assert report.verdict.startswith(expected)
    assert distributions == "tensorflow-cpu"
    if NO_NVML:
        assert report.verdict == f"{expected}, and no NVIDIA driver was found."
        assert report.codes == ["no-gpu"]
        assert report.problems[0]["evidence"]["reasons"] == ["cpu-only-build", "no-driver"]


def test_build_facts_are_tensorflows_own(ip):
    ip.run_line_magic("tfgpu", "-o r")
    facts = ip.user_ns["r"].facts["tensorflow"]
    build = dict(tf.sysconfig.get_build_info())
    assert facts["version"] == tf.__version__
    assert facts["built_with_cuda"] is tf.test.is_built_with_cuda()
    assert facts["build_info"]["is_cuda_build"] is build["is_cuda_build"]
    assert facts["cuda_version"] == build.get("cuda_version")
    assert facts["cudnn_version"] == build.get("cudnn_version")
    assert len(facts["gpus"]) == len(TF_GPUS)
    assert facts["physical_devices"]["CPU"] == len(tf.config.list_physical_devices("CPU"))
    assert facts["jit"] == (tf.config.optimizer.get_jit() or "off")
    assert facts["initialized"] is runtime_initialized()


def test_nvml_section_matches_what_nvml_says_here(ip):
    ip.run_line_magic("tfgpu", "-o r")
    nvml = ip.user_ns["r"].facts["nvml"]
    assert nvml["available"] is not NO_NVML
    if NO_NVML:
        assert nvml["devices"] == [] and nvml["reason"]


def test_report_is_text_in_a_terminal(ip, capsys):
    ip.run_line_magic("tfgpu", "")
    out = capsys.readouterr().out
    assert out.startswith("GPU doctor\n")
    for section in ("TensorFlow", "Environment", "CUDA_VISIBLE_DEVICES", "NVIDIA driver (NVML)"):
        assert section in out
    if NO_NVML:
        assert "not available: " in out
    assert "<div" not in out


def test_report_has_html_for_notebooks(ip):
    ip.run_line_magic("tfgpu", "-o r")
    report = ip.user_ns["r"]
    html = report._repr_html_()
    assert html.startswith("<style>") and "class='verdict'" in html
    formatted, _ = ip.display_formatter.format(report)
    assert formatted["text/html"] == html
    assert formatted["text/plain"] == report.text()


def test_json_option_prints_the_report_as_json(ip, capsys):
    ip.run_line_magic("tfgpu", "--json")
    out = capsys.readouterr().out
    loaded = json.loads(out)
    assert loaded["schema"] == 1
    assert set(loaded) == {"schema", "verdict", "problems", "facts"}
    assert {"tensorflow", "nvml", "env", "platform"} <= set(loaded["facts"])
    assert loaded["facts"]["tensorflow"]["version"] == tf.__version__
    assert "GPU doctor" not in out


def test_json_path_writes_the_file_and_shows_the_report(ip, capsys, tmp_path):
    target = tmp_path / "gpu.json"
    ip.run_line_magic("tfgpu", f"--json {target} -o r")
    out = capsys.readouterr().out
    assert "GPU doctor" in out and f"JSON report written to {target}" in out
    assert json.loads(target.read_text())["verdict"] == ip.user_ns["r"].verdict


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--watch 0", "--watch needs an interval of at least 0.05 seconds; got 0"),
        ("--watch -2", "--watch needs an interval of at least 0.05 seconds; got -2"),
        ("--watch 0.001", "--watch needs an interval of at least 0.05 seconds; got 0.001"),
        ("--watch nan", "--watch needs an interval of at least 0.05 seconds; got nan"),
        ("--watch soon", "invalid float value: 'soon'"),
        ("--watch --stop", "--watch and --stop cannot be combined"),
        ("--memory-growth --json", "--memory-growth and -o/--json cannot be combined"),
        ("--stop -o r", "--stop and -o/--json cannot be combined"),
        ("-o 1r", "-o needs a valid variable name; got '1r'"),
        ("-o class", "-o needs a valid variable name; got 'class'"),
    ],
)
def test_bad_options_are_usage_errors(ip, line, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ip.run_line_magic("tfgpu", line)
    assert watch_threads() == []


def test_help_lists_every_option(ip):
    doc = ip.find_line_magic("tfgpu").__doc__
    for option in ("-o NAME", "--json [PATH]", "--watch [SECONDS]", "--stop", "--memory-growth"):
        assert option in doc, option


def test_in_process_report_answers_within_two_seconds(ip):
    """With TensorFlow imported (any notebook that trains), %tfgpu reads facts only."""
    started = time.perf_counter()
    ip.run_line_magic("tfgpu", "-o r")
    elapsed = time.perf_counter() - started
    print(f"%tfgpu in a process that imported TensorFlow: {elapsed * 1000:.1f} ms")
    assert elapsed < 2.0


# -- the runtime stays uninitialised; --memory-growth before and after -----------------------


def test_tfgpu_does_not_initialise_the_runtime_and_answers_in_seconds():
    """In a fresh process: %tfgpu (importing TensorFlow itself) leaves device settings open."""
    done = run_python(
        SHELL
        + """
import time
started = time.perf_counter()
ip.run_line_magic("tfgpu", "-o r")
print("ELAPSED", time.perf_counter() - started)
import tensorflow as tf
from tensorflow.python.eager import context
print("NO-CONTEXT", context.context_safe() is None)  # none made: deprecation warnings print
print("HANDLE", context.context()._context_handle is None)
cpu = tf.config.list_physical_devices("CPU")[0]
# raises RuntimeError once the runtime exists: the behaviour %tfgpu must not take away
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)
print("STILL-CONFIGURABLE", ip.user_ns["r"].facts["tensorflow"]["initialized"])
print("LOGICAL", len(tf.config.list_logical_devices("CPU")))
"""
    )
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["NO-CONTEXT"] == "True"
    assert lines["HANDLE"] == "True"
    assert lines["STILL-CONFIGURABLE"] == "False"
    assert lines["LOGICAL"] == "2"  # the configuration made after %tfgpu took effect
    elapsed = float(lines["ELAPSED"])
    print(f"%tfgpu in a fresh process, TensorFlow import included: {elapsed:.2f} s")
    assert elapsed < 20.0


def test_runtime_initialised_is_detected_as_tensorflow_enforces_it():
    done = run_python(
        """
import tensorflow as tf
from tfdiag_magic.gpu.tensorflow_facts import runtime_initialized, tensorflow_facts
print("BEFORE", runtime_initialized(), tensorflow_facts(tf)["logical_gpus"])
tf.constant(1.0) + 1.0
print("AFTER", runtime_initialized(), tensorflow_facts(tf)["logical_gpus"] is not None)
cpu = tf.config.list_physical_devices("CPU")[0]
try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
except RuntimeError as exc:
    print("REFUSED", "initialized" in str(exc))
"""
    )
    assert "BEFORE False None" in done.stdout  # logical devices not read: that initialises
    assert "AFTER True True" in done.stdout  # read once the runtime exists
    assert "REFUSED True" in done.stdout  # TensorFlow agrees: it is initialised


def test_runtime_initialized_without_tensorflow_imported_is_false():
    done = run_python(
        """
import sys
from tfdiag_magic.gpu.tensorflow_facts import runtime_initialized
print("RESULT", runtime_initialized(), "tensorflow" in sys.modules)
"""
    )
    assert "RESULT False False" in done.stdout


@pytest.mark.skipif(bool(TF_GPUS), reason="TensorFlow sees a GPU here")
def test_memory_growth_before_initialisation_without_a_gpu_changes_nothing():
    done = run_python(
        SHELL
        + """
ip.run_line_magic("tfgpu", "--memory-growth")
from tfdiag_magic.gpu.tensorflow_facts import runtime_initialized
print("INITIALIZED", runtime_initialized())
"""
    )
    assert "TensorFlow sees no GPU, so there is no memory growth to turn on" in done.stdout
    assert "the runtime is still not initialised" in done.stdout
    assert "INITIALIZED False" in done.stdout


def test_memory_growth_after_initialisation_explains_the_restart_with_the_cell():
    done = run_python(
        SHELL
        + """
import tensorflow as tf
tf.constant(1.0) * 2.0
ip.run_line_magic("tfgpu", "--memory-growth")
"""
    )
    out = done.stdout
    assert "TensorFlow's runtime is already initialised in this kernel" in out
    assert "Restart the kernel and run this cell before anything else" in out
    cell = out[out.index("import tensorflow as tf") :].strip()
    assert "tf.config.experimental.set_memory_growth(gpu, True)" in cell
    compile(cell, "<cell>", "exec")  # the cell printed is valid Python


@pytest.mark.skipif(not TF_GPUS, reason="no GPU visible to TensorFlow here")
def test_memory_growth_before_initialisation_turns_it_on():
    done = run_python(
        SHELL
        + """
ip.run_line_magic("tfgpu", "--memory-growth")
import tensorflow as tf
print("GROWTH", [tf.config.experimental.get_memory_growth(g)
                 for g in tf.config.list_physical_devices("GPU")])
"""
    )
    assert "Memory growth is on for /physical_device:GPU:0" in done.stdout
    assert "GROWTH [True" in done.stdout


@pytest.mark.skipif(bool(TF_GPUS), reason="TensorFlow sees a GPU here")
def test_memory_growth_without_tensorflow_is_a_usage_error_with_the_reason(tmp_path):
    blocker = tmp_path / "tensorflow.py"
    blocker.write_text("raise ImportError('TensorFlow is blocked for this test')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    code = SHELL + textwrap.dedent(
        """
        from IPython.core.error import UsageError
        try:
            ip.run_line_magic("tfgpu", "--memory-growth")
        except UsageError as exc:
            print("USAGE", exc)
        ip.run_line_magic("tfgpu", "-o r")
        print("VERDICT", ip.user_ns["r"].verdict)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "USAGE %tfgpu --memory-growth needs TensorFlow: ImportError: TensorFlow is blocked" in (
        done.stdout
    )
    assert "VERDICT TensorFlow cannot be imported in this Python (ImportError" in done.stdout


# -- session_facts: what %%tfprofile reads ---------------------------------------------------


def _assert_shape(facts: dict[str, Any]) -> None:
    tensorflow, nvml, env = facts["tensorflow"], facts["nvml"], facts["env"]
    assert isinstance(tensorflow["built_with_cuda"], bool)
    for key in ("cuda_version", "cudnn_version", "mixed_precision_policy"):
        assert tensorflow[key] is None or isinstance(tensorflow[key], str)
    assert isinstance(tensorflow["initialized"], bool)
    for gpu in tensorflow["gpus"]:
        assert gpu["name"].startswith("/physical_device:GPU:")
        assert gpu["device_name"] is None or isinstance(gpu["device_name"], str)
        assert gpu["compute_capability"] is None or len(gpu["compute_capability"]) == 2
        assert gpu["memory_growth"] in (None, True, False)
    assert isinstance(nvml["available"], bool)
    assert nvml["reason"] is None or isinstance(nvml["reason"], str)
    for key in ("driver_version", "cuda_driver_version"):
        assert nvml[key] is None or isinstance(nvml[key], str)
    for device in nvml["devices"]:
        assert isinstance(device["index"], int)
        for key in ("memory_total", "memory_used", "pcie_gen", "pcie_gen_max", "pcie_width"):
            assert device[key] is None or isinstance(device[key], int)
        for key in ("name", "uuid"):
            assert device[key] is None or isinstance(device[key], str)
    for name in ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR"):
        assert env[name] == os.environ.get(name)
    json.dumps(facts, allow_nan=False)


def test_session_facts_have_the_agreed_shape_and_match_the_report(ip):
    facts = session_facts(tf)
    _assert_shape(facts)
    ip.run_line_magic("tfgpu", "-o r")
    full = ip.user_ns["r"].facts
    for key in ("built_with_cuda", "cuda_version", "cudnn_version", "mixed_precision_policy"):
        assert facts["tensorflow"][key] == full["tensorflow"][key]
    assert facts["nvml"]["available"] == full["nvml"]["available"]
    assert [p["code"] for p in gpu_problems(facts)] == ip.user_ns["r"].codes


def test_session_facts_cost_well_under_100_ms():
    session_facts(tf)  # the first device listing of a process is TensorFlow's own cost
    timings = []
    for _ in range(7):
        started = time.perf_counter()
        session_facts(tf)
        timings.append(time.perf_counter() - started)
    median = sorted(timings)[len(timings) // 2]
    print(f"session_facts median: {median * 1000:.2f} ms")
    assert median < 0.1


def test_session_facts_in_a_fresh_process_do_not_initialise_the_runtime():
    done = run_python(
        """
import json, time
import tensorflow as tf
started = time.perf_counter()
import pynvml  # the profiling run's NVML sampler imports it too
print("PYNVML", time.perf_counter() - started)
from tfdiag_magic.gpu.session_facts import session_facts
from tfdiag_magic.gpu.tensorflow_facts import runtime_initialized
started = time.perf_counter()
facts = session_facts(tf)
print("FIRST", time.perf_counter() - started)
print("INITIALIZED", runtime_initialized(), facts["tensorflow"]["initialized"])
print("JSON", json.dumps(facts))
"""
    )
    assert "INITIALIZED False False" in done.stdout
    first = float(done.stdout.split("FIRST ")[1].split()[0])
    pynvml_import = float(done.stdout.split("PYNVML ")[1].split()[0])
    print(
        f"session_facts, first call of a process: {first * 1000:.1f} ms "
        f"(after import pynvml: {pynvml_import * 1000:.1f} ms)"
    )
    assert first < 0.1
    facts = json.loads(done.stdout.split("JSON ", 1)[1])
    _assert_shape(facts)


def test_session_facts_never_raise_on_a_module_that_is_not_tensorflow():
    facts = session_facts(types.ModuleType("tensorflow"))
    assert facts["tensorflow"]["error"].startswith("AttributeError")
    assert facts["tensorflow"]["built_with_cuda"] is None  # unknown, not "CPU build"
    assert facts["tensorflow"]["gpus"] == []
    assert "nvml" in facts and "env" in facts
    found = [p["code"] for p in gpu_problems(facts)]
    assert "tensorflow-facts-unreadable" in found
    assert not {"no-gpu", "gpu-not-used"} & set(found)  # no diagnosis from unknown facts


# -- --watch, --stop, %unload_ext ------------------------------------------------------------


def _wait_for_samples(count: int, timeout: float = 10.0) -> watch_module.GPUWatch:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        watch = watch_module.active_watch()
        if watch is not None and len(watch.samples) >= count:
            return watch
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} samples after {timeout} s")


def test_watch_samples_in_the_background_and_stop_joins_the_thread(ip, capsys, no_watch_left):
    ip.run_line_magic("tfgpu", "--watch 0.05")
    out = capsys.readouterr().out
    assert out.startswith("%tfgpu --watch: sampling every 0.05 s in the background")
    assert len(watch_threads()) == 1
    watch = _wait_for_samples(3)
    ip.run_cell("x = sum(range(10_000))")  # other cells run meanwhile
    assert watch.running
    sample = watch.samples[-1]
    assert 0 < sample.memory_used <= sample.memory_total and sample.process_rss > 0
    if NO_NVML:
        assert watch.nvml_status.startswith("GPUs not watched: ") and sample.gpus == []
    ip.run_line_magic("tfgpu", "--stop")
    out = capsys.readouterr().out
    assert out.startswith("%tfgpu --watch: stopped; sampled every 0.05 s")
    assert "host CPU" in out and "host memory" in out
    assert watch_threads() == [] and not watch.running
    ip.run_line_magic("tfgpu", "--stop")
    assert capsys.readouterr().out == "%tfgpu --stop: no watch is running.\n"


def test_a_second_watch_replaces_the_first(ip, no_watch_left):
    ip.run_line_magic("tfgpu", "--watch 0.05")
    first = _wait_for_samples(1)
    ip.run_line_magic("tfgpu", "--watch 0.1")
    assert not first.running
    assert len(watch_threads()) == 1
    assert watch_module.active_watch().interval == 0.1


def test_unload_ext_stops_the_watch_and_removes_the_magic(shell, no_watch_left):
    shell.run_line_magic("tfgpu", "--watch 0.05")
    _wait_for_samples(1)
    try:
        shell.run_line_magic("unload_ext", "tfdiag_magic")
        assert watch_threads() == []
        assert watch_module.active_watch() is None
        assert shell.find_line_magic("tfgpu") is None
        assert shell.find_cell_magic("tfprofile") is None
    finally:
        shell.run_line_magic("load_ext", "tfdiag_magic")
    assert shell.find_line_magic("tfgpu") is not None


def test_watch_view_renders_escaped_html(no_watch_left):
    watch = watch_module.GPUWatch(0.05)
    watch.start()
    try:
        deadline = time.monotonic() + 10
        while not watch.samples and time.monotonic() < deadline:
            time.sleep(0.01)
        watch.nvml_status = "GPUs not watched: <b>no driver</b>"  # text from the machine
        html = watch.html()
    finally:
        watch.stop()
    assert "&lt;b&gt;no driver&lt;/b&gt;" in html and "<b>no driver</b>" not in html
    assert "host CPU" in html
    assert watch_threads() == []


def test_a_failing_view_does_not_stop_the_sampling(no_watch_left):
    def broken(watch, sample):
        raise RuntimeError("the frontend went away")

    watch = watch_module.GPUWatch(watch_module.MIN_INTERVAL, on_sample=broken)
    watch.start()
    try:
        deadline = time.monotonic() + 10
        while len(watch.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(watch.samples) >= 3
    finally:
        watch.stop()
    assert watch.view_error == "RuntimeError: the frontend went away"
    assert "the live view stopped updating" in watch.summary()


# -- the command line ------------------------------------------------------------------------


def test_command_line_gpu_prints_the_report_and_writes_json(tmp_path):
    target = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, "-m", "tfdiag_magic", "gpu", "--json", str(target)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("GPU doctor\n")
    report = json.loads(target.read_text())
    assert " ".join(report["verdict"].split()) in " ".join(done.stdout.split())
    assert f"JSON report: {target}" in done.stdout


# -- a real Jupyter kernel: HTML report and live widget --------------------------------------


@pytest.mark.kernel
def test_notebook_shows_html_and_a_widget_that_updates_while_other_cells_run(tmp_path):
    cells = [
        "%load_ext tfdiag_magic",
        "%tfgpu",
        "%tfgpu --watch 0.1",
        "import time\ntime.sleep(1.0)",
        "%tfgpu --stop",
        "import threading\nprint([t.name for t in threading.enumerate()])",
    ]
    nb = run_cells(cells, tmp_path / "kernels", "tfgpu-test", "tfgpu test")
    for index, cell in enumerate(nb.cells):
        errors = [o for o in cell.outputs if o["output_type"] == "error"]
        assert not errors, f"cell {index} failed: {errors}"
    report = nb.cells[1].outputs[0]
    assert report["output_type"] == "display_data"
    assert "class='verdict'" in report["data"]["text/html"]
    assert report["data"]["text/plain"].startswith("GPU doctor")
    widget = nb.cells[2].outputs[0]["data"]
    model_id = widget["application/vnd.jupyter.widget-view+json"]["model_id"]
    states = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    value = states[model_id]["state"]["value"]
    assert "stopped; sampled every 0.1 s" in value  # the thread's updates reached the frontend
    samples = int(value.split("since ")[1].split("(")[1].split(" samples")[0])
    assert samples >= 5  # sampled while the sleeping cell ran
    assert nb.cells[4].outputs[0]["text"].startswith("%tfgpu --watch: stopped")
    assert WATCH_THREAD not in nb.cells[5].outputs[0]["text"]
