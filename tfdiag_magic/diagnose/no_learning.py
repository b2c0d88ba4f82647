"""no-learning: training steps ran, but a model's trainable weights did not change."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record, TrainedState
from .evidence import rounded

CODE = "no-learning"
TITLE = "Training steps ran, but the weights did not change"
DOC = """\
## What it detects
A Keras model that ran training batches (`fit`, `train_on_batch`) with nothing to train or
whose trainable weights all ended the run as they began, or an optimizer that a custom loop
stepped (its `iterations` rose) while none of the variables it was given changed. A model's
weights are also read at the end of each `fit`: code that sets them back after training (to
train again from the same start) learned, and is not flagged.

## Why it hurts
Every such step costs its time and teaches the model nothing: the loss reported may even
move (it is measured on changing batches), so the run looks like training. Keras 3 takes a
model's trainable weights when its train function is made: a Keras 2 GAN that sets
`discriminator.trainable = False` before compiling the combined model leaves the
discriminator with no trainable weights in Keras 3, and its `train_on_batch` calls do nothing
but print a warning, however many there are.

## Evidence we show
For each model or optimizer: the training steps it ran (for an optimizer, how far its
`iterations` rose), its optimizer's `iterations` before and after, its trainable variables,
how many of them were fingerprinted and how many changed, and the learning rate at the end.

## Fix
- No weights at all (0 weights, trainable or not): the model keeps its variables as
  `tf.Variable` attributes, which Keras 3 does not track (TensorFlow's basic training loops
  guide does this). Create them with `self.add_weight(...)` or as `keras.Variable`.
- `trainable` False when training began: Keras 3 reads it when a model's train function is
  made, at its first training call after `compile` (not at `compile` itself); set it before
  that call, or compile again after changing it.
- A Keras 2 GAN: the discriminator and the combined model each read `trainable` at their
  first training call, so set it before each model's training, in the loop: each train
  function then keeps the weights it was made with. Or write a custom `train_step` that
  applies each optimizer to its own model's variables (keras-io's DCGAN).
  ```python
  for step in range(steps):
      discriminator.trainable = True
      discriminator.train_on_batch(images, labels)
      discriminator.trainable = False
      gan.train_on_batch(noise, misleading_labels)  # the generator's weights alone
  ```
  Not Keras 2's recipe of setting `discriminator.trainable = True` and compiling the
  discriminator again before the loop: the combined model's first call then finds the
  discriminator trainable, and every generator step trains the discriminator too (measured
  with Keras 3.15: the combined model trained the discriminator's weights with the
  generator's; `tests/test_diagnose_no_learning.py`).
- A learning rate of 0 (or a schedule that reaches 0): set a positive one.
- Gradients that are None or zero because the loss does not depend on the weights (a
  `tf.stop_gradient`, `.numpy()` in the loss, variables outside the tape): compute the
  loss from the model's output inside the `GradientTape`.

## Threshold
At least 10 training steps of the model (or 10 optimizer iterations), and either no
trainable variable at first sight nor built later while the optimizer's `iterations` did not
rise, or every trainable variable read (up to 4M elements each, 16M an object, at the start
and the end, never per step) with none changed. A model with one changed variable learns
(partial fine-tuning is learning), and a model only evaluated or predicted is never looked at.
A variable too large to read only counts as unchanged where the optimizer never stepped.
"""

MIN_STEPS = 10


def _stalled(state: TrainedState) -> bool:
    """Whether `state`'s trainable weights measurably did not change (see the threshold)."""
    if state.variables_changed or state.variables_new:
        return False
    stepped = state.iterations_first >= 0 and state.iterations_last > state.iterations_first
    if state.kind == "optimizer":
        return (
            state.iterations_last - state.iterations_first >= MIN_STEPS
            and state.variables > 0
            and state.variables_read == state.variables
        )
    if state.steps < MIN_STEPS:
        return False
    if state.variables == 0:
        return state.iterations_first >= 0 and not stepped
    return state.variables_read == state.variables or (state.iterations_first >= 0 and not stepped)


def _entry(state: TrainedState) -> dict:
    entry = {
        state.kind: state.name,
        "optimizer": state.optimizer,
        "iterations_before": state.iterations_first,
        "iterations_after": state.iterations_last,
        "trainable_variables": state.variables,
        "trainable_variables_after": state.variables_last,
        "variables_read": state.variables_read,
        "variables_changed": state.variables_changed,
        "learning_rate": rounded(state.learning_rate, 6),
    }
    if state.kind == "model":
        entry["training_steps"] = state.steps
        entry["weights"] = state.weights
    return entry


def _cause(state: TrainedState) -> str:
    name = f"{state.kind} '{state.name}'"
    if state.kind == "model":
        ran = f"{name} ran {state.steps} training steps"
    else:
        ran = f"{name} stepped {state.iterations_last - state.iterations_first} times"
    if state.variables == 0:
        return (
            f"{ran} with no trainable weights ({state.weights} weights in all; its"
            f" optimizer's iterations stayed at {state.iterations_last})"
        )
    return (
        f"{ran}; none of its {state.variables} trainable variables changed (optimizer"
        f" iterations {state.iterations_first} → {state.iterations_last})"
    )


def check(record: Record, source: str | None) -> Finding | None:
    stalled = [state for state in record.trained if _stalled(state)]
    if not stalled:
        return None
    training = record.phase_counts().get("train", 0)
    evidence = {"training_steps_in_run": training, "not_learning": [_entry(s) for s in stalled]}
    first = stalled[0]
    if first.kind == "model" and first.variables == 0 and first.weights == 0:
        # No weight at all that Keras knows of: not frozen, never made Keras weights.
        fix = (
            "Make the model's variables Keras weights: in Keras 3 a `tf.Variable` set as an"
            " attribute of a Model or Layer is not tracked (no weight, nothing for the optimizer"
            " to update); create it with `self.add_weight(shape=(), initializer=...)` in"
            " `__init__` or `build`, or as a `keras.Variable`."
        )
    elif first.variables == 0:
        fix = (
            "Keras 3 reads `trainable` when a model's train function is made, at its first"
            " training call after `compile`: set it before that call (or compile again after"
            " changing it). For a Keras 2 GAN, set `discriminator.trainable = True` before the"
            " discriminator's training and `False` before the combined model's, in the loop:"
            " each train function keeps the weights it was made with. Not True and a new"
            " `compile` before the loop: then every generator step trains the discriminator too."
        )
    else:
        fix = (
            "Check the learning rate (0?) and that the loss depends on the weights (gradients"
            " None or zero: a `stop_gradient`, `.numpy()`, variables outside the tape)."
        )
    return Finding(
        code=CODE,
        severity="warning",
        title=f"No learning: {_cause(first)}",
        detail="; ".join(_cause(s) for s in stalled)
        + ". These steps cost their time and changed nothing.",
        fix=fix,
        evidence=evidence,
        impact=0.0,
    )
