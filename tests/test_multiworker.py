"""Multi-worker jobs for real: `MultiWorkerMirroredStrategy` workers started as separate
processes on localhost (free ports, a `TF_CONFIG` each, CPU only), each under
``python -m tfdiag_magic profile``, then merged: healthy (no straggler), one worker's input
slowed on purpose (the straggler finding names it), and Keras 3's fit under the strategy (the
finding that says it does not run there, and the two ways out)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tfdiag_magic
from tests.job_support import CUSTOM_LOOP, KERAS_FIT
from tfdiag_magic.jobs import straggler
from tfdiag_magic.jobs.local import run_local_job
from tfdiag_magic.jobs.workers import NotAReportError, Worker

pytestmark = pytest.mark.job  # several processes: kept apart from `make test-fast`

STEPS = 200  # three windows of the input measure (read every 64 steps)


def _merged(tmp_path: Path, slow: dict[int, dict[str, str]], options: tuple[str, ...] = ()):
    runs = run_local_job(
        CUSTOM_LOOP,
        tmp_path,
        env_of={i: {"STEPS": str(STEPS), **slow.get(i, {})} for i in range(2)},
        options=options,
    )
    outputs = "\n".join(
        f"--- worker {run.index} ({run.returncode}):\n{run.output[-2000:]}" for run in runs
    )
    for run in runs:
        assert run.returncode == 0, outputs
        assert "worker done" in run.output
        assert f"JSON report: reports/worker_ctl.worker-{run.index}.tfdiag.json" in run.output
        assert f"worker {run.index} of a 2-worker job" in run.output
    return tfdiag_magic.merge(tmp_path / "reports")


def test_a_healthy_job_has_no_straggler(tmp_path):
    # --ops is asked for and refused: TensorFlow's profiler, stopped during a collective, crashed
    # workers of such jobs (tfdiag_magic/probes/ops_window.py); the job runs as without it.
    merged = _merged(tmp_path, {}, options=("--ops",))
    for worker in merged.workers:
        assert "stays off in a worker of a 2-worker job" in worker.report["ops"]["note"]
    assert [w.name for w in merged.workers] == ["worker 0", "worker 1"]
    assert merged.findings == [], merged.summary()
    for worker in merged.workers:
        assert worker.steps == STEPS
        assert worker.input_wait_share is not None and worker.input_wait_share < 0.2, worker
        assert len(worker.input_series) >= 3
        # Each report carries its steps by index, the merge's Workers plot aligns them.
        series = worker.step_series
        assert series["every"] == 1 and series["step"] == list(range(STEPS)), series["step"][:5]
        assert all(d > 0 for d in series["duration"]) and series["interval"][-1] is None
        assert 0 < worker.beyond_input_s <= worker.median_step_s and worker.collective_s is None
    report = json.loads(merged.to_json())
    assert [w["task_index"] for w in report["workers"]] == [0, 1]
    assert report["findings"] == []
    assert "no worker held the others back" in merged.summary()


def test_the_worker_with_a_slow_input_is_named_the_straggler(tmp_path):
    # 50 ms per batch: the slow worker's extra wait is the sleep less its own step, which a
    # busy machine lengthens (with 20 ms it read 9.8 ms on three test workers on 2 CPUs; with
    # 30 ms its share read 0.398 on three test workers on a 2-vCPU AMD EPYC, against worker
    # 0's few per cent, and once, beside a fresh clone's whole suite and other TensorFlow
    # programs, there was no straggler at all).
    merged = _merged(tmp_path, {1: {"SLOW_INPUT_S": "0.05"}})
    (finding,) = merged.findings
    assert finding.code == "straggler"
    ev = finding.evidence
    assert (ev["task_type"], ev["task_index"], ev["worker"]) == ("worker", 1, "worker 1")
    assert ev["input_wait_share"] >= 0.3 and ev["input_wait_share_of"]["worker 0"] < 0.2
    assert ev["windows"] >= 2 and ev["windows_held"] == ev["windows"]
    assert ev["from_step"] is not None and ev["from_step"] <= 70
    assert "input-bound" in ev["its_findings"]
    # Synchronous steps: both workers' steps last about as long; the waits tell them apart.
    steps = ev["median_step_s"]
    assert 0.5 <= steps["worker 0"] / steps["worker 1"] <= 2.0, steps
    # The fast worker's step is its own work and its wait for the slow one in the collective;
    # the slow worker's is its own work once its input came. So beyond their input, the fast
    # worker's step is longer by about the slow one's extra wait for input, however much a busy
    # machine slows both workers' own work (a ratio of the two read 1.93x in one run beside
    # another test's processes: too close to a bound to hold on a slower machine).
    fast, slow = merged.workers
    extra_wait = slow.input_wait_s / slow.steps - fast.input_wait_s / fast.steps
    assert extra_wait > 0.01, (fast, slow)
    assert fast.beyond_input_s - slow.beyond_input_s > 0.5 * extra_wait, (fast, slow)
    # The command line: text, JSON with the workers, HTML with the Workers table and the plot.
    out = tmp_path / "merged.json"
    page = tmp_path / "merged.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfdiag_magic",
            "merge",
            "reports",
            "--json",
            str(out),
            "--html",
            str(page),
            "--chrome-trace",
            str(tmp_path / "job.trace.json"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "straggler: worker 1 waits for its input" in done.stdout
    report = json.loads(out.read_text())
    assert report["schema"] == 1 and [f["code"] for f in report["findings"]] == ["straggler"]
    assert report["findings"][0]["evidence"]["task_index"] == 1
    assert {w["name"]: w["findings"] for w in report["workers"]}["worker 1"] == ["input-bound"]
    html = page.read_text()
    assert "Workers (2)" in html and "compute + collective" in html
    for plot in ("tfdiag-worker-steps", "tfdiag-worker-waits"):
        drawn = html.split(f'class="{plot}"')[1].split("</svg>")[0]
        assert drawn.count("<polyline") == 2, plot
    # The merged trace: a process per worker, its steps one after the other from 0.
    trace = json.loads((tmp_path / "job.trace.json").read_text())
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "worker 0", 1: "worker 1"}
    for pid in names:
        steps = [e for e in events if e["ph"] == "X" and e["pid"] == pid]
        assert [e["args"]["step"] for e in steps] == list(range(STEPS))
        assert steps[0]["ts"] == 0
        assert all(b["ts"] >= a["ts"] + a["dur"] - 0.01 for a, b in itertools.pairwise(steps))
    assert "clocks are not compared" in trace["metadata"]["aligned"]


def test_keras_fit_under_the_strategy_is_named_with_the_ways_out(tmp_path):
    runs = run_local_job(KERAS_FIT, tmp_path)
    for run in runs:
        assert run.returncode == 1, run.output[-3000:]
        assert "Attempt to convert a value (PerReplica" in run.output  # the user's own error
        report = json.loads(
            (tmp_path / "reports" / f"worker_fit.worker-{run.index}.tfdiag.json").read_text()
        )
        (finding,) = [f for f in report["findings"] if f["code"] == "keras-multi-worker-fit"]
        assert finding["severity"] == "error"
        assert finding["evidence"]["worker"] == f"worker {run.index}"
        assert "TF_USE_LEGACY_KERAS=1" in finding["fix"] and "custom loop" in finding["fix"]


def test_merge_says_clearly_what_is_not_a_report(tmp_path):
    (tmp_path / "notes.tfdiag.json").write_text("{not json")
    with pytest.raises(NotAReportError, match="not a readable JSON report"):
        tfdiag_magic.merge(tmp_path)
    (tmp_path / "empty").mkdir()
    for given, message in (("empty", "no reports (*.tfdiag.json) in"), ("gone", "no such file")):
        done = subprocess.run(
            [sys.executable, "-m", "tfdiag_magic", "merge", str(tmp_path / given)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def _worker(name: str, durations: list[float]) -> Worker:
    n = len(durations)
    return Worker(
        path=name,
        name=name,
        task_type="worker",
        task_index=int(name[-1]),
        steps=n,
        median_step_s=float(sorted(durations)[n // 2]),
        wall_s=sum(durations),
        input_wait_s=0.0,
        input_measured_s=0.0,
        host_peak_bytes=None,
        findings=[],
        step_series={
            "every": 1,
            "step": list(range(n)),
            "duration": durations,
            "interval": durations,
        },
    )


def test_a_worker_slower_in_every_step_is_named_and_a_busy_stretch_is_not():
    steady = [0.0004] * 60
    # Slower hardware: every step 1.6x.
    slower = straggler.check([_worker("worker 0", [0.00064] * 60), _worker("worker 1", steady)])
    assert slower is not None and slower.evidence["worker"] == "worker 0"
    assert slower.evidence["fastest_steps_ratio"] == pytest.approx(1.6)
    # A neighbour busy over the first two thirds of one worker's run: its median moves, its
    # fastest steps do not.
    busy = straggler.check(
        [_worker("worker 0", [0.001] * 40 + [0.0004] * 20), _worker("worker 1", steady)]
    )
    assert busy is None


def test_an_input_wait_read_just_below_zero_is_no_wait():
    """The input meter's wait is spans less the pipeline's own gaps, and can read a hair below
    zero (a healthy worker's read -18 µs a step): no wait, never more compute than the step."""
    worker = dataclasses.replace(
        _worker("worker 0", [0.0067] * 200), input_wait_s=-0.0036, input_measured_s=1.3
    )
    assert worker.input_wait_share == 0.0
    assert worker.beyond_input_s == worker.median_step_s
