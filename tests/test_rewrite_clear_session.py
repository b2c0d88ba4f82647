"""clear_session_in_loop: loops that build Keras models start each iteration from a clean state."""

from __future__ import annotations

from tfdiag_magic.rewrite import clear_session_in_loop

from .test_rewrite_common import assert_compiles, execute

SWEEP_CELL = """import keras

scores = []
for units in [2, 3, 4]:
    # a fresh model per setting
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units)])
    scores.append(model.count_params())
"""

GRID_CELL = """import tensorflow as tf

def build(width):  # builds through tf.keras
    inputs = tf.keras.Input((2,))
    outputs = tf.keras.layers.Dense(width)(inputs)
    return tf.keras.Model(inputs, outputs)

names = []
for depth in range(2):
    for width in (1, 2):
        net = build(width)
        names.append(net.layers[-1].name)
"""


def test_sweep_clears_the_session_first_and_layer_names_restart():
    out = clear_session_in_loop(SWEEP_CELL)
    assert out is not None
    assert_compiles(out)
    assert (
        "for units in [2, 3, 4]:\n    keras.backend.clear_session()\n"
        "    # a fresh model per setting\n" in out
    )
    before, after = execute(SWEEP_CELL), execute(out)
    assert before["scores"] == after["scores"] == [8, 12, 16]
    # Without clearing, Keras keeps counting layers across iterations.
    assert before["model"].layers[-1].name != "dense"
    assert after["model"].layers[-1].name == "dense"


def test_function_of_the_cell_that_builds_counts_and_innermost_loop_gets_it():
    out = clear_session_in_loop(GRID_CELL)
    assert out is not None
    assert (
        "    for width in (1, 2):\n        tf.keras.backend.clear_session()\n"
        "        net = build(width)\n" in out
    )
    assert "for depth in range(2):\n    for width" in out  # the outer loop is unchanged
    assert execute(out)["names"] == ["dense"] * 4
    # The outer loop, when asked for by line.
    by_line = clear_session_in_loop(GRID_CELL, loop_lineno=9)
    assert "for depth in range(2):\n    tf.keras.backend.clear_session()\n" in by_line


def test_backend_alias_one_line_loop_and_missing_import():
    aliased = (
        "from tensorflow.keras import backend as K, layers\n"
        "for i in range(3): d = layers.Dense(i)\n"
    )
    assert clear_session_in_loop(aliased) == (
        "from tensorflow.keras import backend as K, layers\n"
        "for i in range(3):\n    K.clear_session()\n    d = layers.Dense(i)\n"
    )
    bare = "from keras.models import Sequential\nfor i in range(2):\n    m = Sequential()\n"
    out = clear_session_in_loop(bare)
    assert out.startswith("from keras.models import Sequential\nimport keras\n")
    assert "    keras.backend.clear_session()\n    m = Sequential()" in out
    execute(out)


def test_loops_that_build_nothing_or_already_clear_are_left_alone():
    assert clear_session_in_loop("import keras\nfor x in xs:\n    model.fit(x)\n") is None
    cleared = SWEEP_CELL.replace(
        "    # a fresh", "    keras.backend.clear_session()\n    # a fresh"
    )
    assert clear_session_in_loop(cleared) is None
    assert clear_session_in_loop("import keras\nm = keras.Sequential()\n") is None
    assert clear_session_in_loop(SWEEP_CELL, loop_lineno=1) is None
