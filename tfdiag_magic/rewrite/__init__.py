"""Rewrites of the user's own cell that fix a diagnosed problem, as libcst transforms.

Each function takes the cell source and facts the diagnosis measured, and returns the whole
rewritten cell, or None when the pattern is not there or the rewrite would not be safe.
Comments and layout of the untouched code survive; every result is compiled before it is
returned. A leading ``%%tfprofile`` line is kept as it is; ``loop_lineno`` facts are 1-based
lines of the source given (that line included, when there is one).

- numpy_batches_to_dataset: hand-sliced NumPy batches -> tf.data pipeline (fit or own loop)
- datasets_built_once: fit on arrays -> tf.data datasets built once (short epochs)
- compile_eager_step: @tf.function on eager training steps; eager switches removed
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
"""

from __future__ import annotations

from .accumulation import gradient_accumulation
from .batch_size import larger_batch, steps_per_execution
from .clear_session import clear_session_in_loop
from .common import unified_diff
from .detach import detach_appends
from .eager import compile_eager_step
from .epoch_datasets import datasets_built_once
from .keras_loops import compile_once, fit_once, predict_in_loop, train_on_batch_in_loop
from .memory_growth import MEMORY_GROWTH_CELL, memory_growth_first
from .mixed_precision import mixed_precision
from .numpy_batches import numpy_batches_to_dataset
from .pipeline import tune_input_pipeline
from .retracing import hoist_function, input_signature, reduce_retracing, scalars_to_tensors
from .vectorise import vectorise_element_loop

__all__ = [
    "MEMORY_GROWTH_CELL",
    "clear_session_in_loop",
    "compile_eager_step",
    "compile_once",
    "datasets_built_once",
    "detach_appends",
    "fit_once",
    "gradient_accumulation",
    "hoist_function",
    "input_signature",
    "larger_batch",
    "memory_growth_first",
    "mixed_precision",
    "numpy_batches_to_dataset",
    "predict_in_loop",
    "reduce_retracing",
    "scalars_to_tensors",
    "steps_per_execution",
    "train_on_batch_in_loop",
    "tune_input_pipeline",
    "unified_diff",
    "vectorise_element_loop",
]
