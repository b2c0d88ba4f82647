"""The columnar step log: `Recorder` (the hot path the probes append to) and `Record`.

Covers the storage of a large run (bytes, row counts, dtypes, DataFrame), the JSON report
built from a record, the steady-state statistics (warm-up excluded), the deferred reading of a
step's loss, the split of a fused host call into rows, and how the error that ended a run is
located. No probe is installed here: rows go through `Recorder.add_step` exactly as the probes
send them, or a `Record` is built by hand with known values.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from tfdiag_magic.record import KINDS, PHASES, STEP_COLUMNS, Kind, Phase, Record, TraceEvent
from tfdiag_magic.recorder import LOSS_BATCH, Recorder
from tfdiag_magic.report import build_report
from tfdiag_magic.result import ProfileResult
from tfdiag_magic.stats import phase_stats, time_split, warmup_mask

N_STEPS = 100_000


def _strict_json(text: str):
    """json.loads that refuses NaN and the infinities (which strict JSON does not have)."""

    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _add(rec: Recorder, phase: str, start: float, end: float, **kwargs) -> None:
    """One step as a probe would send it, with times given in seconds since the run started."""
    kind = kwargs.pop("kind", "marker")
    rec.add_step(
        Phase.of(phase),
        Kind[kind.upper()],
        rec.t0 + start,
        rec.t0 + end,
        kwargs.pop("data_wait", math.nan),
        kwargs.pop("epoch", -1),
        kwargs.pop("eager", False),
        **kwargs,
    )


def _large_record() -> Record:
    """100 000 rows through the hot path: every phase, fused groups of 3, float losses."""
    rec = Recorder()
    rows = 0
    call = 0
    t = 0.0
    rotation = ("train", "train", "train", "eval", "predict", "loop", "function")
    while rows < N_STEPS:
        phase = rotation[call % len(rotation)]
        fused = 3 if phase == "train" and call % 10 == 0 and N_STEPS - rows >= 3 else 1
        duration = 0.001 * (1 + call % 5)
        loss = None if phase in ("predict", "loop") else 1.0 / (1 + call)
        kind = {"loop": "loop", "function": "tf_function"}.get(phase, "keras")
        _add(
            rec,
            phase,
            t,
            t + duration,
            kind=kind,
            data_wait=0.0001 if phase == "loop" else math.nan,
            epoch=call // 1000,
            loss=loss,
            fused=fused,
        )
        rows += fused
        call += 1
        t += duration + 0.0002
    return rec.finish()


@pytest.fixture(scope="module")
def large_record() -> Record:
    return _large_record()


# -- storage ---------------------------------------------------------------------------------


def test_record_of_100k_steps_takes_well_under_20_mb(large_record):
    nbytes = large_record.nbytes()
    print(f"\nRecord.nbytes() for {N_STEPS:,} steps: {nbytes:,} bytes ({nbytes / 1e6:.2f} MB)")
    assert nbytes < 20e6


def test_every_step_column_has_one_row_per_step_with_its_declared_dtype(large_record):
    assert set(large_record.steps) == set(STEP_COLUMNS)
    for name, dtype in STEP_COLUMNS.items():
        column = large_record.steps[name]
        assert column.shape == (N_STEPS,), name
        assert column.dtype == np.dtype(dtype), name
    assert large_record.step_count == N_STEPS


def test_large_record_keeps_phases_fused_groups_and_float_losses(large_record):
    steps = large_record.steps
    counts = large_record.phase_counts()
    assert set(counts) == set(PHASES)
    assert sum(counts.values()) == N_STEPS
    fused = steps["fused"]
    assert set(np.unique(fused).tolist()) == {1, 3}
    assert np.count_nonzero(fused == 3) % 3 == 0
    assert np.all(np.diff(steps["start"]) > 0)  # rows come out in start order
    losses = steps["loss"][large_record.phase_mask("eval")]
    assert np.all(np.isfinite(losses))
    assert np.all(np.isnan(steps["loss"][large_record.phase_mask("predict")]))


def test_to_dataframe_has_a_row_per_step_and_categorical_phase_and_kind(large_record):
    frame = large_record.to_dataframe()
    assert len(frame) == N_STEPS
    assert isinstance(frame["phase"].dtype, pd.CategoricalDtype)
    assert isinstance(frame["kind"].dtype, pd.CategoricalDtype)
    assert list(frame["phase"].cat.categories) == list(PHASES)
    assert list(frame["kind"].cat.categories) == list(KINDS)
    expected = pd.Series(large_record.phase_counts())
    observed = frame["phase"].value_counts()
    assert observed[observed > 0].sort_index().to_dict() == expected.sort_index().to_dict()
    np.testing.assert_array_equal(frame["duration"].to_numpy(), large_record.steps["duration"])


def test_finish_orders_rows_by_start_when_a_loop_row_is_appended_after_its_steps():
    rec = Recorder()
    _add(rec, "train", 1.0, 2.0)
    _add(rec, "train", 2.0, 3.0)
    # the loop iteration around them ends last, so it is appended last
    _add(rec, "loop", 0.5, 3.5, kind="loop")
    record = rec.finish()
    np.testing.assert_allclose(record.steps["start"], [0.5, 1.0, 2.0])
    assert [PHASES[p] for p in record.steps["phase"]] == ["loop", "train", "train"]


# -- the JSON report -------------------------------------------------------------------------


def _small_run(error: BaseException | None = None) -> Record:
    rec = Recorder()
    for i in range(6):
        loss = math.nan if i % 2 else 0.5 / (i + 1)
        _add(rec, "train", i * 0.1, i * 0.1 + 0.05, kind="keras", epoch=i // 3, loss=loss)
    for i in range(2):
        _add(rec, "eval", 1 + i * 0.1, 1 + i * 0.1 + 0.02, kind="keras", loss=math.nan)
    if error is not None:
        rec.set_error(error)
    return rec.finish()


def test_json_report_is_strict_json_with_schema_1_and_the_training_step_count():
    record = _small_run()
    text = ProfileResult(record=record).to_json()
    report = _strict_json(text)
    assert report["schema"] == 1
    assert report["steps"]["count"] == int(record.phase_mask("train").sum()) == 6
    assert report["steps"]["rows"] == 8
    assert set(report["steps"]["phases"]) == set(record.phase_counts()) == {"train", "eval"}
    assert report["steps"]["phases"]["eval"]["count"] == 2
    assert report["findings"] == []
    assert report["error"] is None


def test_json_report_file_written_by_to_json_is_strict_json(tmp_path):
    path = tmp_path / "report.json"
    ProfileResult(record=_small_run()).to_json(path)
    assert _strict_json(path.read_text(encoding="utf-8"))["steps"]["count"] == 6


def test_json_report_error_holds_type_message_step_and_phase():
    report = _strict_json(ProfileResult(record=_small_run(ValueError("bad batch"))).to_json())
    assert report["error"] == {
        "type": "ValueError",
        "message": "bad batch",
        "step": 6,
        "phase": None,
        "batch": None,  # raised between steps: no failing step, no batch size
    }


def test_nan_loss_values_become_null_in_the_json_report():
    record = _small_run()
    assert np.isnan(record.steps["loss"]).any()  # the run has NaN losses
    # a loss value that reaches the report (here through the facts) is null, not NaN
    record.facts["last_loss"] = record.steps["loss"][-1]
    record.facts["losses"] = record.steps["loss"][:2].tolist()
    report = build_report(record, [])
    assert report["environment"]["last_loss"] is None
    assert report["environment"]["losses"][0] == pytest.approx(0.5)
    assert report["environment"]["losses"][1] is None
    assert _strict_json(json.dumps(report, allow_nan=False))["environment"]["last_loss"] is None


# -- steady-state statistics -----------------------------------------------------------------


def _hand_record() -> tuple[Record, np.ndarray, np.ndarray]:
    """Train rows 0..7 with row 4 traced, eval rows interleaved; returns record, train, eval."""
    train_durations = np.array([0.9, 0.011, 0.012, 0.010, 0.5, 0.013, 0.020, 0.014])
    eval_durations = np.array([0.3, 0.004, 0.006, 0.005])
    phases = ["train"] * 3 + ["eval"] * 2 + ["train"] * 3 + ["eval"] * 2 + ["train"] * 2
    n = len(phases)
    steps = {name: np.zeros(n, dtype=dtype) for name, dtype in STEP_COLUMNS.items()}
    steps["phase"] = np.array([PHASES.index(p) for p in phases], dtype=np.uint8)
    steps["kind"][:] = KINDS.index("keras")
    steps["data_wait"][:] = np.nan
    steps["loss"][:] = np.nan
    steps["fused"][:] = 1
    steps["loop"][:] = -1
    train_rows = np.flatnonzero(steps["phase"] == PHASES.index("train"))
    eval_rows = np.flatnonzero(steps["phase"] == PHASES.index("eval"))
    steps["duration"][train_rows] = train_durations
    steps["duration"][eval_rows] = eval_durations
    steps["start"] = np.arange(n, dtype=np.float64)
    steps["traced"][train_rows[4]] = True  # a retrace in the middle of training
    return Record(steps=steps, wall_time=float(n)), train_durations, eval_durations


def test_warmup_is_the_first_step_of_each_phase_and_every_traced_step():
    record, _, _ = _hand_record()
    warm = warmup_mask(record)
    train_rows = np.flatnonzero(record.phase_mask("train"))
    eval_rows = np.flatnonzero(record.phase_mask("eval"))
    assert np.flatnonzero(warm).tolist() == sorted([train_rows[0], train_rows[4], eval_rows[0]])


def test_steady_state_median_and_p90_are_numpys_on_the_non_warmup_steps():
    record, train, evals = _hand_record()
    stats = phase_stats(record)
    steady_train = np.delete(train, [0, 4])
    steady_eval = evals[1:]
    assert stats["train"].steady_count == steady_train.size
    assert stats["train"].warmup_count == 2
    assert stats["train"].warmup_time == pytest.approx(train[0] + train[4])
    assert stats["train"].median == pytest.approx(np.median(steady_train))
    assert stats["train"].p90 == pytest.approx(np.percentile(steady_train, 90))
    assert stats["train"].mean == pytest.approx(steady_train.mean())
    assert stats["train"].median_all == pytest.approx(np.median(train))
    assert stats["eval"].median == pytest.approx(np.median(steady_eval))
    assert stats["eval"].p90 == pytest.approx(np.percentile(steady_eval, 90))
    report = build_report(record, [])
    assert report["steps"]["phases"]["train"]["median"] == pytest.approx(np.median(steady_train))


def test_a_loop_inside_a_loop_is_not_counted_twice_in_the_loops_time():
    # Two outer iterations of 1 s, each holding two inner iterations of 0.4 s that traced
    # (a `predict` per inner iteration): 2 s in loops, not 3.6; the warm-up is the outer
    # iterations' time (their first, and the ones holding a tracing), not more than the run.
    rows = [(0.0, 1.0, -1, True), (0.1, 0.4, 0, True), (0.5, 0.4, 0, True),
            (1.0, 1.0, -1, True), (1.1, 0.4, 1, True), (1.5, 0.4, 1, True)]  # fmt: skip
    empty = Record().steps
    record = Record(wall_time=2.0)
    record.steps = {name: np.zeros(len(rows), dtype=empty[name].dtype) for name in STEP_COLUMNS}
    for i, (start, duration, epoch, traced) in enumerate(rows):
        record.steps["start"][i], record.steps["duration"][i] = start, duration
        record.steps["epoch"][i], record.steps["traced"][i] = epoch, traced
    record.steps["phase"][:] = PHASES.index("loop")
    record.steps["kind"][:] = KINDS.index("loop")
    record.steps["data_wait"][:] = np.nan
    loop = phase_stats(record)["loop"]
    assert loop.count == 6 and loop.warmup_count == 6
    assert loop.total_time == pytest.approx(2.0)
    assert loop.warmup_time == pytest.approx(2.0)


def _loop_rows(rows: list[tuple[float, float, int, int, float]], wall: float) -> Record:
    """A record of loop iterations alone: each (start, duration, loop, epoch, data wait)."""
    empty = Record().steps
    record = Record(wall_time=wall)
    record.steps = {name: np.zeros(len(rows), dtype=empty[name].dtype) for name in STEP_COLUMNS}
    for i, (start, duration, loop, epoch, wait) in enumerate(rows):
        record.steps["start"][i], record.steps["duration"][i] = start, duration
        record.steps["loop"][i], record.steps["epoch"][i] = loop, epoch
        record.steps["data_wait"][i] = wait
    record.steps["phase"][:] = PHASES.index("loop")
    record.steps["kind"][:] = KINDS.index("loop")
    return record


def test_time_split_of_loops_alone_counts_every_top_level_loop_once():
    # A first loop of two 1 s iterations, each holding an inner loop's two 0.3 s iterations
    # that waited 0.1 s each for their items; then a second top-level loop of one 0.5 s
    # iteration. The work is the top-level loops' 2.5 s less the inner waits (0.4 s), which
    # are data wait: not 3.7 s (every row), nor 2 s (the first loop alone).
    rows = [(0.0, 1.0, 0, -1, 0.0), (0.1, 0.3, 1, 0, 0.1), (0.5, 0.3, 1, 0, 0.1),
            (1.0, 1.0, 0, -1, 0.0), (1.1, 0.3, 1, 1, 0.1), (1.5, 0.3, 1, 1, 0.1),
            (2.0, 0.5, 2, -1, 0.0)]  # fmt: skip
    split = time_split(_loop_rows(rows, wall=3.0))
    assert split.compute == pytest.approx(2.1)
    assert split.data_wait == pytest.approx(0.4)
    assert split.other == pytest.approx(0.5)


def test_time_split_of_loops_alone_counts_tracing_inside_their_bodies_once():
    # A review's distributed training loop whose step raised as it first traced: two loop
    # iterations (2.05 s of bodies), no function step recorded, 1.18 s of tracing inside
    # them. It read "compute 92%, tracing 53%": the tracing counted in both.
    record = _loop_rows([(0.0, 1.0, 0, -1, np.nan), (1.05, 1.0, 1, -1, np.nan)], wall=2.2)
    record.traces = [
        TraceEvent(0.2, 0.6, "train_step", "", False),
        TraceEvent(0.3, 0.2, "inner", "", True),  # nested: inside its caller's
        TraceEvent(1.1, 0.58, "train_step", "", False),
    ]
    split = time_split(record)
    assert split.tracing == pytest.approx(1.18)
    assert split.compute == pytest.approx(2.0 - 1.18)
    assert split.compute + split.tracing + split.other == pytest.approx(2.2)


def test_steps_per_second_leave_out_the_pauses_between_a_phases_steps():
    # Three epochs of 100 training steps, 2 ms apart, each followed by 0.4 s of validation:
    # 500 steps/s while training (count / span would say about 210). Validation's own pause,
    # the training between its runs, is 0.24 s against 40 ms gaps: 6 gaps, clear of the 5 at
    # which a gap counts as a pause (at exactly 5, the clock's rounding decided, by the
    # machine's uptime).
    rec = Recorder()
    t = 0.0
    for epoch in range(3):
        for _ in range(100):
            _add(rec, "train", t, t + 0.0015, epoch=epoch)
            t += 0.002
        for _ in range(10):
            _add(rec, "eval", t, t + 0.03, epoch=epoch)
            t += 0.04
    stats = phase_stats(rec.finish())
    train = stats["train"]
    assert train.span == pytest.approx(1.3995)  # the last training step ends at 1.3995 s
    assert train.steps_per_second == pytest.approx(1 / 0.002, rel=0.02)
    assert stats["eval"].steps_per_second == pytest.approx(1 / 0.04, rel=0.02)


def test_a_slow_steps_own_time_is_never_a_pause():
    # A small model's 200 steps of 2 ms, then a larger model's 20 steps of 2.6 s each in the
    # same phase (two fits in one cell): the slow steps' gaps are 1300 times the typical one,
    # but they are work. It read 75.5 steps/s where 63 s went into the steps.
    rec = Recorder()
    t = 0.0
    for _ in range(200):
        _add(rec, "train", t, t + 0.0018, epoch=0)
        t += 0.002
    for _ in range(20):
        _add(rec, "train", t, t + 2.6, epoch=1)
        t += 2.6005
    train = phase_stats(rec.finish())["train"]
    assert train.total_time == pytest.approx(200 * 0.0018 + 20 * 2.6)
    assert train.steps_per_second <= train.count / train.total_time
    assert train.steps_per_second == pytest.approx(220 / (0.4 + 20 * 2.6005), rel=0.01)


def test_a_phase_of_one_step_an_epoch_reads_its_own_pace():
    # Validation of one batch after each epoch of 100 training steps: the 28 ms validation steps
    # are a whole epoch apart, so their median gap is an epoch and none of them looked long; it
    # read 0.2 steps/s (count over span) where each step takes 28 ms. The gaps hold the
    # training's steps: a pause beyond the validation's own step.
    rec = Recorder()
    t = 0.0
    for epoch in range(9):
        for _ in range(100):
            _add(rec, "train", t, t + 0.0015, epoch=epoch)
            t += 0.002
        _add(rec, "eval", t, t + 0.028, epoch=epoch)
        t += 0.03
    stats = phase_stats(rec.finish())
    assert stats["eval"].steps_per_second == pytest.approx(1 / 0.028, rel=0.02)
    assert stats["train"].steps_per_second == pytest.approx(1 / 0.002, rel=0.02)


def test_a_step_beside_each_training_step_is_not_a_pause():
    # A loop that calls an evaluation function (no weight update: another phase) after every
    # training step: the training's gaps each hold one short evaluation. That is the loop's
    # pace, 250 steps/s, not a pause after every step.
    rec = Recorder()
    t = 0.0
    for _ in range(300):
        _add(rec, "train", t, t + 0.0018, kind="tf_function")
        _add(rec, "function", t + 0.002, t + 0.0038, kind="tf_function")
        t += 0.004
    stats = phase_stats(rec.finish())
    assert stats["train"].steps_per_second == pytest.approx(1 / 0.004, rel=0.02)
    assert stats["function"].steps_per_second == pytest.approx(1 / 0.004, rel=0.02)


def test_a_loops_iteration_around_its_function_call_is_not_other_work():
    # A loop of the cell's own whose iterations (loop rows) each hold a 1 ms tf.function call
    # and 9 ms of Python around it: the function's gaps hold the next iteration's row, which
    # starts before the call, but that row is the call's setting. 100 calls a second.
    rec = Recorder()
    t = 0.0
    for _ in range(200):
        _add(rec, "loop", t, t + 0.0099, kind="loop")
        _add(rec, "function", t + 0.008, t + 0.009, kind="tf_function")
        t += 0.01
    stats = phase_stats(rec.finish())
    assert stats["function"].steps_per_second == pytest.approx(1 / 0.01, rel=0.02)
    assert stats["loop"].steps_per_second == pytest.approx(1 / 0.01, rel=0.02)


def test_steps_per_second_is_the_steady_pace_as_the_median_is():
    # A short fit: its first step traced for 1.2 s, then 78 steps of 4.9 ms, 5 ms apart. The
    # median is 4.9 ms; steps/s read 40.9 with the first step's second in it, where the steady
    # pace is 200 a second.
    rec = Recorder()
    _add(rec, "train", 0.0, 1.2, epoch=0)
    t = 1.2
    for _ in range(78):
        _add(rec, "train", t, t + 0.0049, epoch=0)
        t += 0.005
    train = phase_stats(rec.finish())["train"]
    assert train.warmup_count == 1
    assert train.steps_per_second == pytest.approx(1 / 0.005, rel=0.02)


def test_phase_whose_only_step_is_warmup_has_no_steady_median():
    record, _, _ = _hand_record()
    record.steps["phase"][-1] = PHASES.index("predict")  # a single predict row
    stats = phase_stats(record)
    assert stats["predict"].count == 1
    assert stats["predict"].steady_count == 0
    assert stats["predict"].median is None and stats["predict"].p90 is None
    assert stats["predict"].median_all == pytest.approx(record.steps["duration"][-1])


# -- the loss of a step is read later ---------------------------------------------------------


class CountingLoss:
    """A loss value readable with float(), which counts when it was read."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.reads = 0

    def __float__(self) -> float:
        self.reads += 1
        return self.value


def test_loss_object_is_not_read_inside_its_step_but_once_in_a_later_batch():
    rec = Recorder(memory_interval=3600)  # no time-based reading in this test
    losses = [CountingLoss(0.5 + i) for i in range(LOSS_BATCH + 1)]
    _add(rec, "train", 0.0, 0.1, loss=losses[0])
    assert losses[0].reads == 0  # reading it could make the host wait for the device
    for i, loss in enumerate(losses[1:], start=1):
        _add(rec, "train", 0.1 * i, 0.1 * i + 0.05, loss=loss)
    # A full batch was read at once, except the newest loss (its step may still be running).
    assert [loss.reads for loss in losses[: LOSS_BATCH - 1]] == [1] * (LOSS_BATCH - 1)
    assert [loss.reads for loss in losses[LOSS_BATCH - 1 :]] == [0, 0]
    record = rec.finish()
    assert [loss.reads for loss in losses] == [1] * (LOSS_BATCH + 1)
    np.testing.assert_allclose(record.steps["loss"], [0.5 + i for i in range(LOSS_BATCH + 1)])


def test_memory_sample_reads_the_waiting_losses_but_not_the_newest():
    rec = Recorder(memory_interval=0.0)  # a sample after every step
    first, second = CountingLoss(1.0), CountingLoss(2.0)
    _add(rec, "train", 0.0, 0.1, loss=first)
    assert first.reads == 0
    _add(rec, "train", 0.1, 0.2, loss=second)
    assert (first.reads, second.reads) == (1, 0)
    rec.finish()
    assert second.reads == 1


def test_zero_d_numpy_loss_is_settled_into_its_own_row():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.1, loss=np.array(0.75, dtype=np.float32))
    _add(rec, "train", 0.1, 0.2, loss=np.array(0.5))
    _add(rec, "eval", 0.2, 0.3)
    record = rec.finish()
    np.testing.assert_allclose(record.steps["loss"][:2], [0.75, 0.5])
    assert np.isnan(record.steps["loss"][2])


def test_tf_constant_loss_of_the_last_step_is_settled_by_finish():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.1, loss=1.0)
    _add(rec, "train", 0.1, 0.2, loss=tf.constant(1.5))
    record = rec.finish()
    np.testing.assert_allclose(record.steps["loss"], [1.0, 1.5])


def test_loss_that_cannot_be_read_as_a_float_leaves_nan_without_error():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.1, loss=tf.constant([1.0, 2.0]))
    _add(rec, "train", 0.1, 0.2, loss=0.25)
    record = rec.finish()
    assert np.isnan(record.steps["loss"][0])
    assert record.steps["loss"][1] == pytest.approx(0.25)
    # Unreadable is no loss, not a NaN loss.
    assert record.steps["no_loss"].tolist() == [True, False]


def test_no_loss_is_flagged_apart_from_a_nan_loss_the_step_reported():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.1)  # returned no loss
    _add(rec, "train", 0.1, 0.2, loss=math.nan)  # a Python NaN the code computed
    _add(rec, "train", 0.2, 0.3, loss=tf.constant(math.nan))  # a NaN tensor, read later
    _add(rec, "train", 0.3, 0.4, loss=tf.constant(math.inf))
    _add(rec, "train", 0.4, 0.5, loss=tf.constant(0.5))
    record = rec.finish()
    assert record.steps["no_loss"].tolist() == [True, False, False, False, False]
    assert np.isnan(record.steps["loss"][:3]).all()
    assert record.steps["loss"][3] == np.inf and record.steps["loss"][4] == 0.5
    frame = record.to_dataframe()
    assert frame["no_loss"].tolist() == [True, False, False, False, False]


def test_fused_call_reports_its_loss_on_its_last_row_and_no_loss_on_the_others():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.4, kind="keras", loss=tf.constant(0.3), fused=4)
    _add(rec, "train", 0.4, 0.8, kind="keras", fused=4)  # a call without a loss
    record = rec.finish()
    assert record.steps["no_loss"].tolist() == [True, True, True, False] + [True] * 4
    assert record.steps["loss"][3] == pytest.approx(0.3)
    assert np.isnan(record.steps["loss"][[0, 1, 2, 4, 5, 6, 7]]).all()


# -- fused steps -----------------------------------------------------------------------------


def test_fused_call_of_4_steps_becomes_4_equal_consecutive_rows_summing_to_the_call():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.05)
    _add(rec, "train", 1.0, 1.8, kind="keras", data_wait=0.01, loss=0.3, fused=4)
    record = rec.finish()
    assert record.step_count == 5
    rows = slice(1, 5)
    durations = record.steps["duration"][rows]
    starts = record.steps["start"][rows]
    np.testing.assert_allclose(durations, [0.2] * 4, rtol=1e-9)
    assert durations.sum() == pytest.approx(0.8)
    np.testing.assert_allclose(starts, [1.0, 1.2, 1.4, 1.6], rtol=1e-9)
    np.testing.assert_allclose(starts[1:], starts[:-1] + durations[:-1], rtol=1e-9)
    assert record.steps["fused"][rows].tolist() == [4, 4, 4, 4]
    assert record.steps["fused"][0] == 1
    # the input wait happened once, before the call: it belongs to the group's first row
    assert record.steps["data_wait"][1] == pytest.approx(0.01)
    assert np.isnan(record.steps["data_wait"][2:5]).all()
    assert phase_stats(record)["train"].fused == 4


# -- the error that ended the run ------------------------------------------------------------


def test_keyboard_interrupt_is_recorded_as_interrupted():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.1)
    _add(rec, "train", 0.1, 0.2)
    rec.set_error(KeyboardInterrupt())
    error = rec.finish().error
    assert error is not None
    assert error.type == "KeyboardInterrupt"
    assert error.message == "interrupted"
    assert error.phase is None
    assert error.step == 2  # no step was running: the number of training steps done


def test_failure_noted_during_a_step_gives_its_phase_and_index_within_the_phase():
    rec = Recorder()
    for i in range(3):
        _add(rec, "train", i, i + 0.5)
    _add(rec, "eval", 3.0, 3.5)
    _add(rec, "eval", 4.0, 4.5)
    _add(rec, "train", 5.0, 5.5)
    exc = RuntimeError("eval batch failed")
    rec.note_failure(exc, Phase.EVAL)  # the third eval step raised
    rec.set_error(exc)
    error = rec.finish().error
    assert error is not None
    assert (error.type, error.message, error.phase, error.step) == (
        "RuntimeError",
        "eval batch failed",
        "eval",
        2,
    )


def test_exception_raised_while_handling_the_step_failure_keeps_the_steps_phase():
    rec = Recorder()
    _add(rec, "predict", 0.0, 0.1)
    origin = ValueError("bad input")
    rec.note_failure(origin, Phase.PREDICT)
    try:
        try:
            raise origin
        except ValueError as inner:
            raise TypeError("while reporting") from inner
    except TypeError as outer:
        rec.set_error(outer)
    error = rec.finish().error
    assert error is not None
    assert (error.type, error.phase, error.step) == ("TypeError", "predict", 1)


def test_unrelated_exception_after_a_step_failure_has_no_phase():
    rec = Recorder()
    _add(rec, "train", 0.0, 0.1)
    rec.note_failure(ValueError("handled by the cell"), Phase.TRAIN)
    rec.set_error(OSError("disk full"))
    error = rec.finish().error
    assert error is not None
    assert (error.type, error.message, error.phase, error.step) == ("OSError", "disk full", None, 1)


def test_keyboard_interrupt_inside_a_step_is_interrupted_at_that_steps_index():
    rec = Recorder()
    for i in range(4):
        _add(rec, "train", i, i + 0.5)
    interrupt = KeyboardInterrupt()
    rec.note_failure(interrupt, Phase.TRAIN)
    rec.set_error(interrupt)
    error = rec.finish().error
    assert error is not None
    assert (error.message, error.phase, error.step) == ("interrupted", "train", 4)
