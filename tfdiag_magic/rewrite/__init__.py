"""Rewrites of the user's own cell that fix a diagnosed problem, as libcst transforms.

Each is imported at its first call (`_deferred`): the diagnosis of a run with nothing to
rewrite does not load libcst.

Each function takes the cell source and facts the diagnosis measured, and returns the whole
rewritten cell, or None when the pattern is not there or the rewrite would not be safe.
Comments and layout of the untouched code survive; every result is compiled before it is
returned. A leading ``%%tfprofile`` line is kept as it is; ``loop_lineno`` facts are 1-based
lines of the source given (that line included, when there is one).

- numpy_batches_to_dataset: hand-sliced NumPy batches -> tf.data pipeline (fit or own loop)
- datasets_built_once: fit on arrays -> tf.data datasets built once (short epochs)
- compile_eager_step: @tf.function on eager training steps; eager switches removed
- compile_inline_step: an eager step written inline in a loop -> one @tf.function
- scalars_to_tensors / reduce_retracing / input_signature / hoist_function: retracing
- predict_in_loop / compile_once / fit_once / train_on_batch_in_loop: Keras calls repeated
  in loops
- clear_session_in_loop: models built in a loop
- detach_appends: tensors kept in lists and running totals
- memory_growth_first / MEMORY_GROWTH_CELL: GPU memory growth, set before GPU start-up
- mixed_precision: mixed_float16 policy, float32 outputs
- gradient_accumulation: large-batch updates from micro-batches
- larger_batch / steps_per_execution: more work per step
- tune_input_pipeline: parallel map/interleave, final prefetch
- vectorise_element_loop: element-by-element NumPy loops
- feed_loss_to_metrics / feed_val_loss_to_metrics / metrics_fed_by_hand: a Keras 2
  `train_step`'s (or `test_step`'s) loss fed to Keras 3's metrics
- threshold_logits_at_zero: accuracy, precision and recall of a logits model thresholded at 0
- freeze_batch_norm: a base's BatchNormalization layers kept in inference mode when unfrozen
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..gpu.memory_growth import MEMORY_GROWTH_CELL


def _deferred(name: str, home: str) -> Callable[..., Any]:
    """The rewrite `name` of the module `home`, imported at its first call. Every rewrite
    uses libcst, whose import took 0.53 s of the 0.87 s the tool added to the profile of a
    one-line script (``python -X importtime -m tfdiag_magic profile``): a run with no finding
    to rewrite never loads it. No rewrite has its module's name: importing a submodule binds it
    on the package under its own name, where it would stand in for the rewrite."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(f"{__name__}.{home}"), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"`{__name__}.{home}.{name}`, its module imported at the first call."
    return call


gradient_accumulation = _deferred("gradient_accumulation", "accumulation")
larger_batch = _deferred("larger_batch", "batch_size")
steps_per_execution = _deferred("steps_per_execution", "batch_size")
clear_session_in_loop = _deferred("clear_session_in_loop", "clear_session")
unified_diff = _deferred("unified_diff", "common")
detach_appends = _deferred("detach_appends", "detach")
compile_eager_step = _deferred("compile_eager_step", "eager")
compile_inline_step = _deferred("compile_inline_step", "inline_step")
datasets_built_once = _deferred("datasets_built_once", "epoch_datasets")
compile_once = _deferred("compile_once", "keras_loops")
fit_once = _deferred("fit_once", "keras_loops")
predict_in_loop = _deferred("predict_in_loop", "keras_loops")
train_on_batch_in_loop = _deferred("train_on_batch_in_loop", "keras_loops")
memory_growth_first = _deferred("memory_growth_first", "memory_growth")
mixed_precision = _deferred("mixed_precision", "precision")
numpy_batches_to_dataset = _deferred("numpy_batches_to_dataset", "numpy_batches")
tune_input_pipeline = _deferred("tune_input_pipeline", "pipeline")
hoist_function = _deferred("hoist_function", "retracing")
input_signature = _deferred("input_signature", "retracing")
reduce_retracing = _deferred("reduce_retracing", "retracing")
scalars_to_tensors = _deferred("scalars_to_tensors", "retracing")
vectorise_element_loop = _deferred("vectorise_element_loop", "vectorise")
feed_loss_to_metrics = _deferred("feed_loss_to_metrics", "tracked_loss")
feed_val_loss_to_metrics = _deferred("feed_val_loss_to_metrics", "tracked_loss")
metrics_fed_by_hand = _deferred("metrics_fed_by_hand", "tracked_loss")
calls_compiled_metrics = _deferred("calls_compiled_metrics", "tracked_loss")
threshold_logits_at_zero = _deferred("threshold_logits_at_zero", "logits_threshold")
freeze_batch_norm = _deferred("freeze_batch_norm", "batch_norm_inference")

__all__ = [
    "MEMORY_GROWTH_CELL",
    "calls_compiled_metrics",
    "clear_session_in_loop",
    "compile_eager_step",
    "compile_inline_step",
    "compile_once",
    "datasets_built_once",
    "detach_appends",
    "feed_loss_to_metrics",
    "feed_val_loss_to_metrics",
    "fit_once",
    "freeze_batch_norm",
    "gradient_accumulation",
    "hoist_function",
    "input_signature",
    "larger_batch",
    "memory_growth_first",
    "metrics_fed_by_hand",
    "mixed_precision",
    "numpy_batches_to_dataset",
    "predict_in_loop",
    "reduce_retracing",
    "scalars_to_tensors",
    "steps_per_execution",
    "threshold_logits_at_zero",
    "train_on_batch_in_loop",
    "tune_input_pipeline",
    "unified_diff",
    "vectorise_element_loop",
]
