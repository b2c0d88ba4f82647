"""memory_growth_first and mixed_precision: where the lines go, and that the models still train."""

from __future__ import annotations

import keras
import numpy as np

from tfdiag_magic.rewrite import MEMORY_GROWTH_CELL, memory_growth_first, mixed_precision

from .test_rewrite_common import assert_compiles, execute


def test_memory_growth_goes_first_after_the_magic_line():
    source = "%%tfprofile -q\n# my training\nimport tensorflow as tf\nx = tf.ones(3)\n"
    out = memory_growth_first(source)
    assert out == (
        "%%tfprofile -q\n" + MEMORY_GROWTH_CELL + "\n# my training\nimport tensorflow as tf\n"
        "x = tf.ones(3)\n"
    )
    assert_compiles(out)
    assert memory_growth_first(out) == out  # already first: unchanged
    assert "before anything\n# initialises TensorFlow's GPU runtime" in MEMORY_GROWTH_CELL
    ns = execute(MEMORY_GROWTH_CELL)  # no GPU here: a loop over nothing, but it runs
    assert ns["tf"].__name__ == "tensorflow"


def test_memory_growth_respects_future_imports_and_always_returns():
    source = '"""Doc."""\nfrom __future__ import annotations\nx = 1\n'
    out = memory_growth_first(source)
    assert out.startswith('"""Doc."""\nfrom __future__ import annotations\n# Run this first')
    assert_compiles(out)
    magic = "!nvidia-smi\n"
    assert memory_growth_first(magic) == MEMORY_GROWTH_CELL + "\n" + magic


SEQUENTIAL_CELL = """import numpy as np
import tensorflow as tf

x = np.ones((16, 4), "float32")
y = np.zeros((16,), "int32")
model = tf.keras.Sequential([
    tf.keras.Input((4,)),
    tf.keras.layers.Dense(8, activation="relu"),
    tf.keras.layers.Dense(3, activation="softmax"),  # class probabilities
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(x, y, epochs=1, batch_size=8, verbose=0)
"""

FUNCTIONAL_CELL = """import keras
from keras import layers

inputs = keras.Input((4,))
hidden = layers.Dense(8)(inputs)
outputs = layers.Dense(1)(hidden)
model = keras.Model(inputs, outputs)
model.compile(optimizer="sgd", loss="mse")
"""


def test_sequential_gets_the_policy_first_and_a_float32_output_layer():
    out = mixed_precision(SEQUENTIAL_CELL)
    assert out is not None
    assert_compiles(out)
    assert (
        'y = np.zeros((16,), "int32")\n'
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")\nmodel = ' in out
    )
    assert (
        'tf.keras.layers.Dense(3, activation="softmax", dtype="float32"),'
        "  # class probabilities" in out
    )
    try:
        ns = execute(out)
        assert ns["model"].layers[0].compute_dtype == "float16"
        assert ns["model"].layers[-1].compute_dtype == "float32"
        assert ns["model"].predict(np.ones((2, 4), "float32"), verbose=0).dtype == np.float32
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_functional_output_layer_and_model_add_forms():
    out = mixed_precision(FUNCTIONAL_CELL)
    assert out is not None
    assert 'outputs = layers.Dense(1, dtype="float32")(hidden)' in out
    assert 'keras.mixed_precision.set_global_policy("mixed_float16")\ninputs = ' in out
    try:
        ns = execute(out)
        assert ns["model"].layers[-1].compute_dtype == "float32"
        ns["model"].fit(np.ones((4, 4)), np.ones((4, 1)), epochs=1, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    added = """from tensorflow import keras
net = keras.Sequential()
net.add(keras.layers.Dense(4))
net.add(keras.layers.Dense(2))
"""
    out = mixed_precision(added)
    assert 'net.add(keras.layers.Dense(2, dtype="float32"))' in out
    assert "net.add(keras.layers.Dense(4))" in out


def test_unknown_output_layer_gets_a_comment_and_unsafe_cells_none():
    source = "import keras\nbase = keras.applications.MobileNetV2(weights=None)\n"
    out = mixed_precision(source)
    assert out is not None
    assert '# The layer that produces the model\'s outputs needs dtype="float32"' in out
    custom_loop = SEQUENTIAL_CELL + "with tf.GradientTape() as tape:\n    loss = model(x)\n"
    assert mixed_precision(custom_loop) is None
    already = 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n' + (
        "m = keras.Sequential([keras.layers.Dense(1)])\n"
    )
    assert mixed_precision(already) is None
    assert mixed_precision("import numpy as np\nx = np.ones(3)\n") is None
