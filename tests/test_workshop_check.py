"""The workshop's grader (notebooks/workshop_check.py) on real runs outside the notebooks: the
cases a notebook on a given machine may or may not reach."""

from __future__ import annotations

import sys

from tests.helpers import run_cell
from tests.test_notebooks import NOTEBOOKS

sys.path.insert(0, str(NOTEBOOKS))
import workshop_check  # notebooks/ is not a package; the notebooks import it so

SETUP = """
import time
import numpy as np, tensorflow as tf, keras
photos = np.random.default_rng(0).random((256, 16), dtype=np.float32)
labels = np.zeros(256, dtype=np.int64)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(4)])
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
"""

GENERATOR = """%%tfprofile -q -o generator
def batches():
    while True:
        time.sleep(0.05)
        yield photos[:32], labels[:32]
model.fit(batches(), steps_per_epoch=30, epochs=1, verbose=0)
"""

# Every element draws and multiplies a 256x256 matrix, and the pipeline runs on one thread
# (its own pool of one, one thread per op): a batch of 8 takes 8 single-core matrix products
# (2-15 ms on the x86 machines we know of), a step of the tiny model well under a millisecond.
# Parallel and prefetched, the pipeline cannot keep up on any machine, whatever its cores,
# and is still far faster than the generator's 50 ms a batch. 90 steps, so that the wait passes
# input-bound's 0.2 s on a fast machine too: 0.64 s (81%) on an AVX-512 Xeon, where 30 steps
# waited under 0.2 s and the finding, rightly, stayed silent.
COMPLETE = """%%tfprofile -q -o my_pipeline --compare generator
def augment(x, y):
    m = tf.random.normal((256, 256))
    x = x + tf.reduce_mean(tf.matmul(m, m)) * 0.0
    return x, y
one_thread = tf.data.Options()
one_thread.threading.private_threadpool_size = 1
one_thread.threading.max_intra_op_parallelism = 1
train = (
    tf.data.Dataset.from_tensor_slices((photos, labels)).repeat()
    .map(augment, num_parallel_calls=tf.data.AUTOTUNE).batch(8).prefetch(tf.data.AUTOTUNE)
    .with_options(one_thread)
)
model.fit(train, steps_per_epoch=90, epochs=1, verbose=0)
"""


def test_a_complete_pipeline_that_still_waits_counts_and_says_why(ip):
    assert run_cell(ip, SETUP).success
    assert run_cell(ip, GENERATOR).success
    generator = {f.code for f in ip.user_ns["generator"].findings}
    assert "input-bound" in generator
    unchanged = workshop_check.check("03-augment-in-tf-data", ip.user_ns)
    assert not unchanged.solved  # no pipeline yet: the task's own run is not a solution
    ip.user_ns["my_pipeline"] = ip.user_ns["generator"]
    assert not workshop_check.check("03-augment-in-tf-data", ip.user_ns).solved

    assert run_cell(ip, COMPLETE).success
    findings = {f.code: f for f in ip.user_ns["my_pipeline"].findings}
    grade = workshop_check.check("03-augment-in-tf-data", ip.user_ns)
    assert grade.solved, str(grade)
    # Each batch takes 2-15 ms to make, a step well under 1 ms.
    assert "input-bound" in findings, ip.user_ns["my_pipeline"].summary()
    pipeline = findings["input-bound"].evidence["pipeline"]
    assert pipeline["prefetched"] and not pipeline["python"], pipeline
    assert "nothing left to add" in grade.lines[0], str(grade)
    assert "is gone" not in grade.lines[0], str(grade)
    assert "Measured against `generator`" in grade.lines[0], str(grade)


def test_a_pipeline_left_sequential_is_not_solved(ip):
    assert run_cell(ip, SETUP).success
    assert run_cell(ip, GENERATOR).success
    sequential = COMPLETE.replace(", num_parallel_calls=tf.data.AUTOTUNE", "")
    assert run_cell(ip, sequential).success
    findings = {f.code: f for f in ip.user_ns["my_pipeline"].findings}
    grade = workshop_check.check("03-augment-in-tf-data", ip.user_ns)
    assert "input-bound" in findings
    assert findings["input-bound"].evidence["pipeline"]["one_at_a_time"]
    assert not grade.solved, str(grade)
    assert "still there" in grade.lines[0], str(grade)
