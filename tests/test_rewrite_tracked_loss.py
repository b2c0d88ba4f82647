"""The rewrite of `untracked-loss`: a Keras 2 `train_step`'s returned loss fed to Keras 3's metrics.

What the rewritten step does under Keras 3 is `tests/test_diagnose_untracked_loss.py`'s; here,
which code it touches: the named class's own `train_step` only, and only its returns of a
one-entry ``{"loss": ...}`` dict.
"""

from __future__ import annotations

from tfdiag_magic.rewrite import (
    calls_compiled_metrics,
    feed_loss_to_metrics,
    feed_val_loss_to_metrics,
    metrics_fed_by_hand,
)

TWO_MODELS_CELL = """\
import tensorflow as tf, keras
class Generator(keras.Model):
    def train_step(self, data):
        return {"loss": 0.0}
class Custom(keras.Model):
    def train_step(model, data):
        def helper():
            return {"loss": 1.0}  # a function of its own: left alone
        loss = self.loss(data[1], model(data[0]))
        if loss > 100:
            return {"loss": loss * 2}
        # the end of the step
        return {'loss': loss}
"""


def test_only_the_named_classs_step_and_its_own_loss_returns_are_rewritten():
    new = feed_loss_to_metrics(TWO_MODELS_CELL, "Custom")
    assert new is not None
    compile(new, "<cell>", "exec")
    # The other class's step, and the nested function's return, as they were.
    assert (
        "class Generator(keras.Model):\n"
        "    def train_step(self, data):\n"
        '        return {"loss": 0.0}' in new
    )
    assert '            return {"loss": 1.0}  # a function of its own: left alone' in new
    # Both returns of the step, each its own loss, through the method's own first parameter.
    assert "                metric.update_state(loss * 2)\n" in new
    assert "        # the end of the step\n        for metric in model.metrics:\n" in new
    assert (
        '            if metric.name == "loss":\n                metric.update_state(loss)\n' in new
    )
    assert new.count("return {m.name: m.result() for m in model.metrics}") == 2


def test_a_step_that_returns_more_than_its_loss_or_no_such_class_is_left_alone():
    more = TWO_MODELS_CELL.replace("return {'loss': loss}", "return {'loss': loss, 'mae': loss}")
    more = more.replace('return {"loss": loss * 2}', "return {'total': loss}")
    assert feed_loss_to_metrics(more, "Custom") is None
    assert feed_loss_to_metrics(TWO_MODELS_CELL, "Missing") is None


KERAS_2_GUIDE_CELL = """\
class CustomModel(keras.Model):
    def train_step(self, data):
        x, y, sw = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, sample_weight=sw)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.weights), self.weights))
        # Update the metrics
        self.compiled_metrics.update_state(y, y_pred, sample_weight=sw)
        return {m.name: m.result() for m in self.metrics}
"""


def test_the_compiled_metrics_shim_is_replaced_by_metrics_fed_by_hand():
    new = metrics_fed_by_hand(KERAS_2_GUIDE_CELL, "CustomModel")
    assert new is not None
    compile(new, "<cell>", "exec")
    assert "compiled_metrics" not in new
    assert (
        "        # Update the metrics\n"
        "        for metric in self.metrics:\n"
        '            if metric.name == "loss":\n'
        "                metric.update_state(loss)\n"
        "            else:\n"
        "                metric.update_state(y, y_pred, sample_weight=sw)\n"
    ) in new
    # The loss is what the step differentiates (keras-io's distiller weighs two losses).
    weighed = KERAS_2_GUIDE_CELL.replace(
        "tape.gradient(loss, self.weights)", "tape.gradient(total, self.weights)"
    ).replace(
        "            loss = self.compiled_loss(y, y_pred, sample_weight=sw)\n",
        "            total = 0.9 * self.student_loss_fn(y, y_pred)\n",
    )
    assert "metric.update_state(total)" in metrics_fed_by_hand(weighed, "CustomModel")
    # Without a name for the loss there is nothing to feed the loss metric.
    unnamed = KERAS_2_GUIDE_CELL.replace("loss = self.compiled_loss", "self.compiled_loss")
    unnamed = unnamed.replace("tape.gradient(loss, self.weights)", "tape.gradient(0, self.weights)")
    assert metrics_fed_by_hand(unnamed, "CustomModel") is None


def test_which_methods_call_the_compiled_metrics_shim():
    assert calls_compiled_metrics(KERAS_2_GUIDE_CELL, "CustomModel", "train_step")
    assert not calls_compiled_metrics(KERAS_2_GUIDE_CELL, "CustomModel", "test_step")
    assert not calls_compiled_metrics(KERAS_2_GUIDE_CELL, "Other", "train_step")
    assert not calls_compiled_metrics(TWO_MODELS_CELL, "Custom", "train_step")
    assert not calls_compiled_metrics("%%tfprofile\n!ls\n", "CustomModel", "train_step")


VALIDATING_CELL = """\
class Validated(keras.Model):
    def train_step(self, data):
        return {"loss": self.loss(data[1], self(data[0]))}
    def test_step(self, data):
        x, y = data
        loss = self.loss(y, self(x, training=False))
        return {"loss": loss}
"""


def test_the_test_step_is_rewritten_with_the_train_step_or_alone():
    both = feed_loss_to_metrics(VALIDATING_CELL, "Validated", "Validated")
    assert both is not None and both.count("return {m.name: m.result() for m in self.metrics}") == 2
    assert "metric.update_state(self.loss(data[1], self(data[0])))" in both
    alone = feed_val_loss_to_metrics(VALIDATING_CELL, "Validated")
    assert alone is not None
    compile(alone, "<cell>", "exec")
    # The train step as it was; the test step's own return, fed.
    assert '        return {"loss": self.loss(data[1], self(data[0]))}\n' in alone
    assert (
        "        loss = self.loss(y, self(x, training=False))\n"
        "        for metric in self.metrics:\n"
        '            if metric.name == "loss":\n'
        "                metric.update_state(loss)\n"
        "        return {m.name: m.result() for m in self.metrics}\n" in alone
    )
    # Without the class's test step to mend, only the train step is; without either, nothing.
    assert feed_loss_to_metrics(TWO_MODELS_CELL, "Custom", "Custom") == feed_loss_to_metrics(
        TWO_MODELS_CELL, "Custom"
    )
    assert feed_val_loss_to_metrics(TWO_MODELS_CELL, "Custom") is None
