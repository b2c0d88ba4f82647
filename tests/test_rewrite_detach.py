"""detach_appends: loops keep host numbers, not tensors; run with a real training step."""

from __future__ import annotations

import numpy as np

from tfdiag_magic.rewrite import detach_appends

from .test_rewrite_common import assert_compiles, execute

STEP_CELL = """import numpy as np
import tensorflow as tf

w = tf.Variable([1.0, -1.0])

@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum((x * w) ** 2)
    w.assign_sub(0.01 * tape.gradient(loss, w))
    return loss, x * w

losses, outputs = [], []
running_loss = 0.0
for epoch in range(2):
    for x in np.ones((3, 2), "float32"):
        batch_loss, out = train_step(x)  # loss first, then outputs
        losses.append(batch_loss)  # keeps a tensor per step
        running_loss += batch_loss
        outputs.append(out)
"""


def test_heuristic_detaches_losses_but_not_other_tensors():
    out = detach_appends(STEP_CELL)
    assert out is not None
    assert_compiles(out)
    assert "losses.append(float(batch_loss))  # keeps a tensor per step" in out
    assert "running_loss += float(batch_loss)" in out
    assert "outputs.append(out)\n" in out
    ns = execute(out)
    assert len(ns["losses"]) == 6 and all(type(v) is float for v in ns["losses"])
    assert type(ns["running_loss"]) is float
    assert abs(ns["running_loss"] - sum(ns["losses"])) < 1e-4


def test_explicit_names_and_numpy_mode():
    out = detach_appends(STEP_CELL, names={"out": "numpy"})
    assert out is not None
    assert "outputs.append(out.numpy())" in out
    assert "losses.append(batch_loss)" in out  # not asked for
    ns = execute(out)
    assert all(isinstance(v, np.ndarray) and v.shape == (2,) for v in ns["outputs"])


def test_keras_histories_and_host_values_are_left_alone():
    keras_loop = """for xb, yb in batches:
    loss = model.train_on_batch(xb, yb)  # already a Python float
    losses.append(loss)
"""
    assert detach_appends(keras_loop) is None
    second_value = """for xb in batches:
    logits, loss = step(xb)
    losses.append(loss)
"""
    assert detach_appends(second_value) is None  # not the first value: maybe not a loss
    assert detach_appends(second_value, names={"loss": "float"}) == second_value.replace(
        "losses.append(loss)", "losses.append(float(loss))"
    )
    outside_loop = "loss = step(x)\nlosses.append(loss)\n"
    assert detach_appends(outside_loop) is None
    assigned_elsewhere = """for xb in batches:
    loss = step(xb)
    loss = loss * 2
    losses.append(loss)
"""
    assert detach_appends(assigned_elsewhere) is None
    assert detach_appends("for a in b:\n    losses.append(float(loss_fn(a)))\n") is None


EAGER_KERAS_CELL = """import keras
import numpy as np
import tensorflow as tf

model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.01)
history = []
for epoch in range(2):
    epoch_loss = 0.0
    for xb in np.ones((4, 3, 2), "float32"):  # four batches of three
        with tf.GradientTape() as tape:
            step_loss = keras.ops.mean(model(xb) ** 2)
        opt.apply(tape.gradient(step_loss, model.trainable_variables), model.trainable_variables)
        epoch_loss += step_loss  # grows a chain of tensor additions
    history.append(epoch_loss)
"""


def test_nested_eager_loop_total_is_detached_where_it_is_assigned():
    out = detach_appends(EAGER_KERAS_CELL)
    assert out is not None
    assert "        epoch_loss += float(step_loss)  # grows a chain of tensor additions" in out
    # `epoch_loss` is not assigned from a call in its loop: appending it needs no change.
    assert "    history.append(epoch_loss)\n" in out
    ns = execute(out)
    assert [type(v) for v in ns["history"]] == [float, float]


def test_containers_read_as_tensors_later_are_left_alone():
    source = """for xb in batches:
    loss = step(xb)
    losses.append(loss)
    total += loss
print(total.numpy(), [l.numpy() for l in losses])
"""
    assert detach_appends(source) is None
    only_total = source.replace("[l.numpy() for l in losses]", "losses")
    out = detach_appends(only_total)
    assert out is not None
    assert "losses.append(float(loss))" in out and "total += loss\n" in out
