"""tune_input_pipeline: parallel map/interleave and a final prefetch; the pipelines still run."""

from __future__ import annotations

import numpy as np

from tfdiag_magic.rewrite import tune_input_pipeline

from .test_rewrite_common import assert_compiles, execute

FIT_CELL = """import numpy as np
import tensorflow as tf

x = np.arange(40, dtype="float32").reshape(20, 2)
y = np.arange(20, dtype="float32")

def scale(a, b):
    return a / 40.0, b

ds = (
    tf.data.Dataset.from_tensor_slices((x, y))
    .map(scale)  # deterministic preprocessing
    .batch(4)
)
val = tf.data.Dataset.from_tensor_slices((x, y)).map(scale).batch(10)
model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(ds, validation_data=val, epochs=1, verbose=0)
"""


def test_parallel_maps_and_prefetch_on_the_training_chain_only():
    out = tune_input_pipeline(FIT_CELL)
    assert out is not None
    assert_compiles(out)
    assert (
        "    .map(scale, num_parallel_calls=tf.data.AUTOTUNE)  # deterministic preprocessing\n"
        "    .batch(4)\n"
        "    .prefetch(tf.data.AUTOTUNE)\n)"
    ) in out
    assert out.count("# deterministic preprocessing") == 1
    assert "val = tf.data.Dataset.from_tensor_slices((x, y)).map(scale, " in out
    assert ".batch(10)\n" in out  # validation: no prefetch added
    assert ".cache()" not in out
    ns = execute(out)
    assert int(ns["model"].optimizer.iterations) == 5
    # Parallel map keeps the order of the elements.
    first = next(iter(ns["ds"]))[0].numpy()
    np.testing.assert_allclose(first, np.arange(8, dtype="float32").reshape(4, 2) / 40.0)


def test_reassigned_names_interleave_and_loop_iteration():
    source = """import tensorflow as tf
files = tf.data.Dataset.range(3)
ds = files.interleave(lambda i: tf.data.Dataset.range(i * 10, i * 10 + 2), cycle_length=3)
ds = ds.map(lambda v: v * 2, num_parallel_calls=2).batch(2)
seen = []
for step, batch in enumerate(ds):
    seen.append(batch.numpy().tolist())
"""
    out = tune_input_pipeline(source)
    assert out is not None
    assert "cycle_length=3, num_parallel_calls=tf.data.AUTOTUNE)" in out
    assert "num_parallel_calls=2).batch(2).prefetch(tf.data.AUTOTUNE)\n" in out
    assert execute(out)["seen"] == execute(source)["seen"]


def test_tuned_or_unrecognised_pipelines_are_left_alone():
    tuned = """import tensorflow as tf
ds = tf.data.Dataset.range(8).map(f, num_parallel_calls=tf.data.AUTOTUNE).prefetch(1)
model.fit(ds)
"""
    assert tune_input_pipeline(tuned) is None
    not_tf_data = "import pandas as pd\ndf = pd.read_csv(p).map(f)\nmodel.fit(df)\n"
    assert tune_input_pipeline(not_tf_data) is None
    # A dataset from elsewhere (an earlier cell): its chain is not in this cell.
    assert tune_input_pipeline("model.fit(train_ds, epochs=3)\n") is None


EPOCH_CELL = """import numpy as np
import tensorflow as tf

x = np.arange(40, dtype="float32").reshape(20, 2)
y = np.arange(20, dtype="float32")

def encode(a, b):
    return tf.tanh(a / 40.0), b

ds = (
    tf.data.Dataset.from_tensor_slices((x, y))
    .map(encode)  # per-row encoding
    .shuffle(20, seed=1)
    .batch(4)
)
model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(ds, epochs=2, verbose=0)
"""


def test_cache_after_the_deterministic_map_when_asked():
    assert ".cache()" not in (tune_input_pipeline(EPOCH_CELL) or "")
    out = tune_input_pipeline(EPOCH_CELL, cache=True)
    assert out is not None
    assert_compiles(out)
    assert ".map(encode, num_parallel_calls=tf.data.AUTOTUNE).cache()  # per-row encoding\n" in out
    assert out.index(".cache()") < out.index(".shuffle(20, seed=1)")
    assert out.count(".cache()") == 1
    ns = execute(out)
    assert int(ns["model"].optimizer.iterations) == 10
    # The cached elements are the mapped ones; the shuffle after the cache still reshuffles.
    orders = [np.concatenate([b.numpy() for _, b in ns["ds"]]) for _ in range(2)]
    assert sorted(orders[0].tolist()) == list(range(20))
    assert orders[0].tolist() != orders[1].tolist()


def test_no_cache_after_a_shuffle_or_a_random_map():
    shuffled_first = EPOCH_CELL.replace(
        "    .map(encode)  # per-row encoding\n    .shuffle(20, seed=1)\n",
        "    .shuffle(20, seed=1)\n    .map(encode)  # per-row encoding\n",
    )
    out = tune_input_pipeline(shuffled_first, cache=True)
    assert out is not None and ".cache()" not in out  # it would replay the first order
    augmenting = EPOCH_CELL.replace(
        "return tf.tanh(a / 40.0), b", "return a + tf.random.normal(tf.shape(a)), b"
    )
    out = tune_input_pipeline(augmenting, cache=True)
    assert out is not None and ".cache()" not in out  # it would freeze the augmentation
    cached = EPOCH_CELL.replace(".map(encode)", ".map(encode).cache()")
    assert ".cache().cache()" not in (tune_input_pipeline(cached, cache=True) or "")
