"""keras-epoch-setup: a fit of many short epochs whose set-up outweighs their training, on real
Keras fits, and the fits that must stay silent: long epochs, few epochs, and epochs whose time
goes to the user's own callbacks."""

from __future__ import annotations

import pytest

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled
from tfdiag_magic.diagnose.keras_epoch_setup import fit_epochs

# The shape of TensorFlow's tabular regression tutorial: 314 rows of 9 features, a 64-64-1
# model, `fit(x, y, validation_split=0.2, epochs=100)`: 8 training batches and 2 validation
# batches an epoch.
TABULAR = """
import time
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
def table(rows):
    x = rng.normal(size=(rows, 9)).astype("float32")
    return x, (x @ rng.normal(size=(9, 1))).astype("float32")
def regressor():
    model = keras.Sequential([keras.Input((9,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.001), loss="mean_absolute_error")
    return model
"""


@pytest.fixture
def tab(ip):
    ip.run_cell(TABULAR)
    return ip


def test_short_epochs_of_a_small_table_are_found(tab):
    result, r = profiled(
        tab,
        "x, y = table(314)\nmodel = regressor()\n"
        "history = model.fit(x, y, validation_split=0.2, verbose=0, epochs=40)\n",
    )
    assert result.success
    f = the(r, "keras-epoch-setup")
    ev = f.evidence
    assert ev["epochs"] == 40 and ev["steps_per_epoch"] == 8, ev
    assert ev["data"] == ["numpy"]
    (call,) = ev["calls"]
    assert call.startswith("line ") and "model.fit(x, y, validation_split=0.2" in call
    assert ev["setup_per_epoch_s"] >= 2 * ev["steps_time_per_epoch_s"], ev
    assert ev["setup_s"] >= 1.0 and ev["share_of_run"] >= 0.25, ev
    assert "from_tensor_slices" in f.fix
    # The rewrite builds the datasets once: the same 40 epochs of 8 batches, each epoch's
    # set-up a fraction of what it was (163 against 41 ms here; benchmarks/epoch_setup.py).
    assert f.rewrite is not None
    result, fixed = profiled(tab, f.rewrite)
    assert result.success
    assert fixed.record.phase_counts() == r.record.phase_counts()
    (before,) = (fit_epochs(r.record, c) for c in r.record.keras_calls if c.api == "fit")
    (after,) = (fit_epochs(fixed.record, c) for c in fixed.record.keras_calls if c.api == "fit")
    assert after.setup < 0.7 * before.setup, (after, before)


def test_long_epochs_are_silent(tab):
    # The same model on 16 times the rows: 126 batches an epoch, whose training outweighs
    # the epoch's set-up.
    result, r = profiled(
        tab,
        "x, y = table(16 * 314)\nmodel = regressor()\n"
        "model.fit(x, y, validation_split=0.2, verbose=0, epochs=12)\n",
    )
    assert result.success
    assert_silent(r, "keras-epoch-setup")


def test_time_in_the_users_epoch_callbacks_is_not_kerass_set_up(tab):
    # Each epoch ends in the user's callback (a checkpoint or a plot: here a 0.25 s sleep):
    # that time lies between the epochs, but it is not Keras' set-up, and a dataset built
    # once would not cut it.
    result, r = profiled(
        tab,
        "class Slow(keras.callbacks.Callback):\n"
        "    def on_epoch_end(self, epoch, logs=None):\n"
        "        time.sleep(0.25)\n"
        "x, y = table(40 * 32)\n"
        "data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(2)\n"
        "model = regressor()\n"
        "model.fit(data, verbose=0, epochs=12, callbacks=[Slow()])\n",
    )
    assert result.success
    assert r.record.epoch_hook_seconds >= 12 * 0.25
    assert_silent(r, "keras-epoch-setup")
