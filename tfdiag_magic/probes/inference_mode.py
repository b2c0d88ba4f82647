"""Which BatchNormalization layers a functional model calls with ``training=False``, and whether
their moving statistics changed during a fit all the same (`batchnorm-training-mode`).

The transfer-learning idiom (keras-io's "Transfer learning & fine-tuning", TensorFlow's
"Transfer learning and fine-tuning") builds ``x = base_model(inputs, training=False)`` so that
the base's BatchNormalization layers stay in inference mode when the base is unfrozen to be
fine-tuned. Keras 3 does not keep that: a functional model run by `fit` passes its own
``training=True`` to every layer of its graph that takes a ``training`` argument, over the value
the node was built with (`keras.src.models.functional.operation_fn`; keras-team/keras#20285).
A trainable BatchNormalization then normalises with each batch's statistics and moves its
moving mean and variance, the pretrained ones, towards the new data's.

Read, for a model at its first sight (before its first training batch of the run): the nodes of
its functional graphs (the model's, and those of functional models inside it, a Sequential's
included) called with ``training=False``, and the BatchNormalization layers inside each such
node's layer or model. Their moving statistics are copied to the host then, as each top-level
`fit` of the model starts, and as it ends: a change between the two reads around a fit
happened in that fit (what another model trained on the same base moves between the fits is
not counted). Only weak references to the layers are kept.
Nothing is read for a model without such nodes (most models): no cost there.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..record import PinnedNormalization

MAX_LAYERS = 2000  # BatchNormalization layers followed per model (a ResNet-152 has 155)
MAX_ELEMENTS = 1 << 22  # moving-statistic elements copied per model at one read


@dataclass
class PinnedPart:
    """A layer or model that a functional graph calls with ``training=False``, with the
    BatchNormalization layers inside it and their moving statistics at the latest read."""

    name: str
    layers: list[weakref.ref[Any]]
    nested: bool  # some of the layers lie inside a layer or model of the part, not directly in it
    last: list[np.ndarray | None]  # each layer's moving mean and variance, concatenated


def pinned_parts(model: Any) -> list[PinnedPart]:
    """The parts of `model` called with ``training=False`` that hold BatchNormalization
    layers, their statistics read now; [] where there are none or the model cannot be read."""
    try:
        parts: list[PinnedPart] = []
        seen: set[int] = set()
        budget = MAX_LAYERS
        for operation in _pinned_operations(model):
            if id(operation) in seen:
                continue
            seen.add(id(operation))
            layers = [layer for layer in _layers_in(operation) if _is_batch_norm(layer)]
            layers = layers[:budget]
            if not layers:
                continue
            budget -= len(layers)
            direct = {id(layer) for layer in getattr(operation, "layers", None) or []}
            nested = not _is_batch_norm(operation) and any(id(x) not in direct for x in layers)
            parts.append(
                PinnedPart(
                    name=str(getattr(operation, "name", "?")),
                    layers=[weakref.ref(layer) for layer in layers],
                    nested=nested,
                    last=_statistics(layers),
                )
            )
        return parts
    except Exception:  # a model that cannot be read says nothing
        return []


def moved_during_fit(parts: list[PinnedPart], fit: int) -> tuple[PinnedNormalization, ...]:
    """For each part whose layers' statistics changed since the last read, what changed; the
    statistics read now become the last read."""
    moved: list[PinnedNormalization] = []
    for part in parts:
        try:
            layers = [ref() for ref in part.layers]
            alive = [layer for layer in layers if layer is not None]
            now = _statistics(alive)
            before = [last for layer, last in zip(layers, part.last, strict=True) if layer]
            changes = [
                _change(old, new) for old, new in zip(before, now, strict=True) if old is not None
            ]
            part.layers = [weakref.ref(layer) for layer in alive]
            part.last = now
        except Exception:  # never the user's run's problem
            continue
        changed = [change for change in changes if change > 0.0]
        if changed:
            moved.append(
                PinnedNormalization(
                    part=part.name,
                    layers=len(alive),
                    moved=len(changed),
                    trainable=sum(bool(getattr(layer, "trainable", False)) for layer in alive),
                    largest_change=float(max(changed)),
                    fit=fit,
                    nested=part.nested,
                )
            )
    return tuple(moved)


def refresh(parts: list[PinnedPart]) -> None:
    """Read the parts' statistics again: the next `moved_during_fit` compares with these."""
    for part in parts:
        try:
            layers = [layer for layer in (ref() for ref in part.layers) if layer is not None]
            part.layers = [weakref.ref(layer) for layer in layers]
            part.last = _statistics(layers)
        except Exception:  # never the user's run's problem
            continue


def _pinned_operations(model: Any) -> list[Any]:
    """The operations of `model`'s functional graphs (nested ones too) whose node passes
    ``training=False``, in graph order."""
    found: list[Any] = []
    graphs, visited = [model], set()
    while graphs:
        graph = graphs.pop(0)
        functional = getattr(graph, "_functional", None) or graph  # a Sequential's graph
        if id(functional) in visited:
            continue
        visited.add(id(functional))
        by_depth = getattr(functional, "_nodes_by_depth", None)
        if not isinstance(by_depth, dict):
            continue
        for depth in sorted(by_depth, reverse=True):
            for node in by_depth[depth]:
                operation = getattr(node, "operation", None)
                arguments = getattr(node, "arguments", None)
                kwargs = getattr(arguments, "kwargs", None) or {}
                if operation is None:
                    continue
                if kwargs.get("training") is False:
                    found.append(operation)
                if getattr(operation, "_nodes_by_depth", None) is not None or getattr(
                    operation, "_functional", None
                ):
                    graphs.append(operation)
    return found


def _layers_in(operation: Any) -> list[Any]:
    """`operation` and every layer inside it."""
    flatten = getattr(operation, "_flatten_layers", None)
    if flatten is None:
        return [operation]
    return list(flatten(include_self=True, recursive=True))


def _is_batch_norm(layer: Any) -> bool:
    """A Keras BatchNormalization layer (or a class of the code's that extends it)."""
    return any(
        klass.__name__ == "BatchNormalization" and klass.__module__.startswith("keras")
        for klass in type(layer).__mro__
    )


def _statistics(layers: list[Any]) -> list[np.ndarray | None]:
    """Each layer's moving mean and variance, copied to the host; None past the budget or
    where a layer holds none (not built)."""
    read: list[np.ndarray | None] = []
    budget = MAX_ELEMENTS
    for layer in layers:
        mean = getattr(layer, "moving_mean", None)
        variance = getattr(layer, "moving_variance", None)
        size = int(np.prod(getattr(mean, "shape", (0,)))) * 2
        if mean is None or variance is None or size == 0 or size > budget:
            read.append(None)
            continue
        budget -= size
        read.append(
            np.concatenate(
                [np.asarray(mean.numpy(), np.float64), np.asarray(variance.numpy(), np.float64)]
            ).ravel()
        )
    return read


def _change(old: np.ndarray, new: np.ndarray | None) -> float:
    """How far `new` moved from `old`, relative to `old`'s size (0.0: not at all)."""
    if new is None or new.shape != old.shape:
        return 0.0
    moved = float(np.linalg.norm(new - old))
    return moved / max(float(np.linalg.norm(old)), 1e-12)
