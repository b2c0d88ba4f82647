"""Findings about runs that fail or go wrong, on real cells: oom (TensorFlow's
ResourceExhaustedError raised by its CPU allocator in a training step, NumPy's MemoryError),
nonfinite-loss, device-config-too-late (caught and printed, and uncaught).

The CPU allocator refuses a 256 GiB tensor at once (no memory is touched: the process stays
under 1 GiB) but waits 10 s for memory to be freed before it raises, so the TensorFlow OOM
test takes about 11 s. A GPU's OOM is tested on its recorded message in
test_diagnose_gpu_records.py.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tests.diagnosis_support import TABULAR, assert_silent, listing, problems, the
from tests.helpers import profiled
from tfdiag_magic.diagnose import oom

GIB = 1 << 30


@pytest.fixture
def tab(ip):
    ip.run_cell(TABULAR)
    return ip


# -- oom ------------------------------------------------------------------------------------


LONG_CONTEXT = (
    "import numpy as np, tensorflow as tf, keras\n"
    "embed = keras.layers.Embedding(1000, 8)\n"
    "head = keras.layers.Dense(1000)\n"
    "opt = keras.optimizers.Adam(1e-3)\n"
    "@tf.function(input_signature=[tf.TensorSpec((None, None), tf.int64)])\n"
    "def lm_step(tokens):\n"
    "    with tf.GradientTape() as tape:\n"
    "        h = embed(tokens)\n"
    "        n = tf.shape(tokens)[1]\n"
    "        causal = tf.linalg.band_part(tf.ones((n, n)), -1, 0)  # token i sees j <= i\n"
    "        context = tf.einsum('ij,bjd->bid', causal, h)\n"
    "        context /= tf.reduce_sum(causal, axis=1)[:, None]\n"
    "        logits = head(context[:, :-1])\n"
    "        loss = tf.reduce_mean(\n"
    "            tf.nn.sparse_softmax_cross_entropy_with_logits(tokens[:, 1:], logits))\n"
    "    variables = embed.trainable_variables + head.trainable_variables\n"
    "    opt.apply_gradients(zip(tape.gradient(loss, variables), variables))\n"
    "    return loss\n"
    "rng = np.random.default_rng(0)\n"
    "for batch, length in [(2, 64), (2, 64), (2, 64), (4, 1 << 18)]:\n"
    "    lm_step(tf.constant(rng.integers(0, 1000, (batch, length))))\n"
)


@pytest.fixture(scope="module")
def long_context_oom(shell):
    """One run of a language-model step whose causal mask needs 256 GiB (11 s: run once).

    A sequence-by-sequence mask is fine for 64 tokens; for 262,144 it is refused. The dynamic
    signature keeps the mask's shape out of the graph (a static one would be folded).
    """
    shell.reset(new_session=False)
    result, r = profiled(shell, LONG_CONTEXT)
    shell.reset(new_session=False)
    return result, r


def test_oom_causal_mask_of_a_long_sequence_in_a_training_step(long_context_oom):
    result, r = long_context_oom
    assert not result.success
    assert type(result.error_in_exec).__name__ == "ResourceExhaustedError"
    f = the(r, "oom")
    assert f.severity == "error"
    ev = f.evidence
    assert ev["error"] == "ResourceExhaustedError"
    assert ev["step"] == 3 and ev["phase"] == "train"  # the fourth training step
    assert "ResourceExhaustedError in train step 4 with batch size 4" in f.detail, f.detail
    assert ev["batch_size"] == 4  # the failing step's own; the completed steps had 2
    assert r.record.error.batch == 4
    assert ev["peak_host_bytes"] < 4 * GIB  # refused, not filled
    # TensorFlow's own message, as the exception carries it, read by the rule.
    full = replace(r.record, error=replace(r.record.error, message=str(result.error_in_exec)))
    ev = oom.check(full, full.source).evidence
    assert ev["shape"] == [1 << 18, 1 << 18]
    assert ev["dtype"] == "float"
    assert ev["tensor_bytes"] == 256 * GIB
    assert ev["device"].endswith("device:CPU:0")
    assert ev["op"] == "ones"
    title = oom.check(full, full.source).title
    assert title.startswith("Out of host memory")  # a CPU device's memory is the host's
    assert "256.0 GiB" in title


def test_oom_recorded_message_keeps_the_allocation_line(long_context_oom):
    _, r = long_context_oom
    assert "OOM when allocating tensor with shape[262144,262144]" in r.record.error.message


def test_oom_numpy_pairwise_distances(tab):
    result, r = profiled(
        tab,
        "points = rng.normal(size=(200_000, 16)).astype('float32')\n"
        "distances = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)\n"
        "nearest = distances.argsort(axis=1)[:, 1:6]\n",
    )
    assert not result.success
    assert isinstance(result.error_in_exec, MemoryError)
    f = the(r, "oom")
    assert f.severity == "error"
    assert f.evidence["error"] == "MemoryError"
    assert f.evidence["phase"] is None
    assert f.evidence["peak_host_bytes"] > 0
    assert f.title == "Out of host memory"


# -- nonfinite-loss -------------------------------------------------------------------------


def test_nonfinite_loss_learning_rate_too_high(tab):
    result, r = profiled(
        tab,
        "targets = x[:, :4].sum(axis=1, keepdims=True) * 1000  # unscaled regression targets\n"
        "reg = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation='relu'),\n"
        "                        keras.layers.Dense(1)])\n"
        "reg.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5), loss='mse')\n"
        "reg.fit(x, targets, batch_size=64, epochs=2, verbose=0)\n",
    )
    assert result.success  # nothing fails: the run is silently useless
    f = the(r, "nonfinite-loss")
    assert f.severity == "warning"
    ev = f.evidence
    assert 0 < ev["first_step"] < 20
    assert ev["loss_at_first_step"] in ("inf", "nan")
    assert math.isfinite(ev["last_finite_loss"])
    assert ev["nonfinite_steps"] == ev["training_steps"] - ev["first_step"] == 64 - ev["first_step"]
    before = ev["losses_before"]
    assert before[-1] > before[0]  # rising until it overflowed
    assert "learning rate" in f.detail


def test_nonfinite_loss_nan_in_the_data(tab):
    result, r = profiled(
        tab,
        "features = x.copy()\n"
        "features[500, 3] = np.nan  # one missing value in the CSV\n"
        "logistic = keras.Sequential([keras.Input((16,)), keras.layers.Dense(2)])\n"
        "logistic.compile(optimizer='adam', loss=loss_fn)\n"
        "logistic.fit(features, y, batch_size=32, epochs=1, shuffle=False, verbose=0)\n",
    )
    assert result.success
    f = the(r, "nonfinite-loss")
    ev = f.evidence
    assert ev["first_step"] == 500 // 32  # the batch holding row 500
    assert ev["loss_at_first_step"] == "nan"
    assert 0 < ev["last_finite_loss"] < 10
    assert len(ev["losses_before"]) == 5
    assert ev["nonfinite_steps"] == 64 - 500 // 32


def test_nonfinite_loss_hand_written_cross_entropy_in_a_custom_loop(tab):
    # log(p) of a sigmoid output that saturates to 0 or 1 under a large learning rate.
    result, r = profiled(
        tab,
        "clf = keras.Sequential([keras.Input((16,)), keras.layers.Dense(16, activation='relu'),\n"
        "                        keras.layers.Dense(1, activation='sigmoid')])\n"
        "sgd = keras.optimizers.SGD(learning_rate=50.0)\n"
        "labels = y.astype('float32')\n"
        "@tf.function\n"
        "def clf_step(xb, yb):\n"
        "    with tf.GradientTape() as tape:\n"
        "        p = clf(xb, training=True)[:, 0]\n"
        "        loss = -tf.reduce_mean(yb * tf.math.log(p) + (1 - yb) * tf.math.log(1 - p))\n"
        "    grads = tape.gradient(loss, clf.trainable_variables)\n"
        "    sgd.apply_gradients(zip(grads, clf.trainable_variables))\n"
        "    return loss\n"
        "for xb, yb in tf.data.Dataset.from_tensor_slices((x, labels)).batch(32).take(40):\n"
        "    clf_step(xb, yb)\n",
    )
    assert result.success
    f = the(r, "nonfinite-loss")
    assert f.evidence["first_step"] >= 1
    assert f.evidence["loss_at_first_step"] in ("inf", "nan")
    assert f.evidence["training_steps"] == 40


def test_nonfinite_loss_from_the_very_first_step(tab):
    # A ReLU output fed to log(): log(0) on the first batch already.
    result, r = profiled(
        tab,
        "reg = keras.Sequential([keras.Input((16,)), keras.layers.Dense(1, activation='relu')])\n"
        "sgd = keras.optimizers.SGD(0.01)\n"
        "@tf.function\n"
        "def log_step(xb, yb):\n"
        "    with tf.GradientTape() as tape:\n"
        "        p = reg(xb, training=True)[:, 0]\n"
        "        loss = -tf.reduce_mean(tf.math.log(p) * tf.cast(yb, tf.float32))\n"
        "    grads = tape.gradient(loss, reg.trainable_variables)\n"
        "    sgd.apply_gradients(zip(grads, reg.trainable_variables))\n"
        "    return loss\n"
        "for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64).take(20):\n"
        "    log_step(xb, yb)\n",
    )
    assert result.success
    losses = r.steps[r.steps["phase"] == "train"]["loss"]
    assert losses.isna().all() or np.isinf(losses).any()
    assert the(r, "nonfinite-loss").evidence["first_step"] == 0


def test_no_nonfinite_loss_when_steps_return_no_loss(tab):
    # A step that returns nothing leaves the loss column empty: that is no NaN loss.
    result, r = profiled(
        tab,
        "@tf.function\n"
        "def silent_step(xb, yb):\n"
        "    train_step(xb, yb)\n"
        "for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64):\n"
        "    silent_step(xb, yb)\n",
    )
    assert result.success
    assert r.record.phase_counts()["train"] == 32
    assert_silent(r, "nonfinite-loss")
    assert not problems(r), listing(r)


# keras-io's GAN: a Model whose train_step returns d_loss and g_loss, no "loss" key.
GAN_CELL = """
class GAN(keras.Model):
    def __init__(self, discriminator, generator):
        super().__init__()
        self.discriminator, self.generator = discriminator, generator
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    def train_step(self, real):
        n = tf.shape(real)[0]
        z = keras.random.normal((n, 4), seed=self.seed_generator)
        both = tf.concat([self.generator(z), real], axis=0)
        labels = tf.concat([tf.ones((n, 1)), tf.zeros((n, 1))], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(both))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        z = keras.random.normal((n, 4), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(tf.zeros((n, 1)), self.discriminator(self.generator(z)))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        return {"d_loss": d_loss, "g_loss": g_loss}

gan = GAN(keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
                            keras.layers.Dense(1)]),
          keras.Sequential([keras.Input((4,)), keras.layers.Dense(16)]))
gan.compile(d_optimizer=keras.optimizers.Adam(1e-3), g_optimizer=keras.optimizers.Adam(1e-3),
            loss_fn=keras.losses.BinaryCrossentropy(from_logits=True))
"""


def test_no_nonfinite_loss_for_a_gan_fit_after_a_fit_that_reported_a_loss(tab):
    # The script: a classifier fit (losses reported), then a GAN fit whose steps report
    # d_loss and g_loss. Its steps have no loss, which is no NaN loss.
    tab.run_cell(GAN_CELL)
    result, r = profiled(
        tab,
        "model.compile(optimizer='adam', loss=loss_fn)\n"
        "model.fit(x, y, batch_size=64, epochs=1, verbose=0)\n"
        "history = gan.fit(tf.data.Dataset.from_tensor_slices(x).batch(64), epochs=2,"
        " verbose=0)\n",
    )
    assert result.success
    history = tab.user_ns["history"].history
    assert np.isfinite(history["d_loss"]).all() and np.isfinite(history["g_loss"]).all()
    steps = r.steps[r.steps["phase"] == "train"]
    assert len(steps) == 32 + 2 * 32
    assert not steps["no_loss"][:32].any() and np.isfinite(steps["loss"][:32]).all()
    assert steps["no_loss"][32:].all() and steps["loss"][32:].isna().all()
    assert_silent(r, "nonfinite-loss")


def test_nonfinite_loss_found_after_gan_steps_that_reported_no_loss(tab):
    # Steps without a loss before and after do not hide a real NaN (log of a negative number).
    tab.run_cell(GAN_CELL)
    result, r = profiled(
        tab,
        "gan.fit(tf.data.Dataset.from_tensor_slices(x).batch(64), epochs=1, verbose=0)\n"
        "@tf.function\n"
        "def log_step(xb, yb):\n"
        "    with tf.GradientTape() as tape:\n"
        "        out = model(xb, training=True)[:, 0]\n"
        "        loss = tf.reduce_mean(tf.math.log(out - 1e3))  # log of a negative number\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    return loss\n"
        "for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(64).take(5):\n"
        "    log_step(xb, yb)\n"
        "gan.fit(tf.data.Dataset.from_tensor_slices(x).batch(64), epochs=1, verbose=0)\n",
    )
    assert result.success
    f = the(r, "nonfinite-loss")
    ev = f.evidence
    assert ev["first_step"] == 32  # the first step of log_step, after the GAN's 32
    assert ev["loss_at_first_step"] == "nan"
    assert ev["nonfinite_steps"] == 5
    assert ev["steps_without_loss"] == 64
    assert ev["training_steps"] == 69
    assert "64 steps reported no loss" in f.detail


# -- device-config-too-late -----------------------------------------------------------------


def test_device_config_too_late_thread_setting_caught_and_printed(tab, capsys):
    # As TensorFlow's guide writes it: the RuntimeError is printed and the cell goes on.
    result, r = profiled(
        tab,
        "try:\n"
        "    tf.config.threading.set_intra_op_parallelism_threads(1)\n"
        "    tf.config.threading.set_inter_op_parallelism_threads(1)\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
        "model.compile(optimizer='adam', loss=loss_fn)\n"
        "model.fit(x, y, batch_size=256, epochs=1, verbose=0)\n",
    )
    assert result.success
    assert "cannot be modified after initialization" in capsys.readouterr().out
    f = the(r, "device-config-too-late")
    assert f.severity == "warning"
    ev = f.evidence
    assert ev["ended_the_run"] is False
    assert ev["count"] == 1  # the first refusal jumped to the except
    call = ev["refused_calls"][0]
    assert call["call"] == "tf.config.threading.set_intra_op_parallelism_threads"
    assert "after initialization" in call["message"]


def test_device_config_too_late_virtual_devices_uncaught(tab):
    result, r = profiled(
        tab,
        "cpus = tf.config.list_physical_devices('CPU')\n"
        "tf.config.set_logical_device_configuration(\n"
        "    cpus[0], [tf.config.LogicalDeviceConfiguration()] * 4)\n"
        "strategy = tf.distribute.MirroredStrategy(tf.config.list_logical_devices('CPU'))\n",
    )
    assert not result.success
    f = the(r, "device-config-too-late")
    assert f.severity == "error"
    ev = f.evidence
    assert ev["ended_the_run"] is True
    assert ev["refused_calls"][0]["call"] == "tf.config.set_logical_device_configuration"
    assert "Virtual devices cannot be modified" in ev["refused_calls"][0]["message"]
    assert "restart the kernel" in f.fix.lower()


def test_no_device_config_finding_for_memory_growth_without_gpus(tab):
    # The usual first cell, run on a machine without GPUs, and settings TensorFlow takes
    # while it runs: nothing refused.
    result, r = profiled(
        tab,
        "for gpu in tf.config.list_physical_devices('GPU'):\n"
        "    tf.config.experimental.set_memory_growth(gpu, True)\n"
        "tf.config.set_soft_device_placement(True)  # these may change at any time\n"
        "tf.debugging.set_log_device_placement(False)\n"
        "tf.config.optimizer.set_jit(False)\n",
    )
    assert result.success
    assert_silent(r, "device-config-too-late")
