"""epoch-start-stall: epochs of a fit whose first batch waits, asleep, while Keras lets the last
iterator over the data go (a tf.data iterator's shut-down waits for its autotuning thread), on
a real fit; and the starts that must stay silent: one iterator for the whole fit, a busy
neighbour, a kernel that keeps no per-thread counts."""

from __future__ import annotations

import math

import pytest

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled
from tfdiag_magic.diagnose import epoch_start_stall
from tfdiag_magic.record import EpochStart, KerasCall, Record

# 4,096 rows in batches of 32, an autotuned parallel map and prefetch: 128 batches an epoch
# (about 0.2 s here). Measured on the 2-vCPU EPYC: 11-13 of 29 epoch starts slept 0.13-0.16 s
# each (1.2-1.7 s in all), with 5 ms of CPU each; beside a CPU hog, 25 of 39.
PIPELINE = """
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(4096, 32)).astype("float32")
y = (x[:, 0] > 0).astype("float32")
ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096)
      .map(lambda a, b: (a * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE)
      .batch(32).prefetch(tf.data.AUTOTUNE))
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1)])
model.compile("adam", "mse")
"""


def test_epochs_that_start_asleep_while_the_last_iterator_shuts_down_are_found(ip):
    ip.run_cell(PIPELINE)
    result, r = profiled(ip, "model.fit(ds, epochs=40, verbose=0)\n")
    assert result.success
    f = the(r, "epoch-start-stall")
    ev = f.evidence
    assert ev["starts_measured"] == 39 and ev["data"] == ["dataset"], ev
    assert ev["stalled_epoch_starts"] >= 3 and ev["stalled_validation_starts"] == 0, ev
    assert ev["asleep_s"] >= 1.0, ev
    # Asleep: the thread used little CPU in those starts.
    assert ev["cpu_in_stalled_starts_s"] < 0.3 * ev["asleep_s"], ev
    assert "autotune.enabled = False" in f.fix
    assert "`model.fit(dataset.repeat(), steps_per_epoch=N" in f.fix
    assert_silent(r, "keras-epoch-setup")  # the sleep is not Keras' set-up

    # The fix: one iterator for the whole fit. No epoch start waits for one to go (the same
    # 5,120 batches in 20 epochs of 256).
    result, fixed = profiled(
        ip, "model.fit(ds.repeat(), steps_per_epoch=256, epochs=20, verbose=0)\n"
    )
    assert result.success
    assert_silent(fixed, "epoch-start-stall")
    assert fixed.record.phase_counts() == r.record.phase_counts()
    asleep = sum(start.asleep for start in fixed.record.epoch_starts[1:])
    assert asleep < 0.3, [round(start.asleep, 3) for start in fixed.record.epoch_starts]


VALIDATION = """
def autotuned(rows, seed):
    x = np.random.default_rng(seed).normal(size=(rows, 32)).astype("float32")
    return (tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("float32")))
            .map(lambda a, b: (a * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(32).prefetch(tf.data.AUTOTUNE))
train, val = autotuned(4096, 0), autotuned(2048, 1)
"""


def test_validations_that_start_asleep_are_found_and_a_repeated_validation_set_is_no_fix(ip):
    # One training iterator for the fit, and the validation data repeated with
    # `validation_steps`: the epochs start at once, but Keras lets the validation's iterator
    # go at every validation. Measured: 14 of 30 validations slept, 1.3 s in all (its
    # training starts 0.006 s); the same fit unrepeated slept 0.36 s, and 0.02 s with
    # autotuning off.
    ip.run_cell(PIPELINE + VALIDATION)
    result, r = profiled(
        ip,
        "model.fit(train.repeat(), steps_per_epoch=128, validation_data=val.repeat(),\n"
        "          validation_steps=64, epochs=40, verbose=0)\n",
    )
    assert result.success
    f = the(r, "epoch-start-stall")
    ev = f.evidence
    assert ev["stalled_validation_starts"] >= 3 and ev["stalled_epoch_starts"] == 0, ev
    assert ev["starts_measured"] == 2 * 39, ev
    assert f.title.split(" started ")[0].endswith("validations"), f.title
    assert "autotune.enabled = False" in f.fix and "A repeated validation dataset" in f.fix
    assert "steps_per_epoch" not in f.fix  # the training data's iterator is one already


def _fit(starts: list[tuple[float, float, float]], data: str = "dataset") -> Record:
    """A recorded fit of one epoch start a second after another: each (wall, on CPU, waiting
    for a CPU), the first start of the fit included."""
    record = Record()
    record.keras_calls = [
        KerasCall("fit", 0.0, 30.0, 600, 20.0, -1, "sequential", 32.0, data, line=3)
    ]
    record.epoch_starts = [
        EpochStart(float(i), i, wall, cpu, wait) for i, (wall, cpu, wait) in enumerate(starts)
    ]
    record.wall_time = 30.0
    return record


@pytest.mark.parametrize(
    ("start", "found"),
    [
        ((0.5, 0.005, 0.0), True),  # asleep 0.5 s in each of 9 starts after the first
        ((0.5, 0.1, 0.39), False),  # a neighbour held the CPU: 0.01 s asleep
        ((0.5, math.nan, math.nan), False),  # no per-thread counts: not known to be sleep
        ((0.12, 0.005, 0.0), False),  # 1.04 s asleep in all, 3% of the run
    ],
    ids=["asleep", "busy-neighbour", "no-counts", "too-little"],
)
def test_only_sleep_counts_and_only_enough_of_it(start, found):
    record = _fit([(0.6, 0.0, 0.0)] + [start] * 9)
    assert (epoch_start_stall.check(record, None) is not None) == found


def test_data_that_keras_reads_without_tf_data_is_not_judged():
    # A generator or a PyDataset: Keras starts its own workers at an epoch's start.
    assert epoch_start_stall.check(_fit([(0.5, 0.005, 0.0)] * 10, "pydataset"), None) is None
    assert epoch_start_stall.check(_fit([(0.5, 0.005, 0.0)] * 10, "numpy"), None) is not None
