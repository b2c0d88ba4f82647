"""Every kind of Keras model builds and trains under ``%%tfprofile`` exactly as it does plainly.

Keras reads constructors' parameters to capture a model's config (`Operation.__new__` uses
`inspect.signature` and `inspect.getfullargspec` on ``cls.__init__``), so a probe that wraps a
constructor with other parameter names broke the Keras 3 guide's pattern, a `keras.Model`
subclass with `train_step`/`test_step` and no ``__init__`` (``KeyError: 'model'``). These
tests build Sequential, functional, subclassed (with and without ``__init__``, custom
train/test steps) and GAN-style models (two optimizers given to ``compile``) under the tool,
check that every callable the tool replaced reads as the original to both kinds of
introspection, and that the weights after training equal those of a plain run.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from tests.helpers import profiled, run_cell

MODELS = '''
import numpy as np, keras, tensorflow as tf

X = np.random.default_rng(0).normal(size=(96, 6)).astype("float32")
Y = (X @ np.arange(6, dtype="float32")[:, None] / 10).astype("float32")


class NoInitStep(keras.Model):
    """The guide's "Customizing what happens in fit()": no __init__, own train/test steps."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class WithInit(keras.Model):
    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(units, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))


class GAN(keras.Model):
    """keras-io's GAN pattern: compile(d_optimizer=..., g_optimizer=...), no "loss" key."""

    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real):
        n = tf.shape(real)[0]
        z = keras.random.normal((n, self.latent_dim), seed=self.seed_generator)
        fake = self.generator(z)
        both = tf.concat([fake, real], axis=0)
        labels = tf.concat([tf.ones((n, 1)), tf.zeros((n, 1))], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(both))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        z = keras.random.normal((n, self.latent_dim), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(tf.zeros((n, 1)), self.discriminator(self.generator(z)))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        return {"d_loss": d_loss, "g_loss": g_loss}


def build_and_train():
    """Each kind of model, built from a fixed seed and fitted a few steps: name -> weights."""
    trained = {}

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    trained["sequential"] = model

    keras.utils.set_random_seed(2)
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dense(4)(inputs)))
    model.compile(optimizer="adam", loss="mse")
    model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    trained["functional"] = model

    keras.utils.set_random_seed(3)
    inputs = keras.Input((6,))
    model = NoInitStep(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    model.evaluate(X, Y, batch_size=32, verbose=0)
    trained["subclassed_no_init"] = model

    keras.utils.set_random_seed(4)
    model = WithInit(units=3)
    model.compile(optimizer="rmsprop", loss="mse")
    model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    trained["subclassed_with_init"] = model

    keras.utils.set_random_seed(5)
    discriminator = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])
    generator = keras.Sequential([keras.Input((3,)), keras.layers.Dense(6)])
    gan = GAN(discriminator, generator, latent_dim=3)
    gan.compile(
        d_optimizer=keras.optimizers.Adam(1e-3),
        g_optimizer=keras.optimizers.Adam(1e-3),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    gan.fit(tf.data.Dataset.from_tensor_slices(X).batch(16), epochs=2, shuffle=False, verbose=0)
    trained["gan"] = gan
    return {name: [w.numpy() for w in m.weights] for name, m in trained.items()}
'''

RUN = "weights = build_and_train()\nreplaced = replaced_callables(before)\n"


def owners() -> list[Any]:
    """Classes and modules whose attributes the tool's probes replace while a run lasts."""
    import keras
    import tensorflow as tf
    from keras.src.callbacks.callback_list import CallbackList
    from keras.src.models.functional import Functional
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    from tensorflow.python.eager import context
    from tensorflow.python.eager.polymorphic_function import (
        polymorphic_function,
        tracing_compilation,
    )

    classes = {*keras.Model.__mro__, *Functional.__mro__, *BaseOptimizer.__mro__, CallbackList}
    classes -= {object}
    return [*classes, polymorphic_function.Function, context.Context, tracing_compilation, tf]


def snapshot() -> dict[tuple[int, str], Any]:
    """Every attribute the owners hold in their own namespace, by (owner, name)."""
    return {(id(owner), name): value for owner in owners() for name, value in vars(owner).items()}


def replaced_callables(before: dict[tuple[int, str], Any]) -> list[tuple[str, Any, Any]]:
    """(label, original, replacement) for each callable (or property setter) now replaced."""
    found = []
    for owner in owners():
        label = getattr(owner, "__qualname__", getattr(owner, "__name__", "?"))
        for name, now in list(vars(owner).items()):
            was = before.get((id(owner), name))
            if was is None or was is now:
                continue
            if isinstance(now, property) and isinstance(was, property):
                if now.fset is not was.fset:
                    found.append((f"{label}.{name}.fset", was.fset, now.fset))
            elif callable(now) and callable(was):
                found.append((f"{label}.{name}", was, now))
    return found


def _argspec(function: Any) -> inspect.FullArgSpec | str:
    try:
        return inspect.getfullargspec(function)
    except TypeError as exc:
        return f"unsupported: {exc}"


@pytest.fixture
def models_ip(ip):
    run_cell(ip, MODELS)
    ip.user_ns["replaced_callables"] = replaced_callables
    ip.user_ns["before"] = snapshot()
    return ip


def test_every_kind_of_model_trains_under_the_tool_as_it_does_plainly(models_ip):
    result, r = profiled(models_ip, RUN)
    assert result.success, result.error_in_exec
    assert r.error is None
    # The classes anew for the plain run: Keras rebases a Model subclass built like a
    # functional model onto Functional on its first build, and the tool must meet it fresh.
    run_cell(models_ip, MODELS)
    plain = run_cell(models_ip, "plain = build_and_train()\n")
    assert plain.success, plain.error_in_exec
    plain_weights, tool_weights = models_ip.user_ns["plain"], models_ip.user_ns["weights"]
    assert (
        set(tool_weights)
        == set(plain_weights)
        == {
            "sequential",
            "functional",
            "subclassed_no_init",
            "subclassed_with_init",
            "gan",
        }
    )
    for name, weights in plain_weights.items():
        assert len(tool_weights[name]) == len(weights), name
        for mine, theirs in zip(tool_weights[name], weights, strict=True):
            np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7, err_msg=name)
    # Every fit is seen: 2 epochs of 6 batches for each of the five models.
    assert r.record.phase_counts()["train"] == 5 * 12
    built = [m.cls for m in r.record.models]
    assert {"Sequential", "Functional", "NoInitStep", "WithInit", "GAN"} <= set(built)


def test_replaced_callables_keep_the_original_signature_during_the_run(models_ip):
    result, _ = profiled(models_ip, RUN)
    assert result.success, result.error_in_exec
    replaced = models_ip.user_ns["replaced"]
    labels = {label for label, _, _ in replaced}
    # The discovery finds the wrappers that Keras or TensorFlow may introspect.
    assert {
        "Model.__init__",
        "Functional.__init__",
        "BaseOptimizer.apply",
        "Function.__call__",
        "Context.set_memory_growth",
    } <= labels
    for label, original, wrapper in replaced:
        assert inspect.signature(wrapper) == inspect.signature(original), label


# Keras' fit/evaluate/predict/compile and the CallbackList hooks (probes/keras_calls.py) are
# checked by the test after this one, together with every other replaced callable.
KERAS_CALLS = ("compile", "fit", "evaluate", "predict", "_on_batch", "on_")


def test_replaced_constructors_and_functions_keep_their_argspec(models_ip):
    result, _ = profiled(models_ip, RUN)
    assert result.success, result.error_in_exec
    replaced = [
        entry
        for entry in models_ip.user_ns["replaced"]
        if not entry[0].rsplit(".", 1)[-1].startswith(KERAS_CALLS)
        and not entry[0].rsplit(".", 1)[-1].endswith("_on_batch")
    ]
    assert len(replaced) >= 6
    for label, original, wrapper in replaced:
        assert _argspec(wrapper) == _argspec(original), label
        assert wrapper.__name__ == original.__name__, label


def test_keras_api_wrappers_keep_their_argspec(models_ip):
    result, _ = profiled(models_ip, RUN)
    assert result.success, result.error_in_exec
    for label, original, wrapper in models_ip.user_ns["replaced"]:
        assert _argspec(wrapper) == _argspec(original), label
