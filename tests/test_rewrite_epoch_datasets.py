"""datasets_built_once: a fit on arrays gets its tf.data datasets built once, run for real: the
same training and validation batches as Keras makes from the arrays, shuffled alike."""

from __future__ import annotations

import numpy as np
import pytest

from tfdiag_magic.rewrite import datasets_built_once

from .test_rewrite_common import execute

SETUP = """import numpy as np
import keras

rng = np.random.default_rng(0)
x = rng.normal(size=(101, 9)).astype("float32")
y = np.arange(101, dtype="float32").reshape(101, 1)  # which rows a batch holds
model = keras.Sequential([keras.Input((9,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")

class Seen(keras.callbacks.Callback):
    '''The number of rows of each training and validation batch.'''
    def __init__(self):
        super().__init__()
        self.train, self.test = [], []
    def on_train_batch_end(self, batch, logs=None):
        self.train.append(batch)
    def on_test_batch_end(self, batch, logs=None):
        self.test.append(batch)
seen = Seen()
"""


# The tabular tutorial's fit, for the rewrites that every known cell goes through.
TABULAR_FIT_CELL = SETUP + "history = model.fit(x, y, validation_split=0.2, epochs=100)\n"


def _run(cell: str) -> dict:
    return execute(cell)


@pytest.mark.parametrize(
    "fit",
    [
        "history = model.fit(x, y, validation_split=0.2, epochs=3, verbose=0, callbacks=[seen])",
        "history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[seen],\n"
        "                    validation_data=(x[:30], y[:30]), shuffle=False)",
        "history = model.fit(x=x, y=y, batch_size=None, epochs=3, verbose=0, callbacks=[seen])",
    ],
    ids=["validation-split", "validation-data", "keywords"],
)
def test_the_rewritten_fit_trains_on_the_same_batches(fit):
    cell = SETUP + fit + "\n"
    new = datasets_built_once(cell)
    assert new is not None
    assert "from_tensor_slices" in new and "import tensorflow as tf" in new
    before, after = _run(cell), _run(new)
    # Batches per epoch, training and validation, and the history's keys: as Keras made them.
    assert after["seen"].train == before["seen"].train
    assert after["seen"].test == before["seen"].test
    assert sorted(after["history"].history) == sorted(before["history"].history)
    assert after["train_data"].element_spec[0].shape.as_list() == [None, 9]


def test_the_validation_split_takes_kerass_last_rows():
    cell = SETUP + "model.fit(x, y, validation_split=0.25, epochs=1, verbose=0)\n"
    ns = _run(datasets_built_once(cell))
    val_rows = np.concatenate([b[1].numpy().ravel() for b in ns["val_data"]])
    train_rows = np.concatenate([b[1].numpy().ravel() for b in ns["train_data"]])
    split = int(101 * 0.75)  # Keras: floor(rows * (1 - validation_split))
    assert val_rows.tolist() == list(range(split, 101))
    assert sorted(train_rows.tolist()) == list(range(split))  # all of them, shuffled
    assert train_rows.tolist() != list(range(split))


def test_pandas_data_is_read_as_arrays_once():
    cell = (
        "import pandas as pd\n" + SETUP + "frame = pd.DataFrame(x)\nlabels = pd.Series(y[:, 0])\n"
        "model.fit(frame, labels, validation_split=0.2, epochs=2, verbose=0)\n"
    )
    new = datasets_built_once(cell, pandas=True)
    assert new.count("np.asarray(") == 2
    ns = _run(new)
    assert len(list(ns["train_data"])) == 3  # 80 rows in batches of 32


@pytest.mark.parametrize(
    "fit",
    [
        "model.fit(x, y, sample_weight=np.ones(101), epochs=3)",
        "model.fit(x, y, class_weight={0: 1.0}, epochs=3)",
        "model.fit(x, y, epochs=3, shuffle=mode)",
        "model.fit(x, y, epochs=3, validation_data=held_out)",
        "model.fit(make_x(), y, epochs=3)",
        "model.fit(dataset, epochs=3)",
        "model.fit(x, y, epochs=3, **options)",
    ],
)
def test_calls_it_cannot_rewrite_faithfully_are_left_alone(fit):
    assert datasets_built_once(SETUP + fit + "\n") is None


def test_the_tabular_fit_keeps_its_result_name_and_epochs():
    new = datasets_built_once(TABULAR_FIT_CELL)
    assert "history = model.fit(train_data, epochs=100, validation_data=val_data)" in new
