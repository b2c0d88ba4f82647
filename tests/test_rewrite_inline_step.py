"""compile_inline_step: a training step written inline in a loop becomes one tf.function, run
for real against the eager original; and the eager-step finding offers it on such a loop."""

from __future__ import annotations

import numpy as np
import pytest

from tfdiag_magic.rewrite import compile_inline_step

from .helpers import profiled, run_cell
from .test_rewrite_common import execute

DATA = """import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int64")
train_dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)])
optimizer = keras.optimizers.Adam(1e-2)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_acc_metric = keras.metrics.SparseCategoricalAccuracy()
"""

# keras-io's "Writing a training loop from scratch", before its tf.function section.
KERAS_IO_CELL = (
    DATA
    + """
losses = []
for epoch in range(3):
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        # Open a GradientTape to record the forward pass.
        with tf.GradientTape() as tape:
            logits = model(x_batch_train, training=True)
            loss_value = loss_fn(y_batch_train, logits)
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
        train_acc_metric.update_state(y_batch_train, logits)
        if step % 2 == 0:
            losses.append(float(loss_value))
"""
)

# TensorFlow's "Custom training: walkthrough": a cell function returns the gradients, the
# loop applies them.
WALKTHROUGH_CELL = (
    DATA
    + """
def loss(model, x, y, training):
    y_ = model(x, training=training)
    return loss_fn(y_true=y, y_pred=y_)

def grad(model, inputs, targets):
    with tf.GradientTape() as tape:
        loss_value = loss(model, inputs, targets, training=True)
    return loss_value, tape.gradient(loss_value, model.trainable_variables)

results = []
for epoch in range(3):
    epoch_loss_avg = keras.metrics.Mean()
    for x_batch, y_batch in train_dataset:
        loss_value, grads = grad(model, x_batch, y_batch)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        epoch_loss_avg.update_state(loss_value)
    results.append(float(epoch_loss_avg.result()))
"""
)

# A GAN's two tapes and two updates, its noise drawn in the loop before them.
GAN_CELL = """import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(0)
real_images = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices(real_images).batch(8)
generator = keras.Sequential([keras.Input((3,)), keras.layers.Dense(6)])
discriminator = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])
d_opt, g_opt = keras.optimizers.SGD(0.01), keras.optimizers.SGD(0.01)
bce = keras.losses.BinaryCrossentropy(from_logits=True)
history = []
for epoch in range(2):
    for real in dataset:
        noise = tf.random.normal([8, 3])
        with tf.GradientTape() as d_tape:
            fake = generator(noise)
            real_out, fake_out = discriminator(real), discriminator(fake)
            d_loss = bce(tf.ones_like(real_out), real_out) + bce(tf.zeros_like(fake_out), fake_out)
        d_grads = d_tape.gradient(d_loss, discriminator.trainable_weights)
        d_opt.apply_gradients(zip(d_grads, discriminator.trainable_weights))
        with tf.GradientTape() as g_tape:
            fake_out = discriminator(generator(noise))
            g_loss = bce(tf.ones_like(fake_out), fake_out)
        g_grads = g_tape.gradient(g_loss, generator.trainable_weights)
        g_opt.apply_gradients(zip(g_grads, generator.trainable_weights))
        history.append(float(g_loss))
"""

# The loop inside a function of the cell, its batch a dict of tensors taken apart first.
FUNCTION_CELL = (
    DATA
    + """
records = tf.data.Dataset.from_tensor_slices({"features": x, "label": y}).batch(16)

def train(model, dataset, epochs):
    history = []
    for epoch in range(epochs):
        for batch in dataset:
            features, label = batch["features"], batch["label"]
            with tf.GradientTape() as tape:
                loss = loss_fn(label, model(features, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        history.append(float(loss))
    return history

history = train(model, records, 3)
"""
)

# Keras 3's Dropout draws from a seed variable: the compiled step draws as the eager one.
DROPOUT_CELL = KERAS_IO_CELL.replace(
    "keras.layers.Dense(8), keras.layers.Dense(2)",
    "keras.layers.Dense(8), keras.layers.Dropout(0.5), keras.layers.Dense(2)",
)


def _weights(namespace: dict, *models: str) -> list[np.ndarray]:
    return [np.asarray(w) for name in models for w in namespace[name].get_weights()]


@pytest.mark.parametrize(
    ("cell", "models", "outputs"),
    [
        (KERAS_IO_CELL, ["model"], ["losses"]),
        (WALKTHROUGH_CELL, ["model"], ["results"]),
        (GAN_CELL, ["generator", "discriminator"], ["history"]),
        (FUNCTION_CELL, ["model"], ["history"]),
        (DROPOUT_CELL, ["model"], ["losses"]),
    ],
    ids=["keras-io", "walkthrough", "gan", "in-a-function", "dropout"],
)
def test_an_inline_step_compiled_trains_as_the_eager_one(cell, models, outputs):
    out = compile_inline_step(cell)
    assert out is not None
    assert "@tf.function\n" in out and "def train_step(" in out
    assert out.count("= train_step(") == 1
    eager, compiled = execute(cell), execute(out)
    if "train_step" in compiled:
        # Every batch has one shape and nothing Python changes between steps: one trace, and
        # the second tf.function makes after a first call that created the optimizer's
        # variables.
        assert compiled["train_step"].experimental_get_tracing_count() <= 2
    for a, b in zip(_weights(eager, *models), _weights(compiled, *models), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    for name in outputs:
        np.testing.assert_allclose(eager[name], compiled[name], rtol=1e-4, atol=1e-5)


def test_the_dropout_cell_has_its_dropout():
    assert "keras.layers.Dropout(0.5)" in DROPOUT_CELL


def test_the_step_returns_what_the_code_after_it_reads():
    out = compile_inline_step(KERAS_IO_CELL)
    assert out is not None
    # logits for the metric, the loss for the log; the tape and the gradients stay inside.
    assert "    return logits, loss_value\n" in out
    assert "logits, loss_value = train_step(x_batch_train, y_batch_train)" in out
    # Defined once, before the outer loop: not a new function (and trace) every epoch.
    assert out.index("def train_step(") < out.index("for epoch in range(3):")
    assert "# Open a GradientTape to record the forward pass." in out.split("for epoch")[0]


def test_a_name_the_outer_loop_reads_before_the_step_is_returned():
    cell = (
        "import tensorflow as tf\nloss = None\nfor epoch in range(3):\n"
        "    print(epoch, loss)  # the last epoch's loss\n"
        "    for x, y in ds:\n        with tf.GradientTape() as tape:\n"
        "            loss = loss_fn(y, model(x))\n"
        "        grads = tape.gradient(loss, model.trainable_weights)\n"
        "        opt.apply_gradients(zip(grads, model.trainable_weights))\n"
    )
    out = compile_inline_step(cell)
    assert out is not None
    assert "        loss = train_step(x, y)\n" in out


STEP = """
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x)){scale}
{extra_in_tape}    grads = tape.gradient(loss, model.trainable_weights)
    opt.apply_gradients(zip(grads, model.trainable_weights))
{after}"""


def _loop(head: str, scale: str = "", extra_in_tape: str = "", after: str = "") -> str:
    body = STEP.format(scale=scale, extra_in_tape=extra_in_tape, after=after)
    return "import tensorflow as tf\n" + head + body.replace("\n    ", "\n" + " " * 4)


@pytest.mark.parametrize(
    "cell",
    [
        # a learning rate per epoch: a graph would keep the first
        "import tensorflow as tf\nfor epoch in range(3):\n    lr = 0.1 / (epoch + 1)\n"
        "    for x, y in ds:\n        with tf.GradientTape() as tape:\n"
        "            loss = loss_fn(y, model(x)) * lr\n"
        "        grads = tape.gradient(loss, model.trainable_weights)\n"
        "        opt.apply_gradients(zip(grads, model.trainable_weights))\n",
        # the index of enumerate, a Python number: a trace per step
        _loop("for step, (x, y) in enumerate(ds):", scale=" * min(1.0, step / 10)"),
        # a print and .numpy() inside the step
        _loop("for x, y in ds:", extra_in_tape="        print(loss.numpy())\n"),
        # the tape, read after the step
        _loop("for x, y in ds:", after="    del tape\n"),
        # a total carried from step to step
        _loop("total = 0.0\nfor x, y in ds:", extra_in_tape="        total = total + loss\n"),
        # a step inside a loop over range that reads its counter
        _loop("for i in range(10):", scale=" * i"),
        # no update: not a training step
        "import tensorflow as tf\nfor x in ds:\n    with tf.GradientTape() as tape:\n"
        "        y = model(x)\n    print(tape.gradient(y, x))\n",
    ],
    ids=["per-epoch", "enumerate-index", "print", "tape-after", "carried", "range", "no-update"],
)
def test_a_step_that_cannot_move_into_a_graph_safely_is_left_alone(cell):
    compile(cell, "<cell>", "exec")  # each case is valid Python: the refusal is the rewrite's
    assert compile_inline_step(cell) is None


def test_the_eager_step_finding_offers_the_compiled_loop_and_the_rewrite_ends_it(ip):
    result, report = profiled(ip, KERAS_IO_CELL.replace("range(3)", "range(8)"))
    assert result.success, result.error_in_exec
    finding = next(f for f in report.findings if f.code == "eager-step")
    assert finding.rewrite is not None
    assert "def train_step(x_batch_train, y_batch_train):" in finding.rewrite
    assert run_cell(ip, "keras.backend.clear_session()").success
    result, fixed = profiled(ip, finding.rewrite.split("\n", 1)[1])
    assert result.success, result.error_in_exec
    assert "eager-step" not in {f.code for f in fixed.findings}, fixed.summary()
    assert finding.evidence["eager_steps"] == 32
    assert fixed.record.phase_counts().get("train") == 32
