"""The findings as the user meets them: every code documented (``--explain``, the explain
command), findings in the JSON report and the text summary most important first, and a
diagnosis that survives a rule that fails."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from IPython.core.error import UsageError

from tests.diagnosis_support import TABULAR, the
from tests.helpers import profiled
from tfdiag_magic.diagnose import (
    RULE_MODULES,
    UnknownCodeError,
    codes,
    diagnose,
    documented,
    explain,
)
from tfdiag_magic.record import KINDS, PHASES, STEP_COLUMNS, Record

CODES = [
    "oom",
    "keras-multi-worker-fit",
    "device-config-too-late",
    "nonfinite-loss",
    "no-learning",
    "untracked-loss",
    "metric-on-logits",
    "batchnorm-training-mode",
    "last-batch-logs",
    "retracing",
    "eager-step",
    "repeated-keras-call",
    "keras-epoch-setup",
    "epoch-start-stall",
    "model-rebuilt-in-loop",
    "progressive-slowdown",
    "host-memory-growth",
    "device-memory-growth",
    "input-bound",
    "per-step-host-conversion",
    "python-preprocessing",
    "repeated-adapt-passes",
    "eager-model-calls",
    "small-batch",
    "slow-callback",
    "gc-pauses",
    "gpu-not-used",
    "memory-growth-disabled",
    "mixed-precision-available",
    "mixed-precision-without-tensor-cores",
]
JOB_CODES = ["straggler"]  # findings of a merged multi-worker job


def test_every_code_has_a_rule_with_its_documentation_and_threshold():
    assert sorted(codes()) == sorted(CODES)
    assert len(RULE_MODULES) == len(CODES)
    assert [rule.CODE for rule in documented()] == codes() + JOB_CODES
    for rule in documented():
        assert rule.__name__.rsplit(".", 1)[-1].replace("_", "-") == rule.CODE
        assert rule.TITLE and rule.TITLE[0].isupper()
        for section in ("## What it detects", "## Why it hurts", "## Evidence we show"):
            assert section in rule.DOC, (rule.CODE, section)
        threshold = rule.DOC.split("## Threshold", 1)[1].strip()
        assert threshold, rule.CODE
        assert callable(rule.check)


@pytest.mark.parametrize("code", CODES + JOB_CODES)
def test_explain_prints_the_documentation_of_each_code(code):
    text = explain(code)
    assert text.startswith(f"# {code}: ")
    assert "## Threshold" in text


def test_explain_accepts_underscores_and_case():
    assert explain("Eager_Step") == explain("eager-step")


def test_explain_of_an_unknown_code_lists_the_codes():
    with pytest.raises(UnknownCodeError) as caught:
        explain("slow-gpu")
    message = str(caught.value)
    assert "'slow-gpu'" in message
    assert all(code in message for code in CODES)


def test_cell_magic_explain_prints_the_documentation_and_runs_nothing(ip, capsys):
    ip.run_cell_magic("tfprofile", "--explain retracing", "ran = True\n")
    out = capsys.readouterr().out
    assert out.startswith("# retracing: A tf.function keeps tracing")
    assert "FREQUENT_TRACING_WARNING_THRESHOLD" in out
    assert "ran" not in ip.user_ns


def test_explain_of_an_unknown_code_is_a_usage_error_listing_the_codes(ip):
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("tfprofile", "--explain nonsense", "ran = True\n")
    assert "retracing" in str(caught.value) and "gc-pauses" in str(caught.value)
    assert "ran" not in ip.user_ns


def test_line_magic_explain_prints_the_documentation(ip, capsys):
    ip.run_line_magic("tfprofile", "--explain retracing")
    assert capsys.readouterr().out.startswith("# retracing: ")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfdiag_magic", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_explain_command():
    done = run_cli("explain", "small-batch")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# small-batch: ")
    assert "## Threshold" in done.stdout


def test_explain_command_unknown_code_exits_2_and_lists_the_codes():
    done = run_cli("explain", "slow-gpu")
    assert done.returncode == 2
    assert "slow-gpu" in done.stderr and "input-bound" in done.stderr
    assert done.stdout == ""


def test_explain_command_without_a_code_lists_every_code():
    done = run_cli("explain")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert listed == codes() + JOB_CODES


# -- findings in the report -----------------------------------------------------------------


@pytest.fixture
def two_findings(ip):
    """An eager training loop (a warning), then a refused device setting that ends the cell
    (an error)."""
    ip.run_cell(TABULAR)
    result, r = profiled(
        ip,
        "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)\n"
        "for xb, yb in ds.take(20):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = loss_fn(yb, model(xb, training=True))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "tf.config.set_logical_device_configuration(\n"
        "    tf.config.list_physical_devices('CPU')[0],\n"
        "    [tf.config.LogicalDeviceConfiguration()] * 4)\n",
    )
    assert not result.success
    return r


def test_findings_are_in_the_json_report_errors_first(two_findings):
    r = two_findings
    report = json.loads(r.to_json())
    found = report["findings"]
    assert [f["code"] for f in found] == ["device-config-too-late", "eager-step"]
    assert [f["severity"] for f in found] == ["error", "warning"]
    eager = found[1]
    assert eager["evidence"]["eager_steps"] == 20
    assert eager["evidence"]["median_eager_step_s"] > 0
    assert set(eager) >= {"code", "severity", "title", "detail", "fix", "evidence", "impact"}
    assert report["findings"] == r.report()["findings"]


def test_findings_are_in_the_summary_most_important_first(two_findings):
    text = two_findings.summary()
    assert "Findings (2), most important first:" in text
    error = text.index("ERROR device-config-too-late:")
    warning = text.index("WARNING eager-step:")
    assert error < warning
    # The numbers the finding rests on are shown with it.
    section = text[warning:]
    evidence = r"Evidence: eager_steps 20; training_steps 20; median_eager_step_s \d"
    assert re.search(evidence, section)
    assert "More: %tfprofile --explain eager-step" in section


def test_findings_that_warn_show_the_numbers_they_rest_on(two_findings):
    for f in two_findings.findings:
        assert f.title and f.detail and f.fix
        numbers = [v for v in f.evidence.values() if isinstance(v, (int, float))]
        assert numbers or f.evidence.get("refused_calls"), f


def test_ordering_within_a_severity_follows_the_time_at_stake(ip):
    ip.run_cell(TABULAR)
    # SGD: half of Adam's ops per eager step (9 against 17 ms measured here), so the steps stay
    # under small-batch's 80 ms eager limit on a machine four times slower (86 ms with Adam
    # once, at a busy hour on the shared 2-CPU machine).
    _, r = profiled(
        ip,
        "model.compile(optimizer='sgd', loss=loss_fn, run_eagerly=True)\n"
        "model.fit(x[:160], y[:160], batch_size=1, epochs=1, verbose=0)\n",
    )
    warnings = [f for f in r.findings if f.severity == "warning"]
    assert {"eager-step", "small-batch"} <= {f.code for f in warnings}, r.findings
    impacts = [f.impact for f in warnings]
    assert impacts == sorted(impacts, reverse=True)
    assert the(r, "small-batch").evidence["batch_size"] == 1


# -- a rule that fails ----------------------------------------------------------------------


def nan_record() -> Record:
    """Training steps whose loss turned NaN after 30 steps, and facts that are malformed."""
    steps = 40
    record = Record()
    columns = {name: np.zeros(steps, dtype=dtype) for name, dtype in STEP_COLUMNS.items()}
    columns["start"] = np.arange(steps) * 0.01
    columns["duration"][:] = 0.009
    columns["data_wait"][:] = np.nan
    columns["phase"][:] = PHASES.index("train")
    columns["kind"][:] = KINDS.index("keras")
    columns["fused"][:] = 1
    columns["loop"][:] = -1
    columns["batch"][:] = 32
    columns["loss"] = np.where(np.arange(steps) < 30, 1.0, np.nan).astype(np.float32)
    record.steps = columns
    record.wall_time = 0.5
    return record


def test_a_rule_that_fails_does_not_cost_the_other_findings(capsys):
    record = nan_record()
    record.facts = {"gpu": "not a dict", "gpus": 3, "mixed_precision_policy": ["float32"]}
    record.nvml = {"time": np.arange(3.0)}
    findings = diagnose(record)
    assert [f.code for f in findings] == ["nonfinite-loss"]
    assert findings[0].evidence["first_step"] == 30
    err = capsys.readouterr().err
    failed = re.findall(r"tfdiag_magic: the ([\w-]+) check failed: \w+", err)
    assert failed, err
    assert "nonfinite-loss" not in failed


def test_a_rule_that_raises_is_reported_and_skipped(monkeypatch, capsys):
    from tfdiag_magic.diagnose import small_batch

    def broken(record, source):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(small_batch, "check", broken)
    findings = diagnose(nan_record())
    assert [f.code for f in findings] == ["nonfinite-loss"]
    assert "the small-batch check failed: ZeroDivisionError" in capsys.readouterr().err
