"""``%%tfprofile --compare NAME``: a run measured against an earlier one, on real TensorFlow/Keras.

The fix under test is the diagnosis's own: a per-batch NumPy loop calling ``model.predict`` on
each slice gets a repeated-keras-call finding whose rewrite calls ``predict_on_batch``; that
rewrite, run as the report inserts it (under ``%%tfprofile --compare``), measures faster.
The verdict's rules (which measure, what is noise, failed runs) are checked on their own below.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from IPython.core.error import UsageError

from tfdiag_magic.experiments.compare import compare_headlines
from tfdiag_magic.experiments.headline import Headline
from tfdiag_magic.magics import TFProfileMagics
from tfdiag_magic.views.dashboard import Dashboard

from .helpers import run_cell

PREDICT_LOOP = """import numpy as np, keras
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(320, 16)).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(1)])
batch_size = 32
preds = []
for i in range(0, len(x), batch_size):
    xb = x[i:i + batch_size]
    preds.append(model.predict(xb, verbose=0))
"""


def _rewrite_of(result, code: str):
    found = [f for f in result.findings if f.code == code]
    assert found and found[0].rewrite, [(f.code, bool(f.rewrite)) for f in result.findings]
    return found[0].rewrite


def test_rewrite_of_a_per_batch_numpy_loop_measures_faster(ip):
    assert run_cell(ip, "%%tfprofile -q -o before\n" + PREDICT_LOOP).success
    before = ip.user_ns["before"]
    rewrite = _rewrite_of(before, "repeated-keras-call")
    assert "predict_on_batch(xb)" in rewrite

    result = run_cell(ip, f"%%tfprofile -q --compare before -o after\n{rewrite}")
    assert result.success, result.error_in_exec
    comparison = ip.user_ns["after"].comparison
    print(f"\nverdict: {comparison.verdict}\n{comparison.frame}")  # shown with pytest -s
    # Both runs predict batches of 32 known samples: samples/s decides. Measured here: two
    # orders of magnitude (each predict() call sets up a data adapter for one batch); 1.5x
    # is the margin for a noisy machine.
    assert comparison.measure == "samples/s"
    assert comparison.speedup > 1.5, comparison.verdict
    assert "faster by samples/s in steady state" in comparison.verdict
    assert comparison.resolved == ["repeated-keras-call"] and comparison.new == []
    frame = comparison.frame
    assert list(frame.columns) == ["before", "after", "change"]
    assert frame.loc["steps", "before"] == frame.loc["steps", "after"] == 10
    assert frame.loc["throughput", "after"] > 1.5 * frame.loc["throughput", "before"]
    assert frame.loc["wall time", "after"] < frame.loc["wall time", "before"]
    assert frame.attrs["baseline"] == "before"

    report = json.loads(ip.user_ns["after"].to_json())
    assert report["schema"] == 1 and report["sweep"] is None
    assert report["comparison"]["baseline"] == "before"
    assert report["comparison"]["resolved"] == ["repeated-keras-call"]
    assert report["comparison"]["verdict"] == comparison.verdict
    text = ip.user_ns["after"].summary()
    assert f"Compared with before: {comparison.verdict}" in text
    assert "Findings resolved: repeated-keras-call; new: none" in text
    page = ip.user_ns["after"].to_html()
    assert '<label for="tfdiag-tab0">Compare</label>' in page


def test_inserted_rewrite_carries_compare_and_one_run_of_it_verifies_the_fix(ip):
    # No -o: a run with a rewrite is kept as _tfprofile_<N>, and the cell the dashboard
    # inserts starts with `%%tfprofile --compare _tfprofile_<N>`.
    result = run_cell(ip, "%%tfprofile -q\n" + PREDICT_LOOP)
    assert result.success, result.error_in_exec
    name = f"_tfprofile_{result.execution_count}"
    original = ip.user_ns[name]
    assert original is TFProfileMagics.last_result and original.stored_as == name
    dashboard = Dashboard(original)
    try:
        findings_html = " ".join(
            child.value
            for child in dashboard.tab.children[dashboard.titles.index("Findings")].children
        )
    finally:
        dashboard.close()
    inserted = re.search(
        r'<textarea class="tfdiag-rewrite" hidden readonly>(.*?)</textarea>', findings_html, re.S
    )
    assert inserted is not None
    cell = html.unescape(inserted.group(1))
    assert cell == f"%%tfprofile --compare {name}\n" + _rewrite_of(original, "repeated-keras-call")
    assert f"Measure the fix: run the rewritten cell under `%%tfprofile --compare {name}`" in (
        original.summary()
    )

    assert run_cell(ip, cell).success  # the inserted cell, as it is
    comparison = TFProfileMagics.last_result.comparison
    assert comparison.baseline == name
    assert comparison.speedup > 1.5 and "faster" in comparison.verdict, comparison.verdict


def test_runs_without_a_rewrite_are_not_kept_under_a_name(ip):
    result = run_cell(
        ip, "%%tfprofile -q\nimport tensorflow as tf\nv = tf.reduce_sum(tf.ones(3))\n"
    )
    assert result.success
    assert not [k for k in ip.user_ns if k.startswith("_tfprofile_")]
    assert TFProfileMagics.last_result.stored_as is None


@pytest.mark.parametrize(
    ("setup", "name", "message"),
    [
        ("", "missing", "there is no variable missing"),
        ("before = 3", "before", "before holds a value of type int, not the ProfileResult"),
        ("", "1x", "needs a variable name"),
    ],
)
def test_compare_with_nothing_to_compare_is_a_usage_error_before_running(ip, setup, name, message):
    ip.user_ns["ran"] = []
    if setup:
        run_cell(ip, setup)
    result = run_cell(ip, f"%%tfprofile --compare {name}\nran.append(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert message in str(result.error_in_exec) and "Nothing was run" in str(result.error_in_exec)
    assert ip.user_ns["ran"] == []


def _headline(**changes) -> Headline:
    numbers = dict(
        phase="train",
        kind="keras",
        steps=100,
        step_time=0.010,
        step_interval=0.012,
        batch_size=32.0,
        throughput=32 / 0.012,
        throughput_unit="samples/s",
        compute_share=0.8,
        data_wait_share=None,
        other_share=0.2,
        peak_host=1000 * 2**20,
        host_added=50 * 2**20,
        peak_device=None,
        wall_time=1.5,
        failed=False,
        error=None,
        error_type=None,
        findings=["small-batch"],
    )
    numbers.update(changes)
    return Headline(**numbers)


def test_verdict_uses_samples_per_second_then_step_interval_then_wall_time():
    before = _headline()
    faster = compare_headlines(before, _headline(throughput=3.4 * before.throughput), "b")
    assert faster.measure == "samples/s" and faster.verdict.startswith("3.4× faster by samples/s")
    no_batch = dict(batch_size=None, throughput_unit="steps/s")
    steps = compare_headlines(
        _headline(**no_batch), _headline(**no_batch, step_interval=0.024, throughput=1 / 0.024), "b"
    )
    assert steps.measure == "step interval" and steps.verdict.startswith("2.0× slower by time per")
    other_kind = compare_headlines(
        _headline(**no_batch), _headline(**no_batch, kind="tf_function", wall_time=0.5), "b"
    )
    assert other_kind.measure == "wall time"
    assert other_kind.verdict.startswith("3.0× faster by the cell's wall time")
    other_phase = compare_headlines(before, _headline(phase="predict", wall_time=3.0), "b")
    assert other_phase.measure == "wall time" and "2.0× slower" in other_phase.verdict


def test_differences_within_noise_are_no_measurable_change():
    before = _headline()
    same = compare_headlines(before, _headline(throughput=1.03 * before.throughput), "b")
    assert same.verdict.startswith("no measurable change in speed (1.03×")
    assert "faster" not in same.verdict and "slower" not in same.verdict
    assert same.resolved == [] and same.persisting == ["small-batch"]


def test_host_memory_the_run_added_is_named_when_the_process_peak_hides_it():
    # The kernel holds 1000 MiB from earlier cells; the fix stops the run adding 200 MiB.
    before = _headline(peak_host=1200 * 2**20, host_added=200 * 2**20)
    after = _headline(peak_host=1100 * 2**20, host_added=5 * 2**20)
    comparison = compare_headlines(before, after, "b")
    assert "peak host memory" not in comparison.verdict  # −8%: below the note's 10%
    assert "host memory added by the run 200.0 MiB → 5.0 MiB" in comparison.verdict
    row = comparison.frame.loc["host memory added by the run"]
    assert row["before"] == 200 * 2**20 and row["after"] == 5 * 2**20
    # Small amounts are allocator noise, whatever their ratio.
    small = compare_headlines(_headline(host_added=8 * 2**20), _headline(host_added=2**20), "b")
    assert "added by the run" not in small.verdict


def test_memory_and_findings_in_the_verdict_and_failed_runs_are_not_timed():
    before = _headline()
    after = _headline(throughput=2 * before.throughput, peak_host=600 * 2**20, findings=["oom"])
    verdict = compare_headlines(before, after, "b").verdict
    assert verdict == (
        "2.0× faster by samples/s in steady state, peak host memory −40%; "
        "resolved: small-batch; new: oom"
    )
    failed = compare_headlines(
        before, _headline(failed=True, error_type="ResourceExhaustedError"), "b"
    )
    assert failed.speedup is None
    assert failed.verdict.startswith("this run failed with ResourceExhaustedError")
    fixed = compare_headlines(_headline(failed=True, error_type="ValueError"), before, "b")
    assert fixed.verdict.startswith("completes now (the baseline failed with ValueError)")


def test_only_the_newest_automatic_results_stay_in_the_namespace(ip):
    """A cell with a rewrite run again and again keeps MAX_AUTO_RESULTS ``_tfprofile_<N>``
    runs, not one per run; a result kept with -o, and a name the user rebound, are left alone."""
    from tfdiag_magic.magics import MAX_AUTO_RESULTS

    assert run_cell(ip, "%%tfprofile -q -o mine\n" + PREDICT_LOOP).success
    names = []
    for _ in range(MAX_AUTO_RESULTS + 2):
        result = run_cell(ip, "%%tfprofile -q\n" + PREDICT_LOOP)
        assert result.success, result.error_in_exec
        names.append(f"_tfprofile_{result.execution_count}")
        if len(names) == 1:
            ip.user_ns[names[0]] = "the user's own value"
    kept = sorted(k for k in ip.user_ns if k.startswith("_tfprofile_"))
    assert kept == sorted([names[0], *names[-MAX_AUTO_RESULTS:]])
    assert ip.user_ns[names[0]] == "the user's own value"
    assert ip.user_ns["mine"].record is not None
