"""Where a finding says memory grew: the line of the user's code that was running while it grew
(issue 19), never a loop that finished before; the models built when the growth follows them;
and an eager random op under a global seed named as the cause where it is the one that grew.

Real TensorFlow and Keras through ``%%tfprofile`` where a run is needed; the attribution
itself also on records built by hand.
"""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tests.diagnosis_support import assert_silent, listing, the
from tests.helpers import profiled, profiled_script
from tfdiag_magic.cli import profile_script
from tfdiag_magic.diagnose import host_memory_growth
from tfdiag_magic.diagnose.eager_kernels import kernel_per_call_calls
from tfdiag_magic.diagnose.evidence import call_label
from tfdiag_magic.diagnose.where import growth_place, running_place
from tfdiag_magic.record import (
    STEP_COLUMNS,
    KerasCall,
    Kind,
    LoopInfo,
    ModelBuilt,
    Phase,
    Record,
)
from tfdiag_magic.recorder import Recorder

MIB = 1 << 20

# A wide model whose gradients (3.1 MiB a step) are kept for later plots, after a CSV text is
# parsed row by row in a Python loop, and before the losses are formatted for a plot.
WIDE = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 256)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(512, activation="relu"), keras.layers.Dense(2)])
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
csv_text = "\\n".join(",".join(str(v) for v in range(12)) for _ in range(40000))
@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss, grads
"""

PARSE_TRAIN_PLOT = """\
rows = []
for line in csv_text.splitlines():
    rows.append([float(v) for v in line.split(",")])
table = np.array(rows, dtype="float32")
grad_history, losses = [], []
for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):
    loss, grads = train_step(xb, yb)
    grad_history.append(grads)  # {keep}
    losses.append(float(loss))
labels = []
for i in range(40000):
    labels.append(f"step {{i}}: {{losses[i % len(losses)]:.3f}}")
"""


@pytest.fixture
def wide(ip):
    ip.run_cell(WIDE)
    return ip


def test_growth_is_placed_at_the_training_loop_not_a_parsing_loop_before_it(wide):
    # The case: the growth was put at a CSV-parsing loop that ran before any training
    # (the old rule named the loop with the most iterations), and at a plotting loop after it.
    # Memory sampled every 5 ms, not 50: the parsing loop takes 30-60 ms here.
    cell = PARSE_TRAIN_PLOT.format(keep="to plot gradient norms later")
    result, r = profiled(wide, cell, "-q -o r --memory-interval 0.005")
    assert result.success
    f = the(r, "host-memory-growth")
    ev = f.evidence
    # Lines count the cell's %%tfprofile line, as tracebacks do.
    assert ev["where"].startswith("line 7: for xb, yb in"), listing(r)
    # The loop's body, or its header fetching the next batch: a fresh clone's CI read the
    # header, where tf.data's next() releases the GIL to the memory sampler as the step does.
    assert ev["where_line"] in (
        "line 8: loss, grads = train_step(xb, yb)",
        "line 7: for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):",
    ), ev
    assert ev["where_loop_share"] >= 0.8, ev
    assert "csv_text" not in f.detail and "labels" not in f.detail
    assert "while the loop at line 7 ran" in f.detail
    assert "Keep Python numbers" in f.fix
    # Every sample taken while a line of the cell ran says which; the parsing loop's too.
    lines = set(r.record.memory["line"].tolist())
    assert 3 in lines and 8 in lines, lines
    assert r.record.lines[8] == "loss, grads = train_step(xb, yb)"


def test_no_growth_and_no_location_for_the_same_cell_keeping_numbers(wide):
    cell = PARSE_TRAIN_PLOT.replace("    grad_history.append(grads)  # {keep}\n", "")
    result, r = profiled(wide, cell.format())
    assert result.success
    for code in ("host-memory-growth", "device-memory-growth", "progressive-slowdown"):
        assert_silent(r, code)
    assert not [f for f in r.findings if "where_share" in f.evidence], listing(r)


SEEDED_SETUP = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 16)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(2)])
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


@pytest.fixture
def seeded(ip):
    ip.run_cell(SEEDED_SETUP)
    try:
        yield ip
    finally:
        tf.random.set_seed(None)  # the global seed is the process's: later tests run without


SEEDED_LOOP = """\
tf.random.set_seed(42)
losses = []
for step in range(2400):
    start = (step * 32) % 2048
    noise = tf.random.normal([32, 16], stddev=0.1)
    loss = train_step(x[start:start + 32] + noise, y[start:start + 32])
    if step % 100 == 0:
        losses.append(float(loss))
"""


def test_eager_random_op_under_a_global_seed_is_named_as_the_cause(tmp_path):
    # Noise drawn eagerly every step after `tf.random.set_seed`: each call leaves a kernel
    # (about 35 KiB) in TensorFlow's cache. Nothing is kept by the code itself. Run as a script
    # in a process of its own: in a process that ran the same calls before, the kernels are
    # cached already, and one that freed more memory than they take reuses it (RSS stays flat;
    # the CPU allocator's count, on oneDNN, does not see kernels).
    report, stdout, script = profiled_script(tmp_path, "seeded.py", SEEDED_SETUP + SEEDED_LOOP)
    assert report["environment"]["global_seed"] == 42
    found = [f for f in report["findings"] if f["code"] == "host-memory-growth"]
    assert len(found) == 1, stdout
    (f,) = found
    ev = f["evidence"]
    lines = script.read_text().splitlines()
    loop_line = lines.index("for step in range(2400):") + 1
    op_line = lines.index("    noise = tf.random.normal([32, 16], stddev=0.1)") + 1
    assert f["severity"] == "warning"
    assert ev["where"].startswith(f"line {loop_line}: for step in range(2400):"), ev
    assert ev["seedless_random_ops"] == [f"line {op_line}: tf.random.normal"], ev
    assert ev["global_seed"] == 42
    # One kernel a step: 35 KiB per call measured alone.
    assert 20 * 1024 <= ev["bytes_per_step"] <= 60 * 1024, ev
    assert "tf.random.set_seed(42)" in f["detail"] and "new kernel" in f["detail"]
    assert "seed=" in f["fix"] and "tf.random.Generator" in f["fix"] and "tf.function" in f["fix"]
    assert "float(loss)" not in f["fix"]
    assert f["rewrite"] is None  # no rewrite that keeps numbers: that is not this growth's fix


def test_a_kept_random_tensor_without_a_global_seed_is_not_called_a_seed_leak(seeded):
    # Growth from the cell's own list of tensors, no global seed: the usual advice.
    tf.random.set_seed(None)
    result, r = profiled(
        seeded,
        "kept = []\n"
        "for step in range(400):\n"
        "    noise = tf.random.normal([256, 256])\n"
        "    kept.append(noise)\n"
        "    loss = train_step(x[:32], y[:32])\n",
    )
    assert result.success
    assert r.record.facts["global_seed"] is None
    f = the(r, "host-memory-growth")
    assert "seedless_random_ops" not in f.evidence
    assert f.evidence["where"].startswith("line 3: for step in range(400):")
    assert "new kernel" not in f.detail
    assert "Keep Python numbers" in f.fix


def test_a_search_over_models_after_a_parsing_loop_says_the_models(ip):
    # The other half: the growth came from models built (and loaded) later, not from
    # a loop that parsed a file first. Each 12->1024->1024->1 model leaves 16-23 MiB.
    ip.run_cell(
        "import os, tempfile, numpy as np, tensorflow as tf, keras\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.normal(size=(512, 12)).astype('float32')\n"
        "y = (X[:, 0] * X[:, 1] > 0).astype('int32')\n"
        "csv_text = '\\n'.join(','.join(str(v) for v in range(12)) for _ in range(30000))\n"
        "folder = tempfile.mkdtemp()\n"
    )
    result, r = profiled(
        ip,
        "rows = []\n"
        "for line in csv_text.splitlines():\n"
        "    rows.append([float(v) for v in line.split(',')])\n"
        "for fold in range(5):\n"
        "    model = keras.Sequential([keras.Input((12,)),\n"
        "                              keras.layers.Dense(1024, activation='relu'),\n"
        "                              keras.layers.Dense(1024, activation='relu'),\n"
        "                              keras.layers.Dense(1, activation='sigmoid')])\n"
        "    model.compile(optimizer='adam', loss='binary_crossentropy')\n"
        "    model.fit(X, y, epochs=1, batch_size=32, verbose=0)\n"
        "    model.save(os.path.join(folder, f'fold{fold}.keras'))\n"
        "    reloaded = keras.models.load_model(os.path.join(folder, f'fold{fold}.keras'))\n"
        "    reloaded.evaluate(X, y, verbose=0)\n",
    )
    assert result.success
    built = {m.line for m in r.record.models}
    assert built == {6, 13}, [(m.name, m.line) for m in r.record.models]
    f = the(r, "host-memory-growth")
    ev = f.evidence
    assert f.severity == "info"
    assert ev["models_built_while_growing"] >= 5, ev
    assert ev["where"].startswith(("line 6: model = keras.Sequential", "line 13: reloaded")), ev
    assert set(ev["models_built_at"]) <= {
        "line 6: model = keras.Sequential([keras.Input((12,)),",
        "line 13: reloaded = keras.models.load_model(os.path.join(folder, f'fold{fold}.keras'))",
    }, ev
    assert "The growth follows" in f.detail and "per model" in f.detail
    assert "csv_text" not in f.detail
    assert "Keep Python numbers" not in f.fix and "own process" in f.fix


def test_a_script_records_its_lines_and_where_its_models_were_built(tmp_path):
    script = tmp_path / "build.py"
    script.write_text(
        textwrap.dedent(
            """\
            import keras

            total = 0
            for i in range(3):
                total += i
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            """
        )
    )
    result, error = profile_script(script, [])
    assert error is None
    record = result.record
    assert [m.line for m in record.models] == [6]
    assert record.lines[6].startswith("model = keras.Sequential(")
    assert record.memory["line"].dtype == np.int32
    assert record.memory["line"].size == record.memory["time"].size


# -- the attribution, on records built by hand ------------------------------------------------

CELL = """\
rows = []
for line in text.splitlines():
    rows.append(line.split(","))
for xb, yb in batches:
    loss = train_step(xb, yb)
    kept.append(loss)
for i in range(100):
    plot(i)
"""


def _record(lines: list[int], rss: list[float], models: list[ModelBuilt] = ()) -> Record:
    """A run of one training step per memory sample (every 0.1 s) over `CELL`."""
    n = len(lines)
    steps = {name: np.zeros(n, dtype=dtype) for name, dtype in STEP_COLUMNS.items()}
    steps["start"] = np.arange(n, dtype=np.float64) * 0.1
    steps["duration"][:] = 0.05
    steps["phase"][:] = Phase.TRAIN
    steps["kind"][:] = Kind.TF_FUNCTION
    steps["loop"][:] = -1
    return Record(
        steps=steps,
        memory={
            "time": np.arange(n, dtype=np.float64) * 0.1 + 0.06,
            "rss": np.array(rss, dtype=np.int64),
            "line": np.array(lines, dtype=np.int32),
        },
        source=CELL,
        loops=[
            LoopInfo(0, 2, "for line in text.splitlines():"),
            LoopInfo(1, 4, "for xb, yb in batches:"),
            LoopInfo(2, 7, "for i in range(100):"),
        ],
        models=list(models),
    )


def test_growth_is_credited_to_the_lines_running_while_it_grew():
    # Ten samples in the parsing loop (flat), twenty in the training loop (rising 4 MiB a
    # sample, at its two lines in turn), ten in the plotting loop (flat).
    lines = [3] * 10 + [5, 6] * 10 + [8] * 10
    rss = [100 * MIB] * 10 + [100 * MIB + 4 * MIB * (k + 1) for k in range(20)]
    rss += [rss[-1]] * 10
    record = _record(lines, rss)
    place = growth_place(record, record.memory["rss"].astype(np.float64), 0.0, 10.0)
    assert place is not None
    assert place.loop_line == 4 and place.loop_text == "for xb, yb in batches:"
    # Half of the first rise goes to the parsing loop's last sample: 2 MiB of 80.
    assert place.loop_share == pytest.approx(78 / 80)
    assert place.line in (5, 6) and 0.4 <= place.share <= 0.6
    assert place.label == "line 4: for xb, yb in batches:"
    assert "while the loop at line 4 ran" in place.sentence()


def test_growth_of_a_series_read_at_every_fourth_sample_is_placed_the_same():
    # A paced series (`paced_read`): its value read at one sample in four, -1 at the others,
    # whose lines are still read. The rise between two reads is shared among the lines of
    # the samples from one to the other; no pair of neighbours is read, so each was lost.
    lines = [3] * 12 + [5, 6] * 10 + [8] * 12
    rss = [100 * MIB] * 12 + [100 * MIB + 4 * MIB * (k + 1) for k in range(20)]
    rss += [rss[-1]] * 12
    paced = [value if k % 4 == 0 else -1 for k, value in enumerate(rss)]
    record = _record(lines, paced)
    place = growth_place(record, record.memory["rss"].astype(np.float64), 0.0, 10.0)
    assert place is not None
    assert place.loop_line == 4 and place.label == "line 4: for xb, yb in batches:"
    # The rise from sample 12 to 16 is shared among 5 samples, one of them the parsing
    # loop's, and so on: most of it is the training loop's.
    assert place.loop_share >= 0.9, place
    assert place.line in (5, 6) and 0.4 <= place.share <= 0.6


def test_a_loop_that_ended_before_the_growth_is_never_named():
    # The parsing loop ran most of the samples, but memory rose only after it ended.
    lines = [3] * 30 + [5] * 10
    rss = [100 * MIB] * 30 + [100 * MIB + 8 * MIB * (k + 1) for k in range(10)]
    record = _record(lines, rss)
    values = record.memory["rss"].astype(np.float64)
    place = growth_place(record, values, 0.0, 10.0)
    assert place is not None and place.loop_line == 4, place
    # Only the samples inside the fitted part count: a span that starts with the growth.
    later = growth_place(record, values, record.memory["time"][30], 10.0)
    assert later is not None and later.loop_line == 4 and later.share == pytest.approx(1.0)


def test_steps_that_slowed_are_placed_at_the_line_running_most_of_the_time():
    record = _record([3] * 5 + [5] * 30 + [8] * 5, [100 * MIB] * 40)
    place = running_place(record, 0.3, 3.5)  # samples 3 to 34: two of the parsing loop's
    assert place is not None and place.loop_line == 4
    assert place.loop_share == pytest.approx(30 / 32)


def test_no_place_without_sample_lines_or_growth():
    record = _record([-1] * 20, [100 * MIB + k * MIB for k in range(20)])
    assert growth_place(record, record.memory["rss"].astype(np.float64), 0.0, 10.0) is None
    flat = _record([5] * 20, [100 * MIB] * 20)
    assert growth_place(flat, flat.memory["rss"].astype(np.float64), 0.0, 10.0) is None


def test_growth_after_models_built_names_the_lines_that_built_them():
    # 40 steps, memory rising 4 MiB a step, five models built along the way at line 4's body.
    n = 40
    models = [ModelBuilt(0.5 + k * 0.8, f"m{k}", "Sequential", 1, -1, line=5) for k in range(5)]
    record = _record([5] * n, [100 * MIB + 4 * MIB * k for k in range(n)], models)
    record.steps["loop"][:] = 1
    record.lines = {5: "loss = train_step(xb, yb)"}
    f = host_memory_growth.check(record, record.source)
    assert f is not None, "the growth is seen"
    assert f.severity == "info"
    assert f.evidence["models_built_at"] == {"line 5: loss = train_step(xb, yb)": 5}
    assert "The growth follows 5 Keras models built at line 5" in f.detail
    assert "Keep Python numbers" not in f.fix


def _models_one_after_another(per_step: float) -> Record:
    # Six models built one after another (the overfit tutorial's sizes), each trained 60
    # steps; each build adds 35 MiB, and each step `per_step` bytes.
    n, size = 360, 60
    models = [
        ModelBuilt(k * size * 0.1 - 0.02, f"m{k}", "Sequential", 1, -1, line=5) for k in range(6)
    ]
    rss = [100 * MIB + 35 * MIB * (k // size + 1) + per_step * k for k in range(n)]
    record = _record([5] * n, rss, models)
    record.lines = {5: "model = build(units)"}
    return record


def test_models_built_one_after_another_are_no_leak_when_each_ones_steps_are_flat():
    # 210 MiB over the run in step with the steps (the builds are between them), and flat
    # within every model's 60 steps: spans long enough to judge, so no note.
    assert host_memory_growth.check(_models_one_after_another(0.0), CELL) is None


def test_growth_within_each_of_many_models_spans_is_the_steps_own():
    # The same six models, and 1 MiB more at every step: a leak per step, said as one.
    f = host_memory_growth.check(_models_one_after_another(1 * MIB), CELL)
    assert f is not None and f.severity == "warning", f
    assert f.evidence["judged_within_spans"] >= 5, f.evidence
    assert f.evidence["bytes_per_step"] == pytest.approx(MIB, rel=0.05)
    assert "bytes_per_model" not in f.evidence and "The growth follows" not in f.detail


def test_the_recorder_samples_the_line_of_the_profiled_file():
    rec = Recorder(memory_interval=3600)
    rec.code_file = "<cell-1>"
    code = compile("x = 1\nsample()\n", "<cell-1>", "exec")
    exec(code, {"sample": rec.sample_memory})
    rec.sample_memory()  # from outside the cell
    assert list(rec.mem_line) == [2, -1]


# -- which calls make a kernel per eager call -------------------------------------------------


def calls(code: str, first: int = 1, last: int = 10_000, modules=None) -> list[str]:
    found = kernel_per_call_calls(textwrap.dedent(code), first, last, modules)
    return [f"{c.line}:{c.name}" for c in found]


def test_random_calls_without_a_seed_are_found_in_the_loop_and_the_functions_it_calls():
    code = """\
        import tensorflow as tf
        import numpy as np
        def augment(x):
            return x + tf.random.uniform(tf.shape(x))
        @tf.function
        def step(x):
            return x * tf.random.normal([2])
        for i in range(10):
            a = tf.random.normal([2])
            b = tf.random.normal([2], seed=1)
            c = tf.random.normal([2], 0.0, 1.0, tf.float32, 7)
            d = np.random.normal(size=2)
            e = augment(a) + step(a) + tf.nn.dropout(a, 0.5)
            g = tf.random.stateless_normal([2], seed=[1, 2])
        """
    assert calls(code, 8, 14) == ["4:tf.random.uniform", "9:tf.random.normal", "13:tf.nn.dropout"]
    assert calls(code, 1, 1) == []


def test_random_calls_through_other_spellings_of_tensorflow():
    assert calls("from tensorflow import random\nrandom.shuffle(x)\n") == ["2:random.shuffle"]
    assert calls("import tensorflow as T\nT.random.categorical(l, 1)\n") == [
        "2:T.random.categorical"
    ]
    # A name bound to TensorFlow by an earlier cell.
    assert calls("tfx.image.random_flip_left_right(i)\n", modules={"tfx": "tensorflow"}) == [
        "1:tfx.image.random_flip_left_right"
    ]
    assert calls("import numpy as tf\ntf.random.normal(size=2)\n") == []
    assert (
        calls(
            "step = tf.function(lambda: 0)\ndef f():\n    tf.random.normal([1])\n"
            "f = tf.function(f)\nf()\n",
            5,
            5,
        )
        == []
    )


def test_py_function_called_eagerly_is_found_and_numpy_function_is_not():
    code = """\
        import tensorflow as tf
        @tf.function
        def mapped(x):
            return tf.py_function(parse, [x], tf.float32)
        for item in items:
            a = tf.py_function(parse, [item], tf.float32)
            b = tf.numpy_function(parse, [item], tf.float32)
            c = mapped(item)
        """
    assert calls(code, 5, 8) == ["6:tf.py_function"]


def test_eager_py_function_where_memory_grew_is_named_as_the_cause():
    # A record made by hand: memory rising 36 KiB a step while the loop at line 4 ran.
    n = 3000
    record = _record([5] * n, [100 * MIB + 36 * 1024 * k for k in range(n)])
    record.source = CELL.replace(
        "loss = train_step(xb, yb)", "loss = tf.py_function(f, [xb], tf.float32)"
    )
    record.facts = {"global_seed": None}
    f = host_memory_growth.check(record, record.source)
    assert f is not None
    assert f.evidence["eager_py_functions"] == ["line 5: tf.py_function"]
    assert "seedless_random_ops" not in f.evidence
    assert "new token" in f.detail and "Python function itself" in f.fix


def test_a_fit_made_in_a_helper_of_the_cell_names_the_lines_that_called_it(ip):
    """TensorFlow's time-series tutorial fits each model through its own `compile_and_fit`:
    every fit is at the helper's one line, and the user needs the line that called it to tell
    the models apart. Each Keras call keeps both; a call made at the cell's own level keeps
    only its line. (The cell's lines count from the magic's line, as its tracebacks do.)"""
    from tfdiag_magic.diagnose.evidence import call_label

    result, r = profiled(
        ip,
        "import numpy as np, keras\n"
        "x = np.zeros((64, 3), 'float32'); y = np.zeros((64, 4), 'float32')\n"
        "def compile_and_fit(model, epochs=1):\n"
        "    model.compile(optimizer='sgd', loss='mse')\n"
        "    return model.fit(x, y, epochs=epochs, verbose=0)\n"
        "linear = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])\n"
        "compile_and_fit(linear)\n"
        "dense = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])\n"
        "history = compile_and_fit(dense, epochs=2)\n"
        "dense.fit(x, y, verbose=0)\n",
    )
    assert result.success
    fits = [call for call in r.record.keras_calls if call.api == "fit"]
    assert [(c.line, c.caller_line) for c in fits] == [(6, 8), (6, 10), (11, -1)]
    assert [call_label(r.record, c) for c in fits] == [
        "line 6: return model.fit(x, y, epochs=epochs, verbose=0),"
        " called from line 8: compile_and_fit(linear)",
        "line 6: return model.fit(x, y, epochs=epochs, verbose=0),"
        " called from line 10: history = compile_and_fit(dense, epochs=2)",
        "line 11: dense.fit(x, y, verbose=0)",
    ]


def test_a_keras_calls_label_cuts_long_lines_with_an_ellipsis():
    # The "overfit and underfit" tutorial's `compile_and_fit(dropout_model, "regularizers/
    # dropout")` lines, cut mid-string without a mark before.
    record = Record()
    caller = (
        'regularizer_histories["dropout"] = compile_and_fit(dropout_model, "regularizers/dropout")'
    )
    record.lines = {189: "history = model.fit(", 300: caller}
    call = KerasCall("fit", 0.0, 1.0, 10, 0.5, -1, "sequential", 32.0, "dataset", line=189)
    call = dataclasses.replace(call, caller_line=300)
    label = call_label(record, call)
    assert label.startswith("line 189: history = model.fit(, called from line 300: regularizer")
    assert label.endswith("…") and len(label.split("line 300: ")[1]) == 80
    assert call_label(record, dataclasses.replace(call, caller_line=-1)) == (
        "line 189: history = model.fit("
    )
