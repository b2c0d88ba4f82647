"""host-memory-growth on real cells that keep something on every step, and on cells whose
memory fills once (a dataset cache) or stays flat, which must stay silent."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.diagnosis_support import TABULAR, assert_silent, listing, problems, the
from tests.helpers import profiled, profiled_script
from tfdiag_magic.diagnose import host_memory_growth
from tfdiag_magic.diagnose.growth import Growth, is_steady_rise, steady_growth, steps_done
from tfdiag_magic.probes import memory, paced_read
from tfdiag_magic.record import Kind, Phase, Record
from tfdiag_magic.recorder import Recorder

MIB = 1 << 20
# The host memory series a run records: RSS and the CPU allocator's bytes in use.
MEASURE_KEYS = ("rss", "cpu_tensors")
MEASURE_NAMES = tuple(host_memory_growth.MEASURES.values())

WIDE = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 256)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(512, activation="relu"), keras.layers.Dense(2)])
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
WEIGHT_BYTES = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)
"""


@pytest.fixture
def wide(ip):
    ip.run_cell(WIDE)
    return ip


GRADIENTS_KEPT = (
    "@tf.function\n"
    "def train_step(xb, yb):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = loss_fn(yb, model(xb, training=True))\n"
    "    grads = tape.gradient(loss, model.trainable_variables)\n"
    "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    "    return loss, grads\n"
    "grad_history = []\n"
    "for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):\n"
    "    loss, grads = train_step(xb, yb)\n"
    "    grad_history.append(grads)  # to plot gradient norms later\n"
)


# The guide's compiled training step, returning the loss.
LOSS_STEP = (
    "@tf.function\n"
    "def train_step(xb, yb):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = loss_fn(yb, model(xb, training=True))\n"
    "    grads = tape.gradient(loss, model.trainable_variables)\n"
    "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    "    return loss\n"
)


def weight_bytes(ip) -> int:
    return int(ip.user_ns["WEIGHT_BYTES"])


def test_host_memory_growth_gradients_kept_for_later_plots(wide):
    # 64 short steps, a third of a second on a quiet machine: sampled every 10 ms, not 50.
    result, r = profiled(wide, GRADIENTS_KEPT, "-q -o r --memory-interval 0.01")
    assert result.success
    f = the(r, "host-memory-growth")
    assert f.severity == "warning"
    ev = f.evidence
    per_step = weight_bytes(wide)  # one gradient per weight, kept every step
    assert 0.5 * per_step <= ev["bytes_per_step"] <= 2 * per_step, (ev, per_step)
    assert ev["growth_bytes"] >= 64 * MIB
    assert ev["r2"] >= 0.8
    assert ev["steps"] <= 64  # training steps, not loop iterations as well
    assert ev["end_bytes"] > ev["start_bytes"]
    assert ev["where"].startswith("line 10: for xb, yb in")
    assert "far more than a scalar" in f.detail  # megabytes per step: not losses


@pytest.fixture
def every_sample_read(monkeypatch):
    """The allocator's series read at every sample, unpaced (`paced_read`): in a test process
    that has run many tests before, a read of the C heap took 8 ms and was made once per 0.8 s,
    two reads in these short runs. These tests are about what the series shows; the pacing has
    its own (`tests/test_paced_read.py`, the fragmented heap in `test_diagnose_input.py`)."""
    monkeypatch.setattr(paced_read, "READ_SHARE", 1.0)


# TensorFlow's DCGAN tutorial's shape: a figure drawn and saved at each epoch's end, never
# closed (its `generate_and_save_images`): pyplot keeps every one, canvas and image.
FIGURE_EACH_EPOCH = (
    "import io\n"
    "import matplotlib.pyplot as plt\n"
    "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(128)\n"
    "for epoch in range(30):\n"
    "    for xb, yb in ds:\n"
    "        train_step(xb, yb)\n"
    "    fig = plt.figure(figsize=(8, 8))\n"
    "    plt.imshow(rng.random((400, 400)))\n"
    "    fig.savefig(io.BytesIO(), format='raw')\n"
)


def test_host_memory_growth_from_figures_never_closed_names_them(ip):
    ip.run_cell(TABULAR)
    try:
        result, r = profiled(ip, FIGURE_EACH_EPOCH)
        assert result.success, result.error_in_exec
        # The tool counts the figures and closes none of them.
        assert ip.run_cell("len(plt.get_fignums())").result == 30
        f = the(r, "host-memory-growth")
        assert f.evidence["figures_left_open"] == 30, f.evidence
        assert "30 matplotlib figures" in f.detail and "plt.close(fig)" in f.fix, f
        # The same growth without the figures counted reads as tensors kept on each step.
        facts = r.record.facts
        facts["figures_open"] = facts["figures_open_at_start"]
        unnamed = host_memory_growth.check(r.record, r.record.source)
        assert unnamed is not None and "figures_left_open" not in unnamed.evidence
        assert "plt.close" not in unnamed.fix and "matplotlib" not in unnamed.detail
    finally:
        ip.run_cell("import matplotlib.pyplot as plt\nplt.close('all')")


@pytest.mark.usefixtures("every_sample_read")
def test_host_memory_growth_when_the_leaking_cell_runs_a_second_time(wide):
    # The second run frees the first run's list (`grad_history = []`) and refills the memory
    # it held: RSS stays flat, but the tensors held on the CPU grow as before.
    # A run of 64 short steps: sample memory often enough to fit a line through it.
    options = "-q -o r --memory-interval 0.01"
    first, _ = profiled(wide, GRADIENTS_KEPT, options)
    assert first.success
    result, r = profiled(wide, GRADIENTS_KEPT, options)
    assert result.success
    f = the(r, "host-memory-growth")
    ev = f.evidence
    per_step = weight_bytes(wide)
    assert 0.5 * per_step <= ev["bytes_per_step"] <= 2 * per_step, (ev, per_step)
    assert ev["growth_bytes"] >= 64 * MIB
    assert ev["measure"] in MEASURE_NAMES
    tensors = r.record.memory["cpu_tensors"]
    assert tensors.max() > 0, "TensorFlow's CPU allocator or the C heap counts bytes in use"


def test_no_host_memory_growth_when_a_healthy_loop_runs_twice(wide):
    cell = (
        LOSS_STEP + "losses = []\n"
        "for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):\n"
        "    losses.append(float(train_step(xb, yb)))\n"
    )
    for _ in range(2):
        result, r = profiled(wide, cell, "-q -o r --memory-interval 0.01")
        assert result.success
        assert_silent(r, "host-memory-growth")


def test_host_memory_growth_weight_snapshots_every_batch(wide):
    result, r = profiled(
        wide,
        "class Snapshots(keras.callbacks.Callback):\n"
        "    def on_train_begin(self, logs=None):\n"
        "        self.weights = []\n"
        "    def on_train_batch_end(self, batch, logs=None):\n"
        "        self.weights.append(self.model.get_weights())\n"
        "snapshots = Snapshots()\n"
        "model.compile(optimizer='adam', loss=loss_fn)\n"
        "model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[snapshots])\n",
    )
    assert result.success
    f = the(r, "host-memory-growth")
    per_step = weight_bytes(wide)
    assert 0.5 * per_step <= f.evidence["bytes_per_step"] <= 2 * per_step, f.evidence
    assert f.evidence["r2"] >= 0.8
    # The line that ran while memory grew (the callback keeps the weights inside `fit`).
    assert f.evidence["where"].startswith("line 9: model.fit(x, y, batch_size=64"), f.evidence
    assert f.evidence["where_share"] >= 0.8, f.evidence


CACHE_FILLING = """\
import numpy as np, tensorflow as tf, keras
images = np.random.default_rng(0).integers(0, 256, (2048, 64, 64, 4), dtype=np.uint8)
labels = np.arange(2048) % 2
decode = lambda image, label: (tf.cast(image, tf.float32) / 255.0, label)
train = (tf.data.Dataset.from_tensor_slices((images, labels)).map(decode).cache()
         .batch(64).prefetch(tf.data.AUTOTUNE))
model = keras.Sequential([keras.Input((64, 64, 4)), keras.layers.Flatten(),
                          keras.layers.Dense(2)])
model.compile(optimizer='adam',
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(train, epochs=4, verbose=0)
"""


def test_no_host_memory_growth_for_a_cache_filling_in_the_first_epoch(tmp_path):
    # 128 MiB of decoded images cached during the first epoch, then read from memory. In a
    # process of its own: one that freed that much before would reuse it, and RSS not rise.
    report, stdout, _ = profiled_script(tmp_path, "cache_filling.py", CACHE_FILLING)
    rss = report["memory"]["host_rss"]
    assert rss["peak"] - rss["start"] >= 100 * MIB  # the cache did fill
    findings = report["findings"]
    assert not [f for f in findings if f["code"] == "host-memory-growth"], stdout
    assert not [f for f in findings if f["severity"] != "info"], stdout


def test_no_host_memory_growth_when_losses_are_kept_as_floats(wide):
    result, r = profiled(
        wide,
        LOSS_STEP + "losses = []\n"
        "for epoch in range(2):\n"
        "    for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):\n"
        "        losses.append(float(train_step(xb, yb)))\n",
    )
    assert result.success
    assert_silent(r, "host-memory-growth")
    assert not problems(r), listing(r)


# TensorFlow's image-classification tutorial, cut down: a model fitted on `cache().prefetch()`
# datasets, then a second model on its own cached datasets (larger images). Each cache fills
# during its model's first epoch and each model is built between them: memory rises by steps
# across the run, flat within each model's own epochs after the first. The tutorial's three
# convolutions are left out: they bear on no memory the test reads, and were most of its
# time (the cell ran plainly in 36 s with them, 6.6 s without, on the 2-vCPU EPYC VM).
TWO_CACHED_MODELS = """
AUTOTUNE = tf.data.AUTOTUNE
def prepare(x, y, size):
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    ds = ds.map(lambda image, label: (tf.image.resize(image, (size, size)), label))
    return ds.cache().prefetch(buffer_size=AUTOTUNE)
def make_model(size):
    model = keras.Sequential([
        keras.Input((size, size, 3)),
        keras.layers.Rescaling(1.0 / 255),
        keras.layers.Flatten(),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(5),
    ])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model
class WeightTrail(keras.callbacks.Callback):
    '''Keeps the hidden layer's kernel after every batch, to plot how it moves.'''
    def __init__(self, keep):
        super().__init__()
        self.keep, self.trail = keep, []
    def on_train_batch_end(self, batch, logs=None):
        if self.keep:
            self.trail.append(tf.identity(self.model.layers[-2].kernel))
trail_small, trail_large = WeightTrail(KEEP), WeightTrail(KEEP)
train_small, val_small = prepare(images, labels, 64), prepare(val_images, val_labels, 64)
small = make_model(64)
small.fit(train_small, validation_data=val_small, epochs=4, verbose=0, callbacks=[trail_small])
train_large, val_large = prepare(images, labels, 80), prepare(val_images, val_labels, 80)
large = make_model(80)
large.fit(train_large, validation_data=val_large, epochs=3, verbose=0, callbacks=[trail_large])
"""

# Samples every 10 ms: on an AMD EPYC VM each model's span lasted 0.2-0.3 s, where samples every
# 50 ms (the default, taken at a step's end) left 3-6 in a span, too few to judge it.
DENSE = "-q -o r --memory-interval 0.01"

IMAGES = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
images = rng.integers(0, 256, size=(1280, 80, 80, 3), dtype=np.uint8)
labels = rng.integers(0, 5, size=(1280,))
val_images = rng.integers(0, 256, size=(256, 80, 80, 3), dtype=np.uint8)
val_labels = rng.integers(0, 5, size=(256,))
"""


def test_no_host_memory_growth_for_two_models_on_caches_filling_in_their_first_epochs(ip):
    ip.run_cell(IMAGES + "KEEP = False\n")
    result, r = profiled(ip, TWO_CACHED_MODELS, DENSE)
    assert result.success
    assert len(r.record.models) == 2
    grew = max(int(r.record.memory[key].max() - r.record.memory[key][0]) for key in MEASURE_KEYS)
    assert grew >= 100 * MIB  # the caches (63 + 98 MiB of float images) did fill
    assert_silent(r, "host-memory-growth")
    assert not problems(r), listing(r)


def test_host_memory_growth_kept_per_step_next_to_two_models_and_their_caches(ip):
    # The same cell, each callback now keeping the hidden layer's kernel every batch (0.75
    # MiB for the first model, 1.2 MiB for the second): that is found within each model's span.
    # Each span is its model's epochs after the first, less a tenth: 40 steps an epoch, 3 and
    # 2 such epochs keep about 170 MiB (with one epoch fewer each, 55 MiB was read within
    # the spans, under the finding's 64 MiB).
    ip.run_cell(IMAGES + "KEEP = True\n")
    result, r = profiled(ip, TWO_CACHED_MODELS, DENSE)
    assert result.success
    f = the(r, "host-memory-growth")
    assert f.severity == "warning"
    ev = f.evidence
    assert ev["judged_within_spans"] == 2, ev
    kernels = (64 * 64 * 3 * 16 * 4, 80 * 80 * 3 * 16 * 4)
    assert 0.5 * min(kernels) <= ev["bytes_per_step"] <= 2 * max(kernels), ev
    assert ev["growth_bytes"] >= 64 * MIB
    assert ev["r2"] >= 0.8


# Numpy copies of the gradients, kept per step: memory the C heap hands out (malloc), which a
# second run of the cell first frees and then takes again.
NUMPY_GRADIENTS_KEPT = GRADIENTS_KEPT.replace(
    "grad_history.append(grads)", "grad_history.append([g.numpy() for g in grads])"
)


@pytest.mark.usefixtures("every_sample_read")
def test_host_memory_growth_read_from_the_c_heap_where_tensorflow_keeps_no_statistics(
    wide, monkeypatch
):
    # As on CPUs without oneDNN's allocator statistics (AVX2-only AMD EPYC): the tool's own
    # reader of TensorFlow's count says "not available", and the C heap's bytes are read.
    monkeypatch.setattr(memory, "tf_cpu_allocator_bytes", lambda: None)
    heap = memory.heap_bytes_reader()
    assert heap is not None, "glibc 2.33 or later (mallinfo2) on this machine"
    options = "-q -o r --memory-interval 0.01"
    for _ in range(2):  # the second run frees the first run's arrays and takes them again
        result, r = profiled(wide, NUMPY_GRADIENTS_KEPT, options)
        assert result.success
    series = r.record.memory["cpu_tensors"]
    assert series.max() > 0
    # The series is the heap's: the last sample lies within the cell's kept arrays of now.
    assert abs(int(series[-1]) - heap()) < 64 * MIB
    growth = steady_growth(r.record, series)
    per_step = weight_bytes(wide)
    assert is_steady_rise(growth, host_memory_growth.MIN_TOTAL), growth
    assert 0.5 * per_step <= growth.per_step <= 2 * per_step, (growth, per_step)
    f = the(r, "host-memory-growth")
    assert f.severity == "warning"
    assert 0.5 * per_step <= f.evidence["bytes_per_step"] <= 2 * per_step, f.evidence


NO_ONEDNN_PROGRAM = r"""
import json, sys
import tensorflow as tf
from IPython.core.interactiveshell import InteractiveShell
try:
    tf.config.experimental.get_memory_info("CPU:0")
    stats = True
except ValueError:
    stats = False
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "tfdiag_magic")
ip.run_cell(sys.argv[1])
for _ in range(2):
    ip.run_cell("%%tfprofile -q -o r --memory-interval 0.01\n" + sys.argv[2])
r = ip.user_ns["r"]
from tfdiag_magic.diagnose.growth import steady_growth
heap = steady_growth(r.record, r.record.memory["cpu_tensors"])
print("RESULT " + json.dumps({
    "heap_growth": None if heap is None else [heap.total, heap.per_step, heap.r2],
    "tensorflow_statistics": stats,
    "cpu_max": int(r.record.memory["cpu_tensors"].max()),
    "findings": [[f.code, f.severity, f.evidence] for f in r.findings],
    "weight_bytes": int(ip.user_ns["WEIGHT_BYTES"]),
}))
"""


def test_leaking_cell_run_a_second_time_without_onednn_allocator_statistics():
    # A real TensorFlow without the statistics: oneDNN switched off, as it is by default on
    # CPUs without AVX-512. Its CPU allocator takes tensors from the C heap.
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", NO_ONEDNN_PROGRAM, WIDE, GRADIENTS_KEPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    if out["tensorflow_statistics"]:
        pytest.skip("this TensorFlow keeps CPU allocator statistics even without oneDNN")
    assert out["cpu_max"] > 0, "the C heap's bytes are read instead"
    # The heap's bytes rise with the steps of the second run (RSS may stay flat: the first
    # run's pages are reused), one set of gradients per step.
    total, heap_per_step, r2 = out["heap_growth"]
    per_step = out["weight_bytes"]
    assert total >= 64 * MIB and r2 >= 0.8, out["heap_growth"]
    assert 0.5 * per_step <= heap_per_step <= 2 * per_step, (out["heap_growth"], per_step)
    found = [f for f in out["findings"] if f[0] == "host-memory-growth"]
    assert found, out["findings"]
    _, severity, ev = found[0]
    assert severity == "warning"
    assert 0.5 * per_step <= ev["bytes_per_step"] <= 2 * per_step, (ev, per_step)


# -- RSS that rises with nothing kept: freed memory the allocators hold ------------------------


def _rss_rising_record(
    heap_step: int, blocks_step: int, counted_by: str, tensors_step: int | None = None
) -> Record:
    """300 steps of one span; RSS rises 1 MiB a step (as the keras-io autoencoder's first
    epochs did), the C heap's bytes in use and Python's blocks by what is given. Counted by
    "heap", the `cpu_tensors` series is the heap; counted by "tensorflow", it is TensorFlow's
    own count, rising `tensors_step` a step, and the heap is its own series (never read where
    `tensors_step` is None)."""
    rec = Recorder(memory_interval=3600)
    rec.t0 -= 4.0  # the steps lie in the past: the last sample, taken by finish, after them
    t = rec.t0
    rss, heap, blocks, tensors = [], [], [], []
    for i in range(300):
        rec.add_step(Phase.of("train"), Kind.MARKER, t, t + 0.01, math.nan, 0, False)
        t += 0.011
        if i % 5 == 4:
            rec.sample_memory(t)
            rss.append(500 * MIB + i * MIB)
            heap.append(200 * MIB + i * heap_step)
            blocks.append(400_000 + i * blocks_step)
            tensors.append(i * (tensors_step or 0))
    record = rec.finish()
    samples = record.memory["time"].size

    def series(values: list[int]) -> np.ndarray:
        return np.array([values[0]] * (samples - len(values)) + values, dtype=np.int64)

    record.memory["rss"] = series(rss)
    record.memory["python_blocks"] = series(blocks)
    if counted_by == "heap":
        record.memory["cpu_tensors"] = series(heap)
    else:
        record.memory["cpu_tensors"] = series(tensors)
        record.memory["heap"] = series(heap if tensors_step is not None else [-1])
    record.facts["cpu_tensors_counted_by"] = counted_by
    return record


def _read_at_every(record: Record, every: int) -> Record:
    """The heap's and Python's series read at one sample in `every` and at the last, the
    others skipped (-1), as the paced reads leave them where walking the heap takes
    milliseconds (`probes/paced_read.py`): too few points for their own fit."""
    for key in ("cpu_tensors", "python_blocks", "heap"):
        values = record.memory[key].copy()
        if (values < 0).all():
            continue
        skipped = np.ones(values.size, dtype=bool)
        skipped[::every] = False
        skipped[-1] = False
        values[skipped] = -1
        record.memory[key] = values
    return record


# Read at every sample, and at one in 12 (7 of the 62 samples read).
READ_EVERY = pytest.mark.parametrize("every", [1, 12], ids=["every-sample", "paced"])


@READ_EVERY
def test_rss_rising_while_the_heap_and_python_objects_stay_flat_is_no_growth(every):
    record = _read_at_every(_rss_rising_record(0, 0, "heap"), every)
    assert host_memory_growth.check(record, None) is None
    # TensorFlow's own count (oneDNN), its tensors flat, and the heap read beside it flat:
    # as keras-io's FeatureSpace example read over 3 epochs of `fit` on an AVX-512 EPYC, RSS
    # up 83-138 MiB, the heap between 129 and 168 MiB, TensorFlow's count 0.
    record = _read_at_every(_rss_rising_record(0, 0, "tensorflow", tensors_step=0), every)
    assert host_memory_growth.check(record, None) is None


@READ_EVERY
def test_rss_rising_with_the_heap_or_python_objects_is_a_warning(every):
    # Tensors or arrays kept: the heap rises with RSS.
    record = _read_at_every(_rss_rising_record(MIB // 2, 0, "heap"), every)
    f = host_memory_growth.check(record, None)
    assert f is not None and f.severity == "warning"
    # Python objects kept (floats in lists: pymalloc's arenas are not the C heap's).
    record = _read_at_every(_rss_rising_record(0, 2000, "heap"), every)
    f = host_memory_growth.check(record, None)
    assert f is not None and f.severity == "warning"
    # TensorFlow's own count: tensors kept rise in it; C++ objects (graphs) in the heap.
    for heap_step, tensors_step in ((0, MIB // 2), (MIB // 2, 0)):
        record = _rss_rising_record(heap_step, 0, "tensorflow", tensors_step=tensors_step)
        f = host_memory_growth.check(_read_at_every(record, every), None)
        assert f is not None and f.severity == "warning", (heap_step, tensors_step)
    # TensorFlow's own count flat and no heap read beside it: that count proves nothing.
    f = host_memory_growth.check(_rss_rising_record(0, 0, "tensorflow"), None)
    assert f is not None and f.severity == "warning"


def _short_run_growth(rss_after: Callable[[np.ndarray], np.ndarray]) -> Growth | None:
    """94 steps of 4 ms sampled every 50 ms or so, as in a short `fit`: samples after the
    steps one epoch over a cache was sampled at in a run (`test_diagnose_realworld`), only two
    of them in the last third of the steps. RSS is `rss_after(steps done)` at each sample."""
    sampled_after = [1, 15, 24, 34, 46, 63, 78]  # and after the last step, by finish()
    rec = Recorder(memory_interval=3600)
    rec.t0 -= 4.0
    t = rec.t0
    for i in range(94):
        rec.add_step(Phase.of("train"), Kind.MARKER, t, t + 0.004, math.nan, 0, False)
        t += 0.0045
        if i + 1 in sampled_after:
            rec.sample_memory(t)
    record = rec.finish()
    return steady_growth(record, rss_after(steps_done(record)).astype(np.int64))


def test_a_short_run_with_two_samples_in_its_last_third_is_judged_by_its_last_three():
    # Rising 2 MiB a step to the end: a steady rise, though the last third of its steps holds
    # only two samples (read alone, too few for a slope: the rise read as stopped).
    rising = _short_run_growth(lambda done: 500 * MIB + 2 * MIB * done)
    assert rising is not None and rising.late_per_step == pytest.approx(2 * MIB, rel=0.01)
    assert is_steady_rise(rising, host_memory_growth.MIN_TOTAL)
    # The same rise, stopped after step 46: not still rising at the end.
    stopped = _short_run_growth(lambda done: 500 * MIB + 2 * MIB * np.minimum(done, 46))
    assert stopped is not None and not is_steady_rise(stopped, host_memory_growth.MIN_TOTAL)


PYTHON_FLOATS_KEPT = LOSS_STEP + (
    "inputs_seen = []\n"
    "for epoch in range(4):\n"
    "    for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):\n"
    "        loss = train_step(xb, yb)\n"
    "        inputs_seen.extend(xb.numpy().ravel().tolist())  # 16,384 Python floats a step\n"
)


def test_python_objects_kept_every_step_stay_a_warning(wide):
    # Python floats live in Python's own arenas, not the C heap (only the list's pointers
    # are there): RSS rises several times faster than the heap's bytes in use, and Python's
    # blocks tell that the code keeps them.
    result, r = profiled(wide, PYTHON_FLOATS_KEPT)
    assert result.success
    f = the(r, "host-memory-growth")
    assert f.severity == "warning", listing(r)
    assert "heap_in_use_growth_bytes" not in f.evidence
    blocks = r.record.memory["python_blocks"]
    assert blocks[-1] - blocks[0] >= 4 * 64 * 16_000  # a block for each float kept
