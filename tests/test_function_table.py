"""The tf.function table keeps Keras' own functions apart from the code's, and says why their
trace counts are expected.

Keras makes a train, test and predict function per model (again after each ``compile``); the
inner ``one_step_on_data`` is called only while its outer function traces, so its traces match
or pass its calls. Shown next to the code's functions with "traced again on most calls", users
read that as retracing. These tests run real Keras and tf.function code under ``%%tfprofile``.
"""

from __future__ import annotations

from html import escape

import keras
import pytest
import tensorflow as tf

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled
from tfdiag_magic.probes.tf_functions import is_keras_internal
from tfdiag_magic.views.text import KERAS_FUNCTIONS_NOTE, LIBRARY_FUNCTIONS

SETUP = """
import numpy as np, keras, tensorflow as tf
x = np.random.default_rng(0).normal(size=(100, 8)).astype("float32")
y = x[:, :1] * 2.0
def small_model():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model
"""

# Several models, each fitted, evaluated and predicted more than once, with last batches
# smaller than the others: Keras' functions trace many times, none of it the code's doing.
KERAS_ONLY = (
    "for seed in range(3):\n"
    "    model = small_model()\n"
    "    model.fit(x, y, batch_size=32, epochs=2, validation_data=(x[:40], y[:40]), verbose=0)\n"
    "    model.fit(x, y, batch_size=32, epochs=1, verbose=0)\n"
    "    model.evaluate(x, y, verbose=0)\n"
    "    model.predict(x, verbose=0)\n"
)


@pytest.fixture
def fn_ip(ip):
    ip.run_cell(SETUP)
    return ip


def test_keras_own_functions_are_shown_apart_with_what_their_traces_mean(fn_ip):
    result, r = profiled(fn_ip, KERAS_ONLY)
    assert result.success
    keras_own = [f for f in r.record.functions if f.keras_internal]
    names = {f.name.rsplit(".", 1)[-1] for f in keras_own}
    assert {"one_step_on_data", "multi_step_on_iterator"} <= names
    # The counts that read as retracing: the inner function traces at least once per call.
    inner = next(f for f in keras_own if f.name.endswith(".one_step_on_data"))
    assert inner.traces >= inner.calls >= 6  # a train and a test function for each of 3 models
    assert not [f for f in r.record.functions if not f.keras_internal]
    text = r.summary()
    assert f"{LIBRARY_FUNCTIONS} (calls, traces in this run):" in text
    assert "tf.functions of the code" not in text  # the code defined none
    assert "traced again" not in text
    assert f"  one_step_on_data: {inner.calls} calls, {inner.traces} traces" in text
    assert "they are not retracing of your code" in " ".join(text.split())  # wrapped lines
    section = text.split(LIBRARY_FUNCTIONS)[1].split("Tracing:")[0]
    assert "TensorFlowTrainer" not in section  # the short name, not Keras' qualname
    html = r.to_html(full_page=False)
    assert f"<caption>{escape(LIBRARY_FUNCTIONS)}</caption>" in html
    assert "traced again" not in html
    assert_silent(r, "retracing")


def test_the_codes_retracing_function_is_marked_and_found_beside_keras_functions(fn_ip):
    result, r = profiled(
        fn_ip,
        "model = small_model()\n"
        "model.fit(x, y, batch_size=32, epochs=1, verbose=0)\n"
        "@tf.function\n"
        "def scaled(v, factor):\n"
        "    return v * factor\n"
        "for i in range(8):\n"
        "    scaled(x, float(i))  # a new Python value each call: a new graph each call\n",
    )
    assert result.success
    text = r.summary()
    mine = text.split("tf.functions of the code (calls, traces in this run):")[1]
    mine, keras_part = mine.split(f"{LIBRARY_FUNCTIONS} (calls, traces in this run):")
    assert "scaled: 8 calls, 8 traces  <- traced again on most calls" in mine
    assert "one_step_on_data" not in mine and "one_step_on_data" in keras_part
    assert "traced again" not in keras_part
    html = r.to_html(full_page=False)
    assert "<caption>tf.functions of the code</caption>" in html
    assert html.index("scaled") < html.index(escape(LIBRARY_FUNCTIONS))
    f = the(r, "retracing")
    assert f.evidence["function"] == "scaled"


def test_the_savers_functions_a_saved_model_traces_are_tensorflows_not_the_codes(fn_ip, tmp_path):
    """Writing a SavedModel (as ``model.export`` and a TFLite conversion do) traces TensorFlow's
    ``MultiDeviceSaver._traced_save`` and ``_traced_restore``: they are not the code's."""
    result, r = profiled(
        fn_ip,
        "class Scale(tf.Module):\n"
        "    def __init__(self):\n"
        "        self.w = tf.Variable(2.0)\n"
        "    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])\n"
        "    def scale(self, v):\n"
        "        return v * self.w\n"
        "module = Scale()\n"
        "module.scale(tf.ones([3]))\n"
        f"tf.saved_model.save(module, {str(tmp_path / 'saved')!r})\n",
    )
    assert result.success
    library = {f.name for f in r.record.functions if f.keras_internal and f.calls}
    assert {"MultiDeviceSaver._traced_save", "MultiDeviceSaver._traced_restore"} <= library
    mine = [f.name for f in r.record.functions if not f.keras_internal and f.calls]
    assert mine == ["Scale.scale"]
    text = r.summary()
    code_part = text.split("tf.functions of the code (calls, traces in this run):")[1]
    code_part = code_part.split(LIBRARY_FUNCTIONS)[0]
    assert "Scale.scale" in code_part and "_traced_save" not in code_part


def test_keras_internal_is_a_function_keras_defines_not_a_model_the_code_wraps():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.make_train_function()
    assert is_keras_internal(model.train_function)  # the function Keras' trainer made

    def step(v):
        return v + 1

    assert not is_keras_internal(step)
    assert not is_keras_internal(tf.function(model).python_function)  # a model the code wraps
    assert not is_keras_internal(tf.function(model.call).python_function)  # a Keras method
    assert not is_keras_internal(None)
    assert "one_step_on_data" in KERAS_FUNCTIONS_NOTE


def test_traced_again_on_most_calls_means_more_than_half():
    from tfdiag_magic.views.text import traced_on_most_calls

    assert traced_on_most_calls({"calls": 12, "traces": 7})
    assert not traced_on_most_calls({"calls": 12, "traces": 6})  # half is not most
    assert not traced_on_most_calls({"calls": 4, "traces": 4})  # too few calls to say


# A tracing that raises: the mixed precision guide's step, traced with a layer that cannot take
# its input's dtype, read "1 calls, 0 traces" (TensorFlow counts only tracings that made a
# graph). Then a function whose tracing worked and whose run raised: one tracing, not two.
TRACE_RAISES = """
@tf.function
def step(v):
    if v.shape[-1] != 4:
        raise ValueError("step takes 4 features")
    return v * 2.0
step(tf.ones((2, 3)))
"""
RUN_RAISES = """
@tf.function
def checked(v):
    tf.debugging.assert_positive(v)
    return v * 2.0
checked(tf.ones((2,)))
checked(-tf.ones((2,)))
"""


@pytest.mark.parametrize(
    ("cell", "error", "calls"),
    [(TRACE_RAISES, "ValueError", 1), (RUN_RAISES, "InvalidArgumentError", 2)],
    ids=["its-tracing-raised", "its-run-raised"],
)
def test_a_call_that_raised_counts_its_tracing_once(fn_ip, cell, error, calls):
    result, r = profiled(fn_ip, cell)
    assert type(result.error_in_exec).__name__ == error
    stats = next(f for f in r.record.functions if f.name in ("step", "checked"))
    assert (stats.calls, stats.traces) == (calls, 1), stats


def test_each_tracing_is_marked_as_the_libraries_or_the_codes(fn_ip):
    """A distributed dataset's iterator traces TensorFlow's own functions (`_init_func`,
    `_next_func`, ... for each device) at every epoch; no function table holds them, since the
    code never calls them. Each tracing carries the mark, so that what grows with the code is
    told from what the library redoes per epoch (progressive-slowdown's causes)."""
    result, r = profiled(
        fn_ip,
        "strategy = tf.distribute.MirroredStrategy(\n"
        "    ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())\n"
        "with strategy.scope():\n"
        "    dmodel = small_model()\n"
        "data = tf.data.Dataset.from_tensor_slices((x, y)).batch(20)\n"
        "dmodel.fit(data, epochs=3, verbose=0)\n"
        "@tf.function\n"
        "def doubled(v):\n"
        "    return v * 2.0\n"
        "doubled(tf.constant(1.0))\n",
    )
    assert result.success
    outer = [t for t in r.record.traces if not t.nested]
    iterators = [t for t in outer if t.function.endswith(("_init_func", "_next_func"))]
    assert len(iterators) >= 3 * 2 * 2, [t.function for t in outer]  # 3 epochs, 2 devices
    assert all(t.library for t in iterators)
    assert [t.library for t in outer if t.function == "doubled"] == [False]
    assert [t for t in outer if t.function == "multi_step_on_iterator" and t.library]


def test_a_dataset_maps_tracing_is_the_function_it_was_given(fn_ip):
    """tf.data traces its own wrapper of a transformation's function: the tracing names and
    marks the function the code gave (`ds.map(self.split_window)` in the time-series tutorial,
    labelled the library's before), and a library utility's own map stays the library's."""
    result, r = profiled(
        fn_ip,
        "import keras\n"
        "class Windows:\n"
        "    def split(self, batch):\n"
        "        return batch[:, :-1], batch[:, -1:]\n"
        "series = np.arange(200, dtype='float32')\n"
        "made = keras.utils.timeseries_dataset_from_array(series, None, 5, batch_size=8)\n"
        "for inputs, labels in made.map(Windows().split):\n"
        "    pass\n",
    )
    assert result.success
    maps = [t for t in r.record.traces if t.function.startswith("Dataset_map_")]
    own = [t for t in maps if t.function.endswith("split")]
    assert own and not any(t.library for t in own), maps
    assert {t.defined_at[1] for t in own} == {4}, own  # `def split` is the cell's line 4
    assert any(t.library for t in maps if t not in own), maps  # the utility's lambdas
    # The report says whose the tracings were: the utility's maps are the library's.
    from tfdiag_magic.views.text import render_text

    tracing = r.report()["tracing"]
    assert tracing["dataset_count"] == len(own) and tracing["library_count"] >= 1, tracing
    assert tracing["library_count"] + tracing["dataset_count"] <= tracing["count"], tracing
    line = next(x for x in render_text(r.report()).splitlines() if x.startswith("Tracing: "))
    assert f"{len(own)} of functions given to tf.data transformations" in line, line
    assert "of functions TensorFlow or Keras defines" in line, line
