"""no-learning: training steps that change no trainable weight, on real Keras 3 models.

The finding rests on what the learning probe reads at first sight and at the end of the run
(each model's or optimizer's `iterations`, a fingerprint of each trainable variable), never on
a warning's text: a Keras 2 GAN whose discriminator has no trainable weights, a model frozen
after compile, a custom loop at learning rate 0. Healthy training, partial fine-tuning, a GAN
whose two models both learn, and evaluate/predict only stay silent.
"""

from __future__ import annotations

import pytest

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled

CODE = "no-learning"

DATA = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
def mlp(name=None):
    return keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)],
        name=name)
"""

GAN = """
g = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)], name="gen")
d = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, activation="sigmoid")],
                     name="disc")
d.compile(optimizer="adam", loss="binary_crossentropy")
{freeze}
z = keras.Input((4,))
gan = keras.Model(z, d(g(z)), name="gan")
gan.compile(optimizer="adam", loss="binary_crossentropy")
{unfreeze}
for i in range(15):
    fake = g.predict_on_batch(rng.normal(size=(16, 4)))
    d.train_on_batch(np.concatenate([x[:16], fake]), np.r_[np.ones((16, 1)), np.zeros((16, 1))])
    gan.train_on_batch(rng.normal(size=(16, 4)), np.ones((16, 1)))
"""


@pytest.fixture
def data(ip):
    ip.run_cell(DATA)
    return ip


def test_keras2_gan_under_keras3_discriminator_never_learns(data):
    cell = GAN.format(freeze="d.trainable = False", unfreeze="")
    result, r = profiled(data, cell)
    assert result.success, result.error_in_exec
    finding = the(r, CODE)
    assert finding.severity == "warning"
    entries = {e.get("model"): e for e in finding.evidence["not_learning"]}
    assert set(entries) == {"disc"}, finding.evidence  # the generator learns through gan
    disc = entries["disc"]
    assert disc["training_steps"] == 15
    assert disc["trainable_variables"] == 0 and disc["weights"] == 2
    assert disc["iterations_before"] == disc["iterations_after"] == 0
    assert finding.evidence["training_steps_in_run"] == 30
    assert "compile" in finding.fix


def test_healthy_gan_both_optimizers_step(data):
    # The finding's fix for Keras 3: `trainable` set before each model's training in the loop
    # (each train function keeps the weights it was made with at its first call).
    cell = (
        GAN.format(freeze="d.trainable = False", unfreeze="")
        .replace("    d.train_on_batch(", "    d.trainable = True\n    d.train_on_batch(")
        .replace("    gan.train_on_batch(", "    d.trainable = False\n    gan.train_on_batch(")
    )
    result, r = profiled(data, cell)
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)
    trained = {s.name: s for s in r.record.trained}
    assert trained["disc"].variables_changed and trained["gan"].variables_changed
    assert trained["gan"].variables == 2  # the generator's kernel and bias alone


def test_keras2s_recompiled_discriminator_is_trained_by_the_generators_steps_too(data):
    """Why the fix is not Keras 2's recipe: a discriminator set trainable and compiled again
    before the loop is trainable when the combined model first trains, so the combined
    model's steps train it too. No finding (everything learns), but the fix must not be it."""
    cell = GAN.format(
        freeze="d.trainable = False",
        unfreeze="d.trainable = True\nd.compile(optimizer='adam', loss='binary_crossentropy')",
    )
    result, r = profiled(data, cell)
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)
    trained = {s.name: s for s in r.record.trained}
    assert trained["gan"].variables == 4  # the generator's and the discriminator's


def test_trainable_set_after_compile_then_fit(data):
    result, r = profiled(
        data,
        "m = mlp('frozen')\n"
        "m.compile(optimizer='sgd', loss='mse')\n"
        "m.trainable = False\n"
        "m.fit(x, y, batch_size=4, epochs=1, verbose=0)\n",
    )
    assert result.success, result.error_in_exec
    (entry,) = the(r, CODE).evidence["not_learning"]
    assert entry["model"] == "frozen" and entry["training_steps"] == 16
    assert entry["trainable_variables"] == 0 and entry["weights"] == 4
    assert entry["iterations_after"] == 0


def test_tf_variable_attributes_of_a_keras3_model_are_no_weights(data):
    # TensorFlow's basic training loops guide: a Keras Model keeping its variables as
    # `tf.Variable` attributes. Keras 3 does not track them: 0 weights, the loss the same in
    # every epoch. Nothing is frozen: the fix is to make them Keras weights.
    result, r = profiled(
        data,
        "class Line(keras.Model):\n"
        "    def __init__(self, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.w = tf.Variable(5.0)\n"
        "        self.b = tf.Variable(0.0)\n"
        "    def call(self, x):\n"
        "        return self.w * x + self.b\n"
        "xs = tf.linspace(-2.0, 2.0, 201)\n"
        "line = Line(name='line')\n"
        "line.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss='mse')\n"
        "history = line.fit(xs, 3.0 * xs + 2.0, epochs=12, batch_size=1000, verbose=0)\n",
    )
    assert result.success, result.error_in_exec
    losses = data.user_ns["history"].history["loss"]
    assert max(losses) - min(losses) < 1e-4 * max(losses)  # it did not learn
    finding = the(r, CODE)
    (entry,) = finding.evidence["not_learning"]
    assert entry["model"] == "line" and entry["weights"] == 0
    assert "add_weight" in finding.fix and "compile" not in finding.fix


def test_learning_rate_zero_custom_loop(data):
    result, r = profiled(
        data,
        "m = mlp()\n"
        "opt = keras.optimizers.SGD(0.0)\n"
        "for i in range(20):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean((m(x, training=True) - y) ** 2)\n"
        "    grads = tape.gradient(loss, m.trainable_variables)\n"
        "    opt.apply_gradients(zip(grads, m.trainable_variables))\n",
    )
    assert result.success, result.error_in_exec
    (entry,) = the(r, CODE).evidence["not_learning"]
    assert entry["optimizer"] == "SGD" and entry["learning_rate"] == 0.0
    assert (entry["iterations_before"], entry["iterations_after"]) == (0, 20)
    assert entry["trainable_variables"] == entry["variables_read"] == 4
    assert entry["variables_changed"] == 0


def test_healthy_fit_is_silent(data):
    result, r = profiled(
        data, "m = mlp()\nm.compile(optimizer='adam', loss='mse')\nm.fit(x, y, epochs=2, verbose=0)"
    )
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)
    (state,) = r.record.trained
    assert state.variables == state.variables_changed == 4 and state.steps == 4


def test_fit_then_weights_set_back_to_the_first_ones_is_silent(data):
    # keras-io's mixed-precision guide trains with fit, sets the model back to its first
    # weights, then trains it again in a custom loop; here that second training never runs (as
    # where the loop fails at its first step). The fit learned: read when it ended.
    result, r = profiled(
        data,
        "m = mlp('reset')\n"
        "m.compile(optimizer='adam', loss='mse')\n"
        "first = m.get_weights()\n"
        "m.fit(x, y, batch_size=8, epochs=2, verbose=0)\n"
        "m.set_weights(first)\n",
    )
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)
    (state,) = r.record.trained
    assert state.variables == state.variables_changed == 4 and state.steps == 16


def test_fit_at_learning_rate_zero_is_found_also_read_at_its_end(data):
    result, r = profiled(
        data,
        "m = mlp('still')\n"
        "m.compile(optimizer=keras.optimizers.SGD(0.0), loss='mse')\n"
        "m.fit(x, y, batch_size=8, epochs=2, verbose=0)\n",
    )
    assert result.success, result.error_in_exec
    (entry,) = the(r, CODE).evidence["not_learning"]
    assert entry["model"] == "still" and entry["variables_changed"] == 0


def test_healthy_custom_tf_function_loop_is_silent(data):
    result, r = profiled(
        data,
        "m = mlp()\n"
        "opt = keras.optimizers.Adam(1e-3)\n"
        "@tf.function\n"
        "def step(xb, yb):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean((m(xb, training=True) - yb) ** 2)\n"
        "    grads = tape.gradient(loss, m.trainable_variables)\n"
        "    opt.apply_gradients(zip(grads, m.trainable_variables))\n"
        "for i in range(20):\n"
        "    step(x, y)\n",
    )
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)
    (state,) = r.record.trained
    assert (state.kind, state.iterations_first, state.iterations_last) == ("optimizer", 0, 20)
    assert state.variables_changed == 4


def test_partial_fine_tuning_is_silent(data):
    result, r = profiled(
        data,
        "base = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation='relu')])\n"
        "base.trainable = False\n"
        "m = keras.Sequential([base, keras.layers.Dense(1)])\n"
        "m.compile(optimizer='adam', loss='mse')\n"
        "m.fit(x, y, batch_size=8, epochs=2, verbose=0)\n",
    )
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)
    (state,) = r.record.trained
    assert state.variables == state.variables_changed == 2 and state.weights == 4


def test_frozen_model_evaluated_and_predicted_only_is_silent(data):
    result, r = profiled(
        data,
        "m = mlp()\n"
        "m.compile(optimizer='adam', loss='mse')\n"
        "m.trainable = False\n"
        "for i in range(5):\n"
        "    m.evaluate(x, y, verbose=0)\n"
        "    m.predict(x, verbose=0)\n",
    )
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)
    assert r.record.trained == []
