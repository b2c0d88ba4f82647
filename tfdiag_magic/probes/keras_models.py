"""Model probe: every Keras model constructed during the run, with the loop it was built in.

`Model.__init__` and `Functional.__init__` are wrapped; a model counts once, when its outermost
constructor returns (a subclass calling ``super().__init__`` is still one model). The process
memory after each build lets the diagnosis tell memory per model. Keras reads a constructor's
parameters to build a model's config (`Operation.__new__`, `Model.from_config`), so the
wrappers keep the original's signature exactly (`wraps_exactly`).

A Sequential model builds a functional twin of itself (``Functional(inputs=..., outputs=...)``
in `Sequential.build`, when it gets its input shape): that is no model of the cell. The name
`Functional` in Keras' sequential module is replaced for the run by a `TwinFactory`, which
makes the same model and tells the probe that what is constructed meanwhile is a twin.
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Any

from ..record import ModelBuilt, Record
from ..recorder import Recorder
from .patching import Patcher, defining_class, wraps_exactly


class KerasModelProbe:
    name = "keras_models"

    def __init__(self) -> None:
        self._patcher = Patcher()
        self._depth = 0
        self._twins: TwinFactory | None = None

    def install(self, recorder: Recorder) -> None:
        import keras
        from keras.src.models import sequential
        from keras.src.models.functional import Functional

        if getattr(sequential, "Functional", None) is Functional:  # else twins count as models
            self._twins = TwinFactory(Functional, recorder.thread_id)
            self._patcher.replace(sequential, "Functional", self._twins)
        owners: list[type] = []
        for cls in (keras.Model, Functional):
            owner = defining_class(cls, "__init__")
            if owner in owners:
                continue
            owners.append(owner)
            self._patcher.replace(owner, "__init__", self._wrap(recorder, vars(owner)["__init__"]))

    def remove(self) -> None:
        self._patcher.restore()
        self._twins = None

    def finish(self, record: Record) -> None:
        """Nothing left to add: the models built are in the recorder's `models`."""

    def _wrap(self, rec: Recorder, original: Any) -> Any:
        probe = self

        # The first parameter is named as Keras names it (`self`), not `model`: see
        # `wraps_exactly` for the KeyError a different name caused.
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
            __tracebackhide__ = True
            model = self
            if threading.get_ident() != rec.thread_id:
                return original(model, *args, **kwargs)
            # The functional twin a Sequential model builds of itself is no model of the
            # cell; it still counts as depth, so that the Model.__init__ it runs inside is
            # not taken for a model either.
            twins = probe._twins
            internal = twins is not None and twins.building > 0
            probe._depth += 1
            try:
                original(model, *args, **kwargs)
            finally:
                probe._depth -= 1
            if probe._depth == 0 and not internal:
                rss = rec.rss_reader() if rec.rss_reader is not None else -1
                rec.models.append(
                    ModelBuilt(
                        time=perf_counter() - rec.t0,
                        name=str(getattr(model, "name", "?")),
                        cls=type(model).__name__,
                        loop=rec.innermost_loop(),
                        rss=rss,
                        line=rec.user_line(),
                    )
                )

        return wraps_exactly(__init__, original)


class TwinFactory:
    """Stands for the class `Functional` in Keras' sequential module while a run lasts.

    Called, it makes the model `Functional` makes, with `building` above 0 meanwhile (on the
    run's thread), so the model probe knows the model being constructed is a Sequential's
    twin. Read as a class (``isinstance``, an attribute), it answers as `Functional`.
    """

    def __init__(self, functional: type, thread_id: int) -> None:
        self.functional = functional
        self.thread_id = thread_id
        self.building = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if threading.get_ident() != self.thread_id:
            return self.functional(*args, **kwargs)
        self.building += 1
        try:
            return self.functional(*args, **kwargs)
        finally:
            self.building -= 1

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self.functional)

    def __subclasscheck__(self, subclass: type) -> bool:
        return issubclass(subclass, self.functional)

    def __getattr__(self, name: str) -> Any:  # only for names the factory has not itself
        if name == "functional":  # not set yet (a copy being made): no lookup loop
            raise AttributeError(name)
        return getattr(self.functional, name)
