"""``%%tfprofile --sweep NAME=V1,V2,...`` in a real IPython shell on real TensorFlow and Keras.

Each value is a full profiled run with the cell's own top-level assignment overridden; a run
that fails is a row of the table and the sweep goes on; an interrupt keeps the rows so far and
is raised again; a malformed specification runs nothing.
"""

from __future__ import annotations

import json

import pytest
from IPython.core.error import UsageError

from .helpers import run_cell

BATCH_CELL = """import numpy as np, keras
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(8192, 16)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
batch_size = 32  # the cell's own value: the sweep overrides it
history = model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
"""


def test_batch_size_sweep_throughput_rises_with_the_batch(ip):
    result = run_cell(ip, "%%tfprofile --sweep batch_size=8,64,512 -o sw\n" + BATCH_CELL)
    assert result.success, result.error_in_exec
    sw = ip.user_ns["sw"]
    frame = sw.sweep
    assert list(frame["value"]) == [8, 64, 512]
    assert frame.attrs["variable"] == "batch_size"
    assert not frame["failed"].any() and list(frame["status"]) == ["ok"] * 3
    # The sweep's value, not the cell's 32, reached fit: 8192 samples in 1024, 128, 16 steps
    # (batches of 512 took 8 steps with 4096 samples: their throughput, read over 7 intervals,
    # fell under the 64's once at a load of 4-8 on 2 vCPUs).
    assert list(frame["steps"]) == [1024, 128, 16]
    assert list(frame["batch_size"]) == [8.0, 64.0, 512.0]
    assert set(frame["throughput_unit"]) == {"samples/s"}
    throughput = list(frame["throughput"])
    print("\n" + frame[["value", "steps", "step_time", "throughput", "wall_time"]].to_string())
    print(sw.recommendation)  # shown with pytest -s, after the progress and the report
    # A small MLP on the CPU: a step costs about the same at any of these batches, so the
    # samples per second grow several-fold with each 8x larger batch (2x is the margin here).
    assert throughput[1] > 2 * throughput[0] and throughput[2] > 2 * throughput[1], throughput
    assert frame["peak_host"].notna().all()
    best = sw.recommendation
    assert best.value == 512 and best.measure == "samples/s"
    assert best.runner_up == 64 and best.margin > 2
    assert "batch_size=512" in best.text and "the runner-up (batch_size=64)" in best.text
    # The result shows the recommended run; the namespace is the last run's.
    assert sw.record.steps["batch"][0] == 512
    assert len(sw.runs) == 3 and sw.runs[0].record.step_count == 1024
    assert ip.user_ns["batch_size"] == 512
    summary = sw.summary()
    assert summary.index("Sweep of batch_size over 3 values") < summary.index("phase")
    assert "The cell's own assignment to batch_size (line 9) was overridden." in summary
    report = json.loads(sw.to_json())
    assert report["schema"] == 1 and report["comparison"] is None
    assert [row["value"] for row in report["sweep"]["rows"]] == ["8", "64", "512"]
    assert [row["value_json"] for row in report["sweep"]["rows"]] == [8, 64, 512]
    assert report["sweep"]["recommendation"]["value"] == "512"
    assert report["sweep"]["overridden_lines"] == [9]
    page = sw.to_html()
    assert '<label for="tfdiag-tab0">Sweep</label>' in page
    assert page.count("data:image/png;base64,") >= 2  # the sweep plot and the run's plots


FAILING_CELL = """import tensorflow as tf
LIMIT = 64  # stands in for the device's memory: larger batches do not fit
x = tf.random.normal((512, 8))
w = tf.Variable(tf.zeros((8, 1)))

@tf.function
def step(xb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(xb @ w - 1.0))
    w.assign_sub(0.01 * tape.gradient(loss, w))
    return loss

for i in range(0, 512, batch_size):
    if batch_size > LIMIT:
        raise tf.errors.ResourceExhaustedError(
            None, None, f"OOM when allocating tensor with shape[{batch_size},8] on CPU"
        )
    step(x[i:i + batch_size])
"""


def test_a_value_that_runs_out_of_memory_is_a_row_and_the_sweep_goes_on(ip, capsys):
    result = run_cell(ip, "%%tfprofile -q --sweep batch_size=16,256,64 -o sw\n" + FAILING_CELL)
    assert result.success, result.error_in_exec  # a failed value is a result, not a crash
    frame = ip.user_ns["sw"].sweep
    assert list(frame["value"]) == [16, 256, 64]  # the run after the failure happened
    assert list(frame["status"]) == ["ok", "failed", "ok"]
    failed = frame.iloc[1]
    assert failed["failed"] and failed["error"].startswith("ResourceExhaustedError: OOM")
    assert "oom" in failed["findings"]  # each value's run is diagnosed
    assert frame["steps"][0] == 32 and frame["steps"][2] == 8  # 512 samples in batches
    best = ip.user_ns["sw"].recommendation
    assert best.value in (16, 64) and best.failed == [("256", "ResourceExhaustedError")]
    assert "Did not complete: batch_size=256 (ResourceExhaustedError)." in best.text
    summary = ip.user_ns["sw"].summary()
    assert "ResourceExhaustedError: OOM when allocating tensor with shape[256,8]" in summary
    assert capsys.readouterr().out == ""  # -q: no progress, no report


def test_every_value_failing_raises_the_last_error_after_storing_the_table(ip):
    result = run_cell(ip, "%%tfprofile -q --sweep n=1,2 -o sw\nraise ValueError(f'no {n}')\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert str(result.error_in_exec) == "no 2"
    frame = ip.user_ns["sw"].sweep
    assert list(frame["status"]) == ["failed", "failed"]
    assert ip.user_ns["sw"].recommendation is None
    assert "No value completed" in ip.user_ns["sw"].summary()


def test_top_level_assignments_are_overridden_and_other_values_kept(ip, capsys):
    ip.user_ns["seen"] = []
    cell = (
        "%%tfprofile --sweep shape=(2, 3),(4,5) -o sw\n"
        "shape = (1, 1)\n"
        "other, shape = 'kept', (9, 9)\n"
        "def default(shape=(7, 7)):\n"
        "    return shape\n"
        "seen.append((shape, other, default()))\n"
    )
    result = run_cell(ip, cell)
    assert result.success, result.error_in_exec
    assert ip.user_ns["seen"] == [((2, 3), "kept", (7, 7)), ((4, 5), "kept", (7, 7))]
    sweep = ip.user_ns["sw"].report()["sweep"]
    assert sweep["values"] == ["(2, 3)", "(4, 5)"]
    assert sweep["overridden_lines"] == [2, 3]
    # No steps: no throughput, so the wall time decides, and says so.
    assert ip.user_ns["sw"].recommendation.measure == "wall time"
    out = capsys.readouterr().out  # progress after each run, then the report
    assert "tfdiag_magic sweep 1/2: shape=(2, 3):" in out
    assert out.index("tfdiag_magic sweep 2/2: shape=(4, 5):") < out.index("Sweep of shape")
    assert "The cell's own assignment to shape (line 2) was overridden." in out
    assert "never reads" not in capsys.readouterr().err  # it does read shape


def test_a_sweep_over_a_name_the_cell_never_reads_says_so(ip, capsys):
    ip.user_ns["runs"] = []
    result = run_cell(ip, "%%tfprofile -q --sweep batch_sise=8,16\nruns.append(1)\n")
    assert result.success, result.error_in_exec
    assert ip.user_ns["runs"] == [1, 1]  # it still runs every value
    err = capsys.readouterr().err
    assert "the cell never reads batch_sise" in err


@pytest.mark.parametrize(
    "spec",
    ["batch_size", "batch_size=", "batch_size=1,,2", "batch_size=(1,2", "1x=1,2", "n=1/3"],
)
def test_malformed_spec_is_a_usage_error_before_anything_runs(ip, spec):
    ip.user_ns["ran"] = []
    result = run_cell(ip, f"%%tfprofile --sweep {spec} -o sw\nran.append(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert "Nothing was run" in str(result.error_in_exec)
    assert ip.user_ns["ran"] == [] and "sw" not in ip.user_ns


def test_sweep_and_compare_together_is_a_usage_error(ip):
    ip.user_ns["ran"] = []
    result = run_cell(ip, "%%tfprofile --sweep n=1,2 --compare before\nran.append(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert ip.user_ns["ran"] == []


def test_user_values_and_errors_are_escaped_in_the_html(ip):
    cell = (
        "%%tfprofile -q --sweep tag='<script>x</script>',plain -o sw\n"
        "if tag != 'plain':\n"
        "    raise ValueError('<img src=x onerror=alert(1)>')\n"
    )
    assert run_cell(ip, cell).success
    sw = ip.user_ns["sw"]
    for page in (sw.to_html(full_page=True), sw.to_html(full_page=False)):
        assert "<script>x" not in page and "<img src=x" not in page
        assert "&#x27;&lt;script&gt;x&lt;/script&gt;&#x27;" in page
        assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_interrupt_keeps_the_finished_rows_and_is_raised_again(ip):
    ip.user_ns["ran"] = []
    cell = (
        "%%tfprofile -q --sweep n=1,2,3 -o sw\n"
        "import tensorflow as tf\n"
        "total = tf.reduce_sum(tf.ones((n, 4)))\n"
        "ran.append(n)\n"
        "if n == 2:\n"
        "    raise KeyboardInterrupt\n"
    )
    result = run_cell(ip, cell)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert ip.user_ns["ran"] == [1, 2]  # the third value never ran
    sw = ip.user_ns["sw"]
    assert list(sw.sweep["value"]) == [1, 2]
    assert list(sw.sweep["status"]) == ["ok", "interrupted"]
    assert sw.recommendation.value == 1
    assert "Not run: 3." in sw.recommendation.text
    report = sw.report()["sweep"]
    assert report["interrupted"] and report["not_run"] == ["3"]
    assert "The sweep was interrupted" in sw.summary()
