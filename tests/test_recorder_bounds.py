"""The step table's bounded memory: past `full_rows` rows the recorder thins its table to a
uniform sample, and every row it leaves out goes into exact per-phase sums.

Rows go through `Recorder.add_step` exactly as the probes send them, with small limits so that
many thinnings happen in a fraction of a second; the last test profiles a real tf.function loop
under `%%tfprofile` with the limits lowered.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import profiled
from tfdiag_magic import recorder as recorder_module
from tfdiag_magic.record import PHASES, Kind, Phase
from tfdiag_magic.recorder import ROW_FIELDS, Recorder
from tfdiag_magic.report import build_report
from tfdiag_magic.views.text import render_text

FULL, TAIL = 200, 64
STEP_S = 1 / 1024
LOSS, PHASE_COL, START = (ROW_FIELDS.index(n) for n in ("loss", "phase", "start"))


class DeviceLoss:
    """A loss as a device tensor comes: not a Python float, read later with float()."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value


def _feed(rec: Recorder, n: int) -> dict[str, dict[str, float]]:
    """`n` rows of rotating phases with known values; returns the sums fed per phase."""
    fed = {p: {"count": 0, "duration": 0.0, "data_wait": 0.0, "eager": 0} for p in PHASES}
    rotation = ("train", "train", "eval", "loop", "function")
    for i in range(n):
        phase = rotation[i % len(rotation)]
        start = math.ceil(rec.t0) + i / 128  # exact at any clock value, as in `_feed_from`
        duration = (1 + i % 7) / 1024
        wait = (i % 3) / 2048 if phase == "loop" else math.nan
        eager = i % 4 == 0
        kind = "loop" if phase == "loop" else "marker"
        rec.add_step(
            Phase.of(phase), Kind[kind.upper()], start, start + duration, wait, -1, eager, float(i)
        )
        sums = fed[phase]
        sums["count"] += 1
        sums["duration"] += duration
        sums["data_wait"] += 0.0 if math.isnan(wait) else wait
        sums["eager"] += eager
    return fed


def test_counts_and_totals_stay_exact_past_the_limit():
    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    fed = _feed(rec, 20_000)
    record = rec.finish()
    assert record.reduced
    assert record.steps_recorded == 20_000
    assert record.step_count < 20_000
    counts = record.phase_counts()
    for phase, sums in fed.items():
        assert counts.get(phase, 0) == sums["count"], phase
        if not sums["count"]:
            continue
        assert record.phase_total("count", phase) == sums["count"]
        assert record.phase_total("duration", phase) == pytest.approx(sums["duration"], rel=1e-9)
        assert record.phase_total("data_wait", phase) == pytest.approx(sums["data_wait"])
        assert record.phase_total("eager", phase) == sums["eager"]


def test_the_buffer_never_holds_more_than_the_cap_and_the_first_rows_stay_intact():
    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    held = []
    for chunk in range(100):
        _feed_from(rec, chunk * 100, 100)
        held.append(rec.rows_held)
    assert max(held) <= FULL + TAIL
    record = rec.finish()
    assert record.step_count <= FULL + TAIL
    # The first FULL rows are exactly the rows recorded first, every column as fed.
    np.testing.assert_array_equal(record.step_index[:FULL], np.arange(FULL))
    np.testing.assert_array_equal(record.steps["loss"][:FULL], np.arange(FULL, dtype=np.float32))
    # Past them, a uniform sample: one row in `stride`, each row its own values.
    stride = record.dropped.stride
    past = record.step_index[FULL:]
    assert stride > 1 and np.all(np.diff(past) == stride) and (past[0] - FULL) % stride == 0
    np.testing.assert_array_equal(record.steps["loss"], record.step_index.astype(np.float32))
    frame = record.to_dataframe()
    assert frame.index[-1] == record.step_index[-1]


def _feed_from(rec: Recorder, first: int, n: int) -> None:
    """Rows 1 ms long. The clock's value on a machine up for weeks is large, and `start + 0.001`
    then rounds; 1/1024 s starting on multiples of 1/128 s is exact at any clock value."""
    for i in range(first, first + n):
        start = math.ceil(rec.t0) + i / 128
        rec.add_step(Phase.TRAIN, Kind.MARKER, start, start + STEP_S, math.nan, -1, False, i)


def test_a_thinning_in_the_middle_of_fit_keeps_losses_and_callback_times_on_their_rows():
    """Keras-like batches: device losses read later, each row written with its callbacks' time
    once they are done, and every 40th batch a callback that runs predict (rows of its own,
    appended before the batch's row, started after it)."""
    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    callbacks = {}  # row index -> callback seconds given to it
    for batch in range(3_000):
        start = rec.t0 + batch * 0.01
        if batch % 40 == 39:  # the callback predicts: 3 rows appended before the batch's row
            for k in range(3):
                s = start + 0.003 + k * 0.001
                rec.add_step(Phase.PREDICT, Kind.KERAS, s, s + 0.0005, math.nan, 0, False)
        seconds = 0.0001 * (1 + batch % 5)
        # The batch's row comes once its callbacks are done, with their time.
        rec.add_step(
            Phase.TRAIN,
            Kind.KERAS,
            start,
            start + 0.002,
            math.nan,
            0,
            False,
            DeviceLoss(batch * 0.5),
            callback_time=seconds,
        )
        callbacks[rec.count - 1] = seconds
    record = rec.finish()
    assert record.reduced
    steps = record.steps
    train = record.phase_mask("train")
    index = record.step_index[train]
    expected_loss = {row: n * 0.5 for n, row in enumerate(sorted(callbacks))}
    np.testing.assert_allclose(steps["loss"][train], [expected_loss[i] for i in index])
    np.testing.assert_allclose(steps["callback_time"][train], [callbacks[i] for i in index])
    assert np.all(steps["callback_time"][~train] == 0)
    assert record.phase_total("callback_time", "train") == pytest.approx(sum(callbacks.values()))
    assert record.phase_counts() == {"train": 3_000, "predict": 3 * 75}
    assert record.dropped.total("loss_count", "train") + np.count_nonzero(train) == 3_000


def test_step_marks_and_the_error_step_are_exact_across_thinnings():
    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    _feed_from(rec, 0, 150)
    mark = rec.step_mark()
    _feed_from(rec, 150, 5_000)
    assert rec.steps_since(mark) == 5_000
    assert rec.seconds_since(mark) == pytest.approx(5_000 * STEP_S, rel=1e-9)
    assert rec.step_seconds(150) == pytest.approx(5_000 * STEP_S, rel=1e-9)  # before the limit
    late = rec.step_mark()
    _feed_from(rec, 5_150, 77)
    assert rec.seconds_since(late) == pytest.approx(77 * STEP_S, rel=1e-9)
    rec.note_failure(error := RuntimeError("boom"), Phase.TRAIN)
    rec.set_error(error)
    assert rec.error.step == 5_227


def test_the_live_reader_sees_every_kept_row_once_across_thinnings():
    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    position, seen, counts = 0, [], np.zeros(len(PHASES), dtype=np.int64)

    def read() -> None:
        nonlocal position, counts
        new = rec.rows_since(position)
        position = new.position
        counts += new.dropped
        counts += np.bincount(new.rows[:, PHASE_COL].astype(np.int64), minlength=len(PHASES))
        seen.extend(new.rows[:, LOSS].astype(np.int64).tolist())

    for first in range(0, 6_000, 97):  # reads between thinnings and across them
        _feed_from(rec, first, 97)
        read()
    read()
    assert len(seen) == len(set(seen))  # no row twice
    assert seen == sorted(seen)
    assert int(counts[Phase.TRAIN]) == rec.count  # what was read plus what was left out
    record = rec.finish()
    assert set(record.step_index.tolist()) <= set(seen)  # every row the table keeps was read
    assert rec.rows_since(position).rows.shape[0] == 0  # handed over: nothing more to read


def test_the_report_says_the_table_was_reduced_and_gives_exact_counts():
    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    fed = _feed(rec, 10_000)
    record = rec.finish()
    report = build_report(record, [])
    assert report["steps"]["count"] == fed["train"]["count"]
    assert report["steps"]["recorded"] == 10_000
    assert report["steps"]["phases"]["eval"]["count"] == fed["eval"]["count"]
    assert report["steps"]["phases"]["train"]["total_time"] == pytest.approx(
        fed["train"]["duration"], rel=1e-9
    )
    assert report["steps"]["eager"] == sum(sums["eager"] for sums in fed.values())
    stride = record.dropped.stride
    text = render_text(report)
    assert f"steps past {FULL:,} are kept one in {stride:,} in the step table" in text
    assert "counts and totals are exact" in text


def test_a_short_run_keeps_every_row_and_says_nothing_of_a_reduction():
    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    _feed(rec, FULL + TAIL - 1)
    record = rec.finish()
    assert record.dropped is None and record.step_index is None and not record.reduced
    assert record.step_count == FULL + TAIL - 1
    assert "kept one in" not in render_text(build_report(record, []))


def test_a_profiled_tf_function_loop_past_the_limit_reports_exact_step_counts(ip, monkeypatch):
    monkeypatch.setattr(recorder_module, "FULL_ROWS", 300)
    monkeypatch.setattr(recorder_module, "TAIL_ROWS", 128)
    ip.run_cell(
        "import tensorflow as tf\n"
        "v = tf.Variable(0.0)\n"
        "@tf.function\n"
        "def step(x):\n"
        "    v.assign_add(x)\n"
        "    return v * 2.0\n"
        "@tf.function\n"
        "def check(x):\n"
        "    return x + 1.0\n"
    )
    result, r = profiled(
        ip,
        "for i in range(3000):\n"
        "    step(tf.constant(1.0))\n"
        "    if i % 10 == 0:\n"
        "        check(tf.constant(1.0))\n",
    )
    assert result.success
    record = r.record
    assert record.reduced
    assert record.step_count <= 300 + 128
    counts = record.phase_counts()
    assert counts["loop"] == 3000
    # `step` updates a variable: a training step; `check` is a function row of its own
    assert counts == {"train": 3000, "loop": 3000, "function": 300}
    assert float(ip.user_ns["v"].numpy()) == 3000.0
    assert "train=3000, loop=3000, function=300" in repr(r)
    report = build_report(record, [])
    assert report["steps"]["count"] == 3000
    assert report["steps"]["recorded"] == 6300
    assert "kept one in" in render_text(report)


def test_a_nan_loss_in_a_row_left_out_of_the_table_is_still_a_finding():
    """A long run whose only NaN loss fell in a row the table left out: nonfinite-loss still
    fires, from the exact count the recorder kept; a run without one stays quiet."""
    from tfdiag_magic.diagnose import nonfinite_loss

    def run(nan_at: int | None):
        rec = Recorder(full_rows=FULL, tail_rows=TAIL)
        for i in range(5_000):
            start = rec.t0 + i * 0.01
            loss = math.nan if i == nan_at else 1.0
            rec.add_step(Phase.TRAIN, Kind.MARKER, start, start + 0.001, math.nan, -1, 0, loss)
        return rec.finish()

    record = run(nan_at=4_001)
    kept = record.step_index
    assert 4_001 not in set(kept.tolist())  # the case under test: its row was left out
    finding = nonfinite_loss.check(record, None)
    assert finding is not None and finding.evidence["nonfinite_steps_left_out_of_table"] == 1
    assert nonfinite_loss.check(run(nan_at=None), None) is None


def test_gc_pauses_past_the_event_limit_are_counted_exactly_not_kept():
    """The GC probe keeps each pause as an event up to its limit, then counts and sums them per
    generation: the report's collections and pause time stay exact, the table bounded."""
    import gc

    from tfdiag_magic.probes.gc_pauses import GCProbe
    from tfdiag_magic.record import Record
    from tfdiag_magic.stats import gc_stats

    probe = GCProbe()
    probe.max_events = 2
    probe.install(Recorder())
    try:
        # Few: a full collection of a worker's heap late in the suite takes about a second.
        for _ in range(8):
            gc.collect()
    finally:
        probe.remove()
    table = probe.table()
    assert table["time"].size == 2
    assert int(table["dropped_count"][2]) >= 6  # the full collections past the limit
    stats = gc_stats(Record(gc=table, wall_time=1.0))
    assert stats["collections"] == 2 + int(table["dropped_count"].sum())
    assert stats["pause_time"] == pytest.approx(
        float(table["duration"].sum() + table["dropped_seconds"].sum())
    )
    assert stats["collections"] >= 8


def test_keras_calls_past_the_kept_ones_are_summed_per_model_build():
    """Past `keras_calls_kept` calls each call is added to the sums of its API, model build,
    data kind and loop: the counts and totals stay exact, a rebuilt model's calls apart."""
    from tfdiag_magic.record import KerasCall, ModelBuilt

    rec = Recorder()
    rec.keras_calls_kept = 3

    def call(i: int, model: str = "net") -> KerasCall:
        return KerasCall("predict", i * 0.1, 0.01, 1, 0.002, 0, model, 8.0, "numpy")

    rec.models.append(ModelBuilt(0.0, "net", "Sequential", -1, -1))
    for i in range(10):
        rec.add_keras_call(call(i))
    rec.models.append(ModelBuilt(1.5, "net", "Sequential", 0, -1))  # same name, built anew
    for i in range(10, 14):
        rec.add_keras_call(call(i))
    record = rec.finish()
    assert len(record.keras_calls) == 3
    assert record.keras_calls_made == 14
    first, second = record.keras_call_groups
    assert (first.built, first.calls, first.steps) == (0, 7, 7)
    assert (second.built, second.calls) == (1, 4)
    assert first.duration == pytest.approx(0.07) and first.step_time == pytest.approx(0.014)
    assert (first.first_start, first.last_start) == pytest.approx((0.3, 0.9))


def test_a_predict_loop_past_the_kept_calls_is_still_a_repeated_keras_call(ip, monkeypatch):
    """A loop calling `predict` more times than the run keeps one by one: the later calls are
    summed, and repeated-keras-call counts every call of the loop."""
    from tfdiag_magic.diagnose import repeated_keras_call

    monkeypatch.setattr(recorder_module, "KERAS_CALLS_KEPT", 5)
    ip.run_cell(
        "import numpy as np, keras\n"
        "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])\n"
        "x = np.ones((4, 3), 'float32')\n"
    )
    body = "for i in range(30):\n    out = model.predict(x, verbose=0)\nlast = model.predict(x)\n"
    result, r = profiled(ip, body)
    assert result.success, result.error_in_exec
    record = r.record
    assert len(record.keras_calls) == 5
    assert record.keras_calls_made == 31
    in_loop = [g for g in record.keras_call_groups if g.loop >= 0]
    assert [(g.api, g.calls, g.steps, g.data) for g in in_loop] == [("predict", 25, 25, "numpy")]
    assert record.phase_counts()["predict"] == 31
    finding = repeated_keras_call.check(record, body)
    assert finding is not None
    assert finding.evidence["calls"] == 30
    assert finding.evidence["batches_per_call"] == 1.0


def test_eager_and_numpy_fed_step_counts_are_exact_past_the_limit():
    """eager-step and per-step-host-conversion report counts over every training step of a
    long run, not over the rows its reduced table kept."""
    from tfdiag_magic.diagnose import eager_step, per_step_host_conversion

    rec = Recorder(full_rows=FULL, tail_rows=TAIL)
    for i in range(4_000):
        start = rec.t0 + i * 0.01
        eager = i % 4 != 0  # three steps in four run eagerly
        rec.add_step(
            Phase.TRAIN,
            Kind.EAGER_UPDATE,
            start,
            start + 0.005,
            math.nan,
            -1,
            eager,
            1.0,
            host_bytes=1024.0,
        )
    record = rec.finish()
    assert record.reduced and record.step_count < 1_000
    eager = eager_step.check(record, None)
    assert eager is not None
    assert (eager.evidence["eager_steps"], eager.evidence["training_steps"]) == (3_000, 4_000)
    fed = per_step_host_conversion.check(record, None)
    assert fed is not None
    assert fed.evidence["steps_fed_from_numpy"] == 4_000
    assert fed.evidence["training_steps"] == 4_000
    assert fed.evidence["numpy_bytes"] == 4_000 * 1024


def test_loop_iterations_past_the_row_limit_are_counted_in_the_report(ip, monkeypatch):
    # Two Python loops past the rows a loop keeps: the report's loop iterations are the
    # iterations run (the loops' table's), not the rows kept. It read "13000 loop iterations"
    # for 25,000 and 3,000 iterations at a limit of 10,000 rows.
    monkeypatch.setattr(recorder_module, "LOOP_ROW_LIMIT", 1000)
    cell = "t = 0\nfor i in range(2500):\n    t += i\nfor j in range(300):\n    t -= j\n"
    result, r = profiled(ip, cell)
    assert result.success
    report = r.report()
    assert sum(loop["iterations"] for loop in report["loops"]) == 2800
    assert report["steps"]["phases"]["loop"]["count"] == 2800
    assert "2800 loop iterations" in render_text(report)


def test_the_loop_phase_is_split_by_loop(ip, monkeypatch):
    # An epoch loop's 3 iterations hold a batch loop's 600: one `loop` row pools them, so
    # each loop gets its own, with its iterations past the kept rows counted.
    monkeypatch.setattr(recorder_module, "LOOP_ROW_LIMIT", 500)
    cell = "t = 0\nfor epoch in range(3):\n    for i in range(200):\n        t += i\n"
    result, r = profiled(ip, cell)
    assert result.success
    report = r.report()
    loops = report["steps"]["phase_loops"]["loops"]
    assert [m["count"] for m in loops] == [3, 600]
    lines = {loop["id"]: loop["lineno"] for loop in report["loops"]}
    assert [m["loop"] for m in loops] == [f"line {n}" for n in sorted(lines.values())]
    assert loops[1]["median_all"] < loops[0]["median_all"]
    assert render_text(report).count("  ·") == 2
