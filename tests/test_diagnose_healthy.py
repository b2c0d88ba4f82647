"""Healthy training gives no warning and no error: a false alarm is worse than a miss.

Each cell is training written the way the TensorFlow and Keras guides write it: a custom loop
with a compiled step over a prefetched tf.data pipeline, `fit` on a prefetched (or cached)
dataset or on arrays with a sensible batch, MirroredStrategy with a custom loop and with
`fit`. Info notes are allowed; a warning or an error fails the test and lists the findings.
"""

from __future__ import annotations

import pytest

from tests.diagnosis_support import TABULAR, assert_healthy
from tests.helpers import profiled

# Collectives of strategies created earlier in the same test process would collide: these
# strategies reduce without them.
STRATEGY = (
    "strategy = tf.distribute.MirroredStrategy(\n"
    "    ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())\n"
)


# The distributed custom training loop of TensorFlow's guide, four epochs of 32 steps.
MIRRORED_CUSTOM_LOOP = (
    STRATEGY + "with strategy.scope():\n"
    "    dmodel = keras.Sequential([keras.Input((16,)),\n"
    "                               keras.layers.Dense(32, activation='relu'),\n"
    "                               keras.layers.Dense(2)])\n"
    "    dopt = keras.optimizers.Adam(1e-3)\n"
    "GLOBAL_BATCH = 64\n"
    "dist = strategy.experimental_distribute_dataset(\n"
    "    tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048).batch(GLOBAL_BATCH)\n"
    "    .prefetch(tf.data.AUTOTUNE))\n"
    "def replica_step(xb, yb):\n"
    "    with tf.GradientTape() as tape:\n"
    "        per_example = keras.losses.sparse_categorical_crossentropy(\n"
    "            yb, dmodel(xb, training=True), from_logits=True)\n"
    "        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)\n"
    "    grads = tape.gradient(loss, dmodel.trainable_variables)\n"
    "    dopt.apply_gradients(zip(grads, dmodel.trainable_variables))\n"
    "    return loss\n"
    "@tf.function\n"
    "def distributed_step(xb, yb):\n"
    "    per_replica = strategy.run(replica_step, args=(xb, yb))\n"
    "    return strategy.reduce('SUM', per_replica, axis=None)\n"
    "for epoch in range(4):\n"
    "    total = 0.0\n"
    "    for xb, yb in dist:\n"
    "        total += float(distributed_step(xb, yb))\n"
)


@pytest.fixture
def tab(ip):
    ip.run_cell(TABULAR)
    return ip


def test_custom_loop_with_tf_function_and_prefetched_dataset(tab):
    result, r = profiled(
        tab,
        "train = (tf.data.Dataset.from_tensor_slices((x, y))\n"
        "         .shuffle(2048).batch(32).prefetch(tf.data.AUTOTUNE))\n"
        "val_x, val_y = tf.constant(x[:256]), tf.constant(y[:256])\n"
        "@tf.function\n"
        "def val_step(xb, yb):\n"
        "    return loss_fn(yb, model(xb, training=False))\n"
        "history = []\n"
        "for epoch in range(12):\n"
        "    total = 0.0\n"
        "    for xb, yb in train:\n"
        "        total += float(train_step(xb, yb))\n"
        "    history.append((total / 64, float(val_step(val_x, val_y))))\n"
        "print(history[-1])\n",
    )
    assert_healthy(result, r)
    # Long enough that the iterator's own cost per batch (0.1-0.3 ms) adds up to more
    # than input-bound's 0.2 s: only waiting beyond a ready batch may count.
    assert r.record.phase_counts()["train"] == 12 * 64


def test_fit_on_prefetched_dataset_with_validation_and_progress_bar(tab):
    result, r = profiled(
        tab,
        "model.compile(optimizer='adam', loss=loss_fn, metrics=['accuracy'])\n"
        "train = (tf.data.Dataset.from_tensor_slices((x[:1792], y[:1792]))\n"
        "         .shuffle(1792).batch(64).prefetch(tf.data.AUTOTUNE))\n"
        "val = tf.data.Dataset.from_tensor_slices((x[1792:], y[1792:])).batch(64)\n"
        "history = model.fit(train, validation_data=val, epochs=6)\n",
    )
    assert_healthy(result, r)
    assert r.record.phase_counts()["train"] == 6 * 28


def test_fit_on_cached_dataset_with_steps_per_execution(tab):
    result, r = profiled(
        tab,
        "model.compile(optimizer='adam', loss=loss_fn, steps_per_execution=16)\n"
        "train = (tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2.0, b))\n"
        "         .cache().shuffle(2048).batch(32).prefetch(tf.data.AUTOTUNE))\n"
        "model.fit(train, epochs=24, verbose=0)\n",
    )
    assert_healthy(result, r)
    # 16 steps fused in one call: the in-run measure still reads the cached pipeline's
    # waits, and they are a small share of the cycles.
    assert r.record.phase_counts()["train"] == 24 * 64
    fit = next(c for c in r.record.keras_calls if c.api == "fit")
    assert fit.input_elements > 0
    assert fit.input_wait / fit.input_span < 0.2, (fit.input_wait, fit.input_span)


def test_fit_on_numpy_arrays_then_evaluate_and_predict_once(tab):
    result, r = profiled(
        tab,
        "model.compile(optimizer='adam', loss=loss_fn, metrics=['accuracy'])\n"
        "model.fit(x, y, batch_size=32, epochs=4, validation_split=0.25, verbose=2)\n"
        "loss, accuracy = model.evaluate(x, y, batch_size=256, verbose=0)\n"
        "predicted = model.predict(x, batch_size=256, verbose=0).argmax(axis=1)\n",
    )
    assert_healthy(result, r)
    assert r.record.phase_counts()["train"] == 4 * 48


def test_mirrored_strategy_custom_loop(tab):
    result, r = profiled(tab, MIRRORED_CUSTOM_LOOP)
    assert_healthy(result, r)
    assert r.record.phase_counts()["train"] == 4 * 32


def test_mirrored_strategy_fit(tab):
    result, r = profiled(
        tab,
        STRATEGY + "with strategy.scope():\n"
        "    dmodel = keras.Sequential([keras.Input((16,)),\n"
        "                               keras.layers.Dense(32, activation='relu'),\n"
        "                               keras.layers.Dense(2)])\n"
        "    dmodel.compile(optimizer='adam', loss=loss_fn, metrics=['accuracy'])\n"
        "train = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(tf.data.AUTOTUNE)\n"
        "dmodel.fit(train, epochs=4, verbose=0)\n",
    )
    assert_healthy(result, r)
    assert r.record.phase_counts()["train"] == 4 * 32
