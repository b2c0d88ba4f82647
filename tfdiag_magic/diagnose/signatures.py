"""Which argument of a tf.function changes between its tracings, read from the recorded
signatures (``(x: TensorSpec(shape=(32, 4), ...), n: Literal[int(3)]) -> ...``)."""

from __future__ import annotations

import re


def parameters(signature: str) -> dict[str, str]:
    """Parameter name -> its type text, from a function type's text (top-level commas only)."""
    text = signature.strip()
    if not text.startswith("("):
        return {}
    depth = 0
    end = None
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                end = i
                break
    inner = text[1:end] if end is not None else text[1:]
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in inner:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if current:
        parts.append("".join(current))
    result: dict[str, str] = {}
    for part in parts:
        name, sep, kind = part.strip().partition(":")
        if sep:
            result[name.strip()] = kind.strip()
    return result


def changing_arguments(signatures: list[str]) -> dict[str, list[str]]:
    """Arguments whose type text differs between tracings, with the distinct values seen."""
    parsed = [parameters(s) for s in signatures]
    names: list[str] = []
    for params in parsed:
        for name in params:
            if name not in names:
                names.append(name)
    changing: dict[str, list[str]] = {}
    for name in names:
        values: list[str] = []
        for params in parsed:
            value = params.get(name, "<absent>")
            if value not in values:
                values.append(value)
        if len(values) > 1:
            changing[name] = values
    return changing


def is_python_value(kind: str) -> bool:
    """A Python value baked into the graph (each new value is a new tracing)."""
    return kind.startswith("Literal[") or kind in ("int", "float", "bool", "str")


def shape_of(kind: str) -> str:
    """A tensor spec's text without its name (``name='x'`` or ``name=None``): two specs of
    one shape and dtype make the same graph; any other type text as it is."""
    return re.sub(r",\s*name=(None|'[^']*')", "", kind)


def is_shape_change(values: list[str]) -> bool:
    return all("TensorSpec" in v for v in values)
