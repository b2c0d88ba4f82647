"""Slowdown and memory findings with a busy neighbour: a CPU hog on one core (a Python busy
loop pinned to one CPU), as on a shared machine, a workshop's Binder or CI.

A healthy cell must stay free of progressive-slowdown whether the neighbour runs throughout or
starts halfway through the run; a cell whose step grows with what it accumulates must still be
found. Real TensorFlow and Keras in the test's IPython shell; the hog is killed by its own pid.
"""

from __future__ import annotations

import keras
import pytest

from tests.conftest import start_cpu_hog, stop_cpu_hog
from tests.diagnosis_support import TABULAR, assert_silent, listing, problems, the
from tests.helpers import profiled

# A healthy LSTM text classifier on a prefetched dataset (keras-io's text classification
# pattern, token ids instead of raw text).
TEXT = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
tokens = rng.integers(1, 1000, size=(2000, 40))
labels = (tokens[:, :5].mean(axis=1) > 500).astype("int32")
"""

LSTM_CELL = (
    "train_ds = (tf.data.Dataset.from_tensor_slices((tokens, labels)).shuffle(2000).batch(32)\n"
    "            .prefetch(tf.data.AUTOTUNE))\n"
    "model = keras.Sequential([keras.Input((40,)), keras.layers.Embedding(1000, 32),\n"
    "                          keras.layers.LSTM(32), keras.layers.Dense(1)])\n"
    "model.compile(optimizer='adam', loss=keras.losses.BinaryCrossentropy(from_logits=True),\n"
    "              metrics=['accuracy'])\n"
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


def test_slowdown_of_a_loop_that_stacks_every_loss_so_far_with_a_neighbour(ip, cpu_hog):
    ip.run_cell(TABULAR)
    result, r = profiled(ip, STACKED_LOSSES)
    assert result.success
    f = the(r, "progressive-slowdown")
    assert f.evidence["steps"] == "loop iterations", listing(r)
    assert f.evidence["ratio"] >= 2
    assert f.evidence["rise_first_half_s"] > 0 and f.evidence["rise_second_half_s"] > 0
    assert f.evidence["rank_correlation"] >= 0.8
