"""Every rewrite on every cell we know: a compiling cell or None, never an exception.

The cells are the ones the other rewrite tests use plus the training code our users copy from
the articles the project grew from (slow GPU training, retracing, memory growth, accumulation).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from tfdiag_magic import rewrite
from tfdiag_magic.rewrite.common import split_magic_line

from . import (
    test_rewrite_accumulation,
    test_rewrite_batch_norm,
    test_rewrite_batch_size,
    test_rewrite_clear_session,
    test_rewrite_detach,
    test_rewrite_eager,
    test_rewrite_epoch_datasets,
    test_rewrite_inline_step,
    test_rewrite_keras_loops,
    test_rewrite_logits_threshold,
    test_rewrite_numpy_batches,
    test_rewrite_pipeline,
    test_rewrite_precision_memory,
    test_rewrite_retracing,
    test_rewrite_tracked_loss,
    test_rewrite_vectorise,
)

ARTICLE_CELLS = [
    # Per-batch NumPy -> tensor conversion inside the loop.
    """import tensorflow as tf
import numpy as np

for epoch in range(epochs):
    for batch in range(num_batches):
        x_batch = np.random.rand(batch_size, input_dim)  # Data on CPU
        y_batch = np.random.rand(batch_size, output_dim) # Data on CPU
        with tf.device('/GPU:0'):
            x_gpu = tf.convert_to_tensor(x_batch, dtype=tf.float32)
            y_gpu = tf.convert_to_tensor(y_batch, dtype=tf.float32)
            loss = model.train_on_batch(x_gpu, y_gpu)
""",
    # A tf.function step with check_numerics.
    """import tensorflow as tf

@tf.function
def train_step(images, labels):
  with tf.GradientTape() as tape:
    predictions = model(images)
    loss = loss_fn(labels, predictions)
    loss = tf.debugging.check_numerics(loss, "Loss contains NaN or Inf values")
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
  return loss
""",
    # Memory growth in a try block, gc.collect every ten steps.
    """import tensorflow as tf
import time
import gc

gpus = tf.config.list_physical_devices('GPU')
if gpus:
  try:
    for gpu in gpus:
      tf.config.experimental.set_memory_growth(gpu, True)
  except RuntimeError as e:
    print(e)

model = tf.keras.models.Sequential([
    tf.keras.layers.Dense(10, activation='relu', input_shape=(100,)),
    tf.keras.layers.Dense(1)
])
optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)
loss_fn = tf.keras.losses.MeanSquaredError()
x_train = tf.random.normal((1000, 100))
y_train = tf.random.normal((1000, 1))
batch_size = 32
dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size)

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        y_pred = model(x)
        loss = loss_fn(y, y_pred)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

num_epochs = 10
for epoch in range(num_epochs):
    start = time.time()
    for step, (x_batch, y_batch) in enumerate(dataset):
        loss = train_step(x_batch, y_batch)
        if step % 10 == 0:  # Invoke garbage collection periodically
            gc.collect()
    end = time.time()
    print(f"Epoch {epoch+1}, Time: {end - start:.2f} seconds")
""",
    # A batch-size sweep.
    """import tensorflow as tf

model = tf.keras.models.Sequential([
    tf.keras.layers.Dense(128, activation='relu', input_shape=(784,)),
    tf.keras.layers.Dense(10, activation='softmax')
])
(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
x_train = x_train.reshape(60000, 784).astype('float32') / 255
batch_sizes = [32, 128, 512, 2048]
for batch_size in batch_sizes:
    start_time = time.time()
    model.fit(x_train, y_train, epochs=1, batch_size=batch_size)
    end_time = time.time()
""",
    # Batch size 1, compiled model.
    """import tensorflow as tf
model = tf.keras.models.Sequential([
  tf.keras.layers.Dense(128, activation='relu', input_shape=(784,)),
  tf.keras.layers.Dense(10, activation='softmax')
])
model.compile(optimizer='adam',
              loss='categorical_crossentropy',
              metrics=['accuracy'])
# Batch size is too small, leading to poor GPU utilization
model.fit(x_train, y_train, epochs=10, batch_size=1, verbose=1)
""",
    # A tf.data pipeline with map, shuffle, batch, prefetch, and mixed precision by policy.
    """import tensorflow as tf
dataset = tf.data.Dataset.from_tensor_slices(training_data) \\
    .map(preprocess_function) \\
    .shuffle(buffer_size=1000) \\
    .batch(batch_size=32) \\
    .prefetch(buffer_size=tf.data.AUTOTUNE)
policy = tf.keras.mixed_precision.Policy('mixed_float16')
tf.keras.mixed_precision.set_global_policy(policy)
for epoch in range(num_epochs):
    for batch in dataset:
        with tf.GradientTape() as tape:
            predictions = model(batch['features'])
            loss = compute_loss(predictions, batch['labels'])
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
""",
    "%%tfprofile -q\nfor i in range(3):\n    model.predict(x)\n",
    "%%tfprofile\n",
    "",
    "# only a comment\n",
    "!pip install tensorflow\nmodel.fit(x)\n",
]


def _cells() -> list[str]:
    cells = list(ARTICLE_CELLS)
    for module in (
        test_rewrite_accumulation,
        test_rewrite_batch_norm,
        test_rewrite_batch_size,
        test_rewrite_clear_session,
        test_rewrite_detach,
        test_rewrite_eager,
        test_rewrite_epoch_datasets,
        test_rewrite_inline_step,
        test_rewrite_keras_loops,
        test_rewrite_logits_threshold,
        test_rewrite_numpy_batches,
        test_rewrite_pipeline,
        test_rewrite_precision_memory,
        test_rewrite_retracing,
        test_rewrite_tracked_loss,
        test_rewrite_vectorise,
    ):
        cells += [v for k, v in vars(module).items() if k.endswith("_CELL") and isinstance(v, str)]
    return cells


REWRITES = {
    "numpy_batches_to_dataset": {},
    "compile_eager_step": {},
    "compile_inline_step": {},
    "scalars_to_tensors": {"function": "train_step", "arguments": [0, "y"]},
    "reduce_retracing": {"function": "train_step"},
    "input_signature": {"function": "train_step", "specs": ["tf.TensorSpec(None, tf.float32)"]},
    "hoist_function": {},
    "predict_in_loop": {},
    "compile_once": {},
    "datasets_built_once": {},
    "fit_once": {},
    "clear_session_in_loop": {},
    "detach_appends": {},
    "larger_batch": {"batch_size": 256},
    "steps_per_execution": {"steps": 8},
    "tune_input_pipeline": {},
    "vectorise_element_loop": {},
    "mixed_precision": {},
    "gradient_accumulation": {"steps": 4},
    "train_on_batch_in_loop": {},
    "feed_loss_to_metrics": {"train_step_of": "Custom"},
    "metrics_fed_by_hand": {"train_step_of": "CustomModel"},
    "feed_val_loss_to_metrics": {"test_step_of": "Validated"},
    "threshold_logits_at_zero": {"kinds": ("BinaryAccuracy",)},
    "freeze_batch_norm": {},
}


def test_the_package_exports_every_rewrite():
    # and what is no rewrite: the memory-growth cell, the diff, and a question about a cell
    others = {"memory_growth_first", "MEMORY_GROWTH_CELL", "unified_diff", "calls_compiled_metrics"}
    assert set(REWRITES) | others == set(rewrite.__all__)


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_every_rewrite_gives_a_compiling_cell_or_none(name):
    function = getattr(rewrite, name)
    changed = 0
    for cell in _cells():
        result = function(cell, **REWRITES[name])
        if result is None:
            continue
        changed += 1
        header, _ = split_magic_line(cell)
        new_header, new_body = split_magic_line(result)
        assert new_header == header
        compile(new_body, "<cell>", "exec")
        assert result != cell
        assert rewrite.unified_diff(cell, result)
    assert changed >= 1, f"{name} rewrote none of the known cells"


def test_memory_growth_first_always_returns_a_cell():
    for cell in _cells():
        result = rewrite.memory_growth_first(cell)
        assert rewrite.MEMORY_GROWTH_CELL in result
        header, _ = split_magic_line(cell)
        assert result.startswith(header)


def test_every_rewrite_stays_callable_once_its_modules_are_imported():
    """The package defers each rewrite's import to its first call; a module of the package
    named as a rewrite would replace it on the package once imported (notebook 06 imports
    `mixed_precision` after the diagnosis ran it)."""
    modules = {info.name for info in pkgutil.iter_modules(rewrite.__path__)}
    assert modules and not modules & set(rewrite.__all__)
    for name in modules:
        importlib.import_module(f"{rewrite.__name__}.{name}")
    from tfdiag_magic.rewrite import mixed_precision, unified_diff

    assert unified_diff("a\n", "b\n")
    assert mixed_precision("x = 1\n") is None
    for name in set(rewrite.__all__) - {"MEMORY_GROWTH_CELL"}:
        assert callable(getattr(rewrite, name)), name
