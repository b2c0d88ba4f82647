"""Fault injection: whatever fails inside ``%%tfprofile``, the kernel is left as it was.

Each test makes one of the tool's own functions raise, a KeyboardInterrupt or an Exception, at
one stage of a run (probe install, live view start, inside a step, detach, record building,
diagnosis, a view, a file write, between the runs of a sweep), in the real IPython shell of the
test process on real TensorFlow and Keras. Afterwards: no patch or hook is left (the objects
the probes replace are the originals again), no thread of the tool is alive, the recorder is
released, the user sees their own exception or interrupt, the next ``%%tfprofile`` works and
finds its steps, and a failure after the run is a line of the report, never a lost result.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tfdiag_magic.diagnose
import tfdiag_magic.experiments.sweep
import tfdiag_magic.files
import tfdiag_magic.magics
import tfdiag_magic.session
import tfdiag_magic.views.dashboard
from tests.helpers import run_cell
from tests.test_cell_semantics import _changed, _patched_attributes, _snapshot
from tfdiag_magic import active
from tfdiag_magic.gpu import watch as watch_module
from tfdiag_magic.probes import nvml_sampler
from tfdiag_magic.probes.keras_models import KerasModelProbe
from tfdiag_magic.recorder import Recorder
from tfdiag_magic.result import ProfileResult
from tfdiag_magic.views.live import LiveView

SETUP = """
import numpy as np, tensorflow as tf, keras
x = np.ones((16, 3), "float32")
y = np.ones((16, 1), "float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
step = tf.function(lambda v: v * 2)
"""
# Two training batches, two tf.function steps in a loop; its value is 42.
BODY = """\
model.fit(x, y, batch_size=8, epochs=1, verbose=0)
for i in range(2):
    step(tf.constant(1.0))
ran = True
42"""
# The same, ending with the user's own error (raised on line 5 of the cell).
FAILING_BODY = """\
model.fit(x, y, batch_size=8, epochs=1, verbose=0)
for i in range(2):
    step(tf.constant(1.0))
err = ValueError("the user's own error")
raise err"""
FAILING_LINENO = 6  # the %%tfprofile line is line 1


def tool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tfdiag")]


@dataclass
class Stage:
    """Where a fault is injected: `owner.name` raises on its `nth` call, before or after
    running the original. `when` says whether the cell has run by then ("pre", "in", "post")."""

    owner: Callable[[], Any]  # resolved at test time: the module or class to patch
    name: str
    when: str
    after: bool = False  # raise after the original ran (so its effects, e.g. a thread, exist)
    nth: int = 1
    kernel: bool = False  # needs the kernel path (live view, dashboard)
    line: str | None = None  # the report's line that names the failed stage
    options: str = ""
    only: Callable[[tuple[Any, ...]], bool] | None = None  # which calls count


def _json_path(args: tuple[Any, ...]) -> bool:
    return str(args[0]).endswith(".json")


def _html_path(args: tuple[Any, ...]) -> bool:
    return str(args[0]).endswith(".html")


STAGES = {
    "probe-install": Stage(lambda: KerasModelProbe, "install", "pre"),
    "live-view-start": Stage(lambda: LiveView, "attach", "pre", after=True, kernel=True),
    "inside-a-step": Stage(lambda: Recorder, "add_step", "in", nth=2),
    "live-view-detach": Stage(
        lambda: LiveView, "detach", "post", kernel=True, line="live view failed"
    ),
    "record": Stage(
        lambda: tfdiag_magic.session.Session, "_build_record", "post", line="record failed"
    ),
    "record-details": Stage(
        lambda: tfdiag_magic.session, "_attribute_events", "post", line="record failed"
    ),
    "diagnosis": Stage(lambda: tfdiag_magic.diagnose, "diagnose", "post", line="diagnosis failed"),
    "report-view": Stage(
        lambda: tfdiag_magic.magics, "_show_report", "post", line="report view failed"
    ),
    "dashboard": Stage(
        lambda: tfdiag_magic.views.dashboard,
        "dashboard_bundle",
        "post",
        kernel=True,
        line="failed",  # "dashboard failed" (an error) or "report view failed" (an interrupt)
    ),
    "json-file": Stage(
        lambda: tfdiag_magic.files,
        "write_text_atomic",
        "post",
        line="JSON report file failed",
        options="--json {tmp}/report.json",
        only=_json_path,
    ),
    "html-file": Stage(
        lambda: tfdiag_magic.files,
        "write_text_atomic",
        "post",
        line="HTML report file failed",
        options="--html {tmp}/report.html",
        only=_html_path,
    ),
}
FAULTS = {
    "interrupt": lambda: KeyboardInterrupt("injected interrupt"),
    "error": lambda: RuntimeError("injected fault"),
}


def inject(monkeypatch: pytest.MonkeyPatch, stage: Stage, fault: BaseException) -> dict[str, int]:
    """Make `stage` raise `fault`; returns the count of the calls that counted."""
    owner = stage.owner()
    original = getattr(owner, stage.name)
    calls = {"n": 0}
    is_method = isinstance(owner, type)

    def raising(*args: Any, **kwargs: Any) -> Any:
        counted = args[1:] if is_method else args
        if stage.only is not None and not stage.only(counted):
            return original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] != stage.nth:
            return original(*args, **kwargs)
        if stage.after:
            original(*args, **kwargs)
        raise fault

    monkeypatch.setattr(owner, stage.name, raising)
    return calls


@pytest.fixture
def fit_ip(ip):
    """The shell with a tiny compiled model, its data and a tf.function `step` defined."""
    setup = run_cell(ip, SETUP)
    assert setup.success, setup.error_in_exec
    return ip


@pytest.fixture
def clean_check(fit_ip) -> Iterator[Callable[[], None]]:
    """A check that nothing of the tool is left: patches, hooks, threads, the recorder."""
    namespace = fit_ip.user_ns
    for owner, name in _patched_attributes():
        assert vars(owner).get(name) is not None, (owner, name)
    before = _snapshot(namespace)
    assert before["active recorder"] == (None,)
    assert tool_threads() == []

    def check() -> None:
        assert _changed(before, _snapshot(namespace)) == []
        assert tool_threads() == []
        assert active.recorder() is None

    yield check
    tfdiag_magic.views.dashboard.close_dashboards()


def kernel_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take the notebook path: live view and dashboard (ipywidgets need no frontend)."""
    monkeypatch.setattr(tfdiag_magic.views.dashboard, "in_kernel", lambda shell: True)


def next_run_works(ip, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the injection gone, the next %%tfprofile in the same shell runs and finds steps."""
    monkeypatch.undo()
    ip.user_ns.pop("r", None)
    result = run_cell(ip, f"%%tfprofile -q -o r\n{BODY}")
    assert result.success, result.error_in_exec
    assert result.result == 42
    counts = ip.user_ns["r"].record.phase_counts()
    assert counts["train"] == 2 and counts["loop"] == 2, counts
    assert ip.user_ns["r"].problems == []


@pytest.mark.parametrize("fault_name", list(FAULTS))
@pytest.mark.parametrize("stage_name", list(STAGES))
def test_a_fault_at_each_stage_leaves_nothing_behind_and_the_next_run_works(
    fit_ip, clean_check, monkeypatch, capsys, tmp_path, stage_name: str, fault_name: str
):
    stage = STAGES[stage_name]
    fault = FAULTS[fault_name]()
    if stage.kernel:
        kernel_path(monkeypatch)
    calls = inject(monkeypatch, stage, fault)
    options = stage.options.format(tmp=tmp_path)
    result = run_cell(fit_ip, f"%%tfprofile -o r {options}\n{BODY}")
    out, err = capsys.readouterr()
    assert calls["n"] >= stage.nth, "the fault was never injected"
    clean_check()
    r = fit_ip.user_ns.get("r")
    error = result.error_in_exec
    if stage.when == "pre":
        if stage_name == "live-view-start" and fault_name == "error":
            # No live view, and the run goes on without it.
            assert error is None and result.result == 42
            assert "no live view: RuntimeError: injected fault" in err
        else:
            assert error is fault  # the user sees exactly what was raised
            assert "ran" not in fit_ip.user_ns  # the cell did not run
        if stage_name == "live-view-start" and fault_name == "interrupt":
            assert isinstance(r, ProfileResult)  # reported: a run stopped before its first step
            assert r.record.error.type == "KeyboardInterrupt"
    elif stage.when == "in":
        # The interrupt reaches the user; an error in the tool's bookkeeping either reaches
        # the user as it was raised or is kept out of the user's call.
        assert error is fault or (fault_name == "error" and error is None)
        assert isinstance(r, ProfileResult) and r.record is not None
        assert r.record.step_count >= 1  # the steps before the fault were kept
        if error is not None:
            assert r.record.error.type == type(fault).__name__
    else:
        assert error is None and result.result == 42  # the cell's outcome, unchanged
        assert isinstance(r, ProfileResult) and r.record is not None  # the -o result holds
        assert stage.line is not None
        lines = [p for p in r.problems if stage.line in p]
        assert len(lines) == 1, r.problems
        # one line, naming what failed
        assert ("KeyboardInterrupt" if fault_name == "interrupt" else "injected fault") in lines[0]
        assert "\n" not in lines[0]
        assert lines[0] in out + err  # shown with the report (or on stderr for a file)
        if stage_name not in ("record",):
            assert r.record.phase_counts()["train"] == 2  # the record is the run's
    next_run_works(fit_ip, monkeypatch)
    clean_check()


def test_an_error_raised_in_the_tools_own_code_is_named_the_tools(
    fit_ip, clean_check, monkeypatch, capsys
):
    """A defect of the tool inside a step (a review's run once met a NameError from a probe)
    reaches the code as any error inside its call does, but the report must not take it for
    the code's: a line of the problems says where in the tool it was raised. The code's own
    error, raised through the same wrapper, is not named so."""
    defect = compile(
        "def add_step(*args, **kwargs):\n    raise NameError(\"name 'weakref' is not defined\")\n",
        tfdiag_magic.recorder.__file__,  # as if the tool's own module raised it
        "exec",
    )
    space: dict[str, Any] = {}
    exec(defect, space)
    monkeypatch.setattr(Recorder, "add_step", space["add_step"])
    result = run_cell(fit_ip, f"%%tfprofile -q -o r\n{BODY}")
    capsys.readouterr()
    clean_check()
    assert isinstance(result.error_in_exec, NameError)
    r = fit_ip.user_ns["r"]
    assert r.record.error.type == "NameError"
    (line,) = [p for p in r.problems if "raised inside the profiler" in p]
    assert line.startswith("the run failed: NameError: name 'weakref' is not defined"), line
    assert "recorder.py line 2" in line and "a defect of tfdiag_magic" in line, line
    next_run_works(fit_ip, monkeypatch)  # the code's own ValueError: no such line
    result = run_cell(fit_ip, f"%%tfprofile -q -o r\n{FAILING_BODY}")
    capsys.readouterr()
    assert isinstance(result.error_in_exec, ValueError)
    assert fit_ip.user_ns["r"].problems == []
    clean_check()


@pytest.mark.parametrize("fault_name", list(FAULTS))
@pytest.mark.parametrize("stage_name", ["record", "diagnosis", "report-view", "json-file"])
def test_a_post_run_fault_keeps_the_users_own_exception_and_traceback(
    fit_ip, clean_check, monkeypatch, capsys, tmp_path, stage_name: str, fault_name: str
):
    stage = STAGES[stage_name]
    fault = FAULTS[fault_name]()
    inject(monkeypatch, stage, fault)
    options = stage.options.format(tmp=tmp_path)
    result = run_cell(fit_ip, f"%%tfprofile -o r {options}\n{FAILING_BODY}")
    capsys.readouterr()
    clean_check()
    error = result.error_in_exec
    assert error is fit_ip.user_ns["err"]  # the user's own exception object
    assert str(error) == "the user's own error"
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_lineno == FAILING_LINENO  # the traceback ends at the user's raising line
    r = fit_ip.user_ns["r"]
    assert r.record.error.type == "ValueError"
    assert any(stage.line in p for p in r.problems), r.problems
    next_run_works(fit_ip, monkeypatch)
    clean_check()


SWEEP_BODY = """\
model.fit(x[: n * 8], y[: n * 8], batch_size=8, epochs=1, verbose=0)
"""


@pytest.mark.parametrize("fault_name", list(FAULTS))
def test_a_fault_between_the_runs_of_a_sweep_keeps_the_rows(
    fit_ip, clean_check, monkeypatch, capsys, fault_name: str
):
    fault = FAULTS[fault_name]()
    # The progress line printed after the first run, before the second starts.
    calls = inject(
        monkeypatch, Stage(lambda: tfdiag_magic.magics, "_sweep_progress", "post"), fault
    )
    result = run_cell(fit_ip, f"%%tfprofile --sweep n=1,2 -o r\n{SWEEP_BODY}")
    out = capsys.readouterr().out
    assert calls["n"] >= 1
    clean_check()
    r = fit_ip.user_ns["r"]
    if fault_name == "interrupt":
        assert result.error_in_exec is fault  # the sweep ends there, as an interrupt in a run
        assert list(r.sweep["status"]) == ["ok"]
        assert r.experiment.interrupted
    else:
        assert result.error_in_exec is None
        assert list(r.sweep["status"]) == ["ok", "ok"]  # the sweep went on
        assert len([p for p in r.problems if "sweep row of 1 failed" in p]) == 1
        assert "sweep row of 1 failed" in out
    next_run_works(fit_ip, monkeypatch)
    clean_check()


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Ctrl-C as a kernel has it, Python's own SIGINT handler, for one test. A process started
    with SIGINT ignored (pytest run as a background job of a script, as CI or `make test &`
    may, hands that on to its workers) keeps it ignored, and a real Ctrl-C reaches nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint")  # set up first: before `clean_check`'s snapshot
def test_a_real_ctrl_c_while_the_probes_are_removed_is_held_until_they_are_all_out(
    fit_ip, clean_check, monkeypatch, capsys
):
    original = KerasModelProbe.remove

    def remove_under_ctrl_c(probe: KerasModelProbe) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # delivered between two bytecodes, unless held
        original(probe)

    monkeypatch.setattr(KerasModelProbe, "remove", remove_under_ctrl_c)
    result = run_cell(fit_ip, f"%%tfprofile -o r\n{BODY}")
    out = capsys.readouterr().out
    clean_check()  # this probe's patches too: the interrupt did not cut its removal short
    assert result.success and result.result == 42  # the cell had finished: its value stays
    r = fit_ip.user_ns["r"]
    assert r.problems == ["probe removal failed: interrupted (KeyboardInterrupt)"]
    assert r.problems[0] in out
    assert r.record.phase_counts()["train"] == 2
    next_run_works(fit_ip, monkeypatch)
    clean_check()


# -- a sweep keeps a failed run's error as text, not its frames ------------------------------

SWEEP_FREES_BODY = """\
def train(n):
    batches = Held()  # stands for a failed run's model and batches, held by its frames
    held.append(weakref.ref(batches))
    if n == 1:
        raise ValueError("too big")
    alive_in_next_run.append(held[0]() is not None)

train(n)
"""


class Held:
    """An object whose life a weak reference follows."""


def test_a_failed_sweep_runs_frames_are_freed_before_the_next_run(fit_ip, clean_check, capsys):
    fit_ip.user_ns.update(Held=Held, weakref=weakref, held=[], alive_in_next_run=[])
    result = run_cell(fit_ip, f"%%tfprofile -q --sweep n=1,2 -o r\n{SWEEP_FREES_BODY}")
    capsys.readouterr()
    assert result.success, result.error_in_exec
    clean_check()
    assert fit_ip.user_ns["alive_in_next_run"] == [False]
    r = fit_ip.user_ns["r"]
    assert list(r.sweep["status"]) == ["failed", "ok"]
    failed = r.experiment.runs[0]
    assert failed.headline.error_type == "ValueError"
    # What the report needs is kept as text: the traceback down to the raising line.
    assert "ValueError: too big" in failed.traceback
    assert 'raise ValueError("too big")' in failed.traceback


def test_when_every_sweep_value_fails_the_last_error_is_raised_with_its_traceback(
    fit_ip, clean_check, capsys
):
    fit_ip.user_ns.update(Held=Held, weakref=weakref, held=[], alive_in_next_run=[])
    body = SWEEP_FREES_BODY.replace("if n == 1:", "if n >= 1:")
    result = run_cell(fit_ip, f"%%tfprofile -q --sweep n=1,2 -o r\n{body}")
    capsys.readouterr()
    clean_check()
    error = result.error_in_exec
    assert isinstance(error, ValueError) and str(error) == "too big"
    assert error.__traceback__ is not None  # the one raised to the user keeps its frames
    assert fit_ip.user_ns["held"][0]() is None  # the first failure's frames were freed
    assert list(fit_ip.user_ns["r"].sweep["status"]) == ["failed", "failed"]


# -- report files ----------------------------------------------------------------------------


def test_report_files_expand_home_create_folders_and_replace_atomically(
    fit_ip, clean_check, monkeypatch, capsys, tmp_path
):
    monkeypatch.setenv("HOME", str(tmp_path))
    existing = tmp_path / "reports" / "old.json"
    existing.parent.mkdir()
    existing.write_text("an older report", encoding="utf-8")
    result = run_cell(
        fit_ip,
        f"%%tfprofile -o r --json ~/reports/old.json --html ~/new/folder/r.html\n{BODY}",
    )
    out = capsys.readouterr().out
    assert result.success, result.error_in_exec
    clean_check()
    html = tmp_path / "new" / "folder" / "r.html"
    assert html.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert existing.read_text(encoding="utf-8").startswith("{")  # replaced by the new one
    assert not Path.cwd().joinpath("~").exists()  # no folder literally named ~
    assert f"JSON report written to {existing}" in out
    assert f"HTML report written to {html}" in out
    # Nothing but the reports: no temporary file left next to them.
    assert sorted(p.name for p in existing.parent.iterdir()) == ["old.json"]
    assert sorted(p.name for p in html.parent.iterdir()) == ["r.html"]


def test_a_report_file_that_cannot_be_written_is_one_line_and_the_report_still_shows(
    fit_ip, clean_check, capsys, tmp_path
):
    folder = tmp_path / "a-folder.json"
    folder.mkdir()  # a folder where the file should go: the write must fail
    result = run_cell(fit_ip, f"%%tfprofile -o r --json {folder}\n{BODY}")
    out, err = capsys.readouterr()
    assert result.success and result.result == 42
    clean_check()
    lines = [line for line in err.splitlines() if "could not write" in line]
    assert lines == [
        f"tfdiag_magic: could not write the JSON report to {folder}: "
        f"IsADirectoryError: {folder} is a folder, not a file"
    ]
    assert "tfdiag_magic:" in out and "train" in out  # the report was shown
    assert "JSON report written" not in out
    assert fit_ip.user_ns["r"].record.phase_counts()["train"] == 2
    assert list(folder.iterdir()) == []


# -- bounded joins ---------------------------------------------------------------------------


def test_the_watch_stops_without_waiting_for_a_stuck_sample(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(watch_module, "JOIN_TIMEOUT", 0.05)
    watch = watch_module.GPUWatch(watch_module.MIN_INTERVAL)
    # A sample that hangs (as an NVML call into a wedged driver would).
    monkeypatch.setattr(watch, "sample", lambda: release.wait() and None)
    watch.start()
    try:
        watch.stop()  # returns although the thread is stuck
        assert watch._thread is not None and watch._thread.is_alive()
    finally:
        release.set()
        watch._thread.join()
        watch.stop()  # now joins at once and closes NVML
    assert not watch._thread.is_alive()


def test_the_nvml_sampler_is_removed_without_waiting_for_a_stuck_sample(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(nvml_sampler, "JOIN_TIMEOUT", 0.05)
    sampler = nvml_sampler.NVMLSampler(interval=0.05)
    stuck = threading.Thread(target=release.wait, name="tfdiag-nvml", daemon=True)
    sampler._thread = stuck
    stuck.start()
    try:
        sampler.remove()  # returns although the thread is stuck
        assert stuck.is_alive()
        assert "did not stop within" in sampler.status
        assert sampler._thread is None
    finally:
        release.set()
        stuck.join()


def test_failure_lines_are_one_line_each():
    from tfdiag_magic.result import failure_line

    assert failure_line("diagnosis", KeyError("a\nb")) == "diagnosis failed: KeyError: 'a\\nb'"
    assert (
        failure_line("record", ValueError("two\nlines")) == "record failed: ValueError: two lines"
    )
    assert (
        failure_line("view", KeyboardInterrupt()) == "view failed: interrupted (KeyboardInterrupt)"
    )
    assert re.fullmatch(r"view failed: RuntimeError", failure_line("view", RuntimeError()))
