"""numpy_batches_to_dataset on more loop shapes: bound helpers, index arrays, rounded-up step
counts, shuffles that rebind the arrays, conversions moved onto the whole array."""

from __future__ import annotations

import numpy as np
import pytest

from tfdiag_magic.rewrite import numpy_batches_to_dataset

from .test_rewrite_common import execute


def test_helpers_fixed_index_array_and_astype_run_the_same_batches():
    source = """import math
import numpy as np
n = len(x)
steps = math.ceil(n / bs)
perm = np.arange(n)[::-1]
for s in range(steps):
    start = s * bs
    end = start + bs
    xb = x[perm[start:end]]; yb = y[perm[start:end]]
    xb = xb.astype(np.float32)
    seen.append((np.asarray(xb).tolist(), np.asarray(yb).tolist()))
"""
    out = numpy_batches_to_dataset(source)
    assert out is not None
    assert "from_tensor_slices((x[perm].astype(np.float32), y[perm]))" in out
    assert ".batch(bs)\n" in out and "take" not in out
    assert "for xb, yb in dataset:\n    seen.append(" in out
    x, y = np.arange(10), np.arange(10) * 2
    before = execute(source, {"x": x, "y": y, "bs": 4, "seen": []})["seen"]
    after = execute(out, {"x": x, "y": y, "bs": 4, "seen": []})["seen"]
    assert before == after and len(after) == 3


def test_rebinding_shuffle_takes_its_length_from_the_array_that_remains():
    source = """from sklearn.utils import shuffle
import tensorflow as tf
for epoch in range(3):
    xs, ys = shuffle(x, y)
    for i in range(0, len(xs), 64):
        xb = tf.convert_to_tensor(xs[i:i + 64])
        yb = tf.convert_to_tensor(ys[i:i + 64])
        loss = model.train_on_batch(xb, yb)
"""
    out = numpy_batches_to_dataset(source)
    assert out is not None
    assert "from_tensor_slices((tf.convert_to_tensor(x), tf.convert_to_tensor(y)))" in out
    assert ".shuffle(len(x))" in out and "xs" not in out
    assert "model.fit(dataset, epochs=3)" in out


def test_rounded_up_step_count_with_permutation_becomes_fit():
    source = """import numpy as np
import tensorflow as tf
for epoch in range(5):
    idx = np.random.permutation(len(x_train))
    total = 0
    for b in range((len(x_train) + batch_size - 1) // batch_size):
        xb = x_train[idx[b * batch_size:(b + 1) * batch_size]]
        yb = y_train[idx[b * batch_size:(b + 1) * batch_size]]
        loss = model.train_on_batch(xb, yb)
        total += loss
    print(epoch, total)
"""
    out = numpy_batches_to_dataset(source)
    assert out is not None
    assert ".shuffle(len(x_train))\n    .batch(batch_size)\n" in out
    assert out.endswith("model.fit(dataset, epochs=5)\n")


def test_step_index_kept_through_enumerate_and_import_after_future_imports():
    source = """'''Docstring.'''
from __future__ import annotations
import numpy as np
for k in range(n_steps):
    lo = k * bs
    xb = np.asarray(x[lo:lo + bs], dtype=np.float32)
    step(xb, k)
"""
    out = numpy_batches_to_dataset(source)
    assert out is not None
    assert out.startswith(
        "'''Docstring.'''\nfrom __future__ import annotations\nimport numpy as np\n"
        "import tensorflow as tf\n"
    )
    assert "np.asarray(x, dtype=np.float32)" in out and ".take(n_steps)" in out
    assert "for k, xb in enumerate(dataset):\n    step(xb, k)" in out


@pytest.mark.parametrize(
    "source",
    [
        # The loop may stop early: no fit.
        "for i in range(0, len(x), 8):\n    xb = x[i:i + 8]\n"
        "    loss = model.train_on_batch(xb, y[i:i + 8])\n    if loss > 10:\n        break\n",
        # The name tf is taken.
        "tf = 3\nfor i in range(0, len(x), 8):\n    xb = x[i:i + 8]\n    step(xb)\n",
        # A bound through a call is not plain arithmetic.
        "for i in range(10):\n    start = min(i * bs, n)\n    xb = x[start:start + bs]\n"
        "    step(xb)\n",
        # n is rebound: not known to be the length of x.
        "n = len(x)\nn = n - 1\nfor i in range(0, n, bs):\n    xb = x[i:i + bs]\n    step(xb)\n",
    ],
)
def test_loops_left_alone(source):
    out = numpy_batches_to_dataset(source)
    assert out is None or "model.fit" not in out
    if "tf = 3" in source or "min(" in source or "n = n - 1" in source:
        assert out is None
