"""The live view on real runs: it follows the steps, throttles itself, never breaks a run.

The view is attached to a real profiling session (real TensorFlow and Keras) the way
``%%tfprofile`` attaches it in a kernel; ipywidgets work without a frontend, so every value the
widget would have sent is observed here.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import numpy as np
import pytest

from tfdiag_magic.code_runner import prepare, run
from tfdiag_magic.session import Session
from tfdiag_magic.views.live import LiveView

LOOP = """
import time
for i in range(120):
    time.sleep(0.01)
    f(tf.constant(1.0))
"""
FIT = """
model.fit(x, y, batch_size=8, epochs=4, verbose=0)
"""


def profile_with(view: LiveView, source: str, namespace: dict[str, Any]) -> tuple[Any, Any]:
    """Run `source` profiled with `view` attached; (result, the exception that ended it)."""
    prepared = prepare(source, "<live-test>", instrument=True)
    session = Session(
        source=source, loops=prepared.loops, namespace=namespace, loop_hooks=prepared.hooks
    )
    result = session.start()
    view.attach(session)
    error = None
    try:
        run(prepared, namespace)
    except BaseException as exc:
        error = exc
    view.detach(session)
    session.stop(error)
    view.finish(None, error)
    return result, error


@pytest.fixture
def namespace() -> dict[str, Any]:
    import keras
    import tensorflow as tf

    x = np.random.default_rng(0).normal(size=(512, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return {
        "tf": tf,
        "f": tf.function(lambda v: v * 2),
        "model": model,
        "x": x,
        "y": x.sum(axis=1, keepdims=True),
        "__builtins__": __builtins__,
    }


def watch(view: LiveView) -> list[str]:
    values: list[str] = []
    view.widget.observe(lambda change: values.append(change["new"]), names="value")
    return values


def test_live_view_follows_the_steps_and_throttles_itself(namespace):
    view = LiveView(interval=0.25)
    values = watch(view)
    start = perf_counter()
    result, error = profile_with(view, LOOP, namespace)
    elapsed = perf_counter() - start
    assert error is None
    assert result.record.phase_counts()["function"] == 120
    # ~1.3 s of steps at most 4 redraws a second (the first comes at the first sample).
    assert 2 <= view.updates <= elapsed / 0.25 + 2
    running = [v for v in values if "(running)" in v]
    assert len(running) == view.updates
    # A redraw before the first step is recorded (the first sample can come first on a busy
    # machine: seen beside a CPU hog) shows no step count yet: 0.
    counts = [
        int(v.split("function ")[1].split(",")[0].split("<")[0]) if "function " in v else 0
        for v in running
    ]
    assert counts == sorted(counts) and counts[-1] > counts[0]
    assert "<svg" in running[-1] and "steps/s" in running[-1]
    assert "(finished)" in values[-1] and "function 120" in values[-1]
    assert view.update_seconds / view.updates < 0.01  # a redraw costs milliseconds at most


def test_live_view_shows_fit_progress_and_an_eta(namespace):
    view = LiveView(interval=0.1)
    values = watch(view)
    _, error = profile_with(view, FIT, namespace)
    assert error is None
    with_eta = [v for v in values if "ETA" in v]
    assert with_eta, values[-1]
    assert "/ 256 training steps" in with_eta[-1]  # 4 epochs x 64 batches


def test_an_error_inside_the_live_view_switches_it_off_and_the_run_goes_on(namespace):
    class Broken(LiveView):
        def _body(self, *args: Any, **kwargs: Any) -> str:
            raise RuntimeError("drawing failed")

    view = Broken(interval=0.05)
    result, error = profile_with(view, LOOP, namespace)
    assert error is None
    assert result.record.phase_counts()["function"] == 120
    assert view.enabled is False
    assert view.error == "RuntimeError: drawing failed"
    assert "Live view stopped (RuntimeError: drawing failed)" in view.widget.value


def test_interrupted_run_leaves_the_view_saying_so_with_what_was_counted(namespace):
    view = LiveView(interval=0.05)
    source = LOOP.replace(
        "    f(tf.constant(1.0))",
        "    f(tf.constant(1.0))\n    if i == 60:\n        raise KeyboardInterrupt",
    )
    result, error = profile_with(view, source, namespace)
    assert isinstance(error, KeyboardInterrupt)
    assert result.record.error.type == "KeyboardInterrupt"
    assert "(interrupted)" in view.widget.value
    assert view.updates >= 1


def test_a_closed_view_takes_no_more_updates(namespace):
    view = LiveView(interval=0.05)
    view.close()
    _, error = profile_with(view, LOOP, namespace)
    assert error is None
    assert view.updates == 0


def live_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "tfdiag-live-view"]


def test_while_no_step_ends_the_ticker_redraws_and_says_when_the_last_step_ended(namespace):
    view = LiveView(interval=0.05, tick=0.2)
    values = watch(view)
    source = "f(tf.constant(1.0))\nimport time\ntime.sleep(2.2)\nf(tf.constant(1.0))\n"
    result, error = profile_with(view, source, namespace)
    assert error is None
    assert result.record.phase_counts()["function"] == 2
    # 2.2 s without a step end, a tick every 0.2 s: several redraws from the ticker thread,
    # those after the first second saying when the last step ended (with 1.6 s, a busy machine
    # left two of them, 0.21 s apart).
    assert view.ticks >= 3, view.ticks
    quiet = [v for v in values if "last step ended" in v]
    assert quiet, values
    elapsed = [float(v.split("elapsed</td><td>")[1].split(" s<")[0]) for v in quiet]
    assert elapsed == sorted(elapsed) and elapsed[-1] - elapsed[0] >= 0.3
    assert "(finished)" in values[-1]
    assert live_threads() == []  # stopped and joined when the view was detached


def test_the_ticker_stops_when_the_cell_raises_and_when_the_view_is_closed(namespace):
    view = LiveView(interval=0.05, tick=0.05)
    source = "import time\ntime.sleep(0.3)\nraise ValueError('boom')\n"
    _, error = profile_with(view, source, namespace)
    assert isinstance(error, ValueError)
    assert live_threads() == []
    assert "(stopped by ValueError)" in view.widget.value

    closed = LiveView(interval=0.05, tick=0.05)
    prepared = prepare("import time\ntime.sleep(0.3)\n", "<live-test>", instrument=True)
    session = Session(
        source="", loops=prepared.loops, namespace=namespace, loop_hooks=prepared.hooks
    )
    session.start()
    closed.attach(session)
    assert live_threads() == ["tfdiag-live-view"]
    try:
        closed.close()  # as %%tfprofile does when the report cannot be shown
        assert live_threads() == []
        redraws = closed.updates + closed.ticks
        run(prepared, namespace)
    finally:
        session.stop()
    assert closed.updates + closed.ticks == redraws
