"""gradient_accumulation: K micro-batches of B must update like one batch of K*B (SGD, for real)."""

from __future__ import annotations

import numpy as np
import pytest

from tfdiag_magic.rewrite import gradient_accumulation
from tfdiag_magic.rewrite.accumulation import keras_supports_accumulation

from .test_rewrite_common import assert_compiles, execute

CUSTOM_STEP_CELL = """import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(7)
BATCH_SIZE = 32
x = np.linspace(-1, 1, 32 * 3).reshape(32, 3).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3).astype("float32")
layers = tf.keras.layers
model = tf.keras.Sequential([tf.keras.Input((3,)), layers.Dense(4), layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.1)
loss_fn = tf.keras.losses.MeanSquaredError()  # a mean over the batch
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH_SIZE)

@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    # update the weights
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

for epoch in range(EPOCHS):
    for xb, yb in dataset:
        train_step(xb, yb)
"""


def test_custom_step_accumulates_like_one_large_batch():
    out = gradient_accumulation(CUSTOM_STEP_CELL, steps=4)
    assert out is not None
    assert_compiles(out)
    assert "BATCH_SIZE = 8\n" in out
    assert "accum_steps = 4\n" in out
    assert "    # update the weights\n    if not accum_grads:" in out
    assert "loss_fn = tf.keras.losses.MeanSquaredError()  # a mean over the batch" in out

    # One epoch: the original takes one step on 32 samples; the rewrite takes four
    # micro-batches of 8 and must make exactly the same update.
    reference = execute(CUSTOM_STEP_CELL, {"EPOCHS": 1})
    accumulated = execute(out, {"EPOCHS": 1})
    assert int(reference["optimizer"].iterations) == 1
    assert int(accumulated["optimizer"].iterations) == 1
    assert int(accumulated["accum_count"].numpy()) == 4
    for ref, acc in zip(
        reference["model"].get_weights(), accumulated["model"].get_weights(), strict=True
    ):
        np.testing.assert_allclose(acc, ref, rtol=1e-5, atol=1e-6)
    # The accumulators are zero again after the update, not before it.
    assert all(not np.any(a.numpy()) for a in accumulated["accum_grads"])

    # Over three epochs it keeps matching: three updates, same weights.
    reference = execute(CUSTOM_STEP_CELL, {"EPOCHS": 3})
    accumulated = execute(out, {"EPOCHS": 3})
    assert int(accumulated["optimizer"].iterations) == 3
    for ref, acc in zip(
        reference["model"].get_weights(), accumulated["model"].get_weights(), strict=True
    ):
        np.testing.assert_allclose(acc, ref, rtol=1e-4, atol=1e-5)


def test_inline_loop_with_keras3_apply_and_no_batch_literal():
    source = """import keras
from tensorflow import GradientTape

net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.05)
for xb, yb in batches:  # any batches
    with GradientTape() as tape:
        loss = keras.ops.mean((net(xb) - yb) ** 2)
    gradients = tape.gradient(loss, net.trainable_variables)
    opt.apply(gradients, net.trainable_variables)
"""
    out = gradient_accumulation(source, steps=2)
    assert out is not None
    assert out.startswith(
        "import keras\nfrom tensorflow import GradientTape\nimport tensorflow as tf\n"
    )
    assert "opt.apply_gradients(\n" in out
    batches = [(np.full((2, 2), i, "float32"), np.ones((2, 1), "float32")) for i in range(5)]
    ns = execute(out, {"batches": batches})
    assert int(ns["opt"].iterations) == 2  # 5 micro-batches: two updates, one carried over
    assert int(ns["accum_count"].numpy()) == 5


@pytest.mark.skipif(not keras_supports_accumulation(), reason="Keras without accumulation")
def test_keras_optimizer_accumulates_and_fit_batch_is_divided():
    source = """import numpy as np
import keras

keras.utils.set_random_seed(5)
x = np.linspace(0, 1, 64 * 2).reshape(64, 2).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(learning_rate=0.1)
model.compile(optimizer=optimizer, loss="mse")
model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
"""
    out = gradient_accumulation(source, steps=4)
    assert out is not None
    assert "keras.optimizers.SGD(learning_rate=0.1, gradient_accumulation_steps=4)" in out
    assert "batch_size=16," in out
    reference, accumulated = execute(source), execute(out)
    assert int(accumulated["optimizer"].iterations) == 2
    for ref, acc in zip(
        reference["model"].get_weights(), accumulated["model"].get_weights(), strict=True
    ):
        np.testing.assert_allclose(acc, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not keras_supports_accumulation(), reason="Keras without accumulation")
def test_optimizer_by_name_becomes_its_class():
    source = 'from tensorflow import keras\nm.compile(optimizer="rmsprop", loss="mse")\n'
    out = gradient_accumulation(source, steps=2)
    assert out == (
        "from tensorflow import keras\n"
        "m.compile(optimizer=keras.optimizers.RMSprop(gradient_accumulation_steps=2), "
        'loss="mse")\n'
    )


def test_unrecognised_or_unsafe_structures_return_none():
    # A batch size that does not split into 3 micro-batches.
    assert gradient_accumulation(CUSTOM_STEP_CELL, steps=3) is None
    assert gradient_accumulation(CUSTOM_STEP_CELL, steps=1) is None
    # The article's version: accumulators rebuilt every batch, `i` undefined. Not recognised.
    article = """import tensorflow as tf
accumulation_steps = 8
for epoch in range(num_epochs):
    for batch in dataset:
        with tf.GradientTape() as tape:
            loss = compute_loss(model(batch['features']), batch['labels'])
        gradients = tape.gradient(loss, model.trainable_variables)
        accumulated_gradients = [tf.zeros_like(g) for g in gradients]
        accumulated_gradients = [tf.add(ag, g) for ag, g in zip(accumulated_gradients, gradients)]
        if (i+1)%accumulation_steps == 0:
          scaled_gradients = [ag / accumulation_steps for ag in accumulated_gradients]
          optimizer.apply_gradients(zip(scaled_gradients, model.trainable_variables))
"""
    assert gradient_accumulation(article, steps=4) is None
    clipped = CUSTOM_STEP_CELL.replace(
        "    # update the weights\n",
        "    grads, _ = tf.clip_by_global_norm(grads, 1.0)\n",
    )
    assert gradient_accumulation(clipped, steps=4) is None
    two_models = CUSTOM_STEP_CELL + (
        "with tf.GradientTape() as t2:\n    l2 = critic(x)\n"
        "g2 = t2.gradient(l2, critic.trainable_variables)\n"
        "critic_opt.apply_gradients(zip(g2, critic.trainable_variables))\n"
    )
    assert gradient_accumulation(two_models, steps=4) is None
    wrapped = (
        "import keras\nopt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())\n"
        "model.compile(optimizer=opt, loss='mse')\n"
    )
    assert gradient_accumulation(wrapped, steps=2) is None
    foreign = "model.compile(optimizer=make_optimizer(), loss='mse')\n"
    assert gradient_accumulation(foreign, steps=2) is None
    assert gradient_accumulation("x = 1\n", steps=2) is None
