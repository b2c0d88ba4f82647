"""Exports to the tools teams use: the Trace Event JSON that Perfetto and chrome://tracing open
(`ProfileResult.to_chrome_trace`), TensorBoard scalars (`ProfileResult.to_tensorboard`), and the
command line's ``--chrome-trace`` and ``--tensorboard``.

A real training loop (tf.data, a tf.function step with an optimizer, a GC collection) is
profiled once under ``%%tfprofile``; each test writes the files and reads them back as their
readers would: the trace with `json`, the scalars with TensorFlow's own event-file iterator.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import profiled
from tfdiag_magic import cli
from tfdiag_magic.export.chrome_trace import chrome_trace_events
from tfdiag_magic.record import PHASES, Kind, Phase
from tfdiag_magic.recorder import Recorder
from tfdiag_magic.result import ProfileResult

REPO = Path(__file__).resolve().parents[1]

BODY = """\
import gc
import time

import keras
import numpy as np
import tensorflow as tf

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(xb) - yb) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(2):
    for xb, yb in dataset:
        time.sleep(0.002)
        train_step(xb, yb)
    gc.collect()
"""

TRAIN_STEPS = 16  # 2 epochs of 8 batches


@pytest.fixture(scope="module")
def run(shell) -> ProfileResult:
    shell.reset(new_session=False)
    execution, result = profiled(shell, BODY)
    assert execution.success, execution.error_in_exec
    assert result.record.phase_counts()["train"] == TRAIN_STEPS
    return result


def _strict_json(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _read_trace(path: Path) -> dict:
    trace = _strict_json(path.read_text(encoding="utf-8"))
    assert set(trace) == {"traceEvents", "displayTimeUnit", "metadata"}
    assert trace["displayTimeUnit"] == "ms"
    for event in trace["traceEvents"]:
        assert isinstance(event["name"], str) and event["name"], event
        assert event["ph"] in {"X", "C", "M"}, event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        if event["ph"] == "X":
            for key in ("ts", "dur"):
                value = event[key]
                assert isinstance(value, int | float) and not isinstance(value, bool), event
                assert value >= 0 and math.isfinite(value), event
        if event["ph"] == "C":
            assert isinstance(event["ts"], int | float) and event["ts"] >= 0, event
            assert event["args"], event
            for value in event["args"].values():
                assert isinstance(value, int | float) and math.isfinite(value), event
    return trace


def _step_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["ph"] == "X" and " step " in e["name"]]


def _indices(record) -> np.ndarray:
    index = record.step_index
    return np.arange(record.step_count) if index is None else index


# -- Chrome trace / Perfetto ----------------------------------------------------------------


def test_chrome_trace_has_a_complete_event_per_step_row_at_its_time(run, tmp_path):
    written = run.to_chrome_trace(tmp_path / "run.trace.json")
    trace = _read_trace(written)
    record = run.record
    steps = _step_events(trace["traceEvents"])
    assert len(steps) == record.step_count
    by_step = {event["args"]["step"]: event for event in steps}
    assert sorted(by_step) == _indices(record).tolist()
    columns = record.steps
    for row, step in enumerate(_indices(record).tolist()):
        event = by_step[step]
        phase = PHASES[columns["phase"][row]]
        assert event["name"] == f"{phase} step {step}"
        assert event["ts"] == pytest.approx(columns["start"][row] * 1e6, abs=0.001)
        assert event["dur"] == pytest.approx(columns["duration"][row] * 1e6, abs=0.001)
        assert event["args"]["eager"] == bool(columns["eager"][row])
        if phase == "train":
            assert event["args"]["loss"] == pytest.approx(float(columns["loss"][row]))
            assert event["args"]["epoch"] == columns["epoch"][row]
    assert trace["metadata"]["steps_recorded"] == record.steps_recorded
    assert sum(e["name"].startswith("train step") for e in steps) == TRAIN_STEPS


def test_each_input_wait_is_an_event_that_ends_where_its_step_starts(run, tmp_path):
    trace = _read_trace(run.to_chrome_trace(tmp_path / "run.trace.json"))
    events = trace["traceEvents"]
    steps = {e["args"]["step"]: e for e in _step_events(events)}
    waits = [e for e in events if e["ph"] == "X" and e["name"] == "input wait"]
    wait_column = run.record.steps["data_wait"]
    observed = np.isfinite(wait_column) & (wait_column > 0)
    assert len(waits) == int(observed.sum()) > TRAIN_STEPS  # the loop's items and the steps'
    assert sorted(w["args"]["step"] for w in waits) == _indices(run.record)[observed].tolist()
    row_of = {step: row for row, step in enumerate(_indices(run.record).tolist())}
    for wait in waits:
        step = steps[wait["args"]["step"]]
        seconds = wait_column[row_of[wait["args"]["step"]]]
        assert wait["dur"] == pytest.approx(seconds * 1e6, abs=0.002)
        assert wait["ts"] < step["ts"]
        assert wait["ts"] + wait["dur"] == pytest.approx(step["ts"], abs=0.002)
        assert wait["tid"] != step["tid"]
    # The steps' waits and the loop iterations' waits (the same waits) are on lanes apart.
    loop_lane = {w["tid"] for w in waits if steps[w["args"]["step"]]["name"].startswith("loop")}
    train_lane = {w["tid"] for w in waits if steps[w["args"]["step"]]["name"].startswith("train")}
    assert len(loop_lane) == len(train_lane) == 1 and loop_lane != train_lane


def test_tracings_gc_pauses_and_memory_counters_are_in_the_trace(run, tmp_path):
    record = run.record
    events = _read_trace(run.to_chrome_trace(tmp_path / "t.json"))["traceEvents"]
    traces = [e for e in events if e["ph"] == "X" and e["name"].startswith("trace ")]
    assert [e["args"]["function"] for e in traces] == [t.function for t in record.traces]
    assert "trace train_step" in {e["name"] for e in traces}
    pauses = [e for e in events if e["ph"] == "X" and e["name"].startswith("gc gen ")]
    assert len(pauses) == record.gc["time"].size >= 2  # gc.collect() at each epoch's end
    assert [e["args"]["generation"] for e in pauses] == record.gc["generation"].tolist()
    rss = [e for e in events if e["ph"] == "C" and e["name"] == "host RSS (MiB)"]
    read = record.memory["rss"] >= 0
    assert len(rss) == int(read.sum()) >= 1
    expected = record.memory["rss"][read] / 2**20
    assert [e["args"]["MiB"] for e in rss] == pytest.approx(expected.tolist(), abs=0.001)
    tensors = [e for e in events if e["ph"] == "C" and e["name"] == "CPU tensors (MiB)"]
    assert len(tensors) == int((record.memory["cpu_tensors"] >= 0).sum())


def _category(event: dict) -> str:
    """What an event shows: a phase's steps, input waits, tracings or GC pauses."""
    name = event["name"]
    if " step " in name:
        return name.split(" ")[0] + " steps"
    return {"input": "input wait", "trace": "tracing", "gc": "gc"}[name.split(" ")[0]]


def test_every_lane_is_named_and_each_kind_of_event_has_its_own(run):
    events = chrome_trace_events(run.record, pid=7, process_name="worker 1")
    assert {e["pid"] for e in events} == {7}
    (process,) = [e for e in events if e["name"] == "process_name"]
    assert process["args"]["name"] == "worker 1"
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    lanes: dict[str, set[int]] = {}
    for event in events:
        if event["ph"] == "X":
            lanes.setdefault(_category(event), set()).add(event["tid"])
    assert {category: {names[tid] for tid in tids} for category, tids in lanes.items()} == {
        "train steps": {"train steps"},
        "loop steps": {"loop steps"},
        "input wait": {"input wait", "loop item wait"},
        "tracing": {"tf.function tracing"},
        "gc": {"GC pauses"},
    }
    every = [tid for tids in lanes.values() for tid in tids]
    assert len(every) == len(set(every)) == len(names)  # no lane shared, none named in vain


def test_a_nan_loss_or_wait_never_reaches_the_json(run, tmp_path):
    diverged = ProfileResult("diverged", copy.deepcopy(run.record))
    columns = diverged.record.steps
    train = np.flatnonzero(columns["phase"] == Phase.TRAIN)
    columns["loss"][train[3]] = np.nan
    columns["loss"][train[4]] = np.inf
    columns["data_wait"][train[3]] = np.nan
    trace = _read_trace(diverged.to_chrome_trace(tmp_path / "nan.json"))
    steps = {e["args"]["step"]: e for e in _step_events(trace["traceEvents"])}
    index = _indices(diverged.record)
    assert "loss" not in steps[index[train[3]]]["args"]
    assert "loss" not in steps[index[train[4]]]["args"]
    assert "loss" in steps[index[train[5]]]["args"]
    waited = {e["args"]["step"] for e in trace["traceEvents"] if e["name"] == "input wait"}
    assert index[train[3]] not in waited and index[train[5]] in waited


def test_a_reduced_step_table_names_each_row_by_its_index_among_all_rows():
    record = _reduced_record()
    steps = _step_events(chrome_trace_events(record))
    assert len(steps) == record.step_count < record.steps_recorded
    assert [e["args"]["step"] for e in steps] == record.step_index.tolist()


def _reduced_record():
    """A long run's table through the real recorder, with small limits: a sample of the rows
    past the first 100, each row keeping its index among all 3000."""
    recorder = Recorder(full_rows=100, tail_rows=32)
    start0 = math.ceil(recorder.t0)
    for i in range(3000):
        phase = Phase.EVAL if i % 5 == 4 else Phase.TRAIN
        start = start0 + i / 128
        recorder.add_step(phase, Kind.MARKER, start, start + 1 / 1024, 1 / 4096, 0, False, i / 8)
    record = recorder.finish()
    assert record.reduced
    return record


# -- TensorBoard ----------------------------------------------------------------------------


def _read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of `logdir`, by tag, as TensorBoard's loader reads
    them (ours: the scalars plugin's tensors)."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag.startswith("tfdiag/"):
                    assert value.metadata.plugin_data.plugin_name == "scalars", value.tag
                number = float(tf.make_ndarray(value.tensor))
                scalars.setdefault(value.tag, []).append((event.step, number))
    return scalars


def test_tensorboard_scalars_are_the_training_rows_at_their_step_indices(run, tmp_path):
    written = run.to_tensorboard(tmp_path / "tb")
    assert written == tmp_path / "tb"
    scalars = _read_scalars(written)
    assert set(scalars) == {
        "tfdiag/step_time_s",
        "tfdiag/data_wait_s",
        "tfdiag/loss",
        "tfdiag/host_rss_mib",
    }
    record = run.record
    train = record.phase_mask("train")
    index = _indices(record)[train]
    steps, values = zip(*scalars["tfdiag/step_time_s"], strict=True)
    assert list(steps) == index.tolist() and len(steps) == TRAIN_STEPS
    np.testing.assert_array_equal(
        np.array(values, np.float32), record.steps["duration"][train].astype(np.float32)
    )
    steps, values = zip(*scalars["tfdiag/loss"], strict=True)
    assert list(steps) == index.tolist()
    np.testing.assert_array_equal(np.array(values, np.float32), record.steps["loss"][train])
    steps, values = zip(*scalars["tfdiag/data_wait_s"], strict=True)
    assert list(steps) == index.tolist()
    np.testing.assert_array_equal(
        np.array(values, np.float32), record.steps["data_wait"][train].astype(np.float32)
    )
    steps, values = zip(*scalars["tfdiag/host_rss_mib"], strict=True)
    assert list(steps) == record.memory["step"].tolist()
    np.testing.assert_allclose(values, record.memory["rss"] / 2**20, rtol=1e-6)


def test_tensorboard_export_leaves_the_users_writer_step_and_recording_as_they_were(run, tmp_path):
    assert not tf.summary.write("before", 1.0, step=0)  # no default writer yet
    users = tf.summary.create_file_writer(str(tmp_path / "users"))
    tf.summary.experimental.set_step(5)
    try:
        with users.as_default(), tf.summary.record_if(False):
            run.to_tensorboard(tmp_path / "ours")  # written although the user records nothing
            assert not tf.summary.should_record_summaries()
            assert tf.summary.experimental.get_step() == 5
        with users.as_default():
            assert tf.summary.write("mine", 2.0)  # at the user's step, to the user's writer
        users.flush()
    finally:
        tf.summary.experimental.set_step(None)
        users.close()
    assert not tf.summary.write("after", 1.0, step=0)  # still no default writer
    assert _read_scalars(tmp_path / "users") == {"mine": [(5, 2.0)]}
    ours = _read_scalars(tmp_path / "ours")
    assert "mine" not in ours and len(ours["tfdiag/step_time_s"]) == TRAIN_STEPS


def test_tensorboard_steps_of_a_reduced_table_are_the_rows_indices(tmp_path):
    record = _reduced_record()
    scalars = _read_scalars(ProfileResult("reduced", record).to_tensorboard(tmp_path))
    train = record.phase_mask("train")
    steps = [step for step, _ in scalars["tfdiag/step_time_s"]]
    assert steps == record.step_index[train].tolist()
    assert len(steps) < record.phase_counts()["train"]  # a sample, at the rows' own indices


# -- the command line -----------------------------------------------------------------------

SCRIPT = """\
import sys

import keras
import numpy as np

x = np.zeros((4, 3), "float32")
y = np.zeros((4, 1), "float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
for i in range(3):
    model.train_on_batch(x, y)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def test_cli_writes_both_exports_beside_the_json_report(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "tfdiag_magic", "profile", "--json", "r.json"]
    command += ["--tensorboard", "logs/run1", "--chrome-trace", "out/run.trace.json", "train.py"]
    proc = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert f"TensorBoard scalars: {Path('logs/run1')}" in proc.stdout.splitlines()
    assert f"Chrome trace: {Path('out/run.trace.json')}" in proc.stdout.splitlines()
    report = _strict_json((tmp_path / "r.json").read_text(encoding="utf-8"))
    trace = _read_trace(tmp_path / "out" / "run.trace.json")
    steps = _step_events(trace["traceEvents"])
    assert len(steps) == report["steps"]["rows"] == 6  # 3 loop iterations, a step in each
    train = [e["args"]["step"] for e in steps if e["name"].startswith("train step")]
    assert len(train) == report["steps"]["count"] == 3
    (process,) = [e for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert process["args"]["name"] == "train.py"
    scalars = _read_scalars(tmp_path / "logs" / "run1")
    assert [step for step, _ in scalars["tfdiag/step_time_s"]] == train
    assert len(scalars["tfdiag/loss"]) == 3


def test_exports_that_cannot_be_written_are_one_line_each_and_keep_the_exit_status(
    tmp_path, capsys, monkeypatch
):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").mkdir()  # a folder where the trace file should go
    (tmp_path / "plain.txt").write_text("a file, not a folder", encoding="utf-8")
    capsys.readouterr()
    status = cli.main(
        ["profile", "--chrome-trace", "taken", "--tensorboard", "plain.txt/logs", "train.py", "3"]
    )
    out, err = capsys.readouterr()
    assert status == 3
    problems = [line for line in err.splitlines() if line.startswith("tfdiag_magic:")]
    assert len(problems) == 2, err
    assert problems[0].startswith(
        f"tfdiag_magic: could not write the TensorBoard scalars to {Path('plain.txt/logs')}: "
    )
    assert problems[1] == (
        f"tfdiag_magic: could not write the Chrome trace to taken: "
        f"IsADirectoryError: {Path('taken')} is a folder, not a file"
    )
    assert "Traceback" not in err
    assert "tfdiag_magic:" in out and "JSON report:" in out  # the report, and its file
    assert list((tmp_path / "taken").iterdir()) == []
    assert (tmp_path / "plain.txt").read_text(encoding="utf-8") == "a file, not a folder"
