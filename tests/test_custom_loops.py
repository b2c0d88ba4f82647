"""Exact step counts for custom training: tf.function steps, eager GradientTape loops, the
cell's own loops (with their data wait), ``step()`` markers; and the run's other facts:
tracing, warnings, GC pauses."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.helpers import profiled
from tfdiag_magic.record import KINDS, PHASES
from tfdiag_magic.stats import phase_stats

SETUP = """
import numpy as np, tensorflow as tf, keras
x = np.random.default_rng(0).normal(size=(64, 6)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)
mse = keras.losses.MeanSquaredError()
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)   # 8 batches

def grads_and_loss(xb, yb):
    with tf.GradientTape() as tape:
        loss = mse(yb, model(xb, training=True))
    return tape.gradient(loss, model.trainable_variables), loss
"""


@pytest.fixture
def loop_ip(ip):
    ip.run_cell(SETUP)
    return ip


def phases(r) -> dict[str, int]:
    return r.record.phase_counts()


def test_tf_function_training_loop(loop_ip):
    result, r = profiled(
        loop_ip,
        "@tf.function\n"
        "def train_step(xb, yb):\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    return loss\n"
        "@tf.function\n"
        "def val_step(xb, yb):\n"
        "    return mse(yb, model(xb))\n"
        "for epoch in range(3):\n"
        "    for xb, yb in ds:\n"
        "        loss = train_step(xb, yb)\n"
        "    val = val_step(x, y)\n",
    )
    assert result.success
    counts = phases(r)
    assert counts["train"] == 24  # optimizer updates: 3 epochs x 8 batches
    assert counts["function"] == 3  # the validation function updates no weights
    assert counts["loop"] == 3 + 24
    steps = r.steps
    train = steps[steps["phase"] == "train"]
    assert set(train["kind"]) == {"tf_function"}
    assert train["epoch"].tolist() == [e for e in range(3) for _ in range(8)]
    assert np.isfinite(train["loss"]).all()  # the returned loss, read one step later
    assert not train["eager"].any()
    assert (train["data_wait"] >= 0).all()  # next() on the dataset, measured per step
    stats = {f.name: f for f in r.record.functions}
    assert stats["train_step"].calls == 24 and stats["train_step"].updates_weights
    assert stats["val_step"].calls == 3 and not stats["val_step"].updates_weights
    assert "traced again" not in r.summary()  # one trace each: nothing to point at


def test_eager_gradient_tape_loop_counts_optimizer_updates(loop_ip):
    _, r = profiled(
        loop_ip,
        "for xb, yb in ds.take(5):\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
    )
    counts = phases(r)
    assert counts == {"train": 5, "loop": 5}
    train = r.steps[r.steps["phase"] == "train"]
    assert set(train["kind"]) == {"eager_update"}
    assert train["eager"].all()
    loops = r.steps[r.steps["phase"] == "loop"]
    # The eager step holds the forward and backward pass: it starts with the iteration's body.
    assert np.allclose(train["start"].to_numpy(), loops["start"].to_numpy(), atol=5e-4)


def test_run_functions_eagerly_marks_tf_function_steps_eager(loop_ip):
    _, r = profiled(
        loop_ip,
        "tf.config.run_functions_eagerly(True)\n"
        "try:\n"
        "    @tf.function\n"
        "    def train_step(xb, yb):\n"
        "        grads, loss = grads_and_loss(xb, yb)\n"
        "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    for xb, yb in ds.take(3):\n"
        "        train_step(xb, yb)\n"
        "finally:\n"
        "    tf.config.run_functions_eagerly(False)\n",
    )
    train = r.steps[r.steps["phase"] == "train"]
    assert len(train) == 3 and train["eager"].all()


def test_mirrored_strategy_custom_loop(loop_ip):
    _, r = profiled(
        loop_ip,
        # Reduction without collectives: collective instance keys of strategies created
        # earlier in the same test process would collide.
        "strategy = tf.distribute.MirroredStrategy(\n"
        "    ['/cpu:0', '/cpu:1'], cross_device_ops=tf.distribute.ReductionToOneDevice())\n"
        "with strategy.scope():\n"
        "    dmodel = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])\n"
        "    dopt = keras.optimizers.SGD(0.01)\n"
        "dist = strategy.experimental_distribute_dataset(ds)\n"
        "def replica_step(xb, yb):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean((dmodel(xb) - yb) ** 2)\n"
        "    g = tape.gradient(loss, dmodel.trainable_variables)\n"
        "    dopt.apply_gradients(zip(g, dmodel.trainable_variables))\n"
        "    return loss\n"
        "@tf.function\n"
        "def dist_step(xb, yb):\n"
        "    per = strategy.run(replica_step, args=(xb, yb))\n"
        "    return strategy.reduce('SUM', per, axis=None)\n"
        "for xb, yb in dist:\n"
        "    dist_step(xb, yb)\n",
    )
    assert phases(r)["train"] == 8


def test_predict_per_sample_shows_as_loop_iterations(loop_ip):
    _, r = profiled(
        loop_ip,
        "outs = []\nfor i in range(6):\n    outs.append(model.predict(x[i:i + 1], verbose=0))\n",
    )
    counts = phases(r)
    assert counts["loop"] == 6
    assert counts["predict"] == 6  # one batch per predict call
    assert r.record.loops[0].source == "for i in range(6):"
    # Each call builds Keras' pipeline over the array, tracing its tf.data functions: every
    # iteration alike, so the steady state; only the first iteration is warm-up.
    assert sum(t.of_a_pipeline for t in r.record.traces) >= 6
    loop = phase_stats(r.record)["loop"]
    assert loop.warmup_count == 1 and loop.steady_count == 5


def test_a_pipeline_built_each_epoch_is_steady_but_a_step_that_retraces_is_warm_up(loop_ip):
    """The code's own `ds.map(f)` built in each epoch traces `f` each epoch (the epoch's rows
    are steady), while a step function that retraces (a new Python number each epoch) still
    marks the rows it traced in."""
    loop_ip.run_cell(
        "@tf.function\n"
        "def scaled_step(xb, yb, scale):\n"
        "    grads, loss = grads_and_loss(xb * scale, yb)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    return loss\n"
    )
    result, r = profiled(
        loop_ip,
        "for epoch in range(4):\n"
        "    pipeline = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b))\n"
        "    for xb, yb in pipeline.batch(16):\n"
        "        scaled_step(xb, yb, 1.0 if epoch < 2 else float(epoch))\n",
    )
    assert result.success, result.error_in_exec
    assert sum(t.of_a_pipeline for t in r.record.traces) == 4  # the map, once per epoch
    steps = r.record.steps
    train = np.flatnonzero(steps["phase"] == PHASES.index("train"))
    assert train.size == 16
    # traced: the first call, and the first calls with 2.0 and 3.0 (epochs 2 and 3)
    assert steps["traced"][train].tolist() == [True] + [False] * 7 + ([True] + [False] * 3) * 2
    outer = next(loop.id for loop in r.record.loops if loop.source.startswith("for epoch"))
    epochs = np.flatnonzero((steps["kind"] == KINDS.index("loop")) & (steps["loop"] == outer))
    # each epoch traced the map; only the first and the retracing ones traced the step
    assert steps["traced"][epochs].tolist() == [True, False, True, True]


def test_data_wait_is_the_time_in_next(loop_ip):
    _, r = profiled(
        loop_ip,
        "import time\n"
        "def slow_batches():\n"
        "    for i in range(4):\n"
        "        time.sleep(0.03)\n"
        "        yield x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]\n"
        "@tf.function\n"
        "def train_step(xb, yb):\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "for xb, yb in slow_batches():\n"
        "    train_step(xb, yb)\n",
    )
    train = r.steps[r.steps["phase"] == "train"]
    assert len(train) == 4
    assert (train["data_wait"] >= 0.03).all()
    split = r.report()["time_split"]
    assert split["data_wait_observable"] and split["data_wait"] >= 0.12


def test_while_loop_and_break(loop_ip):
    _, r = profiled(
        loop_ip,
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    if i == 5:\n"
        "        break\n"
        "for j in range(10):\n"
        "    if j == 3:\n"
        "        break\n"
        "after = (i, j)\n",
    )
    assert loop_ip.user_ns["after"] == (5, 3)
    loops = r.steps[r.steps["phase"] == "loop"]
    assert (loops["loop"] == 0).sum() == 5  # the while loop ran its body 5 times
    assert (loops["loop"] == 1).sum() == 4  # the for loop started 4 iterations
    assert np.isfinite(loops["duration"]).all()


def test_step_marker_counts_marked_blocks(loop_ip):
    _, r = profiled(
        loop_ip,
        "from tfdiag_magic import step\n"
        "for i in range(3):\n"
        "    with step() as s:\n"
        "        grads, loss = grads_and_loss(x[:8], y[:8])\n"
        "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "        s.loss = float(loss)\n"
        "with step(phase='eval'):\n"
        "    model(x)\n",
    )
    counts = phases(r)
    # The optimizer update inside a marked step is part of it, not a step of its own.
    assert counts["train"] == 3 and counts["eval"] == 1
    train = r.steps[r.steps["phase"] == "train"]
    assert set(train["kind"]) == {"marker"} and np.isfinite(train["loss"]).all()


def test_step_marker_outside_a_run_does_nothing():
    from tfdiag_magic import step

    with step():
        value = 1 + 1
    assert value == 2
    with pytest.raises(ValueError, match="phase must be one of"):
        step(phase="warmup")


def test_retracing_is_counted_and_its_warning_recorded(loop_ip):
    _, r = profiled(
        loop_ip,
        "@tf.function\n"
        "def scaled(xb, factor):\n"
        "    return tf.reduce_sum(xb) * factor\n"
        "for k in range(8):\n"
        "    scaled(x[:8], float(k))   # a Python float: a new trace per value\n",
    )
    stats = {f.name: f for f in r.record.functions}
    assert stats["scaled"].calls == 8 and stats["scaled"].traces == 8
    top_traces = [t for t in r.record.traces if t.function == "scaled" and not t.nested]
    assert len(top_traces) == 8
    assert "factor" in top_traces[-1].signature
    assert r.steps[r.steps["phase"] == "function"]["traced"].all()
    assert any("retracing" in w.message for w in r.record.warnings)
    assert "scaled: 8 calls, 8 traces  <- traced again on most calls" in r.summary()


def test_function_created_in_a_loop_counts_objects(loop_ip):
    _, r = profiled(
        loop_ip,
        "for k in range(4):\n    f = tf.function(lambda t: t * 2)\n    f(tf.constant(1.0))\n",
    )
    (stats,) = [f for f in r.record.functions if "lambda" in f.name]
    assert stats.objects == 4 and stats.calls == 4 and stats.traces == 4


def test_gc_pauses_are_recorded_per_step(loop_ip):
    _, r = profiled(
        loop_ip,
        "import gc\n"
        "class Node:\n"
        "    def __init__(self):\n"
        "        self.me = self\n"
        "for i in range(3):\n"
        "    junk = [Node() for _ in range(20000)]\n"
        "    del junk\n"
        "    gc.collect()\n",
    )
    gc_table = r.record.gc
    assert gc_table["time"].size >= 3
    assert gc_table["collected"].max() >= 20000
    loops = r.steps[r.steps["phase"] == "loop"]
    assert (loops["gc_time"] > 0).sum() == 3
    assert r.report()["gc"]["collections"] == gc_table["time"].size


def test_python_warnings_are_recorded_and_still_shown(loop_ip):
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        _, r = profiled(
            loop_ip,
            "import warnings\nwarnings.warn('watch out <here>', UserWarning)\n",
        )
    assert [w.message for w in r.record.warnings] == ["watch out <here>"]
    # The warning still reached whatever showed warnings before the run.
    assert [str(w.message) for w in shown] == ["watch out <here>"]


def test_host_memory_is_sampled_over_steps(loop_ip):
    _, r = profiled(
        loop_ip,
        "import time\nkeep = []\n"
        "for i in range(5):\n"
        "    keep.append(np.ones(4_000_000))   # 32 MB per iteration, kept\n"
        "    time.sleep(0.15)\n",
        options="-q -o r --memory-interval 0.01",
    )
    memory = r.record.memory
    assert memory["time"].size >= 6
    assert (np.diff(memory["step"]) >= 0).all()
    rss = r.report()["memory"]["host_rss"]
    assert rss["peak"] - rss["start"] >= 5 * 32_000_000 * 0.9
    # The C heap's bytes in use see the arrays: as the `cpu_tensors` series where TensorFlow
    # keeps no count of its own, else as the `heap` series read beside TensorFlow's count.
    counted_by = r.record.facts.get("cpu_tensors_counted_by")
    heap = memory["cpu_tensors"] if counted_by == "heap" else memory["heap"]
    read = heap[heap >= 0]
    if counted_by is None or not read.size:
        return  # another C library than glibc 2.33+, and no oneDNN count: no heap to read
    assert read[-1] >= 5 * 32_000_000, read  # the last sample is always read
    if counted_by == "heap":
        assert read[-1] - read[0] >= 4 * 32_000_000, read
        assert (memory["heap"] == -1).all()  # not read twice
    else:  # first read half a second in, not at the start
        assert memory["heap"][0] == -1


def test_functions_traced_before_the_run_are_still_classified(loop_ip):
    # Defined and traced in an earlier, unprofiled cell: the run never sees them trace.
    loop_ip.run_cell(
        "metric = keras.metrics.Mean()\n"
        "@tf.function\n"
        "def train_step(xb, yb):\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    return loss\n"
        "@tf.function\n"
        "def eval_step(xb, yb):\n"
        "    metric.update_state(mse(yb, model(xb)))   # assigns variables, not trainable ones\n"
        "train_step(x[:8], y[:8]); eval_step(x[:8], y[:8])\n"
    )
    _, r = profiled(
        loop_ip,
        "for xb, yb in ds:\n    train_step(xb, yb)\n    eval_step(xb, yb)\n",
    )
    counts = phases(r)
    assert counts["train"] == 8 and counts["function"] == 8
    assert not r.steps["traced"].any()


def test_step_marker_with_a_non_scalar_loss_records_no_loss_and_runs_on(loop_ip):
    result, r = profiled(
        loop_ip,
        "from tfdiag_magic import step\n"
        "with step() as s:\n"
        "    s.loss = tf.constant([1.0, 2.0])\n"
        "after = True\n",
    )
    assert result.success and loop_ip.user_ns["after"]
    assert phases(r) == {"train": 1}
    assert np.isnan(r.steps["loss"]).all()


@pytest.mark.parametrize(
    "make_optimizer, nested",
    [
        ("keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01))", False),
        ("keras.optimizers.SGD(0.01, gradient_accumulation_steps=2)", False),
        ("keras.optimizers.SGD(0.01)", True),
    ],
    ids=["loss-scaling", "gradient-accumulation", "apply-in-nested-function"],
)
def test_updates_under_cond_or_nested_functions_traced_before_the_run_are_training(
    loop_ip, make_optimizer, nested
):
    loop_ip.run_cell(
        f"opt2 = {make_optimizer}\n"
        "@tf.function\n"
        "def apply(grads):\n"
        "    opt2.apply_gradients(zip(grads, model.trainable_variables))\n"
        "@tf.function\n"
        "def train_step(xb, yb):\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        + (
            "    apply(grads)\n"
            if nested
            else "    opt2.apply_gradients(zip(grads, model.trainable_variables))\n"
        )
        + "    return loss\n"
        "train_step(x[:8], y[:8])\n"
    )
    _, r = profiled(loop_ip, "for xb, yb in ds:\n    train_step(xb, yb)\n")
    assert phases(r) == {"train": 8, "loop": 8}


def test_eager_gradient_accumulation_step_holds_all_its_micro_batches(loop_ip):
    _, r = profiled(
        loop_ip,
        "import time\n"
        "accumulated = None\n"
        "for i, (xb, yb) in enumerate(ds):\n"
        "    time.sleep(0.01)                      # work on every micro-batch\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        "    accumulated = grads if accumulated is None else [\n"
        "        a + g for a, g in zip(accumulated, grads)]\n"
        "    if i % 4 == 3:\n"
        "        optimizer.apply_gradients(zip(accumulated, model.trainable_variables))\n"
        "        accumulated = None\n",
    )
    train = r.steps[r.steps["phase"] == "train"]
    assert len(train) == 2  # 8 micro-batches, an update every 4
    assert (train["duration"] >= 0.04).all()  # each update's step holds its 4 sleeps


def test_function_calls_inside_an_eager_step_are_not_counted_twice_in_compute(loop_ip):
    _, r = profiled(
        loop_ip,
        "@tf.function\n"
        "def forward(xb):\n"
        "    return model(xb, training=True)\n"
        "for xb, yb in ds:\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = mse(yb, forward(xb))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n",
    )
    counts = phases(r)
    assert counts["train"] == 8 and counts["function"] == 8
    split = r.report()["time_split"]
    assert split["compute"] <= split["wall"]
    train = r.steps[r.steps["phase"] == "train"]
    assert train["traced"].iloc[0]  # the trace inside the first step marks it warm-up


def test_the_run_does_not_keep_dropped_functions_alive(loop_ip):
    _, r = profiled(
        loop_ip,
        "import weakref, gc\n"
        "refs = []\n"
        "for k in range(5):\n"
        "    f = tf.function(lambda t: t + 1)\n"
        "    f(tf.constant(1.0))\n"
        "    refs.append(weakref.ref(f))\n"
        "del f\n"
        "gc.collect()\n"
        "alive = sum(ref() is not None for ref in refs)\n",
    )
    assert loop_ip.user_ns["alive"] == 0
    (stats,) = [f for f in r.record.functions if "lambda" in f.name]
    assert stats.objects == 5 and stats.calls == 5 and stats.traces == 5


def test_a_loop_in_a_function_of_the_cell_is_recorded_with_its_data_wait(loop_ip):
    _, r = profiled(
        loop_ip,
        "def train():\n"
        "    for xb, yb in ds:\n"
        "        grads, loss = grads_and_loss(xb, yb)\n"
        "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "train()\n",
    )
    assert phases(r) == {"train": 8, "loop": 8}
    assert [(loop.lineno, loop.function) for loop in r.record.loops] == [(3, "train")]
    train = r.steps[r.steps["phase"] == "train"]
    assert (train["data_wait"] >= 0).all()
    split = r.report()["time_split"]
    assert split["data_wait_observable"] and split["data_wait_note"] == ""
    # The loop timed next() itself: the tf.data iterator's own timing did not count it again.
    assert "iterator_wait_s" not in r.record.facts


def test_a_dataset_stepped_by_a_function_defined_earlier_gives_its_wait(loop_ip):
    """A loop the tool cannot rewrite (a function of an earlier, unprofiled cell): the
    tf.data iterator's next() is timed where the loop calls it."""
    import time

    loop_ip.run_cell(
        "import time\n"
        "def slowly(v):\n"
        "    time.sleep(0.15)\n"
        "    return v\n"
        "slow = ds.map(lambda a, b: (tf.numpy_function(slowly, [a], tf.float32), b))\n"
        "def train(data):\n"
        "    for xb, yb in data:\n"
        "        xb = tf.ensure_shape(xb, [None, 6])\n"
        "        grads, loss = grads_and_loss(xb, yb)\n"
        "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    started = time.perf_counter()
    _, r = profiled(loop_ip, "train(slow)\n")
    assert time.perf_counter() - started >= 8 * 0.15
    assert phases(r) == {"train": 8}
    train = r.steps[r.steps["phase"] == "train"]
    # Each eager step (10-20 ms here, 40-60 ms on a loaded machine) overlaps the next batch's
    # 150 ms: most of it is waited.
    assert train["data_wait"].median() >= 0.03
    assert r.record.facts["iterator_waits"] == 8
    split = r.report()["time_split"]
    assert split["data_wait_observable"]
    assert split["data_wait"] == pytest.approx(r.record.facts["iterator_wait_s"])
    assert split["data_wait"] == pytest.approx(train["data_wait"].sum())


def test_time_split_says_when_nothing_the_cell_steps_gives_a_wait(loop_ip):
    loop_ip.run_cell(
        "def train(batches):\n"
        "    for xb, yb in batches:\n"
        "        grads, loss = grads_and_loss(xb, yb)\n"
        "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    _, r = profiled(loop_ip, "train([(x[:8], y[:8])] * 4)\n")
    assert phases(r) == {"train": 4}
    split = r.report()["time_split"]
    assert not split["data_wait_observable"]
    assert split["data_wait_note"].startswith("not measured")


def test_a_warning_logged_without_handlers_is_still_printed(loop_ip, capsys):
    import logging

    logger = logging.getLogger("keras.src.tfdiag_test")
    root_handlers = logging.getLogger().handlers[:]
    logging.getLogger().handlers.clear()  # as in a plain Python process: logging's last resort
    try:
        _, r = profiled(
            loop_ip,
            "import logging\nlogging.getLogger('keras.src.tfdiag_test').warning('careful <now>')\n",
        )
    finally:
        logging.getLogger().handlers[:] = root_handlers
    assert [w.message for w in r.record.warnings] == ["careful <now>"]
    assert "careful <now>" in capsys.readouterr().err
    assert logger.handlers == []


# -- steps are optimizer updates -------------------------------------------------------------


def test_a_function_that_trains_a_whole_epoch_counts_its_updates(loop_ip):
    """A tf.function looping over the dataset makes 8 updates per call: 3 calls are 24 steps,
    each an eighth of its call."""
    loop_ip.run_cell(
        "@tf.function\n"
        "def train_epoch(dataset):\n"
        "    total = 0.0\n"
        "    for xb, yb in dataset:\n"
        "        grads, loss = grads_and_loss(xb, yb)\n"
        "        optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "        total += loss\n"
        "    return total\n"
    )
    result, r = profiled(loop_ip, "for epoch in range(3):\n    train_epoch(ds)\n")
    assert result.success
    record = r.record
    assert phases(r)["train"] == 24
    train = record.phase_mask("train")
    assert set(record.steps["fused"][train].tolist()) == {8}
    (stats,) = [f for f in record.functions if f.name == "train_epoch"]
    assert stats.calls == 3
    assert stats.updates_per_call == 8
    assert int(np.asarray(loop_ip.user_ns["optimizer"].iterations)) == 24


def test_two_optimizers_updated_once_each_make_one_step(loop_ip):
    """A GAN-like step: two models, two optimizers, one update each per call: one step."""
    loop_ip.run_cell(
        "other = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])\n"
        "other_optimizer = keras.optimizers.SGD(0.01)\n"
        "@tf.function\n"
        "def gan_step(xb, yb):\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    with tf.GradientTape() as tape:\n"
        "        other_loss = mse(yb, other(xb, training=True))\n"
        "    other_grads = tape.gradient(other_loss, other.trainable_variables)\n"
        "    other_optimizer.apply_gradients(zip(other_grads, other.trainable_variables))\n"
        "    return loss\n"
    )
    result, r = profiled(loop_ip, "for xb, yb in ds:\n    gan_step(xb, yb)\n")
    assert result.success
    assert phases(r)["train"] == 8
    (stats,) = [f for f in r.record.functions if f.name == "gan_step"]
    assert stats.updates_per_call == 0
    assert set(r.record.steps["fused"][r.record.phase_mask("train")].tolist()) == {1}


def test_a_strategy_function_running_several_steps_per_call_counts_each(ip):
    """A distribution strategy's multi-step function: 4 `strategy.run` steps per call."""
    ip.run_cell(
        "import numpy as np, tensorflow as tf, keras\n"
        "strategy = tf.distribute.MirroredStrategy(['CPU:0'])\n"
        "x = np.random.default_rng(0).normal(size=(64, 6)).astype('float32')\n"
        "y = x.sum(axis=1, keepdims=True)\n"
        "with strategy.scope():\n"
        "    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])\n"
        "    optimizer = keras.optimizers.SGD(0.01)\n"
        "data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()\n"
        "it = iter(strategy.experimental_distribute_dataset(data))\n"
        "def step(xb, yb):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    return loss\n"
        "@tf.function\n"
        "def multi_step(iterator):\n"
        "    for _ in tf.range(4):\n"
        "        xb, yb = next(iterator)\n"
        "        strategy.run(step, args=(xb, yb))\n"
    )
    result, r = profiled(ip, "for i in range(5):\n    multi_step(it)\n")
    assert result.success
    assert phases(r)["train"] == 20
    (stats,) = [f for f in r.record.functions if f.name == "multi_step"]
    assert (stats.calls, stats.updates_per_call) == (5, 4)


def test_time_split_gives_tracing_its_own_part(loop_ip):
    """A step function retraced on every call (a Python int argument): tracing is a part of
    the split, not compute, the parts add up to the wall time, and the report leads with it."""
    loop_ip.run_cell(
        "@tf.function\n"
        "def step_with_index(xb, yb, index):\n"
        "    grads, loss = grads_and_loss(xb, yb)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    return loss\n"
    )
    result, r = profiled(loop_ip, "for i in range(12):\n    step_with_index(x[:8], y[:8], i)\n")
    assert result.success
    split = r.report()["time_split"]
    traced = [t for t in r.record.traces if not t.nested]
    assert len(traced) >= 12
    assert split["tracing"] == pytest.approx(sum(t.duration for t in traced), rel=0.01)
    assert split["tracing"] > split["compute"]  # each call traces: tracing is most of it
    total = split["compute"] + split["tracing"] + split["data_wait"] + split["other"]
    total += split["callbacks"] + split["epoch_setup"]
    assert total == pytest.approx(split["wall"], rel=0.01)
    time_line = next(line for line in r.summary().splitlines() if line.startswith("Time:"))
    assert time_line.startswith("Time: tracing")


def test_an_iterators_slow_release_after_its_last_item_is_shown_apart(ip):
    """The `for` statement drops its iterator once the items ran out, and the iterator's
    clean-up runs there (a tf.data iterator's destructor waited 4.6-5 s an epoch for its
    autotune thread in a guide's eager loop): neither a wait for an item nor a body's work, it
    is the loop's `release_seconds`, shown beside its bodies and waits."""
    result, r = profiled(
        ip,
        "import time\n"
        "class Reader:\n"
        "    def __init__(self, n):\n"
        "        self.i, self.n = 0, n\n"
        "    def __iter__(self):\n"
        "        return self\n"
        "    def __next__(self):\n"
        "        if self.i == self.n:\n"
        "            raise StopIteration\n"
        "        self.i += 1\n"
        "        return self.i\n"
        "    def __del__(self):\n"
        "        time.sleep(0.2)\n"
        "for epoch in range(3):\n"
        "    for record in Reader(10):\n"
        "        time.sleep(0.002)\n",
    )
    assert result.success
    inner = next(loop for loop in r.record.loops if loop.source.startswith("for record in"))
    outer = next(loop for loop in r.record.loops if loop.source.startswith("for epoch in"))
    assert inner.iterations == 30
    assert 3 * 0.2 <= inner.release_seconds < 3 * 0.2 + 0.5, inner
    assert inner.wait < 0.2 and inner.seconds < 0.5  # in neither
    assert outer.release_seconds < 0.05  # a range's iterator goes at once
    text = " ".join(r.summary().split())
    assert "releasing its iterator after the last item" in text
