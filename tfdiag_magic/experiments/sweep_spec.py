"""Parse a sweep specification, ``NAME=V1,V2,...``, into a variable name and its values.

Each value is a Python literal (``ast.literal_eval``: ints, floats, strings, tuples, lists,
dicts, True/False/None); a bare word that is no literal (``adam``, ``mixed_float16``) is taken
as a string. Commas inside brackets or quotes belong to the value, so ``shape=(32, 32),(64, 64)``
has two tuple values. Anything else is a `SweepSpecError`, raised before anything runs.
"""

from __future__ import annotations

import ast
import keyword
from dataclasses import dataclass
from typing import Any

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}
_NOT_A_WORD = set("0123456789+-.([{'\"")


class SweepSpecError(ValueError):
    """A malformed ``--sweep`` specification; the message says what is wrong and the form."""


@dataclass(frozen=True)
class SweepSpec:
    name: str
    values: tuple[Any, ...]

    @property
    def labels(self) -> list[str]:
        """The values as they read in the reports: ``repr`` of each."""
        return [value_label(v) for v in self.values]


def value_label(value: Any) -> str:
    return repr(value)


FORM = "--sweep NAME=V1,V2,... (for example --sweep batch_size=16,64,256)"


def parse_sweep_spec(text: str) -> SweepSpec:
    """`text` is ``NAME=V1,V2,...``; raises SweepSpecError when it is not."""
    spec = text.strip()
    if len(spec) >= 2 and spec[0] == spec[-1] and spec[0] in "'\"" and "=" in spec:
        spec = spec[1:-1].strip()  # the whole option quoted in the magic's line
    name, equals, rest = spec.partition("=")
    name = name.strip()
    if not equals:
        raise SweepSpecError(f"--sweep needs NAME=VALUES; got {text!r}. Use {FORM}.")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise SweepSpecError(f"--sweep: {name!r} is not a variable name. Use {FORM}.")
    pieces = _split_top_level(rest, text)
    if not pieces or all(not p.strip() for p in pieces):
        raise SweepSpecError(f"--sweep {name}= lists no values. Use {FORM}.")
    values: list[Any] = []
    seen: set[tuple[str, str]] = set()
    for index, piece in enumerate(pieces, start=1):
        piece = piece.strip()
        if not piece:
            raise SweepSpecError(f"--sweep: value {index} of {name} is empty in {text!r}.")
        value = _value(piece, name)
        key = (type(value).__name__, repr(value))
        if key in seen:
            raise SweepSpecError(f"--sweep: the value {piece} of {name} is given twice.")
        seen.add(key)
        values.append(value)
    return SweepSpec(name=name, values=tuple(values))


def _value(piece: str, name: str) -> Any:
    try:
        return ast.literal_eval(piece)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if piece[0] in _NOT_A_WORD or any(c.isspace() for c in piece):
        raise SweepSpecError(
            f"--sweep: {piece!r} (a value of {name}) is not a Python literal; "
            "values are ints, floats, quoted strings, tuples, lists or dicts of those, "
            "or bare words such as adam (taken as strings)."
        )
    return piece


def _split_top_level(text: str, whole: str) -> list[str]:
    """Split at commas outside brackets and quotes; unbalanced ones are an error."""
    pieces: list[str] = []
    stack: list[str] = []
    quote = ""
    start = 0
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _OPEN:
            stack.append(c)
        elif c in _CLOSE:
            if not stack or stack[-1] != _CLOSE[c]:
                raise SweepSpecError(f"--sweep: unbalanced {c!r} in {whole!r}.")
            stack.pop()
        elif c == "," and not stack:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    if quote:
        raise SweepSpecError(f"--sweep: unclosed quote in {whole!r}.")
    if stack:
        raise SweepSpecError(f"--sweep: unclosed {stack[-1]!r} in {whole!r}.")
    pieces.append(text[start:])
    if len(pieces) > 1 and not pieces[-1].strip():
        pieces.pop()  # a trailing comma, as Python allows
    return pieces
