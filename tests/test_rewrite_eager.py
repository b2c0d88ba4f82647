"""compile_eager_step: eager training steps become tf.functions, eager switches go, run for real."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfdiag_magic.rewrite import compile_eager_step

from .test_rewrite_common import assert_compiles, execute

TF_KERAS_CELL = """import numpy as np
import tensorflow as tf

tf.config.run_functions_eagerly(True)  # debugging leftover
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.1)
loss_fn = tf.keras.losses.MeanSquaredError()

# one step of training
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))  # forward
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

x = np.ones((8, 3), "float32")
y = np.zeros((8, 1), "float32")
first = float(train_step(x, y))
for _ in range(5):
    last = float(train_step(x, y))
"""

KERAS3_CELL = """import keras
from tensorflow import function, GradientTape  # the names this cell uses

net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
net.compile(
    optimizer="adam",
    loss="mse",
    run_eagerly=True,
)
opt = keras.optimizers.Adam(0.01)

def update(batch_x, batch_y):
    with GradientTape() as t:
        l = keras.ops.mean((net(batch_x) - batch_y) ** 2)
    opt.apply(t.gradient(l, net.trainable_variables), net.trainable_variables)
    return l

def helper(v):  # not a training step
    return v * 2
"""


def test_eager_tf_keras_step_is_compiled_and_the_switch_removed():
    out = compile_eager_step(TF_KERAS_CELL)
    assert out is not None
    assert_compiles(out)
    # Switched off, not removed: removing it would leave it on in a kernel where it ran.
    assert "tf.config.run_functions_eagerly(False)  # debugging leftover" in out
    assert "# one step of training\n@tf.function\ndef train_step(x, y):" in out
    assert "# forward" in out
    try:
        ns = execute(out)
        assert not tf.config.functions_run_eagerly()
        assert ns["train_step"].experimental_get_tracing_count() == 1
        assert ns["last"] < ns["first"]
    finally:
        tf.config.run_functions_eagerly(False)


def test_keras3_step_with_optimizer_apply_and_run_eagerly_in_compile():
    out = compile_eager_step(KERAS3_CELL)
    assert out is not None
    assert_compiles(out)
    assert "import tensorflow as tf\n" in out  # the cell had no module alias for tensorflow
    assert "@tf.function\ndef update(batch_x, batch_y):" in out
    assert "@tf.function\ndef helper" not in out
    assert 'net.compile(\n    optimizer="adam",\n    loss="mse",\n)' in out
    ns = execute(out)
    before = ns["net"].get_weights()
    xb, yb = np.ones((4, 2), "float32"), np.zeros((4, 2), "float32")
    ns["update"](xb, yb)
    traced = ns["update"].experimental_get_tracing_count()  # 2 when the optimizer builds
    for _ in range(3):
        ns["update"](xb, yb)
    assert ns["update"].experimental_get_tracing_count() == traced
    assert not ns["net"].run_eagerly
    assert not all(np.allclose(a, b) for a, b in zip(before, ns["net"].get_weights(), strict=True))


def test_run_eagerly_attribute_alone_is_a_rewrite():
    source = "model.compile(loss='mse', run_eagerly=True)\nmodel.run_eagerly = True\nmodel.fit(x)\n"
    out = compile_eager_step(source)
    assert out == "model.compile(loss='mse')\nmodel.run_eagerly = False\nmodel.fit(x)\n"


def test_steps_that_are_not_graph_safe_or_already_compiled_are_left_alone():
    already = """import tensorflow as tf
@tf.function(jit_compile=True)
def step(x):
    with tf.GradientTape() as tape:
        loss = model(x)
    optimizer.apply_gradients(zip(tape.gradient(loss, w), w))
"""
    assert compile_eager_step(already) is None
    wrapped_later = (
        already.replace("@tf.function(jit_compile=True)\n", "") + "fast = tf.function(step)\n"
    )
    assert compile_eager_step(wrapped_later) is None
    reads_values = """import tensorflow as tf
def step(x):
    with tf.GradientTape() as tape:
        loss = model(x)
    optimizer.apply_gradients(zip(tape.gradient(loss, w), w))
    history.append(loss.numpy())  # a Python side effect each call
"""
    assert compile_eager_step(reads_values) is None
    method = """import tensorflow as tf
class M(tf.keras.Model):
    def train_step(self, data):
        with tf.GradientTape() as tape:
            loss = self(data)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self.w), self.w))
"""
    assert compile_eager_step(method) is None
    assert compile_eager_step("tf.config.run_functions_eagerly(False)\n") is None
    assert compile_eager_step("%time step(x)\n") is None
