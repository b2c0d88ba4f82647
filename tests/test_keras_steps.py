"""Exact step counts for every way Keras drives training: fit, evaluate, predict, *_on_batch."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import profiled

SETUP = """
import numpy as np, tensorflow as tf, keras
x = np.random.default_rng(0).normal(size=(80, 6)).astype("float32")
y = x.sum(axis=1, keepdims=True)
def make_model(**compile_args):
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", **compile_args)
    return model
"""


@pytest.fixture
def keras_ip(ip):
    ip.run_cell(SETUP)
    return ip


def phases(r) -> dict[str, int]:
    return r.record.phase_counts()


def test_fit_records_epochs_times_batches_as_train_steps(keras_ip):
    result, r = profiled(
        keras_ip, "m = make_model()\nm.fit(x, y, batch_size=16, epochs=3, verbose=0)"
    )
    assert result.success
    assert phases(r) == {"train": 15}
    steps = r.steps
    assert steps["epoch"].tolist() == [e for e in range(3) for _ in range(5)]
    assert set(steps["kind"]) == {"keras"}
    assert (steps["duration"] > 0).all()
    # The loss Keras reports is recorded, read after the step without an extra sync.
    assert np.isfinite(steps["loss"]).sum() == 15
    assert r.report()["steps"]["count"] == 15


def test_fit_with_validation_records_eval_steps_per_epoch(keras_ip):
    _, r = profiled(
        keras_ip,
        "m = make_model()\n"
        "m.fit(x[:64], y[:64], validation_data=(x[64:], y[64:]), batch_size=16, epochs=2,"
        " verbose=0)",
    )
    assert phases(r) == {"train": 8, "eval": 2}
    evals = r.steps[r.steps["phase"] == "eval"]
    assert evals["epoch"].tolist() == [0, 1]


def test_steps_per_execution_counts_every_step_not_every_call(keras_ip):
    # 80 samples / 16 = 5 batches per epoch, executed as calls of 2 + 2 + 1 steps.
    _, r = profiled(
        keras_ip,
        "m = make_model(steps_per_execution=2)\nm.fit(x, y, batch_size=16, epochs=2, verbose=0)",
    )
    assert phases(r) == {"train": 10}
    assert r.steps["fused"].tolist() == [2, 2, 2, 2, 1] * 2
    assert r.report()["steps"]["phases"]["train"]["fused"] == 2


def test_dataset_with_steps_per_epoch(keras_ip):
    _, r = profiled(
        keras_ip,
        "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()\n"
        "m = make_model()\nm.fit(ds, steps_per_epoch=7, epochs=3, verbose=0)",
    )
    assert phases(r) == {"train": 21}


def test_evaluate_and_predict_steps(keras_ip):
    _, r = profiled(
        keras_ip,
        "m = make_model()\n"
        "m.evaluate(x, y, batch_size=20, verbose=0)\n"
        "p = m.predict(x, batch_size=32, verbose=0)",
    )
    assert phases(r) == {"eval": 4, "predict": 3}
    assert keras_ip.user_ns["p"].shape == (80, 1)
    assert r.report()["steps"]["count"] == 0  # no training step


def test_on_batch_calls_are_steps(keras_ip):
    _, r = profiled(
        keras_ip,
        "m = make_model()\n"
        "for i in range(4):\n"
        "    loss = m.train_on_batch(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])\n"
        "m.test_on_batch(x[:8], y[:8])\n"
        "m.test_on_batch(x[8:16], y[8:16])\n"
        "m.predict_on_batch(x[:8])",
    )
    counts = phases(r)
    assert counts["train"] == 4 and counts["eval"] == 2 and counts["predict"] == 1
    assert counts["loop"] == 4
    train = r.steps[r.steps["phase"] == "train"]
    assert set(train["kind"]) == {"on_batch"}
    assert np.isfinite(train["loss"]).all()


def test_run_eagerly_marks_steps_eager(keras_ip):
    _, r = profiled(
        keras_ip,
        "m = make_model(run_eagerly=True)\nm.fit(x, y, batch_size=40, epochs=1, verbose=0)",
    )
    assert phases(r) == {"train": 2}
    assert r.steps["eager"].all()


def test_graph_fit_steps_are_not_eager_and_first_step_traces(keras_ip):
    _, r = profiled(keras_ip, "m = make_model()\nm.fit(x, y, batch_size=40, epochs=2, verbose=0)")
    steps = r.steps
    assert not steps["eager"].any()
    assert steps["traced"].iloc[0]
    keras_functions = [f for f in r.record.functions if f.keras_internal]
    assert keras_functions and sum(f.calls for f in keras_functions) >= 4
    assert any(f.updates_weights for f in keras_functions)


def test_mirrored_strategy_fit_on_two_logical_cpus(keras_ip):
    _, r = profiled(
        keras_ip,
        # Reduction without collectives: collective instance keys of strategies created
        # earlier in the same test process would collide.
        "strategy = tf.distribute.MirroredStrategy(\n"
        "    ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())\n"
        "with strategy.scope():\n"
        "    m = make_model()\n"
        "m.fit(x, y, batch_size=16, epochs=2, verbose=0)\n"
        "n_replicas = strategy.num_replicas_in_sync",
    )
    assert keras_ip.user_ns["n_replicas"] == 2
    assert phases(r) == {"train": 10}


def test_callback_time_is_kept_apart_from_the_step(keras_ip):
    _, r = profiled(
        keras_ip,
        "import time\n"
        "class Slow(keras.callbacks.Callback):\n"
        "    def on_train_batch_end(self, batch, logs=None):\n"
        "        time.sleep(0.1)\n"
        "m = make_model()\nm.fit(x, y, batch_size=20, epochs=1, verbose=0, callbacks=[Slow()])",
    )
    steps = r.steps
    assert len(steps) == 4
    # The sleep is measured as callback time (a floor), and not inside the step: the steps
    # after the first (which traces) are a small model's, a few ms even on a busy machine
    # (13 ms there once beside two other test workers on 2 CPUs, and 52 ms once at a load of
    # 7: hence a sleep of 100 ms).
    assert (steps["callback_time"] >= 0.1).all()
    assert (steps["duration"] < steps["callback_time"]).sum() >= 3


def test_exception_in_fit_gives_the_failing_step(keras_ip):
    result, r = profiled(
        keras_ip,
        "class Boom(keras.callbacks.Callback):\n"
        "    def on_train_batch_begin(self, batch, logs=None):\n"
        "        if batch == 3:\n"
        "            raise RuntimeError('stop at 3')\n"
        "m = make_model()\nm.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[Boom()])",
    )
    assert isinstance(result.error_in_exec, RuntimeError)
    assert phases(r) == {"train": 3}
    assert r.record.error.type == "RuntimeError"
    assert r.record.error.step == 3


def test_validation_with_steps_per_execution_counts_validation_batches(keras_ip):
    # 48 training samples / 16 = 3 batches; 32 validation samples / 4 = 8 batches.
    _, r = profiled(
        keras_ip,
        "m = make_model(steps_per_execution=4)\n"
        "m.fit(x[:48], y[:48], validation_data=(x[48:], y[48:]), validation_batch_size=4,"
        " batch_size=16, epochs=1, verbose=0)",
    )
    assert phases(r) == {"train": 3, "eval": 8}
    evals = r.steps[r.steps["phase"] == "eval"]
    assert evals["fused"].tolist() == [4] * 8


def test_time_split_says_keras_input_wait_is_inside_the_steps(keras_ip):
    _, r = profiled(keras_ip, "m = make_model()\nm.fit(x, y, batch_size=40, epochs=1, verbose=0)")
    split = r.report()["time_split"]
    assert not split["data_wait_observable"]
    assert "inside each step" in split["data_wait_note"]
    assert "inside each step" in r.summary()


TWO_MODELS = """
def sized(width, name):
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(1)], name=name)
    model.compile(optimizer="sgd", loss="mse")
    return model
small, large = sized(4, "small"), sized(1536, "large")
small.fit(x, y, batch_size=16, epochs=6, validation_split=0.2, verbose=0)
large.fit(x, y, batch_size=16, epochs=3, validation_split=0.2, verbose=0)
small.fit(x, y, batch_size=16, epochs=1, verbose=0)
"""


def test_a_phase_of_two_models_is_split_by_model(keras_ip):
    # One train phase of a small model's steps and a large one's (about 10x as long a step
    # here): its median is a step of neither, so each model's steps get their own numbers,
    # placed by the fit call they ran in (the small model's second fit joins its first).
    from tfdiag_magic.views.text import render_text

    result, r = profiled(keras_ip, TWO_MODELS)
    assert result.success
    split = r.report()["steps"]["phase_models"]
    train = {m["model"]: m for m in split["train"]["models"]}
    assert list(train) == ["small", "large"]
    assert (train["small"]["count"], train["large"]["count"]) == (4 * 6 + 5, 4 * 3)
    assert train["large"]["median"] > 2 * train["small"]["median"], train
    evals = {m["model"]: m["count"] for m in split["eval"]["models"]}
    assert evals == {"small": 6, "large": 3}
    text = render_text(r.report())
    assert "model small" in text and "model large" in text


FROZEN_THEN_FINE_TUNED = """
base = keras.Sequential([keras.Input((6,)), keras.layers.Dense(512, activation="relu"),
                         keras.layers.Dense(512, activation="relu")], name="base")
model = keras.Sequential([base, keras.layers.Dense(1)], name="tuned")
base.trainable = False
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=16, epochs=2, verbose=0)
base.trainable = True
model.compile(optimizer=keras.optimizers.Adam(1e-5), loss="mse")
model.fit(x, y, batch_size=16, epochs=3, verbose=0)
"""


def test_a_model_compiled_again_is_split_by_its_compiles(keras_ip):
    # Transfer learning fits a model with its base frozen, then unfreezes the base and
    # compiles again: the fine-tuning steps (a new training function, several times as long in
    # keras-io's guide) get their own numbers, named by the compile they followed.
    from tfdiag_magic.views.text import render_text

    result, r = profiled(keras_ip, FROZEN_THEN_FINE_TUNED)
    assert result.success
    train = r.report()["steps"]["phase_models"]["train"]["models"]
    assert [(m["model"], m["count"]) for m in train] == [
        ("tuned, compiled at line 7", 5 * 2),
        ("tuned, compiled at line 10", 5 * 3),
    ]
    assert "model tuned, compiled at line 10" in render_text(r.report())


def test_a_phase_of_one_model_is_not_split(keras_ip):
    result, r = profiled(
        keras_ip, "m = make_model()\nfor _ in range(2):\n    m.fit(x, y, epochs=2, verbose=0)"
    )
    assert result.success
    assert r.report()["steps"]["phase_models"] == {}


def test_models_rebuilt_under_one_name_and_compiled_at_one_line_read_apart():
    # A loop over settings that clears the session rebuilds "sequential" and compiles it at one
    # line each time: each row says which compile it follows, not three alike.
    from tfdiag_magic.phase_split import rows_by_model
    from tfdiag_magic.record import KerasCall, Record

    record = Record()
    for name, column in record.steps.items():
        record.steps[name] = np.zeros(6, dtype=column.dtype)
    record.steps["start"] = np.arange(6, dtype=float)
    for i in range(3):
        record.keras_calls += [
            KerasCall("compile", 2.0 * i, 0.1, 0, 0.0, 0, "sequential", 32.0, "", line=5),
            KerasCall("fit", 2.0 * i + 0.5, 1.0, 1, 0.5, 0, "sequential", 32.0, "numpy", line=6),
        ]
    owner, names = rows_by_model(record)
    assert owner.tolist() == [-1, 0, -1, 1, -1, 2]
    assert names == [f"sequential, compiled at line 5 (compile {n})" for n in (1, 2, 3)]
