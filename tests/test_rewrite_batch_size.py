"""larger_batch and steps_per_execution: literal batch sizes and compile options are set."""

from __future__ import annotations

import numpy as np

from tfdiag_magic.rewrite import larger_batch, steps_per_execution

from .test_rewrite_common import assert_compiles, execute

FIT_CELL = """import numpy as np
import tensorflow as tf

x = np.ones((64, 4), "float32")
y = np.ones((64, 1), "float32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
# batch size too small for the GPU
model.fit(x, y, epochs=1, batch_size=1, verbose=0)
"""


def test_fit_batch_size_kwarg_is_set_and_trains_with_fewer_steps():
    out = larger_batch(FIT_CELL, batch_size=16)
    assert out is not None
    assert_compiles(out)
    assert "# batch size too small for the GPU\nmodel.fit(x, y, epochs=1, batch_size=16, " in out
    assert int(execute(out)["model"].optimizer.iterations) == 4
    assert larger_batch(out, batch_size=16) is None  # already that size


def test_named_batch_size_and_tf_data_chain():
    source = """import keras
import tensorflow as tf
BATCH_SIZE = 32  # per step
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(100).batch(BATCH_SIZE)
val = tf.data.Dataset.from_tensor_slices((vx, vy)).batch(64)
model.evaluate(val, batch_size=BATCH_SIZE)
"""
    out = larger_batch(source, batch_size=256)
    assert out is not None
    assert "BATCH_SIZE = 256  # per step\n" in out
    assert ".batch(256)\n" in out  # the validation chain's literal
    assert "model.evaluate(val, batch_size=BATCH_SIZE)" in out
    ds = execute(out.split("val =")[0], {"x": np.zeros((300, 2)), "y": np.zeros(300)})["train"]
    assert next(iter(ds))[0].shape[0] == 256


def test_swept_or_computed_batch_sizes_are_left_alone():
    sweep = """for batch_size in [32, 128]:
    model.fit(x, y, batch_size=batch_size)
"""
    assert larger_batch(sweep, batch_size=512) is None
    computed = "bs = base * 2\nmodel.fit(x, y, batch_size=bs)\n"
    assert larger_batch(computed, batch_size=512) is None
    assert larger_batch("model.fit(dataset)\n", batch_size=512) is None


def test_steps_per_execution_is_added_or_replaced():
    out = steps_per_execution(FIT_CELL, steps=8)
    assert out is not None
    assert 'model.compile(optimizer="sgd", loss="mse", steps_per_execution=8)' in out
    ns = execute(out)
    assert ns["model"].steps_per_execution == 8
    multi = 'net.compile(\n    optimizer="adam",\n    steps_per_execution=2,\n)\n'
    assert steps_per_execution(multi, steps=32) == multi.replace("=2,", "=32,")
    assert steps_per_execution(multi, steps=2) is None
    assert steps_per_execution("import re\nre.compile('a+')\n", steps=4) is None
