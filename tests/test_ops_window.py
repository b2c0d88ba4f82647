"""The ops window (``--ops``): TensorFlow's profiler over a few steady steps, read from its
XPlane trace into a per-step split, the top ops and the top Keras layer scopes.

The reader is tested on a committed trace (tests/fixtures/, made by make_ops_trace.py) without
running the profiler, and on traces the tests record with real TensorFlow on the CPU; the
window's runs check that the cell behaves as without it, and that the profiler is stopped, its
folder removed and its thread gone however the cell ends.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import profiled, run_cell
from tfdiag_magic.ops_summary import (
    keep_compressed,
    layer_scope,
    ops_summary,
    short_name,
    step_split,
)
from tfdiag_magic.record import KEPT_TRACE_BYTES, Kind, OpsCapture, Phase, Record
from tfdiag_magic.views.html import tabs_of
from tfdiag_magic.xplane import Category, parse_xspace, read_events, split_op

FIXTURES = Path(__file__).resolve().parent / "fixtures"

FIT_CELL = """
import numpy as np, keras
keras.utils.set_random_seed(1)
x = np.random.default_rng(0).normal(size=(2048, 16)).astype('float32')
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation='relu'),
                          keras.layers.Dense(1)])
model.compile(optimizer='sgd', loss='mse')
history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
after = float(keras.random.uniform((), seed=keras.random.SeedGenerator(3)))
"""

LOOP_CELL = """
import time
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(2)
x = np.random.default_rng(0).normal(size=(1024, 16)).astype('float32')
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation='relu'),
                          keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)

@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

losses = []
for step, (xb, yb) in enumerate(tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
                                .repeat().take(STEPS)):
    if step == FAIL_AT:
        raise ValueError(f"bad batch at step {step}")
    losses.append(float(train_step(xb, yb)))
    time.sleep(PAUSE)
"""


def loop_cell(steps: int = 40, fail_at: int = -1, pause: float = 0.0) -> str:
    """The loop; `pause` seconds after each step keep a short run longer than the window
    thread's 5 ms between reads of the count, however fast the machine."""
    cell = LOOP_CELL.replace("STEPS", str(steps)).replace("FAIL_AT", str(fail_at))
    return cell.replace("PAUSE", str(pause))


def _profiler_running() -> bool:
    from tensorflow.python.profiler import profiler_v2

    return profiler_v2._profiler is not None


@pytest.fixture(autouse=True)
def private_temp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """This process's temporary folder for each test: the window's folder is made there, where
    another test process's window (a kernel's, a command line's) cannot appear."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tmp")))


def _window_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("tfdiag-ops-*")}


def assert_nothing_left(folders_before: set[str]) -> None:
    """The profiler stopped, its folder removed, its thread gone."""
    assert not _profiler_running()
    assert _window_folders() <= folders_before
    assert not [t for t in threading.enumerate() if t.name == "tfdiag-ops-window"]


def assert_sound_window(ops: dict) -> None:
    """What any captured window must hold: shares ≤ 1, parts summing to each step."""
    assert ops["status"] == "captured", ops
    assert ops["window"]["steps"] >= 1
    for step in ops["per_step"]:
        parts = [step[p] for p in ("input", "collective", "device_ops", "host_ops", "other")]
        assert min(parts) >= -1e-9, step
        assert sum(parts) == pytest.approx(step["duration"], rel=1e-6, abs=1e-6)
        assert step["host_ops"] > 0, (step, ops["window"])  # its ops seen in it: clocks agree
    for row in ops["top_ops"] + ops["top_layers"]:
        assert 0 <= row["share"] <= 1, row
    assert ops["cost"]["trace_bytes"] > 0


# -- the reader, on the committed trace --------------------------------------------------------


def _committed_trace(name: str) -> tuple[Any, dict]:
    """The events of tests/fixtures/NAME.xplane.pb.gz and the facts NAME.json keeps beside it."""
    data = gzip.decompress((FIXTURES / f"{name}.xplane.pb.gz").read_bytes())
    facts = json.loads((FIXTURES / f"{name}.json").read_text())
    return read_events(parse_xspace(data)), facts


@pytest.fixture(scope="module")
def fixture_trace():
    return _committed_trace("ops_trace")


def _fixture_record(facts: dict) -> Record:
    steps = np.array(facts["steps"], dtype=np.float64)
    record = Record()
    n = steps.shape[0]
    record.steps["start"] = steps[:, 0]
    record.steps["duration"] = steps[:, 1]
    record.steps["phase"] = np.full(n, Phase.TRAIN, dtype=np.uint8)
    record.steps["kind"] = np.full(n, Kind.TF_FUNCTION, dtype=np.uint8)
    return record


def _fixture_capture(facts: dict) -> OpsCapture:
    """The window of a committed trace: its steps' span and the clocks read as it began."""
    steps = facts["steps"]
    return OpsCapture(
        status="captured",
        start=0.0,
        stop=steps[-1][0] + steps[-1][1],
        anchor_ns=facts["anchor_ns"],
        anchor_s=facts["anchor_s"],
        trace_bytes=1,
    )


def _committed_summary(events: Any, facts: dict) -> dict:
    """The ops window's summary of a committed trace, over every step it recorded."""
    ops = ops_summary(events, _fixture_capture(facts), _fixture_record(facts))
    assert ops["window"]["steps"] == len(facts["steps"])
    return ops


def test_split_op_reads_tensorflow_op_events_only():
    assert split_op("sequential/dense/MatMul:MatMul") == ("sequential/dense/MatMul", "MatMul")
    assert split_op("outer:While::sequential/dense/Relu:_FusedMatMul")[1] == "_FusedMatMul"
    assert split_op("ExecutorState::Process") is None
    assert split_op("EagerLocalExecute: MatMul") is None


def test_layer_scope_and_short_names():
    types = {"Sub", "ReadVariableOp", "MatMul"}
    # A layer's ops run in its call's scope: its name and one suffix (see `layer_scope`).
    assert layer_scope("StatefulPartitionedCall/sequential_1/dense_1/MatMul", types) == "dense"
    assert layer_scope("sequential_1/dense_1_2/Add", types) == "dense_1"
    assert layer_scope("gradient_tape/model_1/conv_3/Conv2D/Conv2DBackpropInput", types) == "conv"
    assert layer_scope("model/encoder/dense/MatMul", types) == "encoder"  # no suffix: as it is
    assert layer_scope("adam/Sub_6/ReadVariableOp", types) is None
    # steps_per_execution > 1: the step runs in a loop's body and a branch of a cond
    looped = "while/body/_1/while/cond/then/_131/while/cond/StatefulPartitionedCall/"
    assert layer_scope(looped + "sequential_1/dense_1/Relu", types) == "dense"
    grad = looped + "gradient_tape/sequential_1/dense_1_2/MatMul/MatMul_1"
    assert layer_scope(grad, types) == "dense_1"
    assert layer_scope(looped + "adam/Mul_3", types) is None
    assert layer_scope(looped + "adam/AssignSubVariableOp", types) is None
    assert layer_scope("compile_loss/mse/sub", types) is None
    assert layer_scope("sequential/MatMul", types) is None
    assert short_name("StatefulPartitionedCall/seq/dense/MatMul") == "seq/dense/MatMul"


def test_reader_on_the_committed_trace(fixture_trace):
    events, facts = fixture_trace
    assert len(events) > 50
    assert events.profile_start > 10**18 and events.profile_stop > events.profile_start
    # Every event inside the profile's span, self time within its duration.
    assert (events.start >= events.profile_start - 10**6).all()
    assert (events.end <= events.profile_stop + 10**6).all()
    assert (events.self_ns >= 0).all() and (events.self_ns <= events.end - events.start).all()
    types = set(events.op_type)
    assert any("MatMul" in t for t in types)
    inputs = events.category == Category.INPUT
    assert inputs.sum() >= len(facts["steps"])  # a GetNext per step
    # Each of the six steps ran its forward pass once: the fused MatMul+Relu of the first layer.
    relu = [i for i, name in enumerate(events.name) if name.endswith("dense_1/Relu")]
    assert len(relu) == len(facts["steps"]), sorted(set(events.name))


def test_summary_of_the_committed_trace(fixture_trace):
    events, facts = fixture_trace
    ops = _committed_summary(events, facts)
    assert_sound_window(ops)
    assert any("MatMul" in op["type"] for op in ops["top_ops"][:5]), ops["top_ops"]
    # The fixture's model's layers, `dense` and `dense_1` (their ops in scopes `dense_1` and
    # `dense_1_2`), by the names the model gives them.
    assert [layer["layer"] for layer in ops["top_layers"]][:2] == ["dense", "dense_1"]
    # The first step's GetNext is inside it: its input part is the GetNext it waited on.
    assert ops["per_step"][0]["input"] > 0
    # A step's split, checked by hand: the input part of a span with no GetNext is zero.
    lo, hi = events.profile_start, events.profile_start + 1000
    assert sum(step_split(events, lo, hi).values()) == pytest.approx(1e-6)


@pytest.fixture(scope="module")
def gpu_trace():
    """Six steps of a small training loop on an NVIDIA H200, traced by JAX's profiler (TSL's,
    as TensorFlow's; make_gpu_trace.py): the first step compiled and autotuned, the next five
    each copied a batch in, ran ten kernels and copied the loss out."""
    return _committed_trace("gpu_trace")


def _step_span_ns(facts: dict, start: float, duration: float) -> tuple[int, int]:
    lo = facts["anchor_ns"] + round((start - facts["anchor_s"]) * 1e9)
    return lo, lo + round(duration * 1e9)


def test_reader_on_a_real_gpu_trace(gpu_trace):
    events, facts = gpu_trace
    assert facts["device"] == "NVIDIA H200"
    device = events.device
    assert device.sum() > 100
    # A GPU plane's events are kernels, copies and memsets, nothing of the host's kinds, and
    # its line times (relative to the profile's start) land inside the profile's span.
    assert set(events.category[device].tolist()) == {Category.DEVICE_OP, Category.MEMCPY}
    assert (events.start[device] >= events.profile_start).all()
    assert (events.end[device] <= events.profile_stop).all()
    copies = {events.op_type[i] for i in np.flatnonzero(events.category == Category.MEMCPY)}
    assert {"MemcpyH2D", "MemcpyD2H"} <= copies
    assert any(kind.startswith("Memset") for kind in copies), copies  # CUPTI's "Memset 3"
    kernels = {events.name[i] for i in np.flatnonzero(events.category == Category.DEVICE_OP)}
    assert not any(name.startswith(("Memset", "Memcpy")) for name in kernels)
    # The clocks agree: each steady step holds the GPU work it launched, and waited for.
    for start, duration in facts["steps"][1:]:
        lo, hi = _step_span_ns(facts, start, duration)
        inside = np.flatnonzero(device & (events.start >= lo) & (events.end <= hi))
        kinds = [events.op_type[i] for i in inside]
        assert kinds.count("MemcpyH2D") >= 1 and kinds.count("MemcpyD2H") == 1, kinds
        assert sum("gemm" in kind for kind in kinds) == 2, kinds  # forward and backward


def test_summary_of_a_real_gpu_trace(gpu_trace):
    events, facts = gpu_trace
    steps = facts["steps"]
    ops = _committed_summary(events, facts)
    for step, (start, duration) in zip(ops["per_step"][1:], steps[1:], strict=True):
        parts = [step[p] for p in ("input", "collective", "device_ops", "host_ops", "other")]
        assert sum(parts) == pytest.approx(step["duration"], rel=1e-6, abs=1e-6)
        lo, hi = _step_span_ns(facts, start, duration)
        inside = events.device & (events.start >= lo) & (events.end <= hi)
        busy = (events.end - events.start)[inside]
        # The GPU's busy time, each instant once: at least its longest event, at most all.
        assert busy.max() / 1e9 <= step["device_ops"] <= busy.sum() / 1e9 + 1e-9, step
    assert [op["where"] for op in ops["top_ops"][:3]] == ["device"] * 3, ops["top_ops"]
    assert any("gemm" in op["name"] for op in ops["top_ops"]), ops["top_ops"]


# -- live windows ------------------------------------------------------------------------------


def test_window_of_a_fit_run_is_faithful_and_summarised(ip):
    before = _window_folders()
    run_cell(ip, FIT_CELL)
    plain_losses, plain_after = ip.user_ns["history"].history["loss"], ip.user_ns["after"]
    outcome, r = profiled(ip, FIT_CELL, "-q -o r --ops")
    assert outcome.success
    assert ip.user_ns["history"].history["loss"] == plain_losses
    assert ip.user_ns["after"] == plain_after
    ops = r.report()["ops"]
    assert_sound_window(ops)
    # About 20: the count is read every 5 ms, and the step running at its start is not whole.
    # Steps of about 1 ms run on while the reading thread waits for a CPU: 27 in a quiet
    # `make test` beside its other workers. Of the fit's 128 steps, 40 is still a window.
    assert 18 <= ops["window"]["steps"] <= 40, ops["window"]
    assert any("MatMul" in t for t in r.ops["type"].head(5)), r.ops
    # Named as the model names its layers (not as the graph's scopes: see `layer_scope`).
    names = {layer.name for layer in ip.user_ns["model"].layers}
    assert {layer["layer"] for layer in ops["top_layers"]} == names, (names, ops["top_layers"])
    assert_nothing_left(before)
    # Shown: the text report's section, the HTML's table, the dashboard's last tab.
    assert re.search(r"Ops window: window of \d+ steps", r.summary())
    assert "Top ops by self time" in r.to_html()
    assert tabs_of(r.report())[-1] == "Ops"


def test_window_of_a_custom_loop(ip, tmp_path):
    before = _window_folders()
    outcome, r = profiled(ip, loop_cell(), "-q -o r --ops")
    assert outcome.success
    ops = r.report()["ops"]
    assert_sound_window(ops)
    assert ops["top_ops"][0]["type"].endswith(("MatMul", "FusedMatMul")) or any(
        "MatMul" in op["type"] for op in ops["top_ops"][:3]
    )
    names = {layer.name for layer in ip.user_ns["model"].layers}
    assert {layer["layer"] for layer in ops["top_layers"]} == names, (names, ops["top_layers"])
    # Loop iterations and tf.function calls are both rows; the window's rows are the steps.
    kinds = r.steps["kind"].iloc[[s["step"] for s in ops["per_step"]]]
    assert set(kinds) == {"tf_function"}
    assert_nothing_left(before)
    # The TensorBoard export puts the window's trace where the profile plugin finds it.
    logdir = r.to_tensorboard(tmp_path / "logs")
    traces = list(logdir.glob("plugins/profile/*/*.xplane.pb"))
    assert len(traces) == 1, list(logdir.rglob("*"))
    assert re.fullmatch(r"\d{4}(_\d\d){5}", traces[0].parent.name)
    events = read_events(parse_xspace(traces[0].read_bytes()))
    assert any("MatMul" in name for name in events.name), set(events.name)
    assert list(logdir.glob("events.out.tfevents.*"))  # the scalars beside it


def test_a_run_without_ops_has_no_window(ip, tmp_path):
    _outcome, r = profiled(ip, loop_cell(steps=8))
    assert r.ops is None and r.report()["ops"] is None
    assert "Ops" not in tabs_of(r.report())
    assert not (r.to_tensorboard(tmp_path) / "plugins").exists()


def test_a_trace_too_large_to_keep_is_read_but_not_kept():
    capture = OpsCapture(status="captured", xspace=os.urandom(KEPT_TRACE_BYTES + 1024))
    keep_compressed(capture)
    assert capture.trace_gz == b""
    small = OpsCapture(status="captured", xspace=b"x" * (KEPT_TRACE_BYTES + 1024))
    keep_compressed(small)
    assert gzip.decompress(small.trace_gz) == small.xspace


def test_a_cell_that_raises_inside_the_window(ip):
    before = _window_folders()
    plain = run_cell(ip, loop_cell(fail_at=9, pause=0.01))
    outcome, r = profiled(ip, loop_cell(fail_at=9, pause=0.01), "-q -o r --ops")
    error = outcome.error_in_exec
    assert isinstance(error, ValueError) and str(error) == "bad batch at step 9"

    def user_frames(exc: BaseException) -> list[tuple[int, str, str | None]]:
        return [
            (f.lineno, f.name, f.line)
            for f in traceback.extract_tb(exc.__traceback__)
            if "tfdiag_magic" not in f.filename and "IPython" not in f.filename
        ]

    # The same innermost frame: the cell's own line (numbered with the %%tfprofile line).
    assert user_frames(error)[-1][1:] == user_frames(plain.error_in_exec)[-1][1:]
    assert r.record.error.type == "ValueError"
    assert r.record.step_count >= 9  # what was recorded before it is kept
    ops = r.report()["ops"]
    assert ops["note"] == "the run ended inside the window"
    assert_sound_window(ops)
    assert_nothing_left(before)


def test_a_run_shorter_than_the_window(ip):
    before = _window_folders()
    _outcome, r = profiled(ip, loop_cell(steps=6, pause=0.03), "-q -o r --ops")
    ops = r.report()["ops"]
    assert ops["note"] == "the run ended inside the window"
    assert 1 <= ops["window"]["steps"] <= 3
    assert_sound_window(ops)
    _outcome, r = profiled(ip, loop_cell(steps=2), "-q -o r --ops")
    assert r.report()["ops"] == {
        "status": "skipped",
        "note": "the run ended before the window began",
    }
    assert r.ops is None
    assert "not captured" in r.summary()
    assert_nothing_left(before)


def test_a_profiler_the_user_started_is_left_alone(ip, tmp_path):
    import tensorflow as tf

    logdir = str(tmp_path / "user-profile")
    tf.profiler.experimental.start(logdir)
    try:
        outcome, r = profiled(ip, loop_cell(steps=12), "-q -o r --ops")
        assert outcome.success
        assert _profiler_running()  # still the user's
        assert r.report()["ops"]["note"] == "TensorFlow's profiler was already running; not touched"
    finally:
        tf.profiler.experimental.stop()
    assert list(Path(logdir).rglob("*.xplane.pb"))  # the user's trace is the user's
    cell = "import tensorflow as tf\n" + loop_cell(steps=12) + "\ntf.profiler.experimental\n"
    outcome, r = profiled(ip, cell, "-q -o r --ops")
    assert outcome.success
    assert "uses TensorFlow's profiler itself" in r.report()["ops"]["note"]


def test_command_line_ops(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(loop_cell(steps=30))
    report = tmp_path / "train.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfdiag_magic",
            "profile",
            "--ops",
            "--json",
            str(report),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"Ops window: window of \d+ steps", done.stdout)
    assert_sound_window(json.loads(report.read_text())["ops"])


def test_ops_is_documented_in_the_magic_help(ip):
    assert "--ops" in ip.find_line_magic("tfprofile").__doc__


def test_a_trace_that_cannot_be_read_is_reported_as_unread():
    from tfdiag_magic.ops_summary import summarise_ops
    from tfdiag_magic.report import build_report

    record = Record()
    record.ops_window = OpsCapture(status="captured", xspace=b"\xff not a trace \xff")
    with pytest.raises(Exception):  # noqa: B017 (protobuf's DecodeError; the session notes it)
        summarise_ops(record)
    ops = build_report(record, [])["ops"]
    assert ops["status"] == "unread" and "problems" in ops["note"]
    assert "Ops" not in tabs_of(build_report(record, []))
