"""A loop iteration's row, written from its two clock reads in a batch (`Recorder.next_item`,
`Recorder.write_iterations`): the same rows and totals as one row per iteration, written when
the slots are full, when the flush time is due, before a reader counts the rows mid-run, and
when the loop ends.

The recorder is fed as the loop probe feeds it (`next_item` with the times an iterator would
read), with steps inside the iterations as the tf.function probe sends them (`add_step`), at
exact times, so every expected value is computed from the times fed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfdiag_magic import recorder as recorder_module
from tfdiag_magic.record import Kind, Phase
from tfdiag_magic.recorder import LOOP_PAIRS, ROW_FIELDS, Recorder

PHASE, KIND, START, DURATION, WAIT, EPOCH, LOOP = (
    ROW_FIELDS.index(name)
    for name in ("phase", "kind", "start", "duration", "data_wait", "epoch", "loop")
)
ITERATION_S, WAIT_S, STEP_S = 1 / 256, 1 / 2048, 1 / 1024


def _rows(rec: Recorder) -> np.ndarray:
    return np.frombuffer(rec._rows, dtype=np.float64).reshape(-1, len(ROW_FIELDS)).copy()


def _loop_rows(rec: Recorder, loop_id: int) -> np.ndarray:
    rows = _rows(rec)
    return rows[(rows[:, KIND] == Kind.LOOP) & (rows[:, LOOP] == loop_id)]


def _iterate(rec: Recorder, loop_id: int, n: int, t: float, steps: bool = True) -> float:
    """`n` iterations of loop `loop_id` from time `t` (each waits WAIT_S for its item, then
    runs one training step of STEP_S when `steps`); returns the time the last one ends."""
    state = rec.begin_loop(loop_id)
    for _ in range(n):
        rec.next_item(state, t, t + WAIT_S)
        if steps:  # as the tf.function probe sends a step: it takes the waits so far
            begin = t + WAIT_S + STEP_S
            wait, rec.pending_wait = rec.pending_wait, math.nan
            rec.add_step(Phase.TRAIN, Kind.TF_FUNCTION, begin, begin + STEP_S, wait, -1, False)
        t += ITERATION_S
    return t


@pytest.fixture()
def rec():
    recorder = Recorder(memory_interval=3600.0)
    recorder._next_memory = math.inf  # no memory sample: it would flush the slots early
    return recorder


def test_each_iteration_gets_its_row_and_totals_are_exact(rec):
    n = 3 * LOOP_PAIRS + 5  # three full batches and some
    t0 = rec.t0 + 1.0
    end = _iterate(rec, 7, n, t0)
    rec.end_loop(7)
    # end_loop ends the open iteration at the clock's now; the others end when the next item
    # was asked for.
    rows = _loop_rows(rec, 7)
    assert rows.shape[0] == n
    starts = rows[:, START] + rec.t0
    expected_starts = t0 + WAIT_S + ITERATION_S * np.arange(n)
    np.testing.assert_allclose(starts, expected_starts, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rows[:-1, DURATION], ITERATION_S - WAIT_S, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rows[:, WAIT], WAIT_S, rtol=0, atol=1e-12)
    assert (rows[:, PHASE] == Phase.LOOP).all()
    assert (rows[:, EPOCH] == -1).all()  # the outermost loop
    iterations, seconds, wait, dropped = rec.loop_totals[7][:4]
    assert (iterations, dropped) == (n, 0)
    assert wait == pytest.approx(n * WAIT_S, abs=1e-9)
    assert seconds == pytest.approx(float(rows[:, DURATION].sum()), abs=1e-9)
    assert end > t0
    # The steps inside carry the loop's id and their iteration's wait, one row each.
    rows = _rows(rec)
    steps = rows[rows[:, KIND] == Kind.TF_FUNCTION]
    assert steps.shape[0] == n
    assert (steps[:, LOOP] == 7).all()
    np.testing.assert_allclose(steps[:, WAIT], WAIT_S, rtol=0, atol=1e-12)


def test_rows_wait_in_the_slots_until_a_batch_is_full(rec):
    t = _iterate(rec, 1, LOOP_PAIRS, rec.t0 + 1.0)
    # LOOP_PAIRS iterations: the last is open, the others wait in the slots.
    assert _loop_rows(rec, 1).shape[0] == 0
    state = rec.open_loops[-1]
    rec.next_item(state, t, t + WAIT_S)  # the slots are full: every ended iteration is written
    assert _loop_rows(rec, 1).shape[0] == LOOP_PAIRS


def test_a_reader_counting_rows_mid_run_sees_every_ended_iteration(rec):
    _iterate(rec, 2, 10, rec.t0 + 1.0)
    mark = rec.step_mark()  # a Keras call begins inside the 10th iteration
    assert _loop_rows(rec, 2).shape[0] == 9  # the open 10th is not a row yet
    assert rec.steps_since(mark) == 0


def test_rows_are_written_when_the_flush_time_is_due(rec, monkeypatch):
    monkeypatch.setattr(recorder_module, "LOOP_FLUSH_S", 2 * ITERATION_S)
    _iterate(rec, 3, 8, rec.t0 + 1.0)
    # Every second or third iteration is past its loop's flush time: at most two wait.
    assert _loop_rows(rec, 3).shape[0] >= 5


def test_an_inner_loop_takes_its_outer_loops_iteration_as_epoch(rec):
    t = rec.t0 + 1.0
    outer = rec.begin_loop(10)
    for _ in range(3):
        rec.next_item(outer, t, t + WAIT_S)
        t = _iterate(rec, 11, 5, t + WAIT_S)
        rec.end_loop(11)
    rec.end_loop(10)
    inner = _loop_rows(rec, 11)
    assert inner.shape[0] == 15
    assert list(inner[:, EPOCH]) == [e for e in range(3) for _ in range(5)]
    assert (_loop_rows(rec, 10)[:, EPOCH] == -1).all()


def test_a_loop_without_steps_is_counted_past_the_row_limit(rec, monkeypatch):
    monkeypatch.setattr(recorder_module, "LOOP_ROW_LIMIT", 100)
    n = 250
    _iterate(rec, 4, n, rec.t0 + 1.0, steps=False)
    rec.end_loop(4)
    assert _loop_rows(rec, 4).shape[0] == 100
    iterations, _, _, dropped = rec.loop_totals[4][:4]
    assert (iterations, dropped) == (n, n - 100)
