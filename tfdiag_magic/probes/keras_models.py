"""Model probe: every Keras model constructed during the run, with the loop it was built in.

`Model.__init__` and `Functional.__init__` are wrapped; a model counts once, when its outermost
constructor returns (a subclass calling ``super().__init__`` is still one model). The process
memory after each build lets the diagnosis tell memory per model. Keras reads a constructor's
parameters to build a model's config (`Operation.__new__`, `Model.from_config`), so the
wrappers keep the original's signature exactly (`wraps_exactly`).
"""

from __future__ import annotations

import sys
import threading
from time import perf_counter
from typing import Any

from ..record import ModelBuilt
from ..recorder import Recorder
from .patching import Patcher, defining_class, wraps_exactly


class KerasModelProbe:
    name = "keras_models"

    def __init__(self) -> None:
        self._patcher = Patcher()
        self._depth = 0

    def install(self, recorder: Recorder) -> None:
        import keras
        from keras.src.models.functional import Functional

        owners: list[type] = []
        for cls in (keras.Model, Functional):
            owner = defining_class(cls, "__init__")
            if owner in owners:
                continue
            owners.append(owner)
            self._patcher.replace(owner, "__init__", self._wrap(recorder, vars(owner)["__init__"]))

    def remove(self) -> None:
        self._patcher.restore()

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
            internal = _sequential_internal(model)
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
                    )
                )

        return wraps_exactly(__init__, original)


def _sequential_internal(model: Any) -> bool:
    """A Sequential model builds a functional twin of itself: that is not a model of the cell.

    The Sequential model's own ``super().__init__()`` comes from the same module, and is the
    cell's model: it is told apart by being a Sequential.
    """
    import keras

    caller = sys._getframe(2).f_globals.get("__name__")
    return caller == "keras.src.models.sequential" and not isinstance(model, keras.Sequential)
