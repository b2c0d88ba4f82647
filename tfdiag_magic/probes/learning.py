"""Learning probe: whether what trained during the run changed its weights.

What trains is seen by the Keras and optimizer probes: a Keras model about to run its first
training batch of the run (fit, train_on_batch), and an optimizer whose `apply` a custom loop
calls for the first time (outside Keras' own training calls, which the model covers). They call
the recorder's `first_training` / `first_update`, which call the hooks this probe sets. Each
object is read at that first sight, before its first batch or update, and in `finish`; a model
also at the end of each top-level `fit`, as code may set its weights back after training (the
mixed-precision guide resets a model to its first weights to train it again another way): a
variable changed at either read has changed. At that end the fit's `History` gives the loss it
showed for each epoch, and a model's first sight whether the code's own class defines its
`train_step` or `test_step` (`untracked-loss`); the model's loss, output layer and metrics say
whether a metric thresholds its logits (probes/logits_metrics.py); and the BatchNormalization
layers its graph calls with ``training=False``, whose moving statistics are read as each fit of
it starts and ends (probes/inference_mode.py). A read takes the optimizer's
`iterations` and a fingerprint of each trainable variable: a digest of its values, read to the
host (inside a tf.function being traced, in the eager context that `tf.init_scope` gives).
Variables over `FINGERPRINT_ELEMENTS` elements, or past `READ_ELEMENTS` elements an object, are
counted but not read.

Nothing is read per step: the per-step path only tests a weak reference's membership in a
set and counts a model's training batches. Only weak references to the user's objects are
kept, so a model built and trained in a loop is freed as before; one freed before the end
is left out. At most `WATCHED` objects are read in a run.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..record import LogitsMetric, PinnedNormalization, Record, TrainedState
from ..recorder import Recorder
from .inference_mode import PinnedPart, moved_during_fit, pinned_parts, refresh
from .logits_metrics import logits_metrics

FINGERPRINT_ELEMENTS = 1 << 22  # 16 MiB of float32: read to the host once at each end
READ_ELEMENTS = 1 << 24  # elements read in all for one object, at one end
WATCHED = 32
SHOWN_LOSSES = 1000  # a model's epoch losses kept from its fits' History


@dataclass
class _Watched:
    kind: str
    name: str
    target: weakref.ref[Any]  # the model, or the optimizer
    optimizer: Any  # weak reference to the optimizer, or None
    optimizer_class: str
    iterations: int
    variables: list[tuple[weakref.ref[Any], bytes | None]]  # each with its fingerprint
    # Each variable's fingerprint at the end of the latest fit (by id), for a model
    after_fit: dict[int, bytes | None] | None = None
    custom_train_step: str = ""  # a model's class of the code's that defines `train_step`
    custom_test_step: str = ""  # and `test_step`
    shown_losses: list[float] = field(default_factory=list)  # its fits' History "loss"
    shown_val_losses: list[float] = field(default_factory=list)  # and "val_loss"
    logits_metrics: tuple[LogitsMetric, ...] = ()  # read at the end of its latest fit
    pinned: list[PinnedPart] = field(default_factory=list)  # parts called with training=False
    fits: int = 0  # its fits that ended
    pinned_moved: tuple[PinnedNormalization, ...] = ()  # what its fits moved of them


class LearningProbe:
    name = "learning"

    def __init__(self) -> None:
        self._rec: Recorder | None = None
        self._watched: list[_Watched] = []

    def install(self, recorder: Recorder) -> None:
        self._rec = recorder
        self._watched = []
        recorder.on_first_training = self._model_seen
        recorder.on_first_update = self._optimizer_seen
        recorder.on_fit_done = self._fit_done
        recorder.on_fit_started = self._fit_started

    def remove(self) -> None:
        if self._rec is not None:
            self._rec.on_first_training = self._rec.on_first_update = None
            self._rec.on_fit_done = self._rec.on_fit_started = None

    def finish(self, record: Record) -> None:
        """Read each watched object again, and write what changed to `record.trained`."""
        rec, watched = self._rec, self._watched
        self._rec, self._watched = None, []
        batches = rec.trained if rec is not None else {}
        for each in watched:
            try:
                state = _final(each, batches)
            except Exception:  # a state that cannot be read is no fact
                continue
            if state is not None:
                record.trained.append(state)

    def _model_seen(self, model: Any) -> None:
        if len(self._watched) >= WATCHED:
            return
        try:
            optimizer = getattr(model, "optimizer", None)
            self._watched.append(
                _Watched(
                    kind="model",
                    name=str(getattr(model, "name", "?")),
                    target=weakref.ref(model),
                    optimizer=weakref.ref(optimizer) if optimizer is not None else None,
                    optimizer_class=type(optimizer).__name__ if optimizer is not None else "",
                    iterations=_iterations(optimizer),
                    variables=_fingerprints(list(model.trainable_variables)),
                    custom_train_step=_step_owner(model, "train_step"),
                    custom_test_step=_step_owner(model, "test_step"),
                    pinned=pinned_parts(model),
                )
            )
        except Exception:  # never the user's run's problem
            return

    def _fit_started(self, model: Any) -> None:
        """Read the statistics a watched model's graph pins with ``training=False`` again as a
        fit of it starts: what moves them between its fits (another model trained on the same
        base, the code's own calls) is not this fit's."""
        for each in self._watched:
            if each.kind == "model" and each.target() is model:
                if each.pinned:
                    refresh(each.pinned)
                return

    def _fit_done(self, model: Any) -> None:
        """Read a watched model's variables at the end of a fit of it."""
        for each in self._watched:
            if each.kind == "model" and each.target() is model:
                try:
                    alive = [ref() for ref, _ in each.variables]
                    alive = [variable for variable in alive if variable is not None]
                    each.after_fit = {
                        id(ref()): digest
                        for ref, digest in _fingerprints(alive)
                        if ref() is not None
                    }
                except Exception:  # never the user's run's problem
                    each.after_fit = None
                _note_shown_losses(each, model)
                each.logits_metrics = logits_metrics(model) or each.logits_metrics
                each.fits += 1
                if each.pinned:
                    each.pinned_moved += moved_during_fit(each.pinned, each.fits)
                return

    def _optimizer_seen(self, optimizer: Any, variables: Any) -> None:
        if len(self._watched) >= WATCHED:
            return
        try:
            if variables is None:
                variables = getattr(optimizer, "_trainable_variables", None) or []
            self._watched.append(
                _Watched(
                    kind="optimizer",
                    name=str(getattr(optimizer, "name", "?")),
                    target=weakref.ref(optimizer),
                    optimizer=weakref.ref(optimizer),
                    optimizer_class=type(optimizer).__name__,
                    iterations=_iterations(optimizer),
                    variables=_fingerprints(list(variables)),
                )
            )
        except Exception:
            return


def _final(watched: _Watched, batches: dict[Any, int]) -> TrainedState | None:
    target = watched.target()
    if target is None:  # freed before the end: its end state is unknown
        return None
    optimizer = watched.optimizer() if watched.optimizer is not None else None
    first = [(ref(), digest) for ref, digest in watched.variables]
    alive = [variable for variable, _ in first if variable is not None]
    known = {id(variable) for variable in alive}
    again = _fingerprints(alive)
    now = {id(variable): digest for variable, (_, digest) in zip(alive, again, strict=True)}
    after_fit = watched.after_fit or {}

    def differs(variable: Any, digest: bytes) -> bool:
        """A variable gone, or one not read at the end, counts as changed: nothing says it is
        not; one changed at the end of a fit has changed, whatever was set after it."""
        if variable is None or now.get(id(variable)) is None or now[id(variable)] != digest:
            return True
        at_fit = after_fit.get(id(variable), digest)
        return at_fit is None or at_fit != digest

    changed = sum(
        1 for variable, digest in first if digest is not None and differs(variable, digest)
    )
    if watched.kind == "model":
        last = list(target.trainable_variables)
        steps = int(batches.get(watched.target, 0))
        weights = len(target.weights)
    else:
        last = alive
        steps = weights = -1
    return TrainedState(
        kind=watched.kind,
        name=watched.name,
        optimizer=watched.optimizer_class,
        steps=steps,
        iterations_first=watched.iterations,
        iterations_last=_iterations(optimizer),
        learning_rate=_learning_rate(optimizer),
        variables=len(first),
        variables_read=sum(1 for _, digest in first if digest is not None),
        variables_changed=changed,
        variables_last=len(last),
        variables_new=sum(1 for variable in last if id(variable) not in known),
        weights=weights,
        custom_train_step=watched.custom_train_step,
        shown_losses=tuple(watched.shown_losses),
        custom_test_step=watched.custom_test_step,
        shown_val_losses=tuple(watched.shown_val_losses),
        logits_metrics=watched.logits_metrics,
        pinned_moved=watched.pinned_moved,
    )


def _note_shown_losses(watched: _Watched, model: Any) -> None:
    """Keep the "loss" and "val_loss" the fit that just ended showed for each of its epochs:
    what its `History` callback (`model.history`, set by Keras for each fit) holds."""
    try:
        history = model.history.history
        for key, kept in (("loss", watched.shown_losses), ("val_loss", watched.shown_val_losses)):
            values = history.get(key) or []
            kept.extend(float(value) for value in list(values)[: SHOWN_LOSSES - len(kept)])
    except Exception:  # no History, or values that are no numbers: nothing shown to note
        return


def _step_owner(model: Any, step: str) -> str:
    """The name of the first class of the model's, outside Keras, that defines the method
    `step` ("train_step", "test_step"; "" where only Keras' own classes do)."""
    for cls in type(model).__mro__:
        if str(getattr(cls, "__module__", "")).split(".")[0] == "keras":
            return ""
        if step in vars(cls):
            return cls.__qualname__
    return ""


def _fingerprints(variables: list[Any]) -> list[tuple[weakref.ref[Any], bytes | None]]:
    """Each variable with a digest of its values; None for one too large to read."""
    import tensorflow as tf

    budget = READ_ELEMENTS
    out: list[tuple[weakref.ref[Any], bytes | None]] = []
    with tf.init_scope():
        for variable in variables:
            digest = None
            try:
                size = math.prod(int(d) for d in variable.shape)
                if size <= FINGERPRINT_ELEMENTS and size <= budget:
                    budget -= size
                    values = np.ascontiguousarray(np.asarray(variable.numpy()))
                    # Hashed in place: a copy of the bytes would double the host's peak.
                    raw = values.reshape(-1).view(np.uint8)
                    digest = hashlib.blake2b(raw, digest_size=16).digest()
            except Exception:
                digest = None
            out.append((weakref.ref(variable), digest))
    return out


def _iterations(optimizer: Any) -> int:
    """The optimizer's `iterations` now; -1 when there is none or it cannot be read."""
    if optimizer is None:
        return -1
    import tensorflow as tf

    try:
        with tf.init_scope():
            return int(np.asarray(optimizer.iterations.numpy()))
    except Exception:
        return -1


def _learning_rate(optimizer: Any) -> float:
    if optimizer is None:
        return math.nan
    import tensorflow as tf

    try:
        with tf.init_scope():
            rate = optimizer.learning_rate
            return float(np.asarray(rate.numpy() if hasattr(rate, "numpy") else rate))
    except Exception:
        return math.nan
