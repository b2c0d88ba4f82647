"""metric-on-logits: accuracy, precision or recall of a logits model thresholded at 0.5.

Real Keras: a model whose loss is built with ``from_logits=True`` and whose output layer is
linear, compiled with ``metrics=["accuracy"]`` (as TensorFlow's word-embeddings tutorial does),
is found, and what the finding says is checked against the model's own predictions, counted by
the test: Keras' accuracy is the share of logits above 0.5, not above 0. The rewrite thresholds
at 0, and its accuracy is the predictions' count at 0. A sigmoid model, a metric already at 0,
a multi-class model (its accuracy takes the largest logit) and a subclassed model (its output
layer is not known) stay silent.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled

CODE = "metric-on-logits"

DATA = """
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1000, 20)).astype("float32")
w = rng.normal(size=(20,))
y = ((x @ w + 2 * rng.normal(size=1000)) > 0).astype("float32")
"""

# TensorFlow's word-embeddings tutorial compiles its logits model so.
LOGITS_MODEL = (
    DATA
    + """
model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer="adam",
              loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(x, y, batch_size=50, epochs=2, verbose=0)
shown = model.evaluate(x, y, verbose=0, return_dict=True)["accuracy"]
logits = model.predict(x, verbose=0)[:, 0]
"""
)


def _counted(ip, threshold: float) -> float:
    logits, y = ip.user_ns["logits"], ip.user_ns["y"]
    return float(np.mean((logits > threshold) == (y > 0.5)))


def test_accuracy_of_a_logits_model_is_found_and_thresholded_at_zero(ip):
    result, r = profiled(ip, LOGITS_MODEL)
    assert result.success
    # What Keras showed is the share of logits above 0.5; the model's is above 0, and differs.
    shown = ip.user_ns["shown"]
    assert shown == pytest.approx(_counted(ip, 0.5), abs=1e-6)
    assert abs(_counted(ip, 0.0) - shown) > 0.01, (shown, _counted(ip, 0.0))
    f = the(r, CODE)
    ev = f.evidence
    assert f.severity == "warning"
    assert (
        ev["loss"] == "BinaryCrossentropy(from_logits=True)" and ev["output_activation"] == "linear"
    )
    (metric,) = ev["metrics"]
    assert metric["name"] == "accuracy" and metric["kind"] == "BinaryAccuracy", metric
    assert metric["threshold"] == 0.5 and metric["threshold_as_probability"] == 0.622, metric
    fit_shown = ip.user_ns["history"].history["accuracy"][-1]
    assert metric["shown_last"] == pytest.approx(fit_shown, rel=1e-3), metric
    assert "a probability of 0.62" in f.detail
    # The rewrite: the same key in History, the model's accuracy, and silent.
    assert 'tf.keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0)' in f.rewrite
    result, fixed = profiled(ip, f.rewrite)
    assert result.success
    assert "accuracy" in ip.user_ns["history"].history
    assert ip.user_ns["shown"] == pytest.approx(_counted(ip, 0.0), abs=1e-6)
    assert_silent(fixed, CODE)


def test_precision_and_accuracy_of_a_functional_logits_model_are_named(ip):
    cell = (
        DATA
        + """
inputs = keras.Input((20,))
outputs = keras.layers.Dense(1, name="logit")(keras.layers.Dense(8, activation="relu")(inputs))
model = keras.Model(inputs, outputs)
model.compile("adam", loss=keras.losses.BinaryCrossentropy(from_logits=True),
              metrics=[keras.metrics.BinaryAccuracy(), keras.metrics.Precision(), "mae"])
model.fit(x, y, epochs=1, verbose=0)
"""
    )
    result, r = profiled(ip, cell)
    assert result.success
    f = the(r, CODE)
    assert [m["kind"] for m in f.evidence["metrics"]] == ["BinaryAccuracy", "Precision"]
    assert f.evidence["output_layer"] == "logit"
    assert "keras.metrics.BinaryAccuracy(threshold=0.0)" in f.rewrite
    assert "keras.metrics.Precision(thresholds=0.0)" in f.rewrite and '"mae"' in f.rewrite


def test_every_model_the_run_trained_with_the_fault_is_named(ip):
    # TensorFlow's overfit-and-underfit tutorial compiles its seven models in one helper: the
    # finding named only the first.
    cell = (
        DATA
        + """
def compile_and_fit(model, metrics):
    model.compile("adam", loss=keras.losses.BinaryCrossentropy(from_logits=True), metrics=metrics)
    model.fit(x, y, epochs=1, verbose=0)
def build(name, units):
    return keras.Sequential([keras.Input((20,)), keras.layers.Dense(units, activation="elu"),
                             keras.layers.Dense(1)], name=name)
compile_and_fit(build("tiny", 4), ["accuracy"])
compile_and_fit(build("small", 8), ["accuracy"])
compile_and_fit(build("right", 8), [keras.metrics.BinaryAccuracy(threshold=0.0)])
compile_and_fit(build("large", 16), ["accuracy"])
"""
    )
    result, r = profiled(ip, cell)
    assert result.success
    f = the(r, CODE)
    assert f.evidence["model"] == "tiny" and f.evidence["other_models"] == ["small", "large"]
    assert "The model `tiny` (and 2 more models of the run, the same way: `small`, `large`)" in (
        f.detail
    ), f.detail
    assert "right" not in f.detail


SILENT = {
    "sigmoid": (
        'keras.layers.Dense(1, activation="sigmoid")',
        'loss="binary_crossentropy", metrics=["accuracy"]',
    ),
    "threshold-at-zero": (
        "keras.layers.Dense(1)",
        "loss=keras.losses.BinaryCrossentropy(from_logits=True),"
        " metrics=[keras.metrics.BinaryAccuracy(threshold=0.0)]",
    ),
    "multi-class": (
        "keras.layers.Dense(3)",
        'loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]',
    ),
}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_metrics_that_read_the_outputs_as_they_are_stay_silent(ip, name):
    layer, compiled = SILENT[name]
    labels = "(y * 2).astype('int64')" if name == "multi-class" else "y"
    cell = DATA + (
        f"model = keras.Sequential([keras.Input((20,)), {layer}])\n"
        f"model.compile('adam', {compiled})\n"
        f"model.fit(x, {labels}, epochs=1, verbose=0)\n"
    )
    result, r = profiled(ip, cell)
    assert result.success, result.error_in_exec
    assert_silent(r, CODE)


def test_a_subclassed_models_output_layer_is_not_guessed(ip):
    cell = (
        DATA
        + """
class Scorer(keras.Model):
    def __init__(self):
        super().__init__()
        self.logit = keras.layers.Dense(1)
    def call(self, inputs):
        return keras.activations.sigmoid(self.logit(inputs))  # probabilities after all
model = Scorer()
model.compile("adam", loss=keras.losses.BinaryCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(x, y, epochs=1, verbose=0)
"""
    )
    result, r = profiled(ip, cell)
    assert result.success
    assert_silent(r, CODE)
