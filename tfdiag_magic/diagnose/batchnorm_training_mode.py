"""batchnorm-training-mode: BatchNormalization layers that a functional model calls with
``training=False`` were run in training mode by `fit`, their moving statistics moved."""

from __future__ import annotations

from ..findings import Finding
from ..record import PinnedNormalization, Record, TrainedState
from ..rewrite import freeze_batch_norm
from .evidence import first_rewrite, rounded, with_rewrite

CODE = "batchnorm-training-mode"
TITLE = "BatchNormalization called with training=False was trained by fit all the same"
DOC = """\
## What it detects
A functional model calls a layer or a model holding BatchNormalization layers with
`training=False` (the transfer-learning idiom: `x = base_model(inputs, training=False)`), and
those layers' moving mean and variance changed while the outer model trained: Keras 3's `fit`
passes `training=True` to every layer of a functional graph that takes a `training` argument,
over the `training=False` the node was built with (`keras.src.models.functional.operation_fn`;
keras-team/keras#20285). A BatchNormalization layer runs in training mode when it is called
with `training=True` and is trainable: once the base is unfrozen for fine-tuning
(`base_model.trainable = True`), it normalises with each batch's statistics and moves the
pretrained ones towards the new data's.

## Why it hurts
keras-io's "Transfer learning & fine-tuning" and TensorFlow's transfer-learning tutorial build
the model with `training=False` for this one reason: the base's statistics were learnt on far
more data than the fine-tuning set, and updating them with small batches "will destroy what
the model has learned". Under Keras 3 the argument does not do it. Measured with Keras 3.15
on the guide's sequence with a small base (a Dense layer and a BatchNormalization), frozen for
a first fit, then unfrozen and fitted again at a learning rate of 1e-5 (two epochs of 16
batches each time): its moving statistics did not move in the first fit and moved by 80% of
their size in the second; with the rewrite, not at all
(`tests/test_diagnose_batchnorm_training_mode.py`). The same sequence with an Xception-like
base: the moving means' sum went from 0.0003 to 0.2 in the fine-tuning fit, and the training
loss jumped from 0.693 to 0.646 at its first epoch while the validation loss stayed at 0.69.

## Evidence we show
The model, the part called with `training=False`, its BatchNormalization layers, how many of
them moved and were trainable, the largest change of a layer's statistics relative to their
size, and the fit (the model's first, second... in the run) that moved them. Read from the
layers themselves: their moving statistics copied to the host when the model first trains in
the run and at the end of each fit.

## Fix
Set the BatchNormalization layers of the base non-trainable after unfreezing it (a
non-trainable BatchNormalization runs in inference mode, whatever `training` says):
`for layer in base_model.layers: if isinstance(layer, keras.layers.BatchNormalization):
layer.trainable = False`, after `base_model.trainable = True` and before `compile`. The
rewrite inserts that loop after the cell's last `base_model.trainable = True` (or after the
call with `training=False`, where the cell unfreezes nothing), for each name the cell calls
with `training=False`. Where the layers lie in models nested inside the base, set each nested
model's layers the same way.

## Threshold
Read, not timed: the layers are inside a part of a functional graph whose node passes
`training=False`, and their moving mean or variance changed between the reads around a fit.
"""


def check(record: Record, source: str | None) -> Finding | None:
    for state in record.trained:
        if state.kind == "model" and state.pinned_moved:
            finding = _finding(state, state.pinned_moved)
            if any(moved.nested for moved in state.pinned_moved):
                return finding  # the rewrite sets a base's own layers only
            return with_rewrite(finding, source, first_rewrite(source, (freeze_batch_norm, {})))
    return None


def _finding(state: TrainedState, moved: tuple[PinnedNormalization, ...]) -> Finding:
    first = max(moved, key=lambda item: item.largest_change)
    parts = sorted({item.part for item in moved})
    fits = sorted({item.fit for item in moved})
    return Finding(
        code=CODE,
        severity="warning",
        title=(
            f"`{first.part}` is called with training=False, yet fit moved the statistics of"
            f" {_layers(first.moved, first.layers)}"
        ),
        detail=(
            f"The model `{state.name}` calls `{first.part}` with `training=False`, to keep its"
            " BatchNormalization layers in inference mode. Keras 3's `fit` passes"
            " `training=True` to every layer of a functional model over that argument, and a"
            " trainable BatchNormalization layer then runs in training mode. During the"
            f" model's {_ordinal(first.fit)} fit in the run, {_layers(first.moved, first.layers)}"
            f" ({first.trainable} trainable) normalised with each batch's statistics and moved"
            " their moving mean and variance towards the batches' (the largest by"
            f" {first.largest_change:.1%} of its size)."
        ),
        fix=(
            "After unfreezing the base and before `compile`, set its BatchNormalization layers"
            " non-trainable, which keeps them in inference mode: `for layer in"
            " base_model.layers: if isinstance(layer, keras.layers.BatchNormalization):"
            " layer.trainable = False`."
        ),
        evidence={
            "model": state.name,
            "called_with_training_false": parts,
            "batch_norm_layers": first.layers,
            "moved": first.moved,
            "trainable": first.trainable,
            "largest_relative_change": rounded(first.largest_change, 4),
            "fits_that_moved_them": fits,
            "in_nested_models": first.nested,
        },
    )


def _ordinal(number: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(number, f"{number}th")


def _layers(count: int, layers: int) -> str:
    """ "its BatchNormalization layer", "all 3 of its ...", "2 of its 3 ..."."""
    if count == layers == 1:
        return "its BatchNormalization layer"
    if count == layers:
        return f"all {layers} of its BatchNormalization layers"
    return f"{count} of its {layers} BatchNormalization layers"
