"""Tensors kept in Python lists or running totals become plain numbers.

``losses.append(loss)`` inside a training loop keeps every step's loss tensor alive (on the
GPU, with its device memory), and ``total += loss`` chains a new tensor op per step. Appending
``float(loss)`` (or ``loss.numpy()`` for non-scalars) keeps host values instead.

What is rewritten: inside a loop, ``lst.append(v)`` and ``total += v`` where ``v`` is a name
the same loop body assigns from a call (``v = step(...)``, ``v, other = step(...)``).
With `names`, exactly those names, each in its mode ("float" → ``float(v)``, "numpy" →
``v.numpy()``). Without `names`, a heuristic, in "float" mode: names containing "loss"
assigned from the first or only value a call returns, except calls that already return host
values (Keras ``train_on_batch``/``test_on_batch``/``predict_on_batch``/``predict``/
``evaluate``/``fit``, ``float``/``int``, ``.numpy()``/``.item()``/``.tolist()``, NumPy
functions). ``float(v)`` needs a scalar; use "numpy" for anything else. In both cases a list or
total the cell later reads as a tensor (``total.numpy()``, ``losses[-1].numpy()``,
``[l.numpy() for l in losses]``) is left alone.
"""

from __future__ import annotations

import ast

import libcst as cst

from .common import (
    Aliases,
    Cell,
    aliases,
    dotted,
    enclosing_loops,
    method_name,
    replace,
    rewrite_cell,
    walk,
    walk_skipping_defs,
)

_HOST_METHODS = {
    "train_on_batch",
    "test_on_batch",
    "predict_on_batch",
    "predict",
    "evaluate",
    "fit",
    "numpy",
    "item",
    "tolist",
}
_MODES = ("float", "numpy")


def detach_appends(source: str, *, names: dict[str, str] | None = None) -> str | None:
    """Append/accumulate host values instead of tensors inside loops.

    `names` maps a variable to "float" or "numpy"; None applies the loss heuristic (see the
    module's documentation).
    """
    if names is not None and any(mode not in _MODES for mode in names.values()):
        raise ValueError(f"modes are {_MODES}, got {sorted(set(names.values()))}")
    return rewrite_cell(source, lambda cell: _rewrite(cell, names))


def _rewrite(cell: Cell, modes: dict[str, str] | None) -> cst.Module | None:
    names = aliases(cell.module)
    as_tensors = _read_as_tensors(cell.body)
    edits: dict[cst.CSTNode, object] = {}
    for node in walk(cell.module):
        kept = _kept_name(node)
        if kept is None or _container(node) in as_tensors:
            continue
        loops = enclosing_loops(cell, node)
        if not loops:
            continue
        call, first = _assigning_call(loops[0], kept.value)
        if call is None:
            continue
        if modes is not None:
            mode = modes.get(kept.value)
        else:
            mode = "float" if _looks_like_device_loss(names, kept.value, call, first) else None
        if mode is None:
            continue
        if mode == "float":
            new = cst.Call(func=cst.Name("float"), args=[cst.Arg(kept)])
        else:
            new = cst.Call(func=cst.Attribute(value=kept, attr=cst.Name("numpy")), args=[])
        edits[kept] = new
    return replace(cell.module, edits) if edits else None


def _container(node: cst.CSTNode) -> str | None:
    """The list appended to, or the total added to."""
    if isinstance(node, cst.Call):
        return dotted(node.func.value)
    return dotted(node.target) if isinstance(node, cst.AugAssign) else None


def _read_as_tensors(body: str) -> set[str]:
    """Names whose values (or elements) the cell later uses as tensors: ``.numpy()`` on
    ``total``, on ``losses[i]``, or on ``l`` of ``for l in losses`` / ``[... for l in losses]``.
    Detaching those would break that code.
    """
    tree = ast.parse(body)
    iterated: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.comprehension) and isinstance(node.iter, ast.Name):
            for target in ast.walk(node.target):
                if isinstance(target, ast.Name):
                    iterated[target.id] = node.iter.id
    found = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Attribute) and node.attr in ("numpy", "item", "shape", "dtype")
        ):
            continue
        value = node.value
        if isinstance(value, ast.Subscript):
            value = value.value
        if isinstance(value, ast.Name):
            found.add(value.id)
            if value.id in iterated:
                found.add(iterated[value.id])
    return found


def _kept_name(node: cst.CSTNode) -> cst.Name | None:
    """``v`` of ``lst.append(v)`` or ``total += v``."""
    if (
        isinstance(node, cst.Call)
        and method_name(node) == "append"
        and len(node.args) == 1
        and not node.args[0].star
        and node.args[0].keyword is None
        and isinstance(node.args[0].value, cst.Name)
    ):
        return node.args[0].value
    if (
        isinstance(node, cst.AugAssign)
        and isinstance(node.operator, cst.AddAssign)
        and isinstance(node.value, cst.Name)
    ):
        return node.value
    return None


def _assigning_call(loop: cst.CSTNode, name: str) -> tuple[cst.Call | None, bool]:
    """The call the loop body assigns `name` from, and whether `name` is its first value."""
    found: list[tuple[cst.Call, bool]] = []
    other = False
    for node in walk_skipping_defs(loop.body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                position = _position(target.target, name)
                if position is None:
                    continue
                if isinstance(node.value, cst.Call):
                    found.append((node.value, position == 0))
                else:
                    other = True
        elif (
            isinstance(node, cst.AugAssign | cst.AnnAssign | cst.NamedExpr)
            and _position(node.target, name) is not None
        ):
            other = True
    if len(found) != 1 or other:
        return None, False
    return found[0]


def _position(target: cst.CSTNode, name: str) -> int | None:
    """0 when `target` is `name`, its index in a tuple/list target, else None."""
    if isinstance(target, cst.Name):
        return 0 if target.value == name else None
    if isinstance(target, cst.Tuple | cst.List):
        for index, element in enumerate(target.elements):
            if isinstance(element.value, cst.Name) and element.value.value == name:
                return index
    return None


def _looks_like_device_loss(names: Aliases, name: str, call: cst.Call, first: bool) -> bool:
    if "loss" not in name.lower() or not first:
        return False
    if method_name(call) in _HOST_METHODS:
        return False
    callee = dotted(call.func)
    if callee in ("float", "int", "len", "sum", "round"):
        return False
    qualified = names.qualify(callee) or ""
    return not qualified.startswith("numpy")
