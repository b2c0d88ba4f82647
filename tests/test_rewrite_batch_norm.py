"""The rewrite of `batchnorm-training-mode`: a base's BatchNormalization layers set
non-trainable after the base is unfrozen.

What the rewritten cell does under Keras is `tests/test_diagnose_batchnorm_training_mode.py`'s;
here, where the loop goes: after the last ``NAME.trainable = True`` of each name the cell calls
with ``training=False``, or after that call where nothing is unfrozen.
"""

from __future__ import annotations

from tfdiag_magic.rewrite import freeze_batch_norm

FINE_TUNING_CELL = """\
import tensorflow as tf
base_model = tf.keras.applications.MobileNetV2(input_shape=(160, 160, 3), include_top=False)
base_model.trainable = False
inputs = tf.keras.Input(shape=(160, 160, 3))
x = base_model(inputs, training=False)
outputs = tf.keras.layers.Dense(1)(tf.keras.layers.GlobalAveragePooling2D()(x))
model = tf.keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="mse")
model.fit(train_dataset, epochs=2)
base_model.trainable = True
for layer in base_model.layers[:100]:
    layer.trainable = False
model.compile(optimizer=tf.keras.optimizers.RMSprop(1e-5), loss="mse")
model.fit(train_dataset, epochs=4)
"""

NEVER_FROZEN_CELL = """\
import keras
encoder = keras.Sequential([keras.layers.Dense(8), keras.layers.BatchNormalization()])
inputs = keras.Input((4,))
outputs = keras.layers.Dense(1)(encoder(inputs, training=False))
model = keras.Model(inputs, outputs)
model.compile("adam", "mse")
"""


def test_the_loop_follows_the_last_unfreezing_and_spells_keras_as_the_cell():
    new = freeze_batch_norm(FINE_TUNING_CELL)
    assert new is not None
    compile(new, "<cell>", "exec")
    loop = (
        "for bn_layer in base_model.layers:\n"
        "    if isinstance(bn_layer, tf.keras.layers.BatchNormalization):\n"
        "        bn_layer.trainable = False\n"
    )
    assert new.count(loop) == 1
    # after the tutorial's own loop over the first 100 layers: `layer` is the cell's name
    lines = new.splitlines()
    assert lines.index("base_model.trainable = True") < lines.index(
        "for bn_layer in base_model.layers:"
    )
    assert new.index(loop) < new.index("model.compile(optimizer=tf.keras.optimizers.RMSprop")
    assert "training=False says" in new  # the comment that says why
    # the rest of the cell as it was
    assert (
        new.replace(new[new.index("# Keras 3") : new.index(loop) + len(loop)], "")
        == FINE_TUNING_CELL
    )


def test_where_nothing_is_unfrozen_the_loop_follows_the_call():
    new = freeze_batch_norm(NEVER_FROZEN_CELL)
    assert new is not None
    lines = new.splitlines()
    call = lines.index("outputs = keras.layers.Dense(1)(encoder(inputs, training=False))")
    assert lines[call + 3] == "for layer in encoder.layers:"
    assert lines[call + 4] == "    if isinstance(layer, keras.layers.BatchNormalization):"


def test_a_magic_line_is_kept_and_a_cell_without_training_false_is_no_rewrite():
    new = freeze_batch_norm("%%tfprofile\n" + NEVER_FROZEN_CELL)
    assert new is not None and new.startswith("%%tfprofile\n")
    assert freeze_batch_norm(NEVER_FROZEN_CELL.replace("training=False", "training=True")) is None
    assert freeze_batch_norm("model.fit(x, y)\n") is None
