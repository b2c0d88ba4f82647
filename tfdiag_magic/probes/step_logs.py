"""What `fit` and `evaluate` showed of the values a custom `train_step` or `test_step` returns
that no metric of the model holds (`last-batch-logs`).

Keras 3 shows, after each epoch, the model's metrics' results where the step returns exactly
their names; otherwise it shows what the step returned for the epoch's last batch
(`Trainer._get_metrics_result_or_logs`), and its progress bar shows every value as given
(`ProgbarLogger` makes every value stateful). A step that returns ``{"d_loss": d_loss,
"g_loss": g_loss}`` (keras-io's WGAN-GP) then shows one batch's losses as the epoch's, where
Keras 2's progress bar averaged them. Read at the first training batch of each top-level fit:
the keys of the batch's logs that are not the names of the model's metrics, where the logs'
keys are not exactly those names. Only for such a fit, each batch's values of those keys are
kept (the tensors the step returned, a reference each), and read to the host once at each
epoch's end: the value shown, the epoch's mean, its least and its largest. Left out: a key
whose shown value is a metric's result at the epoch's end (a tracker's running mean returned
under another name) or the optimizer's learning rate then (a rate on a schedule, returned to be
shown: its last value is the one wanted). `evaluate` returns, and fit shows as its `val_`
values, the last test batch's likewise: a second instance reads each top-level `evaluate` and
each validation of the top-level fit, from its first test batch to its end.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from ..record import EpochLogs
from .logits_metrics import shown_metrics

MAX_KEYS = 8
MAX_EPOCHS = 200  # epochs kept per run
RATE_TOLERANCE = 0.05


class StepLogs:
    """The values of the running fit's (or evaluation's) returned keys that no metric holds,
    batch by batch."""

    def __init__(self, epochs: list[EpochLogs], phase: str = "train") -> None:
        self.phase = phase  # what `EpochLogs.phase` the values read here get by default
        self.keys: tuple[str, ...] | None = None  # None: not decided for this fit yet
        self.model = ""
        self._model: Any = None  # a weak reference to the fit's model
        self._values: dict[str, list[Any]] = {}
        self.epochs = epochs  # the recorder's: what each epoch showed and averaged

    def fit_began(self) -> None:
        self.keys, self._values, self._model = None, {}, None

    def release(self) -> None:
        """The fit returned or raised: let go of the values an unfinished epoch kept (the
        user's tensors) and of the model."""
        self.fit_began()

    def batch(self, callbacks: Any, logs: Any) -> None:
        """A batch of the fit or evaluation being read ended with `logs` (a call per batch
        only where its step returns values no metric holds)."""
        keys = self.keys
        if keys is None:
            model = getattr(callbacks, "model", None)
            keys = self.keys = _unheld_keys(model, logs)
            self.model = str(getattr(model, "name", "?"))
            self._model = weakref.ref(model) if keys else None
            self._values = {key: [] for key in keys}
        if keys:
            for key in keys:
                self._values[key].append(logs.get(key))

    def epoch_done(self, epoch: int, phase: str | None = None) -> None:
        """Read the epoch's kept values to the host, and let them go (`phase`: the
        `EpochLogs.phase` they get, the instance's by default; "validation" shows each key
        as fit shows it, "val_" first)."""
        phase = phase or self.phase
        prefix = "val_" if phase == "validation" else ""
        if not self.keys:
            return
        model = self._model() if self._model is not None else None
        results, rate = _metric_results(model), _learning_rate(model)
        for key, values in self._values.items():
            try:
                numbers = [float(value) for value in values]
            except (TypeError, ValueError):  # not a scalar: nothing to average
                numbers = []
            values.clear()
            numbers = [number for number in numbers if math.isfinite(number)]
            if not numbers or _a_result(numbers[-1], results) or _the_rate(numbers[-1], rate):
                continue
            if len(self.epochs) < MAX_EPOCHS:
                self.epochs.append(
                    EpochLogs(
                        model=self.model,
                        key=prefix + key,
                        epoch=epoch,
                        batches=len(numbers),
                        shown=numbers[-1],
                        mean=sum(numbers) / len(numbers),
                        least=min(numbers),
                        largest=max(numbers),
                        phase=phase,
                    )
                )


def _unheld_keys(model: Any, logs: Any) -> tuple[str, ...]:
    """The keys of `logs` that are no metric's name, where the logs are not exactly the
    metrics' results (then Keras shows the metrics' own results); () when they are, or where
    the model or the logs cannot be read."""
    try:
        if model is None or not isinstance(logs, dict) or not logs:
            return ()
        names = {str(metric.name) for metric in shown_metrics(model)}
        if set(logs) == names:
            return ()
        return tuple(key for key in logs if key not in names)[:MAX_KEYS]
    except Exception:  # a model that cannot be read says nothing
        return ()


def _metric_results(model: Any) -> list[float]:
    """The scalar results of the metrics the model shows, now (the epoch's end)."""
    found: list[float] = []
    if model is None:
        return found
    try:
        for metric in shown_metrics(model):
            try:
                found.append(float(metric.result()))
            except (TypeError, ValueError):  # not a scalar
                continue
    except Exception:  # a model that cannot be read: nothing left out
        return []
    return found


def _a_result(value: float, results: list[float]) -> bool:
    """Whether `value` is one of the metrics' results (a tracker's, under another name)."""
    return any(abs(value - result) <= 1e-6 * max(1.0, abs(result)) for result in results)


def _learning_rate(model: Any) -> float | None:
    """The model's optimizer's learning rate now (a schedule's value at its iterations)."""
    try:
        return float(model.optimizer.learning_rate)
    except Exception:  # no optimizer, or a rate that cannot be read
        return None


def _the_rate(value: float, rate: float | None) -> bool:
    """Whether `value` is the learning rate, give or take a step of a schedule (a schedule
    decaying by a tenth every 4 steps moves it 2.6% a step)."""
    return rate is not None and rate > 0 and abs(value - rate) <= RATE_TOLERANCE * rate
