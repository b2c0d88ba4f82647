"""untracked-loss: a custom `train_step` written for Keras 2, whose loss Keras 3's `fit` shows as 0.

The step returns `{"loss": loss}`, names that are exactly the model's metrics' after
`compile(loss=...)`; Keras 3 then shows its own loss tracker, which the step never updates. The
finding rests on what `fit` showed (its `History`, read when each fit ends) against what the
steps returned (read by the tool at each step), never on the step's text. The same model with
the step keras-io writes for Keras 3, or returning another name, stays silent, as does Keras'
own step.
"""

from __future__ import annotations

import pytest

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled
from tfdiag_magic.diagnose import untracked_loss
from tfdiag_magic.record import Record, TrainedState

CODE = "untracked-loss"

MODEL = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
class Regressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)
    def call(self, inputs, training=False):
        return self.out(self.hidden(inputs))
    @tf.function
    def train_step(self, data):
        inputs, labels = data
        with tf.GradientTape() as tape:
            predictions = self(inputs, training=True)
            loss = self.loss(labels, predictions)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
{end_of_step}
model = Regressor()
model.compile(optimizer="adam", loss=keras.losses.MeanSquaredError())
history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
"""

# The TensorFlow text-generation tutorial's `CustomTraining.train_step` ends so.
KERAS_2_END = "        return {'loss': loss}"
# keras-io's "Customizing what happens in fit()" for Keras 3.
KERAS_3_END = """\
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(labels, predictions)
        return {m.name: m.result() for m in self.metrics}"""
OTHER_NAME_END = "        return {'train_loss': loss}"


def test_a_keras_2_train_step_whose_loss_fit_shows_as_zero(ip):
    result, r = profiled(ip, MODEL.format(end_of_step=KERAS_2_END))
    assert result.success
    assert ip.user_ns["history"].history["loss"] == [0.0, 0.0]  # what Keras 3 showed
    f = the(r, CODE)
    ev = f.evidence
    assert f.severity == "warning"
    assert ev["train_step_of"] == "Regressor"
    assert ev["epochs_shown"] == 2 and ev["fits"] == 1
    assert ev["steps"] == 16  # 256 samples in batches of 32, two epochs
    assert ev["returned_loss_min"] > 0  # a mean squared error of sums of 8 normals
    assert ev["returned_loss_median"] > 0.5
    assert "each of its 2 epochs" in f.title
    assert "`Regressor.train_step`" in f.detail
    # The rewrite feeds the loss to the model's metrics: fit shows it, and nothing is found.
    assert "metric.update_state(loss)" in f.rewrite
    result, fixed = profiled(ip, f.rewrite)
    assert result.success
    shown = ip.user_ns["history"].history["loss"]
    assert all(value > 0.5 for value in shown), shown  # the loss, no more 0
    assert_silent(fixed, CODE)


@pytest.mark.parametrize(
    "end_of_step", [KERAS_3_END, OTHER_NAME_END], ids=["metrics-updated", "another-name"]
)
def test_a_train_step_whose_loss_fit_shows_stays_silent(ip, end_of_step):
    result, r = profiled(ip, MODEL.format(end_of_step=end_of_step))
    assert result.success
    shown = ip.user_ns["history"].history
    # What fit showed is the loss: the same steps that went unshown above, shown.
    loss_key = "loss" if "loss" in shown else "train_loss"
    assert all(value > 0 for value in shown[loss_key]), shown
    assert_silent(r, CODE)


def test_keras_own_train_step_stays_silent(ip):
    cell = MODEL.replace("    @tf.function\n    def train_step", "    def _unused_step").format(
        end_of_step=KERAS_2_END
    )
    result, r = profiled(ip, cell)
    assert result.success
    assert ip.user_ns["history"].history["loss"][-1] > 0
    assert_silent(r, CODE)


# keras-io's "Customizing what happens in fit()" as written for Keras 2.
KERAS_2_GUIDE = """
import numpy as np, tensorflow as tf, keras
class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}
    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}
inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])
rng = np.random.default_rng(0)
x = rng.random((1000, 32)); y = 100 + rng.random((1000, 1))  # far from the first outputs
history = model.fit(x, y, epochs=3, verbose=0)
true_mse = float(np.mean((model.predict(x, verbose=0) - y) ** 2))
evaluated_loss = model.evaluate(x, y, verbose=0)[0]
"""


def test_a_keras_2_guides_step_shows_the_mean_of_the_outputs_as_its_loss(ip):
    # Python shows a warning once per place; a filter added (one that changes nothing) makes
    # Keras' deprecation warning due again.
    ip.run_cell("import warnings\nwarnings.simplefilter('default', append=True)")
    result, r = profiled(ip, KERAS_2_GUIDE)
    assert result.success
    ns = ip.user_ns
    shown = ns["history"].history["loss"]
    # What Keras 3 showed (the premise, measured): outputs near 0, not an error near 100².
    assert ns["true_mse"] > 5000 and all(abs(value) < 50 for value in shown), shown
    f = the(r, CODE)
    assert f.title == "Keras shows the mean of the model's outputs as its loss"
    ev = f.evidence
    assert ev["train_step_of"] == "CustomModel" and ev["epochs_shown"] == 3
    assert ev["shown_loss_last"] == pytest.approx(shown[-1], rel=1e-3)
    assert ev["warning"].startswith("`model.compiled_metrics()` is deprecated")
    assert ev["seen_in"] == "Keras' warning"
    # Its test_step calls the shim too: evaluate's loss is the outputs' mean, and it is said.
    assert abs(ns["evaluated_loss"]) < 50 and ev["test_step_too"] is True
    assert "`CustomModel.test_step` calls it too" in f.detail
    # The cell run again: Keras warns no more, and the step's call in the cell says the same.
    result, again = profiled(ip, KERAS_2_GUIDE)
    assert result.success
    assert not [w for w in again.record.warnings if "compiled_metrics" in w.message]
    assert the(again, CODE).evidence["seen_in"] == "the cell's train_step"
    # The rewrite feeds the loss itself: fit shows the loss, and nothing is found.
    result, fixed = profiled(ip, f.rewrite)
    assert result.success
    shown = ns["history"].history["loss"]
    assert shown[-1] == pytest.approx(ns["true_mse"], rel=0.1), shown
    assert_silent(fixed, CODE)


# The same model, validated: a `test_step` of its class's, and a fit that validates each epoch.
VALIDATED = MODEL.replace(
    "{end_of_step}\n",
    """{end_of_step}
    def test_step(self, data):
        inputs, labels = data
        predictions = self(inputs, training=False)
        loss = self.loss(labels, predictions)
{end_of_test_step}
""",
).replace("epochs=2, verbose=0)", "epochs=2, verbose=0, validation_split=0.25)")
KERAS_2_TEST_END = "        return {'loss': loss}"
KERAS_3_TEST_END = """\
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
        return {m.name: m.result() for m in self.metrics}"""


def test_a_keras_2_test_step_whose_val_loss_fit_shows_as_zero(ip):
    cell = VALIDATED.format(end_of_step=KERAS_3_END, end_of_test_step=KERAS_2_TEST_END)
    result, r = profiled(ip, cell)
    assert result.success
    shown = ip.user_ns["history"].history
    assert shown["val_loss"] == [0.0, 0.0] and all(v > 0.5 for v in shown["loss"]), shown
    f = the(r, CODE)
    ev = f.evidence
    assert ev["test_step_of"] == "Regressor" and ev["epochs_validated"] == 2, ev
    assert ev["shown_loss_first"] == pytest.approx(shown["loss"][0], rel=1e-3), ev
    assert "val_loss of 0 for each of its 2 epochs" in f.title
    assert "`Regressor.test_step`" in f.detail and "`evaluate` returns 0.0" in f.detail
    # The rewrite feeds the test step's loss to the metrics: val_loss is the loss, and silent.
    assert f.rewrite.count("metric.update_state(loss)") == 2  # the train step's and its own
    result, fixed = profiled(ip, f.rewrite)
    assert result.success
    shown = ip.user_ns["history"].history
    assert all(value > 0.5 for value in shown["val_loss"]), shown
    assert_silent(fixed, CODE)


def test_both_keras_2_steps_are_found_and_mended_together(ip):
    cell = VALIDATED.format(end_of_step=KERAS_2_END, end_of_test_step=KERAS_2_TEST_END)
    result, r = profiled(ip, cell)
    assert result.success
    f = the(r, CODE)
    assert f.evidence["train_step_of"] == "Regressor" and f.evidence["test_step_too"], f.evidence
    assert "`Regressor.test_step` returns" in f.detail
    assert f.rewrite.count("metric.update_state(loss)") == 2
    result, fixed = profiled(ip, f.rewrite)
    assert result.success
    shown = ip.user_ns["history"].history
    assert all(v > 0.5 for v in shown["loss"] + shown["val_loss"]), shown
    assert_silent(fixed, CODE)


@pytest.mark.parametrize(
    "end_of_test_step",
    [KERAS_3_TEST_END, "        return {'val': loss}"],
    ids=["metrics-updated", "another-name"],
)
def test_a_test_step_whose_loss_fit_shows_stays_silent(ip, end_of_test_step):
    cell = VALIDATED.format(end_of_step=KERAS_3_END, end_of_test_step=end_of_test_step)
    result, r = profiled(ip, cell)
    assert result.success
    shown = ip.user_ns["history"].history
    key = "val_loss" if "val_loss" in shown else "val_val"
    assert all(value > 0.5 for value in shown[key]), shown
    assert_silent(r, CODE)


def test_a_zero_val_loss_is_not_blamed_on_a_test_step_the_cell_does_not_hold():
    # A val_loss of exactly 0 can be true (a hinge loss whose margins all hold): without the
    # step's text returning its loss alone, nothing is said.
    state = TrainedState(
        kind="model", name="m", optimizer="Adam", steps=10, iterations_first=0,
        iterations_last=10, learning_rate=1e-3, variables=2, variables_read=2,
        variables_changed=2, variables_last=2, variables_new=0, weights=2,
        shown_losses=(0.7, 0.5), custom_test_step="Classifier", shown_val_losses=(0.0, 0.0),
    )  # fmt: skip
    record = Record()
    record.trained = [state]
    assert untracked_loss.check(record, None) is None
    step = "class Classifier(keras.Model):\n    def test_step(self, data):\n"
    returns_a_metric = step + "        return {m.name: m.result() for m in self.metrics}\n"
    assert untracked_loss.check(record, returns_a_metric) is None
    found = untracked_loss.check(record, step + "        return {'loss': 0.0}\n")
    assert found is not None and found.evidence["test_step_of"] == "Classifier"
