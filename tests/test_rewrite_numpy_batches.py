"""numpy_batches_to_dataset: hand-sliced NumPy batches become a tf.data pipeline, run for real."""

from __future__ import annotations

import numpy as np

from tfdiag_magic.rewrite import numpy_batches_to_dataset

from .test_rewrite_common import assert_compiles, execute

TRAIN_ON_BATCH_CELL = """# Train by hand, batch by batch
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x = rng.random((100, 4)).astype("float32")
y = rng.random((100, 1)).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")

batch_size = 16  # small on purpose
losses = []
# two passes over the data
for epoch in range(2):
    perm = np.random.permutation(len(x))
    x, y = x[perm], y[perm]
    for i in range(0, len(x), batch_size):
        xb = x[i:i + batch_size]
        yb = y[i:i + batch_size]
        xb = tf.convert_to_tensor(xb, dtype=tf.float32)  # host -> device copy
        loss = model.train_on_batch(xb, yb)
        losses.append(loss)
    print("epoch", epoch)
"""

CUSTOM_STEP_CELL = """%%tfprofile -q
import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(1)
features = np.linspace(0, 1, 96 * 3).reshape(96, 3).astype("float32")
labels = features.sum(axis=1, keepdims=True)
net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.05)
calls = tf.Variable(0)

@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = keras.losses.mean_squared_error(yb, net(xb))
    grads = tape.gradient(loss, net.trainable_variables)
    opt.apply_gradients(zip(grads, net.trainable_variables))
    calls.assign_add(1)
    return loss

bs = 32
n_steps = len(features) // bs
for epoch in range(2):
    for step in range(n_steps):
        start = step * bs  # first sample of the batch
        end = start + bs
        xb = tf.constant(features[start:end])
        # the labels of the same samples
        yb = labels[start:end]
        loss = train_step(xb, yb)
        if step % 2 == 0:
            print(epoch, step, float(tf.reduce_mean(loss)))
"""


def test_train_on_batch_loop_becomes_one_fit_with_shuffle():
    out = numpy_batches_to_dataset(TRAIN_ON_BATCH_CELL)
    assert out is not None
    assert_compiles(out)
    assert "model.fit(dataset, epochs=2)" in out
    assert ".shuffle(len(x))" in out
    assert "tf.convert_to_tensor(x, dtype=tf.float32)" in out
    assert "train_on_batch" not in out and "perm" not in out
    # Comments of the code that stays survive, the comment above the loop included.
    assert "# Train by hand, batch by batch" in out
    assert "batch_size = 16  # small on purpose" in out
    assert "# two passes over the data\ndataset = (" in out

    before = execute(TRAIN_ON_BATCH_CELL)
    after = execute(out)
    # The same number of optimizer steps: ceil(100 / 16) batches in each of 2 epochs.
    assert int(before["model"].optimizer.iterations) == 14
    assert int(after["model"].optimizer.iterations) == 14


def test_custom_step_keeps_the_loops_and_trains_identically():
    out = numpy_batches_to_dataset(CUSTOM_STEP_CELL)
    assert out is not None
    assert out.startswith("%%tfprofile -q\n")
    assert_compiles(out)
    assert "for step, (xb, yb) in enumerate(dataset):" in out
    assert ".batch(bs, drop_remainder=True)" in out
    assert "tf.data.Dataset.from_tensor_slices((tf.constant(features), labels))" in out
    assert "start" not in out.split("n_steps =")[1]
    assert "loss = train_step(xb, yb)" in out

    before = execute(CUSTOM_STEP_CELL)
    after = execute(out)
    # Same batches in the same order: the same number of steps and the same weights.
    assert int(before["calls"].numpy()) == int(after["calls"].numpy()) == 6
    for old, new in zip(before["net"].get_weights(), after["net"].get_weights(), strict=True):
        np.testing.assert_allclose(old, new, rtol=1e-5, atol=1e-6)


def test_step_count_loop_with_inline_slices_and_no_epoch_loop():
    source = """import tensorflow as tf
steps = 5
for k in range(steps):
    xb, yb = x[k * 8:(k + 1) * 8], y[k * 8:(k + 1) * 8]
    history.append(step_fn(xb, yb))
"""
    out = numpy_batches_to_dataset(source)
    assert out is not None
    assert ".batch(8)\n    .take(steps)\n" in out
    assert "for xb, yb in dataset:\n    history.append(step_fn(xb, yb))" in out

    ns = {"x": np.arange(48.0), "y": np.arange(48.0) * 2, "history": []}
    ns["step_fn"] = lambda a, b: float(a.numpy().sum() + b.numpy().sum())
    execute(out, ns)
    expected = [float(np.arange(48.0)[k * 8 : (k + 1) * 8].sum() * 3) for k in range(5)]
    assert ns["history"] == expected


def test_missing_tensorflow_import_is_added():
    source = """import numpy as np
for i in range(0, len(a), 4):
    ab = a[i:i+4]
    consume(ab)
"""
    out = numpy_batches_to_dataset(source)
    assert out is not None
    assert out.startswith("import numpy as np\nimport tensorflow as tf\n")
    seen = []
    execute(out, {"a": np.arange(10), "consume": lambda t: seen.append(t.numpy().tolist())})
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_loop_lineno_picks_the_loop():
    source = """for i in range(0, len(a), 2):
    use(a[i:i + 2])
for j in range(0, len(b), 3):
    bb = b[j:j + 3]
    use(bb)
"""
    assert numpy_batches_to_dataset(source, loop_lineno=1) is None  # slices inline in a call
    out = numpy_batches_to_dataset(source, loop_lineno=3)
    assert out is not None and "for bb in dataset:" in out
    assert numpy_batches_to_dataset(source, loop_lineno=2) is None  # no loop on that line


def test_unsafe_or_unrecognised_loops_are_left_alone():
    # The offset is used for something else than slicing.
    uses_offset = """for i in range(0, len(x), bs):
    xb = x[i:i + bs]
    log(i)
    step(xb)
"""
    assert numpy_batches_to_dataset(uses_offset) is None
    # The range does not cover the array.
    partial = """for i in range(0, 1000, bs):
    xb = x[i:i + bs]
    step(xb)
"""
    assert numpy_batches_to_dataset(partial) is None
    # Overlapping windows are not batches.
    windows = """for i in range(0, len(x), bs):
    xb = x[i:i + 2 * bs]
    step(xb)
"""
    assert numpy_batches_to_dataset(windows) is None
    # Random batches generated in the loop (article 000): nothing is sliced.
    generated = """for epoch in range(epochs):
    for batch in range(num_batches):
        x_batch = np.random.rand(batch_size, input_dim)
        loss = model.train_on_batch(x_batch, y_batch)
"""
    assert numpy_batches_to_dataset(generated) is None
    assert numpy_batches_to_dataset("!nvidia-smi\n" + uses_offset) is None


def test_recorded_losses_used_later_keep_the_loop():
    source = """for epoch in range(3):
    for i in range(0, len(x), 10):
        xb, yb = x[i:i+10], y[i:i+10]
        loss = model.train_on_batch(xb, yb)
        losses.append(loss)
plt.plot(losses)
"""
    out = numpy_batches_to_dataset(source)
    assert out is not None
    assert "model.fit" not in out
    assert "for xb, yb in dataset:\n        loss = model.train_on_batch(xb, yb)" in out
