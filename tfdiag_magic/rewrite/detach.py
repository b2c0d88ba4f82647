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

import libcst as cst
import libcst.matchers as m

from .common import (
    Aliases,
    Cell,
    aliases,
    dotted,
    enclosing_loops,
    method_name,
    replace,
    rewrite_cell,
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


_KEPT = m.Call(
    m.Attribute(m.SaveMatchedNode(m.DoNotCare(), "container"), m.Name("append")),
    [m.Arg(m.SaveMatchedNode(m.Name(), "kept"), keyword=None, star="")],
) | m.AugAssign(
    m.SaveMatchedNode(m.DoNotCare(), "container"),
    m.AddAssign(),
    m.SaveMatchedNode(m.Name(), "kept"),
)


def _rewrite(cell: Cell, modes: dict[str, str] | None) -> cst.Module | None:
    names = aliases(cell.module)
    as_tensors = _read_as_tensors(cell.module)
    edits: dict[cst.CSTNode, object] = {}
    for found in m.extractall(cell.module, _KEPT):
        kept = found["kept"]
        loops = enclosing_loops(cell, kept)
        if dotted(found["container"]) in as_tensors or not loops:
            continue
        call, first = _assigning_call(loops[0], kept.value)
        if call is None:
            continue
        if modes is not None:
            mode = modes.get(kept.value)
        else:
            mode = "float" if _looks_like_device_loss(names, kept.value, call, first) else None
        if mode == "float":
            edits[kept] = cst.Call(cst.Name("float"), [cst.Arg(kept)])
        elif mode == "numpy":
            edits[kept] = cst.Call(cst.Attribute(kept, cst.Name("numpy")))
    return replace(cell.module, edits) if edits else None


def _read_as_tensors(module: cst.Module) -> set[str]:
    """Names whose values (or elements) the cell later uses as tensors: ``.numpy()`` on
    ``total``, on ``losses[i]``, or on ``l`` of ``for l in losses`` / ``[... for l in losses]``.
    Detaching those would break that code.
    """
    iterated: dict[str, set[str]] = {}
    for loop in m.findall(
        module, m.For(iter=m.Name(), asynchronous=None) | m.CompFor(iter=m.Name())
    ):
        for target in m.findall(loop.target, m.Name()):
            iterated.setdefault(target.value, set()).add(loop.iter.value)
    used = m.Name("numpy") | m.Name("item") | m.Name("shape") | m.Name("dtype")
    found = set()
    for node in m.findall(module, m.Attribute(m.Name() | m.Subscript(m.Name()), attr=used)):
        name = m.findall(node.value, m.Name())[0].value  # ``a`` of ``a`` or ``a[...]``
        found |= {name, *iterated.get(name, ())}
    return found


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
    many = m.matches(target, m.Tuple() | m.List())
    elements = [e.value for e in target.elements] if many else [target]
    return next((i for i, e in enumerate(elements) if m.matches(e, m.Name(name))), None)


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
