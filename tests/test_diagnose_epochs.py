"""keras-epoch-setup: a fit of many short epochs whose set-up outweighs their training, on real
Keras fits, and the fits that must stay silent: long epochs, few epochs, and epochs whose time
goes to the user's own callbacks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled
from tfdiag_magic.diagnose import keras_epoch_setup
from tfdiag_magic.fit_epochs import fit_epochs
from tfdiag_magic.record import EpochStart, KerasCall, Kind, Phase, Record, TraceEvent
from tfdiag_magic.stats import time_split
from tfdiag_magic.views.text import split_parts

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
    assert ev["setup_per_epoch_s"] >= 1.5 * ev["steps_time_per_epoch_s"], ev
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


def _pandas_fit(tab, data: str):
    """The run of the tabular fit on `frame` and `labels`, which `data` makes from `x` and `y`,
    and its fit's Keras call."""
    result, r = profiled(
        tab,
        "import pandas as pd\nx, y = table(314)\n" + data + "model = regressor()\n"
        "history = model.fit(frame, labels, validation_split=0.2, verbose=0, epochs=40)\n",
    )
    assert result.success
    (call,) = (c for c in r.record.keras_calls if c.api == "fit")
    return r, call


def test_the_rewrite_of_a_pandas_fit_casts_as_keras_does(tab):
    # TensorFlow's "Basic regression" tutorial: a frame of float64 columns and the bool columns
    # of `pd.get_dummies`, float64 labels. Keras casts the frame whole to float32; as a plain
    # array it is one of Python objects, which `from_tensor_slices` refuses ("Unsupported
    # object type int"): the rewrite crashed there before it cast as Keras does.
    r, call = _pandas_fit(
        tab,
        "frame = pd.DataFrame(x[:, :6].astype('float64'), columns=list('abcdef'))\n"
        "frame['origin'] = rng.choice(['Europe', 'Japan', 'USA'], size=314)\n"
        "frame = pd.get_dummies(frame, columns=['origin'], prefix='', prefix_sep='')\n"
        "labels = pd.Series(y[:, 0].astype('float64'))\n",
    )
    assert (call.x_cast, call.y_cast) == ("float32", "float32")
    f = the(r, "keras-epoch-setup")
    assert f.evidence["data"] == ["pandas"]
    assert 'np.asarray(frame, dtype="float32").reshape(len(frame), -1)' in f.rewrite, f.rewrite
    result, fixed = profiled(tab, f.rewrite)
    assert result.success, result.error_in_exec
    assert fixed.record.phase_counts() == r.record.phase_counts()
    assert tab.user_ns["train_data"].element_spec[0].dtype.name == "float32"


def test_a_frame_keras_does_not_cast_is_read_as_it_is(tab):
    # Float32 columns and int labels: Keras casts nothing, and neither does the rewrite.
    r, call = _pandas_fit(
        tab, "frame = pd.DataFrame(x)\nlabels = pd.Series((y[:, 0] > 0).astype('int64'))\n"
    )
    assert (call.x_cast, call.y_cast) == ("", "")
    f = the(r, "keras-epoch-setup")
    assert (
        "np.asarray(frame).reshape(len(frame), -1), np.asarray(labels).reshape(len(labels), -1)"
        in f.rewrite
    ), f.rewrite


def test_the_rewrite_of_a_fit_on_one_series_feeds_it_as_keras_does(tab):
    # The "Basic regression" tutorial's first model: one `Horsepower` series through a
    # `Normalization(input_shape=[1,], axis=None)`. Keras feeds a series as one column; fed as
    # a vector the rewritten fit traced on rank-1 batches, and the tutorial's `evaluate` on the
    # series afterwards failed on a shape of unknown rank.
    cell = (
        "import pandas as pd\nx, y = table(314)\n"
        "frame = pd.DataFrame(x.astype('float64'), columns=list('abcdefghi'))\n"
        "labels = pd.Series(y[:, 0].astype('float64'))\n"
        "norm = keras.layers.Normalization(input_shape=[1,], axis=None)\n"
        "norm.adapt(np.array(frame['a']))\n"
        "model = keras.Sequential([norm, keras.layers.Dense(1)])\n"
        "model.compile(optimizer=keras.optimizers.Adam(0.1), loss='mean_absolute_error')\n"
        "history = model.fit(frame['a'], labels, validation_split=0.2, verbose=0, epochs=40)\n"
        "score = model.evaluate(frame['a'], labels, verbose=0)\n"
    )
    result, r = profiled(tab, cell)
    assert result.success
    f = the(r, "keras-epoch-setup")
    assert "np.asarray(frame['a'], dtype=\"float32\").reshape(len(frame['a']), -1)" in f.rewrite
    result, fixed = profiled(tab, f.rewrite)
    assert result.success, result.error_in_exec  # evaluate on the series, as before
    assert tab.user_ns["train_data"].element_spec[0].shape.as_list() == [None, 1]
    assert fixed.record.phase_counts()["train"] == r.record.phase_counts()["train"]


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
    # The run's time split counts the sleeps as the callbacks', not as Keras' set-up.
    split = time_split(r.record)
    assert split.callbacks >= 12 * 0.25 and split.epoch_setup < 0.5 * split.callbacks, split


def _fit_record(epochs: int, steps: int, step_s: float, gap_s: float) -> Record:
    """A recorded `fit` on a dataset: `epochs` of `steps` training steps of `step_s`, each
    epoch after the first begun `gap_s` after the last one's end (no validation, no hooks)."""
    starts, epoch_of, t = [], [], 0.0
    for epoch in range(epochs):
        for _ in range(steps):
            starts.append(t)
            epoch_of.append(epoch)
            t += step_s
        t += gap_s
    n = len(starts)
    record = Record()
    for name, column in record.steps.items():  # every column, at its empty value
        record.steps[name] = np.zeros(n, dtype=column.dtype)
    record.steps["data_wait"] = np.full(n, np.nan)
    record.steps["start"] = np.array(starts)
    record.steps["duration"] = np.full(n, step_s)
    record.steps["phase"] = np.full(n, Phase.TRAIN, dtype=np.uint8)
    record.steps["kind"] = np.full(n, Kind.KERAS, dtype=np.uint8)
    record.steps["epoch"] = np.array(epoch_of, dtype=np.int32)
    record.steps["callback_time"] = np.zeros(n)
    record.keras_calls = [
        KerasCall("fit", 0.0, t, n, n * step_s, -1, "sequential", 32.0, "dataset", line=3)
    ]
    record.wall_time = t + 0.5
    return record


@pytest.mark.parametrize(
    ("step_s", "gap_s", "found"),
    [
        (0.05, 0.6, True),  # 0.6 s of set-up an epoch against 0.5 s of training: 1.2x
        (0.3, 1.5, True),  # 1.5 s against 3 s of training: 0.5x, 33% of the run
        (0.3, 0.9, False),  # 0.9 s against 3 s: 23% of the run
        (0.02, 0.25, False),  # 1.25x, at 0.25 s an epoch: the size of Keras' own set-up
        (0.02, 0.45, True),  # 2.25x: short epochs, as before
    ],
    ids=[
        "long-set-up-1.2x",
        "long-set-up-0.5x",
        "long-set-up-under-a-quarter",
        "short-set-up-1.25x",
        "short-set-up-2.25x",
    ],
)
def test_a_long_set_up_between_epochs_is_judged_by_its_share_of_the_run(step_s, gap_s, found):
    # The distributed-training tutorial's MirroredStrategy fit: 3.6 s an epoch between epochs
    # against 2.3 s of training, 57% of the run (restarting each epoch's distributed iterator),
    # was silent where twice the training was asked of every set-up; a review's runs of it read
    # 1.5-2.2 s against 3.0 s, 29-39% of the run, silent where it had to match the training.
    record = _fit_record(12, 10, step_s, gap_s)
    finding = keras_epoch_setup.check(record, None)
    assert (finding is not None) == found, finding
    if found:
        assert finding.evidence["setup_per_epoch_s"] == pytest.approx(gap_s, rel=0.01)
        assert "repeat()" in finding.fix and "steps_per_epoch" in finding.fix


def test_the_time_split_gives_kerass_epoch_set_up_and_the_epoch_hooks_their_own_parts():
    """Between epochs: Keras' own set-up (11 gaps of 0.25 s, less the callbacks' epoch hooks)
    and the callbacks' epoch hooks, each a part of the time split, no longer "other"."""
    record = _fit_record(12, 10, 0.02, 0.25)
    record.epoch_hook_seconds = 0.5
    split = time_split(record)
    assert split.compute == pytest.approx(2.4)
    assert split.epoch_setup == pytest.approx(11 * 0.25 - 0.5)
    assert split.callbacks == pytest.approx(0.5)
    # What is left: the gap after the last epoch and the run's last half second.
    assert split.other == pytest.approx(0.25 + 0.5)
    labels = dict(split_parts(split.to_dict()))
    assert labels["epoch set-up"] == pytest.approx(2.25) and "callbacks" in labels
    # A fit of one epoch has no time between epochs.
    assert time_split(_fit_record(1, 10, 0.02, 0.25)).epoch_setup == 0.0


def _distributed(record: Record, asleep_s: float) -> Record:
    """`record`'s fit made over a distributed dataset: its iterator's cross-device function
    traced at each epoch's start, where the thread slept `asleep_s` of 0.05 s more."""
    starts = record.steps["start"][record.steps["epoch"] != np.roll(record.steps["epoch"], 1)]
    for epoch, begin in enumerate(starts.tolist()):
        record.traces.append(TraceEvent(begin, 0.01, "_remote_next_func", "", False, True))
        record.epoch_starts.append(
            EpochStart(max(begin - asleep_s - 0.05, 0.0), epoch, asleep_s + 0.05, 0.04, 0.01)
        )
    return record


def test_a_distributed_iterators_restart_each_epoch_is_judged_from_a_fifth_of_a_second():
    # A review's MirroredStrategy fits (the distributed-training tutorial's) spent 0.39-1.03 s
    # an epoch between epochs against 0.64-1.15 s of training, 28-39% of the run, asleep for
    # about 1 s of each start; the 0.5 s bar let it through in two runs of three.
    assert keras_epoch_setup.check(_fit_record(12, 10, 0.06, 0.4), None) is None
    record = _distributed(_fit_record(12, 10, 0.06, 0.4), asleep_s=0.3)
    finding = keras_epoch_setup.check(record, None)
    assert finding is not None
    assert finding.evidence["distributed_iterator"] is True
    assert finding.evidence["asleep_at_epoch_starts_s"] == pytest.approx(11 * 0.3, rel=0.01)
    assert "restarting the distributed iterator" in finding.detail and "slept" in finding.detail
    assert "repeat()" in finding.fix
    # Under a fifth of a second an epoch it is judged as any fit's: against the training.
    assert keras_epoch_setup.check(_distributed(_fit_record(12, 10, 0.06, 0.15), 0.1), None) is None
