"""Root causes first: a finding explained by another names its cause, with the measured link,
and fixing only the cause makes both go (checked with ``--compare``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import profiled, run_cell

DEMO = Path(__file__).resolve().parent.parent / "tfdiag_magic" / "examples" / "retracing_demo.py"


def test_the_demos_memory_growth_is_shown_as_the_retracing_and_goes_with_it(ip):
    source = DEMO.read_text()
    body = source[source.index("import keras") :]
    result, r = profiled(ip, body)
    assert result.success
    by_code = {f.code: f for f in r.findings}
    retracing, memory = by_code["retracing"], by_code["host-memory-growth"]
    assert retracing.caused_by is None
    assert memory.caused_by == "retracing"
    assert memory.evidence["traces_per_step"] >= 0.9  # every step traced
    assert 0 < memory.evidence["bytes_per_trace"] <= memory.evidence["bytes_per_step"] * 1.2
    assert memory.rewrite is None  # the cause's rewrite is the fix
    codes = [f.code for f in r.findings]
    assert codes.index("host-memory-growth") == codes.index("retracing") + 1
    report = json.loads(r.to_json())
    causes = {f["code"]: f["caused_by"] for f in report["findings"]}
    assert causes["host-memory-growth"] == "retracing" and causes["retracing"] is None
    text = r.summary()
    assert "caused by retracing" in text

    # Fix only the cause: the step as a tensor.
    fixed = retracing.rewrite
    assert fixed is not None
    after = run_cell(ip, f"%%tfprofile -q --compare r -o after\n{fixed}")
    assert after.success, after.error_in_exec
    comparison = ip.user_ns["after"].comparison
    assert {"retracing", "host-memory-growth"} <= set(comparison.resolved), comparison.resolved


def test_retracing_now_and_then_does_not_claim_a_leak_of_its_own(ip):
    """A list of tensors kept per step, and a function traced on only a few of the steps:
    the two stay side by side. The loop takes a quarter of a second once its six graphs are
    traced (a process that traced them before), so memory is sampled every 5 ms, not 50."""
    result, r = profiled(
        ip,
        "import numpy as np, tensorflow as tf\n"
        "@tf.function\n"
        "def scaled(t, factor):\n"
        "    return t * factor\n"
        "kept = []\n"
        "big = tf.ones((256, 1024))\n"
        "for i in range(300):\n"
        "    kept.append(scaled(big, i % 6))  # 6 tracings, 1 MiB kept per step\n",
        "-q -o r --memory-interval 0.005",
    )
    assert result.success
    by_code = {f.code: f for f in r.findings}
    memory = by_code.get("host-memory-growth")
    assert memory is not None and memory.caused_by is None


def test_the_demos_fixes_in_one_cell_keep_each_other(ip):
    """The combined rewrite of the demo: the tf.data pipeline of one fix still passes the
    tensor step of the other; run under --compare it resolves every finding it fixes."""
    source = DEMO.read_text()
    body = source[source.index("import keras") :]
    result, r = profiled(ip, body)
    assert result.success
    fixed = {f.code for f in r.findings if f.rewrite}
    assert {"retracing", "per-step-host-conversion"} <= fixed
    combined = r.combined_rewrite
    assert combined is not None
    compile(combined, "<combined>", "exec")
    assert "tf.data.Dataset" in combined
    assert "tf.constant(step, dtype=tf.float32)" in combined
    report = json.loads(r.to_json())
    assert report["combined_rewrite"] == combined
    assert report["combined_diff"].startswith("---")
    assert "Every fix in one cell" in r.summary()
    assert "Every fix in one cell" in r.to_html()
    after = run_cell(ip, f"%%tfprofile -q --compare r -o after\n{combined}")
    assert after.success, after.error_in_exec
    comparison = ip.user_ns["after"].comparison
    resolved = set(comparison.resolved)
    assert {"retracing", "host-memory-growth", "per-step-host-conversion"} <= resolved, resolved
    assert comparison.new == []
    # 80 tracings (most of the run) are gone: far beyond a busy machine's noise.
    assert comparison.speedup is not None and comparison.speedup > 1.5, comparison.verdict
