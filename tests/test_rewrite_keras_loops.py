"""Keras calls in loops: predict_on_batch, compile once, one fit; checked by running them."""

from __future__ import annotations

import numpy as np

from tfdiag_magic.rewrite import compile_once, fit_once, predict_in_loop, train_on_batch_in_loop

from .test_rewrite_common import assert_compiles, execute

PREDICT_CELL = """import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(3)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
samples = np.linspace(-1, 1, 20).reshape(5, 4).astype("float32")
outputs = []
for i in range(len(samples)):  # one sample at a time
    pred = model.predict(samples[i:i + 1], verbose=0)  # NumPy out
    outputs.append(pred[0])
reference = model.predict(samples, verbose=0)  # outside the loop: stays
"""


def test_predict_in_loop_becomes_predict_on_batch_with_the_same_results():
    out = predict_in_loop(PREDICT_CELL)
    assert out is not None
    assert_compiles(out)
    assert "pred = model.predict_on_batch(samples[i:i + 1])  # NumPy out" in out
    assert "reference = model.predict(samples, verbose=0)" in out
    ns = execute(out)
    assert isinstance(ns["outputs"][0], np.ndarray)
    np.testing.assert_allclose(np.stack(ns["outputs"]), ns["reference"], rtol=1e-5, atol=1e-6)


def test_predict_in_nested_loops_with_other_receivers_and_keywords():
    source = """import keras
net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
scores = {}
k = 0
while k < 2:
    for chunk in chunks:
        scores[k, chunk.shape[0]] = net.predict(
            x=chunk,
            batch_size=64,  # ignored by predict_on_batch
        )
    k += 1
"""
    out = predict_in_loop(source)
    assert out is not None
    assert "net.predict_on_batch(\n            x=chunk,\n        )" in out
    chunks = [np.ones((2, 3), "float32"), np.zeros((5, 3), "float32")]
    ns = execute(out, {"chunks": chunks})
    assert sorted(ns["scores"]) == [(0, 2), (0, 5), (1, 2), (1, 5)]
    assert ns["scores"][1, 5].shape == (5, 1)


def test_predict_outside_loops_or_with_other_options_is_left_alone():
    assert predict_in_loop("p = model.predict(x)\n") is None
    with_steps = "for x in xs:\n    p = model.predict(x, steps=2)\n"
    assert predict_in_loop(with_steps) is None
    in_def = "for x in xs:\n    def f():\n        return model.predict(x)\n"
    assert predict_in_loop(in_def) is None
    dataset = (
        "import tensorflow as tf\nval = tf.data.Dataset.from_tensor_slices(v).batch(8)\n"
        "for epoch in range(3):\n    p = model.predict(val, verbose=0)\n"
    )
    assert predict_in_loop(dataset) is None  # a whole dataset is not one batch
    two_loops = "for a in xs:\n    m.predict(a)\nfor b in ys:\n    m.predict(b)\n"
    out = predict_in_loop(two_loops, loop_lineno=3)
    assert out == "for a in xs:\n    m.predict(a)\nfor b in ys:\n    m.predict_on_batch(b)\n"
    assert predict_in_loop(two_loops, loop_lineno=2) is None
    # Lines count in the given source, its %%tfprofile line included.
    magic = "%%tfprofile -q\n" + two_loops
    assert predict_in_loop(magic, loop_lineno=4) == "%%tfprofile -q\n" + out
    assert predict_in_loop(magic, loop_lineno=3) is None


COMPILE_CELL = """import numpy as np
import tensorflow as tf

x = np.ones((32, 3), "float32")
y = np.zeros((32, 1), "float32")
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])

for round_ in range(3):
    # (re)compile before training
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
"""


def test_compile_moves_before_the_loop_and_optimizer_state_persists():
    out = compile_once(COMPILE_CELL)
    assert out is not None
    assert_compiles(out)
    assert (
        '\n# (re)compile before training\nmodel.compile(optimizer="sgd", loss="mse")\n'
        "for round_ in range(3):\n    model.fit(" in out
    )
    # A new "sgd" optimizer per compile restarts its step count; one compile keeps all steps.
    assert int(execute(COMPILE_CELL)["model"].optimizer.iterations) == 4
    assert int(execute(out)["model"].optimizer.iterations) == 12


def test_compile_with_loop_values_or_models_built_in_the_loop_stays():
    schedule = """import keras
model = keras.Sequential([keras.layers.Dense(1)])
for lr in [0.1, 0.01]:
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    model.fit(x, y)
"""
    assert compile_once(schedule) is None
    rebuilt = """for units in [4, 8]:
    model = build(units)
    model.compile(optimizer="adam", loss="mse")
"""
    assert compile_once(rebuilt) is None
    built_after = """for i in range(3):
    net.compile(optimizer="adam", loss="mse")
net = build()
"""
    assert compile_once(built_after) is None
    assert compile_once("import re\nfor p in ps:\n    re.compile(p)\n") is None


def test_compile_leaves_only_the_loops_it_does_not_depend_on():
    source = """for lr in rates:
    opt = make_optimizer(lr)
    for fold in range(5):
        model.compile(optimizer=opt, loss="mse")
        model.fit(data[fold])
"""
    out = compile_once(source)
    assert (
        out
        == """for lr in rates:
    opt = make_optimizer(lr)
    model.compile(optimizer=opt, loss="mse")
    for fold in range(5):
        model.fit(data[fold])
"""
    )


FIT_CELL = """import numpy as np
import tensorflow as tf

x = np.ones((16, 2), "float32")
y = np.ones((16, 1), "float32")
model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")

# one epoch at a time
for epoch in range(3):
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # quiet
    print(epoch, history.history["loss"])
"""


def test_epoch_loop_of_single_epoch_fits_becomes_one_fit():
    out = fit_once(FIT_CELL)
    assert out is not None
    assert_compiles(out)
    assert (
        "# one epoch at a time\n"
        "history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)  # quiet\n"
    ) in out
    assert "for epoch" not in out and "print" not in out
    before, after = execute(FIT_CELL), execute(out)
    assert int(before["model"].optimizer.iterations) == int(after["model"].optimizer.iterations)
    assert len(after["history"].history["loss"]) == 3


def test_initial_epoch_form_and_cases_left_alone():
    source = """import keras
for e in range(num_epochs):
    net.fit(train_ds, epochs=e + 1, initial_epoch=e, callbacks=cbs)
"""
    out = fit_once(source)
    assert out == "import keras\nnet.fit(train_ds, epochs=num_epochs, callbacks=cbs)\n"
    more_work = """for e in range(3):
    model.fit(x, y, epochs=1)
    model.evaluate(vx, vy)
"""
    assert fit_once(more_work) is None
    several_epochs = "for e in range(3):\n    model.fit(x, y, epochs=2)\n"
    assert fit_once(several_epochs) is None
    uses_epoch = "for e in range(3):\n    model.fit(xs[e], ys[e], epochs=1)\n"
    assert fit_once(uses_epoch) is None
    epoch_needed_after = "for e in range(3):\n    model.fit(x, y)\nprint(e)\n"
    assert fit_once(epoch_needed_after) is None


REPLAY_CELL = """import numpy as np
import keras

keras.utils.set_random_seed(5)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss="mse")
rng = np.random.default_rng(1)
for step in range(4):
    state = rng.normal(size=(1, 3)).astype("float32")
    target = model.predict(state, verbose=0) + 1.0
    model.fit(state, target, epochs=1, verbose=0)  # one sample: one step
weights = model.get_weights()
"""


def test_fit_of_data_made_in_the_loop_becomes_train_on_batch_with_the_same_weights():
    out = train_on_batch_in_loop(REPLAY_CELL, loop_lineno=8)
    assert out is not None
    assert_compiles(out)
    assert "    model.train_on_batch(state, target)  # one sample: one step\n" in out
    before, after = execute(REPLAY_CELL), execute(out)
    for a, b in zip(before["weights"], after["weights"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_train_on_batch_keeps_weights_and_names_the_data():
    source = (
        "for i in range(9):\n"
        "    xb = make(i)\n"
        "    net.fit(x=xb, y=xb * 2, sample_weight=w, batch_size=64, shuffle=False, verbose=0)\n"
    )
    out = train_on_batch_in_loop(source)
    assert out is not None
    assert "    net.train_on_batch(x=xb, y=xb * 2, sample_weight=w)\n" in out


def test_fits_train_on_batch_cannot_take_stay():
    for source in (
        "for e in range(5):\n    model.fit(x, y, epochs=1, verbose=0)\n",  # the same data
        "for xb, yb in batches:\n    h = model.fit(xb, yb, verbose=0)\n",  # its history used
        "for xb, yb in batches:\n    model.fit(xb, yb, verbose=0, callbacks=[cb])\n",
        "for xb, yb in batches:\n    model.fit(xb, yb, epochs=2)\n",
        "for xb, yb in batches:\n    model.fit(xb, yb, validation_split=0.1)\n",
        "model.fit(x, y)\n",  # in no loop
    ):
        assert train_on_batch_in_loop(source) is None, source
    # a loop given by its line: a fit in another loop stays
    two = "for a in s:\n    m.fit(a, a)\nfor b in s:\n    m.fit(b, b)\n"
    assert train_on_batch_in_loop(two, loop_lineno=3) == (
        "for a in s:\n    m.fit(a, a)\nfor b in s:\n    m.train_on_batch(b, b)\n"
    )
