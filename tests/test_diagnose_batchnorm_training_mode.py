"""batchnorm-training-mode: BatchNormalization called with ``training=False`` trained by `fit`.

Real Keras 3: a functional model built as keras-io's "Transfer learning & fine-tuning" builds it
(``x = base_model(inputs, training=False)``), its base frozen for a first fit, then unfrozen and
fitted again at a small learning rate. The test reads the base's moving statistics around each
fit itself: they do not move in the first fit and move in the second, as the finding says, with
the same size of change. The rewrite keeps them still, and is silent. A base that stays frozen,
a base called without ``training=False`` (training mode asked for) and a subclassed model, whose
explicit ``training=False`` Keras keeps, stay silent.
"""

from __future__ import annotations

import numpy as np

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled

CODE = "batchnorm-training-mode"

DATA = """
import numpy as np, keras
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(3.0, 2.0, size=(512, 8)).astype("float32")
y = (x.sum(axis=1) > 24).astype("float32")
def statistics(layer):
    return np.concatenate([layer.moving_mean.numpy(), layer.moving_variance.numpy()])
"""

# keras-io's guide, its Xception base cut to a Dense layer and a BatchNormalization.
FINE_TUNING = """
base_model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16),
                               keras.layers.BatchNormalization(), keras.layers.ReLU()],
                              name="base")
base_model.trainable = False
inputs = keras.Input((8,))
features = base_model(inputs, training=False)
outputs = keras.layers.Dense(1)(features)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.Adam(),
              loss=keras.losses.BinaryCrossentropy(from_logits=True))
first = statistics(base_model.layers[1])
model.fit(x, y, batch_size=32, epochs=2, verbose=0)
frozen = statistics(base_model.layers[1])
base_model.trainable = True
model.compile(optimizer=keras.optimizers.Adam(1e-5),
              loss=keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x, y, batch_size=32, epochs=2, verbose=0)
tuned = statistics(base_model.layers[1])
"""


def _relative(ns, before: str, after: str) -> float:
    old, new = ns[before], ns[after]
    return float(np.linalg.norm(new - old) / np.linalg.norm(old))


def test_the_fine_tuning_fit_moves_what_training_false_should_keep_still(ip):
    ip.run_cell(DATA)
    result, r = profiled(ip, FINE_TUNING)
    assert result.success
    ns = ip.user_ns
    assert _relative(ns, "first", "frozen") == 0.0  # frozen: inference mode, as the guide says
    moved = _relative(ns, "frozen", "tuned")
    assert moved > 0.05  # unfrozen: Keras 3's fit ran the layer in training mode
    f = the(r, CODE)
    ev = f.evidence
    assert ev["called_with_training_false"] == ["base"]
    assert (ev["batch_norm_layers"], ev["moved"], ev["trainable"]) == (1, 1, 1)
    assert ev["fits_that_moved_them"] == [2]
    assert abs(ev["largest_relative_change"] - moved) <= 1e-3 * max(moved, 1.0)
    assert "training=False" in f.title and "second fit" in f.detail

    # The rewrite: the layer set non-trainable after unfreezing; it stays still, and is silent.
    assert f.rewrite is not None
    ip.run_cell(DATA)
    result, r = profiled(
        ip, f.rewrite.split("\n", 1)[1] if f.rewrite.startswith("%%") else f.rewrite
    )
    assert result.success
    assert _relative(ip.user_ns, "frozen", "tuned") == 0.0
    assert ip.user_ns["base_model"].layers[0].trainable  # the Dense layer still fine-tunes
    assert_silent(r, CODE)


def test_a_base_that_stays_frozen_or_is_asked_for_training_mode_is_silent(ip):
    ip.run_cell(DATA)
    stays_frozen = FINE_TUNING.replace("base_model.trainable = True\n", "")
    result, r = profiled(ip, stays_frozen)
    assert result.success
    assert _relative(ip.user_ns, "first", "tuned") == 0.0
    assert_silent(r, CODE)

    ip.run_cell(DATA)
    training_mode = FINE_TUNING.replace("base_model(inputs, training=False)", "base_model(inputs)")
    result, r = profiled(ip, training_mode)
    assert result.success
    assert _relative(ip.user_ns, "frozen", "tuned") > 0.05  # moved, as the code asked
    assert_silent(r, CODE)


def test_a_subclassed_models_explicit_training_false_is_kept_and_silent(ip):
    ip.run_cell(DATA)
    result, r = profiled(
        ip,
        "base = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8),\n"
        "                         keras.layers.BatchNormalization()])\n"
        "class Head(keras.Model):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.base, self.top = base, keras.layers.Dense(1)\n"
        "    def call(self, inputs, training=None):\n"
        "        return self.top(self.base(inputs, training=False))\n"
        "model = Head()\n"
        "model.compile(optimizer='adam', loss='mse')\n"
        "first = statistics(base.layers[1])\n"
        "model.fit(x, y, batch_size=32, epochs=2, verbose=0)\n"
        "tuned = statistics(base.layers[1])\n",
    )
    assert result.success
    assert _relative(ip.user_ns, "first", "tuned") == 0.0
    assert_silent(r, CODE)
