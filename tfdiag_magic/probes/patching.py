"""Attribute patches that put back exactly what they replaced, whatever happened in between."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

_MISSING = object()
Wrapper = TypeVar("Wrapper", bound=Callable[..., Any])


def wraps_exactly(wrapper: Wrapper, original: Any) -> Wrapper:
    """Make `wrapper` read as `original` to every kind of introspection; returns `wrapper`.

    Libraries read a callable's parameters in more than one way: `inspect.signature` follows
    ``__wrapped__``, `inspect.getfullargspec` does not (Keras' `Operation.__new__` uses both
    on a class's ``__init__`` and pops the first argument's name from one by the name the other
    gave: a wrapper ``(model, *args, **kwargs)`` around ``(self, *args, **kwargs)`` made it
    raise ``KeyError: 'model'``). Both honour ``__signature__``, so the original's signature
    is set there, and name, qualname, docstring and module are copied as `functools.wraps`
    does. Wrappers should still name their first parameter as the original does (``self``),
    for code that reads ``__code__`` itself.
    """
    functools.update_wrapper(wrapper, original)
    if getattr(original, "__wrapped__", None) is not None and not hasattr(
        original, "__signature__"
    ):
        # `original` is a decorator's wrapper (Keras' fit is ``error_handler(*args, **kwargs)``
        # around the real fit): `signature` reads through it, `getfullargspec` reads its own
        # parameters, and no one ``__signature__`` gives both. Left unset, `signature` follows
        # ``__wrapped__`` from `wrapper` as it does from `original`; `wrapper`'s own parameters
        # must then be written as `original`'s (``*args, **kwargs``, unannotated).
        return wrapper
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to keep
        return wrapper
    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    return wrapper


def defining_class(cls: type, name: str) -> type:
    """The class in `cls`'s MRO whose own namespace defines `name` (where a patch must go)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    raise AttributeError(f"{cls.__name__} has no attribute {name!r}")


class Patcher:
    """Replaces attributes and restores the original objects, in reverse order, on `restore()`.

    An attribute that the owner did not hold in its own namespace (an inherited method) is
    deleted again on restore rather than set, so the owner ends up exactly as it was.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, new: Any) -> Any:
        """Set `owner.name = new`; returns the original object (inherited or own)."""
        own = vars(owner).get(name, _MISSING)
        original = getattr(owner, name)
        setattr(owner, name, new)
        self._saved.append((owner, name, own))
        return original

    def restore(self) -> None:
        errors: list[BaseException] = []
        while self._saved:
            owner, name, own = self._saved.pop()
            try:
                if own is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, own)
            except Exception as exc:  # keep restoring the others; report at the end
                errors.append(exc)
        if errors:
            raise errors[0]
