"""Slowdown and memory findings with a busy neighbour: a CPU hog on one core (a Python busy
loop pinned to one CPU), as on a shared machine, a workshop's Binder or CI.

A healthy cell must stay free of progressive-slowdown whether the neighbour runs throughout or
starts halfway through the run; a cell whose step grows with what it accumulates must still be
found. Real TensorFlow and Keras in the test's IPython shell; the hog is killed by its own pid.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tests.conftest import start_cpu_hog, stop_cpu_hog
from tests.diagnosis_support import TABULAR, assert_silent, listing, problems
from tests.helpers import profiled, profiled_script
from tfdiag_magic.diagnose.progressive_slowdown import _half_rises, _splits_into_flat_parts

# A healthy LSTM text classifier on a prefetched dataset (keras-io's text classification
# pattern, token ids instead of raw text). Its autotuning is off: beside a neighbour an
# autotuned iterator's shut-down sleeps at epoch starts and the fit's end (measured on a crowded
# CI run: 2 epoch starts and the end, 1.07 s median, 22% of the run), a true `epoch-start-stall`
# that test_diagnose_epoch_starts covers. Its accuracy thresholds the logits at 0 (`"accuracy"`
# would threshold them at 0.5: a true `metric-on-logits`). The subject here is slowdown, and
# the assertion stays "no problem at all".
TEXT = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
tokens = rng.integers(1, 1000, size=(2000, 40))
labels = (tokens[:, :5].mean(axis=1) > 500).astype("int32")
"""

LSTM_CELL = (
    "train_ds = (tf.data.Dataset.from_tensor_slices((tokens, labels)).shuffle(2000).batch(32)\n"
    "            .prefetch(tf.data.AUTOTUNE))\n"
    "no_autotune = tf.data.Options()\n"
    "no_autotune.autotune.enabled = False\n"
    "train_ds = train_ds.with_options(no_autotune)\n"
    "model = keras.Sequential([keras.Input((40,)), keras.layers.Embedding(1000, 32),\n"
    "                          keras.layers.LSTM(32), keras.layers.Dense(1)])\n"
    "model.compile(optimizer='adam', loss=keras.losses.BinaryCrossentropy(from_logits=True),\n"
    "              metrics=[keras.metrics.BinaryAccuracy(threshold=0.0)])\n"
    "history = model.fit(train_ds, epochs=4, verbose=0, callbacks=callbacks)\n"
)

# Each iteration stacks every loss so far to log their running mean: the loop's iterations
# grow with the list.
STACKED_LOSSES = (
    "history = []\n"
    "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)\n"
    "for epoch in range(6):\n"
    "    for xb, yb in ds:\n"
    "        loss = train_step(xb, yb)\n"
    "        history.append(loss)\n"
    "        running_mean = tf.reduce_mean(tf.stack(history))\n"
)


class NeighbourStarts(keras.callbacks.Callback):
    """Starts a CPU hog when training reaches `epoch`: a neighbour's job begins mid-run."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch
        self.hog = None
        self.started_at: int | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch and self.hog is None:
            self.hog = start_cpu_hog()
            self.started_at = epoch

    def stop(self) -> None:
        if self.hog is not None:
            stop_cpu_hog(self.hog)
            self.hog = None


@pytest.fixture
def text(ip):
    ip.run_cell(TEXT)
    return ip


def test_no_slowdown_for_a_healthy_lstm_with_a_neighbour_throughout(text, cpu_hog):
    text.user_ns["callbacks"] = []
    result, r = profiled(text, LSTM_CELL)
    assert result.success
    assert r.record.phase_counts()["train"] == 4 * 63
    assert_silent(r, "progressive-slowdown")
    assert not problems(r), listing(r)


def test_no_slowdown_for_a_healthy_lstm_when_a_neighbour_starts_halfway(text):
    neighbour = NeighbourStarts(epoch=2)
    text.user_ns["callbacks"] = [neighbour]
    try:
        result, r = profiled(text, LSTM_CELL)
    finally:
        neighbour.stop()
    assert result.success
    assert neighbour.started_at == 2  # the neighbour did start halfway
    assert_silent(r, "progressive-slowdown")
    assert not problems(r), listing(r)


@pytest.mark.alone  # the hog is the neighbour; the other worker's training would be a second one
def test_slowdown_of_a_loop_that_stacks_every_loss_so_far_with_a_neighbour(tmp_path, cpu_hog):
    """Run as a script, in a process of its own: most of this loop's slowdown is TensorFlow
    making a new `Pack` kernel for each new length of the list (about 20 us per element on
    the first run in a process, measured: 2 ms to 10 ms an iteration; a rerun in the same
    process, its kernels cached, rose only 0.8 to 1.2 ms). An earlier test in a shared process
    that stacked or converted lists of tensors would leave part of the cache warm, and the
    early windows flat."""
    report, stdout, _ = profiled_script(tmp_path, "stacked_losses.py", TABULAR + STACKED_LOSSES)
    found = [f for f in report["findings"] if f["code"] == "progressive-slowdown"]
    assert len(found) == 1, stdout
    evidence = found[0]["evidence"]
    assert evidence["steps"] == "loop iterations", stdout
    assert evidence["ratio"] >= 2, stdout
    assert max(evidence["rise_first_half_s"], evidence["rise_second_half_s"]) > 0, stdout
    assert evidence["rank_correlation"] >= 0.8, stdout


def test_a_window_filled_by_a_burst_does_not_make_a_flat_half_rise():
    # A neighbour's burst fills the last window of an otherwise flat half (a neighbour that
    # started once, halfway): the half's rise stays nothing. A steady rise reads its span.
    flat_with_burst = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 1.6, 1.6, 1.6, 1.6, 1.6])
    assert _half_rises(flat_with_burst) == (0.0, 0.0)
    assert _half_rises(np.arange(10.0)) == (4.0, 4.0)
    # One window of a rising half thrown back by a burst: the half still rises.
    first, second = _half_rises(np.array([2, 3, 8, 9, 12, 14, 15, 8.6, 10, 19.0]))
    assert first > 0.1 * 17 and second > 0.1 * 17


def test_a_rise_beyond_a_neighbours_step_may_level_off_but_a_step_is_never_a_rise():
    # Window medians (ms) of the stacking loop beside a hog and a neighbour's training: the
    # middle windows slowed, the last ones not, so the second half reads flat (measured here,
    # 1 run in 12). The first half rises throughout: no split leaves two flat parts.
    levelled = np.array([3.5, 3.4, 4.3, 6.0, 10.2, 12.3, 12.1, 12.2, 11.3, 11.7])
    first, second = _half_rises(levelled)
    assert second < 0.1 * (levelled[-1] - levelled[0]) < first
    assert not _splits_into_flat_parts(levelled)
    # Flat, a jump, flat, wherever the jump falls: a neighbour arriving and staying.
    for at in range(3, 8):
        step = np.where(np.arange(10) < at, 1.0, 3.5) + 0.05 * np.cos(np.arange(10))
        assert _splits_into_flat_parts(step), at
