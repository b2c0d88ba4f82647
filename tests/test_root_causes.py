"""Root causes first: a finding explained by another names its cause, with the measured link,
and fixing only the cause makes both go (checked with ``--compare``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import profiled, profiled_script, run_cell
from tfdiag_magic.diagnose.causes import growing_in_loops

DEMO = Path(__file__).resolve().parent.parent / "tfdiag_magic" / "examples" / "retracing_demo.py"


@pytest.fixture(scope="module")
def demo(shell):
    """The demo profiled once, for the tests that fix it in two ways (each test's own
    namespace gets the result back as ``r``, the name ``--compare r`` reads)."""
    shell.reset(new_session=False)
    source = DEMO.read_text()
    result, r = profiled(shell, source[source.index("import keras") :])
    assert result.success
    return r


def test_the_demos_memory_growth_is_shown_as_the_retracing_and_goes_with_it(ip, demo):
    ip.user_ns["r"] = r = demo
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


def test_the_demos_fixes_in_one_cell_keep_each_other(ip, demo):
    """The combined rewrite of the demo: the tf.data pipeline of one fix still passes the
    tensor step of the other; run under --compare it resolves every finding it fixes."""
    ip.user_ns["r"] = r = demo
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


GROWING = """
import time
import numpy as np, tensorflow as tf, keras
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256), keras.layers.Dense(64)])
optimizer = keras.optimizers.SGD(0.01)

@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        out = model(x)
        loss = tf.reduce_mean(out ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return out

x = tf.random.normal((256, 64), seed=1)
"""


# Alone: beside the other test workers (a quiet `make test` on a 2-vCPU AMD EPYC VM) and in
# 1 of 2 runs beside two CPU hogs, the run found neither finding, its RSS risen 340 MiB; the
# same script beside two hogs alone found both in 7 of 7 runs.
@pytest.mark.alone
def test_a_slowdown_that_follows_a_growing_tensor_is_shown_under_the_growth(tmp_path):
    """Every step's outputs concatenated onto one tensor: the copy grows with it, so the
    iterations slow as the memory grows. Run in a process of its own (freed memory that an
    earlier test left would be reused, and RSS need not rise). Batches of 512 rows, 128 KiB of
    outputs a step: 87.5 MiB after 700 steps, clear of the finding's 64 MiB also where the
    measure is the C heap's exact bytes (256 rows for 1000 steps, 62.5 MiB, fell under it on an
    AMD EPYC without oneDNN's allocator)."""
    source = GROWING.replace("(256, 64)", "(512, 64)") + (
        "outputs = tf.zeros((0, 64))\n"
        "for i in range(700):\n"
        "    out = train_step(x)\n"
        "    outputs = tf.concat([outputs, out], axis=0)\n"
    )
    report, stdout, _ = profiled_script(tmp_path, "growing_tensor.py", source)
    codes = [f["code"] for f in report["findings"]]
    by_code = {f["code"]: f for f in report["findings"]}
    slowdown = by_code.get("progressive-slowdown")
    assert slowdown is not None and "host-memory-growth" in by_code, stdout
    assert slowdown["caused_by"] == "host-memory-growth", stdout
    assert slowdown["evidence"]["grown_each_iteration"] == ["outputs"]
    assert slowdown["evidence"]["memory_rank_correlation"] >= 0.8
    assert codes.index("progressive-slowdown") == codes.index("host-memory-growth") + 1
    assert "caused by host-memory-growth" in stdout


def test_a_slowdown_beside_kept_tensors_it_never_reads_stays_its_own(tmp_path):
    """Tensors kept in a list that the loop never reads, and iterations that slow for another
    reason: two trends side by side, both rising, and not one cause."""
    source = GROWING + (
        "kept = []\n"
        "for i in range(600):\n"
        "    kept.append(tf.tile(train_step(x), [4, 1]))  # 256 KiB a step\n"
        "    time.sleep(i * 2e-5)  # work that grows for a reason of its own\n"
    )
    report, stdout, _ = profiled_script(tmp_path, "kept_and_slow.py", source)
    by_code = {f["code"]: f for f in report["findings"]}
    assert {"progressive-slowdown", "host-memory-growth"} <= set(by_code), stdout
    assert by_code["progressive-slowdown"]["caused_by"] is None, stdout


def test_what_a_loop_grows_and_works_on_whole():
    assert growing_in_loops(
        "for b in data:\n    acc = np.concatenate([acc, b])\n    n = len(acc)\n"
    ) == ["acc"]
    assert growing_in_loops("while True:\n    kept.append(t)\n    m = tf.stack(kept)\n") == ["kept"]
    # Appended and only counted, or grown outside a loop: nothing worked on whole.
    assert growing_in_loops("for b in data:\n    kept.append(b)\n    print(len(kept))\n") == []
    assert growing_in_loops("acc = tf.concat([acc, b], 0)\n") == []
    assert growing_in_loops("for (\n") == []
