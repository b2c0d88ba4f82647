"""The environment a script or cell sets for TensorFlow before it imports it.

TensorFlow reads some settings once, from the environment, when it is imported or first lists
its devices: ``TF_ENABLE_ONEDNN_OPTS`` (which kernels run, and so the last digits of every
result), ``TF_CPP_MIN_LOG_LEVEL``, ``CUDA_VISIBLE_DEVICES`` (which GPUs exist for the process).
Code written for a fresh process sets them first::

    import os
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    import tensorflow as tf

The tool imports TensorFlow and lists the devices when its session starts, before the code's
first line; without these settings it would start TensorFlow as the code never does (oneDNN's
kernels on where the code turned them off, a GPU the code hid). So where TensorFlow is not
imported yet, the settings the code makes at its top level, with constant strings, before its
first import of TensorFlow or Keras, are made first (`set_early`). Only TensorFlow's, CUDA's,
Keras', XLA's and the CPU math libraries' variables are read: those are the ones such code sets
for TensorFlow, and the code sets each again, to the same value, when its line runs.
"""

from __future__ import annotations

import ast
import os
import sys

# The variables read: TensorFlow's and the libraries it starts with.
PREFIXES = ("TF_", "CUDA_", "KERAS_", "XLA_", "OMP_", "KMP_", "MKL_", "DNNL_", "ONEDNN_", "NCCL_")
# Modules whose import starts TensorFlow.
STARTERS = ("tensorflow", "keras", "tf_keras")


def settings_before_tensorflow(source: str) -> dict[str, str]:
    """The variables the code's top level sets to constant strings before its first import
    of TensorFlow or Keras: ``os.environ[NAME] = VALUE``, ``os.environ.setdefault(NAME,
    VALUE)`` (where NAME is not set already), ``os.environ.update(NAME=VALUE)`` or with a dict,
    and ``os.putenv(NAME, VALUE)``; also IPython's ``%env NAME=VALUE`` lines. Code that does
    not parse sets nothing here (it fails as written when it runs)."""
    settings: dict[str, str] = {}
    try:
        tree = ast.parse(_without_magics(source, settings))
    except (SyntaxError, ValueError):
        return {}
    for statement in tree.body:
        if _starts_tensorflow(statement):
            break
        for name, value, only_if_unset in _settings_in(statement):
            if not name.startswith(PREFIXES):
                continue
            if only_if_unset and (name in os.environ or name in settings):
                continue
            settings[name] = value
    return settings


def set_early(source: str | None) -> dict[str, str]:
    """Make the settings of `source` (see `settings_before_tensorflow`) where TensorFlow is
    not imported yet; returns those made."""
    if source is None or "tensorflow" in sys.modules:
        return {}
    settings = settings_before_tensorflow(source)
    os.environ.update(settings)
    return settings


def _without_magics(source: str, settings: dict[str, str]) -> str:
    """`source` with IPython's line magics blanked (they are not Python); the ``%env`` lines
    before the first import of TensorFlow set their variables in `settings`."""
    lines = source.splitlines()
    started = False
    for number, line in enumerate(lines):
        text = line.strip()
        if not started and text.startswith(("import ", "from ")):
            started = any(starter in text.split("#")[0] for starter in STARTERS)
        if text.startswith(("%", "!")):
            if not started and text.startswith("%env "):
                name, value = _env_magic(text[len("%env ") :])
                if name.startswith(PREFIXES):
                    settings[name] = value
            lines[number] = ""
    return "\n".join(lines)


def _env_magic(argument: str) -> tuple[str, str]:
    """``NAME=VALUE`` or ``NAME VALUE``, as ``%env`` reads them."""
    argument = argument.strip()
    if "=" in argument:
        name, _, value = argument.partition("=")
    else:
        name, _, value = argument.partition(" ")
    return name.strip(), value.strip()


def _starts_tensorflow(statement: ast.stmt) -> bool:
    """Whether the statement imports TensorFlow or Keras, anywhere inside it."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and _dotted(node.func) in (
            "__import__",
            "importlib.import_module",
            "import_module",
        ):
            names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
            names = [n for n in names if isinstance(n, str)]
        else:
            continue
        if any(name.split(".")[0] in STARTERS for name in names):
            return True
    return False


def _settings_in(statement: ast.stmt) -> list[tuple[str, str, bool]]:
    """(name, value, only if unset) for each constant setting the statement makes itself (not
    one inside a condition, a loop or a function)."""
    found: list[tuple[str, str, bool]] = []
    if isinstance(statement, ast.Assign):
        for target in statement.targets:
            if (
                isinstance(target, ast.Subscript)
                and _is_environ(target.value)
                and _text(target.slice) is not None
                and _text(statement.value) is not None
            ):
                found.append((_text(target.slice) or "", _text(statement.value) or "", False))
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        function = call.func
        if not isinstance(function, ast.Attribute):
            return found
        texts = [_text(arg) for arg in call.args]
        if function.attr == "setdefault" and _is_environ(function.value) and len(texts) == 2:
            if texts[0] is not None and texts[1] is not None:
                found.append((texts[0], texts[1], True))
        elif function.attr == "putenv" and _dotted(function.value) == "os" and len(texts) == 2:
            if texts[0] is not None and texts[1] is not None:
                found.append((texts[0], texts[1], False))
        elif function.attr == "update" and _is_environ(function.value):
            found.extend(_update_settings(call))
    return found


def _update_settings(call: ast.Call) -> list[tuple[str, str, bool]]:
    found = []
    for keyword in call.keywords:
        value = _text(keyword.value)
        if keyword.arg is not None and value is not None:
            found.append((keyword.arg, value, False))
    for arg in call.args[:1]:
        if isinstance(arg, ast.Dict):
            for key, value in zip(arg.keys, arg.values, strict=True):
                name, text = _text(key) if key is not None else None, _text(value)
                if name is not None and text is not None:
                    found.append((name, text, False))
    return found


def _is_environ(node: ast.expr) -> bool:
    return _dotted(node) in ("os.environ", "environ")


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _text(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None
