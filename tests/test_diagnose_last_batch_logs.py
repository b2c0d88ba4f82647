"""last-batch-logs: fit shows one batch's value of what a custom `train_step` returns.

Real Keras 3: a model whose `train_step` returns its loss under a name no metric holds
(`{"d_loss": loss}`, as keras-io's WGAN-GP returns its two losses) is fitted with a callback of
the test's that keeps every batch's logs. `History` holds each epoch's last batch's value, the
test's own record says so, and the finding's means are the test's. The same model with a
`keras.metrics.Mean` tracker (keras-io's Keras 3 form), and a model with Keras' own step, are
silent.
"""

from __future__ import annotations

import numpy as np

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled
from tfdiag_magic.diagnose import last_batch_logs
from tfdiag_magic.record import EpochLogs, Record

CODE = "last-batch-logs"

MODEL = """
import numpy as np, keras, tensorflow as tf
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32") + rng.normal(size=256)).astype("float32")
class Kept(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.batches = []
    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(float(logs["d_loss"]))
class Critic(keras.Model):
    def __init__(self, tracked):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.tracked = tracked
        self.tracker = keras.metrics.Mean(name="d_loss")
    def call(self, inputs):
        return self.dense(inputs)
    @property
    def metrics(self):
        return [self.tracker] if self.tracked else []
    def train_step(self, data):
        features, target = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(features)[:, 0] - target))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        if self.tracked:
            self.tracker.update_state(loss)
            return {"d_loss": self.tracker.result()}
        return {"d_loss": loss}
"""

FIT = """
critic = Critic(tracked=TRACKED)
critic.compile(optimizer=keras.optimizers.SGD(0.05))
kept = Kept()
history = critic.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0, callbacks=[kept])
"""


def test_the_last_batchs_loss_shown_as_the_epochs_is_found_with_the_epochs_mean(ip):
    ip.run_cell(MODEL + "TRACKED = False\n")
    result, r = profiled(ip, FIT)
    assert result.success
    batches = np.array(ip.user_ns["kept"].batches).reshape(3, 8)
    shown = ip.user_ns["history"].history["d_loss"]
    assert np.allclose(shown, batches[:, -1])  # Keras 3: the last batch's, not the mean
    assert not np.allclose(shown, batches.mean(axis=1), rtol=0.05)
    f = the(r, CODE)
    ev = f.evidence
    assert ev["keys"] == ["d_loss"]
    assert [e["epoch"] for e in ev["epochs"]] == [0, 1, 2]
    for row, values in zip(ev["epochs"], batches, strict=True):
        assert row["batches"] == 8
        assert np.isclose(row["shown"], values[-1], rtol=1e-3)
        assert np.isclose(row["mean"], values.mean(), rtol=1e-3)
        assert np.isclose(row["least"], values.min(), rtol=1e-3)
        assert np.isclose(row["largest"], values.max(), rtol=1e-3)
    assert "last batch" in f.title and "`d_loss`" in f.detail


def test_a_tracked_loss_and_keras_own_step_are_silent(ip):
    ip.run_cell(MODEL + "TRACKED = True\n")
    result, r = profiled(ip, FIT)
    assert result.success
    batches = np.array(ip.user_ns["kept"].batches).reshape(3, 8)
    # the tracker's running mean: the last batch's value is the epoch's mean
    assert np.allclose(ip.user_ns["history"].history["d_loss"], batches[:, -1])
    assert_silent(r, CODE)
    assert not r.record.epoch_logs

    result, r = profiled(
        ip,
        "plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "plain.compile(optimizer='sgd', loss='mse', metrics=['mae'])\n"
        "plain.fit(x, y, batch_size=32, epochs=2, verbose=0)\n",
    )
    assert result.success
    assert_silent(r, CODE)
    assert not r.record.epoch_logs


def test_a_tracker_under_another_name_and_a_learning_rate_are_silent(ip):
    # The tracker's running mean returned as "d_loss" (its own name "critic_loss"): its last
    # value is the epoch's mean. A decaying learning rate returned per step: its last value is
    # the one wanted.
    ip.run_cell(MODEL + "TRACKED = True\n")
    result, r = profiled(
        ip,
        "class Renamed(Critic):\n"
        "    def __init__(self):\n"
        "        super().__init__(tracked=True)\n"
        "        self.tracker = keras.metrics.Mean(name='critic_loss')\n"
        "    def train_step(self, data):\n"
        "        logs = super().train_step(data)\n"
        "        return {**logs, 'lr': self.optimizer.learning_rate}\n"
        "schedule = keras.optimizers.schedules.ExponentialDecay(0.05, 4, 0.9)\n"
        "critic = Renamed()\n"
        "critic.compile(optimizer=keras.optimizers.SGD(schedule))\n"
        "kept = Kept()\n"
        "history = critic.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0,\n"
        "                     callbacks=[kept])\n",
    )
    assert result.success
    lr = ip.user_ns["history"].history["lr"]
    assert lr[0] > lr[1] > lr[2]  # the schedule decays: each epoch shows its last batch's
    assert set(ip.user_ns["history"].history) == {"d_loss", "lr"}
    assert_silent(r, CODE)
    assert not r.record.epoch_logs


def test_a_loss_that_falls_at_every_batch_is_found_too(ip):
    # Early training on like batches: the loss falls at every step, and the last batch's is
    # far below the epoch's mean (a review's CycleGAN: every one of 47 steps of its first epoch).
    ip.run_cell(MODEL + "TRACKED = False\n")
    result, r = profiled(
        ip,
        "same = np.tile(x[:32], (8, 1))\n"
        "target = np.tile(y[:32], 8)\n"
        "critic = Critic(tracked=False)\n"
        "critic.compile(optimizer=keras.optimizers.SGD(0.01))\n"
        "kept = Kept()\n"
        "history = critic.fit(same, target, batch_size=32, epochs=2, shuffle=False, verbose=0,\n"
        "                     callbacks=[kept])\n",
    )
    assert result.success
    batches = np.array(ip.user_ns["kept"].batches).reshape(2, 8)
    assert (np.diff(batches, axis=1) < 0).all()  # it only fell
    f = the(r, CODE)
    assert [e["epoch"] for e in f.evidence["epochs"]] == [0, 1]
    assert np.isclose(f.evidence["epochs"][0]["mean"], batches[0].mean(), rtol=1e-3)


# keras-io's knowledge distillation's `test_step`, in short: it returns the loss of the batch,
# which no metric holds. `fit` shows the validation's last batch as `val_student_loss`, and
# `evaluate` returns it likewise.
EVALUATED = """
class Student(Critic):
    def test_step(self, data):
        features, target = data
        return {"student_loss": tf.reduce_mean(tf.square(self(features)[:, 0] - target))}
class KeptTests(keras.callbacks.Callback):
    def on_test_begin(self, logs=None):
        self.batches = []
        self.runs = getattr(self, "runs", [])
        self.runs.append(self.batches)
    def on_test_batch_end(self, batch, logs=None):
        self.batches.append(float(logs["student_loss"]))
student = Student(tracked=True)
student.compile(optimizer=keras.optimizers.SGD(0.05))
kept = KeptTests()
"""


def test_the_last_test_batchs_value_shown_by_fits_validation_and_evaluate_is_found(ip):
    ip.run_cell(MODEL + "TRACKED = True\n" + EVALUATED)
    result, r = profiled(
        ip,
        "history = student.fit(x[:192], y[:192], batch_size=32, epochs=2, shuffle=False,\n"
        "                      verbose=0, validation_data=(x[192:], y[192:]),\n"
        "                      validation_batch_size=16, callbacks=[kept])\n"
        "returned = student.evaluate(x, y, batch_size=32, verbose=0, return_dict=True,\n"
        "                            callbacks=[kept])\n",
    )
    assert result.success
    runs = [np.array(run) for run in ip.user_ns["kept"].runs]
    assert [len(run) for run in runs] == [4, 4, 8]  # two validations of 64 rows, then evaluate
    shown = ip.user_ns["history"].history["val_student_loss"]
    assert np.allclose(shown, [runs[0][-1], runs[1][-1]])  # Keras 3: the last batch's
    assert np.isclose(ip.user_ns["returned"]["student_loss"], runs[2][-1])
    # What the probe read: each validation's and the evaluate's batches, as the callback kept
    # them; the training's own `d_loss` is the tracker's, and nothing of it is read.
    read = {(e.phase, e.epoch): e for e in r.record.epoch_logs}
    assert set(read) == {("validation", 0), ("validation", 1), ("evaluate", 0)}, read
    for (phase, index), row in read.items():
        values = runs[2] if phase == "evaluate" else runs[index]
        assert row.key == ("student_loss" if phase == "evaluate" else "val_student_loss")
        assert row.batches == len(values)
        assert np.isclose(row.shown, values[-1], rtol=1e-3)
        assert np.isclose(row.mean, values.mean(), rtol=1e-3)
    # The finding, where a shown value was off its mean by a tenth of the range (the
    # first validation's at least: the seeded model's loss spreads over its 4 batches).
    off = [
        e
        for e in read.values()
        if abs(e.shown - e.mean) >= 0.1 * (e.largest - e.least) and e.largest > e.least
    ]
    assert read["validation", 0] in off, read  # shown 4.38, the mean of its 4 batches 5.23
    f = the(r, CODE)
    assert {(e["phase"], e["epoch"]) for e in f.evidence["epochs"]} <= set(read)
    assert f.evidence["epochs_off"] == len(off)
    assert "`test_step`" in f.detail and "`train_step`" not in f.detail
    assert "`student_loss`" in f.detail and "in `test_step`" in f.fix


def test_the_text_says_which_step_returned_what_and_counts_epochs_as_fit_prints_them():
    """keras-io's knowledge distillation, as recorded: its `train_step` returns
    `distillation_loss`, its `test_step` `student_loss` (fit shows the validation's as
    `val_student_loss`), and evaluate returns the last test batch's too."""
    record = Record()
    record.epoch_logs = [
        EpochLogs("distiller", "distillation_loss", 2, 10, 0.5, 0.9, 0.4, 1.4),
        EpochLogs("distiller", "val_student_loss", 2, 4, 2.26, 2.31, 2.2, 2.5, "validation"),
        EpochLogs("distiller", "student_loss", 0, 4, 2.21, 2.31, 2.2, 2.5, "evaluate"),
    ]
    f = last_batch_logs.check(record, None)
    assert f is not None
    assert "fit showed for each epoch and evaluate returned" in f.title, f.title
    assert (
        "Model `distiller`'s `train_step` returns `distillation_loss` and its `test_step`"
        " returns `student_loss`," in f.detail
    ), f.detail
    assert "In epoch 3, `distillation_loss` was shown as 0.5," in f.detail, f.detail
    assert "in `train_step` and `test_step`" in f.fix, f.fix
