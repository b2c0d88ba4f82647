"""Hand-sliced NumPy batches become a tf.data pipeline.

Fixes a Python loop that cuts arrays into batches itself (``xb = x[i:i + bs]``), converts each
batch to a tensor and runs one step per batch: every step then waits for Python to slice and
copy. The rewrite builds ``tf.data.Dataset.from_tensor_slices((x, y)).batch(bs).prefetch(...)``
once and either trains with one ``model.fit(dataset, epochs=E)`` (when the loop only runs
``model.train_on_batch`` and records or prints its loss) or iterates the dataset in the user's
own loops (``for xb, yb in dataset: train_step(xb, yb)``).

Recognised: ``for i in range(0, len(x), bs)`` with ``x[i:i + bs]`` slices, and
``for i in range(steps)`` with ``x[i * bs:(i + 1) * bs]`` slices (also through ``start``/``end``
helper names and ``x[perm[...]]`` index arrays), possibly inside ``for epoch in range(E):``
with a per-epoch permutation (becomes ``.shuffle(len(x))``); conversions of a batch
(``tf.convert_to_tensor``, ``tf.constant``, ``tf.cast``, ``np.asarray``, ``.astype``) move onto
the whole array. Limits: ``range(0, n, bs)`` needs ``n`` to be the length of a sliced array;
``range(steps)`` with any other count keeps at most ``steps`` batches (``.take(steps)``); anything
else in the loop that uses the slice offset, the slices before conversion or the permutation
makes the rewrite give up (None). ``from_tensor_slices`` holds the arrays in memory as the
loop did; for arrays of several GB a generator or files are the better source.

`_analyse` reads the cell into a `_Plan` (nothing is edited); `_apply` writes the plan.
`_analyse` reads the cell into a `_Plan` (nothing is edited); `_apply` writes the plan.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    code_of,
    dotted,
    fresh_name,
    import_alias,
    loaded_names,
    loads_after,
    loop_at_line,
    loop_body,
    parse_expr,
    parse_stmt,
    remove,
    replace,
    rewrite_cell,
    small_statements,
    stored_names,
)

_CONVERSIONS = {"tensorflow.convert_to_tensor", "tensorflow.constant", "tensorflow.cast",
                "numpy.asarray", "numpy.array"}  # fmt: skip
_RANGE_FOR = m.For(target=m.Name(), iter=m.Call(func=m.Name("range")), orelse=None)
_BOUND = m.SaveMatchedNode(m.Slice(), "bound")
_PERMUTED = m.Subscript(m.SaveMatchedNode(m.Name(), "perm"), [m.SubscriptElement(_BOUND)])
# ``array[lo:up]`` or ``array[perm[lo:up]]``
_SLICED = m.Subscript(
    m.SaveMatchedNode(m.Name() | m.Attribute(), "array"),
    [m.SubscriptElement(_BOUND | m.Index(_PERMUTED))],
)
_ARRAY = m.SaveMatchedNode(m.DoNotCare(), "array")
_SHAPE0 = [m.SubscriptElement(m.Index(m.Integer("0")))]
_LENGTH = m.Call(m.Name("len"), [m.Arg(_ARRAY)]) | m.Subscript(
    m.Attribute(_ARRAY, m.Name("shape")), _SHAPE0
)
_ASTYPE = m.Call(func=m.Attribute(attr=m.Name("astype")))
_FIRST_POSITIONAL = m.Call(args=[m.Arg(keyword=None, star=""), m.ZeroOrMore()])
_ONE_NAME = [m.AssignTarget(m.Name())]
_TRAIN_ON_BATCH = m.Call(func=m.Attribute(attr=m.Name("train_on_batch")))
_TRAINS = m.Expr(_TRAIN_ON_BATCH) | m.Assign(_ONE_NAME, _TRAIN_ON_BATCH)
_EMPTY = m.List() | m.Integer() | m.Float()  # ``losses = []`` / ``total = 0`` resets a recorder
_ARITHMETIC = {cst.Add: operator.add, cst.Subtract: operator.sub, cst.Multiply: operator.mul}


def numpy_batches_to_dataset(source: str, *, loop_lineno: int | None = None) -> str | None:
    """Rewrite a loop over hand-sliced NumPy batches into a tf.data pipeline.

    `loop_lineno` (1-based line in `source`) picks the loop: the batch loop itself or the
    epoch loop around it. None when no such loop is recognised or the rewrite is unsafe.
    """
    return rewrite_cell(source, lambda cell: _rewrite(cell, loop_lineno))


@dataclass
class _Element:
    """One sliced array: ``target = array[lo:up]`` (or ``array[perm[lo:up]]``)."""

    target: str
    array: cst.BaseExpression
    perm: str | None
    bound: cst.Slice
    small: cst.CSTNode
    final: str  # the name the batch ends in after conversions
    conversion: cst.Call | None = None  # ``xb = tf.constant(x[i:i + bs])``
    source: cst.BaseExpression | None = None  # whole-array expression for from_tensor_slices
    shuffled: cst.BaseExpression | None = None  # the array shuffled anew every epoch


@dataclass
class _Shuffles:
    perms: set[str] = field(default_factory=set)  # index arrays permuted anew every epoch
    permuted: dict[str, cst.BaseExpression] = field(default_factory=dict)  # shuffled -> source
    removed: list[cst.CSTNode] = field(default_factory=list)  # statements that only shuffle
    other_stores: set[str] = field(default_factory=set)  # names the epoch body binds otherwise


@dataclass
class _Plan:
    inner: cst.For
    epoch: cst.For | None
    elements: list[_Element]
    batch_size: cst.BaseExpression
    drop_remainder: bool
    take: cst.BaseExpression | None
    removed: list[cst.CSTNode]  # small statements the loops lose
    enumerate_index: bool
    inline_conversions: dict[cst.Arg, str]  # ``conv(batch)`` arguments -> batch name
    fit: cst.Call | None = None  # train_on_batch, when the loops become one ``model.fit``


def _rewrite(cell: Cell, loop_lineno: int | None) -> cst.Module | None:
    names = aliases(cell.module)
    if loop_lineno is None:
        candidates = m.findall(cell.module, _RANGE_FOR)
    else:
        loop = loop_at_line(cell, loop_lineno)
        candidates = [] if loop is None else [loop, *loop_body(loop)]
    for loop in candidates:
        plan = _analyse(cell, names, loop) if m.matches(loop, _RANGE_FOR) else None
        if plan is not None:
            return _apply(cell, plan)
    return None


def _smalls(loop: cst.For) -> list[cst.CSTNode]:  # compound statements as they are
    return [small for st in loop_body(loop) for small in small_statements(st) or [st]]


def _eval(node: cst.BaseExpression, env: dict[str, int], helpers: dict, bs: cst.CSTNode) -> int:
    """Evaluate a bound for given offset and batch size; ValueError when not plain arithmetic."""
    if node.deep_equals(bs):
        return env["__bs"]
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.Name) and node.value in env:
        return env[node.value]
    if isinstance(node, cst.Name) and node.value in helpers:
        return _eval(helpers[node.value], env, helpers, bs)
    if m.matches(node, m.UnaryOperation(operator=m.Minus())):
        return -_eval(node.expression, env, helpers, bs)
    if isinstance(node, cst.BinaryOperation) and type(node.operator) in _ARITHMETIC:
        left, right = _eval(node.left, env, helpers, bs), _eval(node.right, env, helpers, bs)
        return _ARITHMETIC[type(node.operator)](left, right)
    raise ValueError(code_of(node))


def _bounds_match(
    bound: cst.Slice, index: str, helpers: dict, bs: cst.CSTNode, steps: bool
) -> bool:
    """Whether ``lo:up`` is the batch of offset `index` (``range(steps)``: of step `index`)."""
    if bound.step is not None or bound.lower is None or bound.upper is None:
        return False
    for i, size in itertools.product((0, 1, 3, 7), (2, 5, 16)):
        env = {index: i, "__bs": size}
        try:
            low, high = (_eval(b, env, helpers, bs) for b in (bound.lower, bound.upper))
        except (ValueError, KeyError):
            return False
        start = i * size if steps else i
        if (low, high) != (start, start + size):
            return False
    return True


def _factor_of_index(node: cst.CSTNode, index: str, helpers: dict) -> cst.BaseExpression | None:
    """``bs`` in a lower bound ``index * bs`` (directly or through a helper name)."""
    if isinstance(node, cst.Name) and node.value in helpers:
        return _factor_of_index(helpers[node.value], index, helpers)
    if m.matches(node, m.BinaryOperation(left=m.Name(index), operator=m.Multiply())):
        return node.right
    if m.matches(node, m.BinaryOperation(right=m.Name(index), operator=m.Multiply())):
        return node.left
    return None


def _is_arithmetic(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.BinaryOperation):
        return _is_arithmetic(node.left) and _is_arithmetic(node.right)
    if isinstance(node, cst.UnaryOperation):
        return _is_arithmetic(node.expression)
    return isinstance(node, cst.Name | cst.Integer | cst.Float)


def _converted(names: Aliases, value: cst.CSTNode) -> cst.BaseExpression | None:
    """``v`` of ``tf.constant(v)``, ``v.astype(...)`` and the like."""
    if m.matches(value, _ASTYPE):
        return value.func.value
    if m.matches(value, _FIRST_POSITIONAL) and names.qualify(dotted(value.func)) in _CONVERSIONS:
        return value.args[0].value
    return None


def _convert_source(conversion: cst.Call, source: cst.BaseExpression) -> cst.Call:
    """The same conversion applied to the whole array instead of one batch."""
    if m.matches(conversion, _ASTYPE):
        if not m.matches(source, m.Name() | m.Attribute() | m.Call() | m.Subscript()):
            source = source.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return conversion.with_changes(func=conversion.func.with_changes(value=source))
    first = conversion.args[0].with_changes(value=source)
    return conversion.with_changes(args=[first, *conversion.args[1:]])


def _pairs(small: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression]] | None:
    if not m.matches(small, m.Assign(targets=[m.AssignTarget()])):
        return None
    target, value = small.targets[0].target, small.value
    if isinstance(target, cst.Name):
        return [(target, value)]
    if m.matches(target, m.Tuple()) and m.matches(value, m.Tuple()):
        if len(target.elements) != len(value.elements):
            return None
        return [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]
    return None


def _slices(names: Aliases, small: cst.CSTNode) -> list[_Element] | None:
    """``xb = x[i:i + bs]``, ``xb, yb = x[...], y[...]``, ``xb = tf.constant(x[...])``."""
    pairs = _pairs(small)
    if m.matches(small, m.Assign(_ONE_NAME)):
        converted = _converted(names, small.value)
        if converted is not None and m.matches(converted, _SLICED):
            return [_element(pairs[0][0].value, converted, small, conversion=small.value)]
    if pairs is None or not all(m.matches(t, m.Name()) and m.matches(v, _SLICED) for t, v in pairs):
        return None
    return [_element(t.value, v, small) for t, v in pairs]


def _element(target: str, value: cst.BaseExpression, small: cst.CSTNode, **kw) -> _Element:
    parts = m.extract(value, _SLICED)
    perm = parts["perm"].value if "perm" in parts else None
    return _Element(target, parts["array"], perm, parts["bound"], small, target, **kw)


def _length_of(cell: Cell, expr: cst.CSTNode, arrays: set[str], depth: int = 0) -> bool:
    """Whether `expr` is the length of one of `arrays`: ``len(x)``, ``x.shape[0]``, a name."""
    length = m.extract(expr, _LENGTH)
    if length:
        return code_of(length["array"]) in arrays
    if isinstance(expr, cst.Name) and depth == 0:
        value = _single_assignment(cell, expr.value)
        return value is not None and _length_of(cell, value, arrays, depth + 1)
    return False


def _single_assignment(cell: Cell, name: str) -> cst.BaseExpression | None:  # bound only there
    values = m.findall(cell.module, m.Assign(targets=[m.AssignTarget(m.Name(name))]))
    return values[0].value if len(values) == 1 and cell.bindings(name) == 1 else None


def _steps_kind(cell: Cell, steps: cst.CSTNode, bs: cst.CSTNode, arrays: set[str]) -> str:
    """'floor' for ``len(x) // bs``, 'ceil' for its rounded-up forms, else 'other'."""
    if isinstance(steps, cst.Name):
        value = _single_assignment(cell, steps.value)
        return "other" if value is None else _steps_kind(cell, value, bs, arrays)
    is_bs, n = m.MatchIfTrue(bs.deep_equals), m.SaveMatchedNode(m.DoNotCare(), "n")
    floor = m.extract(steps, m.BinaryOperation(n, m.FloorDivide(), is_bs))
    if floor and _length_of(cell, floor["n"], arrays):
        return "floor"
    ceil = m.Call(
        m.Attribute(attr=m.Name("ceil")), [m.Arg(m.BinaryOperation(n, m.Divide(), is_bs))]
    )
    rounded_up = (  # (n + bs - 1) // bs, math.ceil(n / bs), int(np.ceil(n / bs))
        m.BinaryOperation(
            m.BinaryOperation(m.BinaryOperation(n, m.Add(), is_bs), m.Subtract(), m.Integer("1")),
            m.FloorDivide(),
            is_bs,
        )
        | ceil
        | m.Call(m.Name("int"), [m.Arg(ceil)])
    )
    found = m.extract(steps, rounded_up)
    return "ceil" if found and _length_of(cell, found["n"], arrays) else "other"


def _analyse(cell: Cell, names: Aliases, loop: cst.For) -> _Plan | None:
    index, range_args = loop.target.value, [a.value for a in loop.iter.args]
    steps_mode = len(range_args) == 1
    if any(a.keyword is not None or a.star for a in loop.iter.args) or not (
        steps_mode or (len(range_args) == 3 and m.matches(range_args[0], m.Integer("0")))
    ):
        return None

    # The loop body: slices, helpers the bounds are computed through, conversions, the rest.
    helpers, elements, conversions, others, removed = {}, [], [], [], []
    for small in _smalls(loop):
        sliced = _slices(names, small)
        if sliced is not None:
            elements += sliced
        elif m.matches(small, m.Assign(_ONE_NAME)) and m.matches(
            _converted(names, small.value), m.Name()
        ):
            conversions.append(small)  # ``xb = tf.constant(xb)``
        elif m.matches(small, m.Assign(_ONE_NAME, m.MatchIfTrue(_is_arithmetic))) and {
            n.value for n in m.findall(small.value, m.Name())
        } & {index, *helpers}:
            helpers[small.targets[0].target.value] = small.value  # ``start = i * bs``
            removed.append(small)
        else:
            others.append(small)
    targets = [e.target for e in elements]
    if not elements or len(set(targets)) != len(targets):
        return None

    # Batch size and slice bounds.
    batch_size = range_args[-1]
    if steps_mode:
        batch_size = _factor_of_index(elements[0].bound.lower, index, helpers)
    if batch_size is None or not all(
        _bounds_match(e.bound, index, helpers, batch_size, steps_mode) for e in elements
    ):
        return None

    # Where the batches come from: an epoch loop around may shuffle them.
    epoch = cell.parent(cell.parent(loop))
    epoch = epoch if m.matches(epoch, m.For(orelse=None)) else None
    shuffle = _shuffles(cell, epoch, loop) if epoch is not None else _Shuffles()
    if shuffle is None:
        return None
    for e in elements:
        array, e.source = code_of(e.array), e.array
        if e.perm in shuffle.perms:
            e.shuffled = e.array
        elif e.perm is not None:  # a fixed permutation: the permuted array, in that order
            e.source = parse_expr(f"{array}[{e.perm}]")
        elif array in shuffle.permuted:
            e.source = e.shuffled = shuffle.permuted[array]
    if len({e.shuffled is None for e in elements}) != 1:
        return None
    arrays = {code_of(e.array) for e in elements} | {code_of(e.source) for e in elements}
    for e in elements:
        e.source = e.source if e.conversion is None else _convert_source(e.conversion, e.source)

    # Batch count.
    drop_remainder, take = False, None
    if steps_mode:
        kind = _steps_kind(cell, range_args[0], batch_size, arrays)
        drop_remainder = kind == "floor"
        take = range_args[0] if kind == "other" else None
    elif not _length_of(cell, range_args[1], arrays):
        return None

    # Conversions of a batch move onto the whole array.
    by_final = {e.target: e for e in elements}
    removed += [e.small for e in elements]
    for small in conversions:
        of = _converted(names, small.value).value
        element = by_final.get(of)
        if element is None or element.final != of:
            others.append(small)
            continue
        element.source = _convert_source(small.value, element.source)
        element.final = small.targets[0].target.value
        removed.append(small)
        by_final[element.final] = element

    # What stays in the loop must not need what the rewrite takes away.
    gone = set(helpers) | {e.target for e in elements if e.final != e.target}
    gone |= {e.perm for e in elements if e.perm}
    kept_loads = set().union(*map(loaded_names, others))
    kept_stores = set().union(*map(stored_names, others))
    enumerate_index = index in kept_loads
    if not others or kept_loads & gone or (enumerate_index and not steps_mode):
        return None
    finals = {e.final for e in elements}
    read = [e.source for e in elements] + [batch_size] + ([take] if take is not None else [])
    sources_use = set().union(*map(loaded_names, read))
    if sources_use & (kept_stores | {index} | finals):
        return None
    if epoch is not None and sources_use & shuffle.other_stores:
        return None
    # Names the old loop left bound and that the cell reads afterwards.
    if loads_after(cell, gone | set(targets), loop) - finals:
        return None

    inline = _inline_conversions(names, others, elements)
    removed += shuffle.removed
    plan = _Plan(
        loop, epoch, elements, batch_size, drop_remainder, take, removed, enumerate_index, inline
    )
    plan.fit = _fit_form(cell, plan)
    return plan


def _shuffles(cell: Cell, epoch: cst.For, inner: cst.For) -> _Shuffles | None:
    """The per-epoch shuffling statements before `inner` in `epoch`'s body."""
    found, smalls = _Shuffles(), _smalls(epoch)
    found.removed = [s for s in smalls[: smalls.index(inner)] if _shuffle_statement(s, found)]
    kept = [s for s in smalls if s is not inner and s not in found.removed]
    found.other_stores = set().union(*map(stored_names, kept))
    found.other_stores.add(epoch.target.value if isinstance(epoch.target, cst.Name) else "")
    # Removing the shuffles is safe only when nothing else reads what they made.
    if any(loaded_names(small) & (found.perms | set(found.permuted)) for small in kept):
        return None
    made = found.perms | {k for k, v in found.permuted.items() if k != code_of(v)}
    return None if loads_after(cell, made, epoch) else found


def _shuffle_statement(small: cst.CSTNode, found: _Shuffles) -> bool:
    # np.random.shuffle(perm) / rng.shuffle(perm)
    if m.matches(small, m.Expr(m.Call(func=m.Attribute(attr=m.Name("shuffle")), args=[m.Arg()]))):
        perm = small.value.args[0].value
        if isinstance(perm, cst.Name):
            found.perms.add(perm.value)
        return isinstance(perm, cst.Name)
    # perm = np.random.permutation(n) / rng.permutation(n)
    if m.matches(small, m.Assign(_ONE_NAME, m.Call(m.Attribute(attr=m.Name("permutation"))))):
        found.perms.add(small.targets[0].target.value)
        return True
    # x, y = shuffle(x, y)   (sklearn.utils.shuffle and the like)
    shuffle = m.Call(
        m.Name("shuffle") | m.Attribute(attr=m.Name("shuffle")),
        [m.ZeroOrMore(m.Arg(m.Name(), keyword=None))],
    )
    tuple_of_names = m.Tuple([m.ZeroOrMore(m.Element(m.Name()))])
    if m.matches(small, m.Assign([m.AssignTarget(tuple_of_names)], shuffle)) and len(
        small.value.args
    ) == len(small.targets[0].target.elements):
        for t, a in zip(small.targets[0].target.elements, small.value.args, strict=True):
            found.permuted[t.value.value] = a.value
        return True
    # x_s = x[perm]  /  x, y = x[perm], y[perm]
    perm = m.Name(m.MatchIfTrue(found.perms.__contains__))
    by_perm = m.Subscript(m.Name(), [m.SubscriptElement(m.Index(perm))])
    pairs = _pairs(small)
    if pairs is None or not all(m.matches(t, m.Name()) and m.matches(v, by_perm) for t, v in pairs):
        return False
    found.permuted.update({t.value: v.value for t, v in pairs})
    return True


def _inline_conversions(
    names: Aliases, others: list[cst.CSTNode], elements: list[_Element]
) -> dict[cst.Arg, str]:
    """Call arguments ``conv(batch)`` in the kept statements: the conversion moves to the source.

    Only when that argument is the one use of the batch name in the loop.
    """
    finals = {e.final: e for e in elements}
    uses = [n.value for node in others for n in m.findall(node, m.Name())]
    moved: dict[cst.Arg, str] = {}
    for arg in (arg for node in others for arg in m.findall(node, m.Arg())):
        converted = _converted(names, arg.value)
        of = converted.value if isinstance(converted, cst.Name) else None
        if of in finals and uses.count(of) == 1:
            finals[of].source = _convert_source(arg.value, finals[of].source)
            moved[arg] = of
    return moved


def _fit_form(cell: Cell, plan: _Plan) -> cst.Call | None:
    """The train_on_batch call, when the loops only train on batches and log."""
    inner_kept = [s for s in _smalls(plan.inner) if s not in plan.removed and not _is_print(s)]
    step = [s for s in inner_kept if m.matches(s, _TRAINS)]
    if len(step) != 1 or plan.enumerate_index:
        return None
    call, result = step[0].value, _assigned_name(step[0])
    finals = [e.final for e in plan.elements]
    if len(call.args) != len(finals) or any(a.keyword is not None or a.star for a in call.args):
        return None
    order = [
        plan.inline_conversions.get(a) or (a.value.value if isinstance(a.value, cst.Name) else "")
        for a in call.args
    ]
    if not set(order) <= set(finals) or len(set(order)) != len(order):
        return None
    plan.elements.sort(key=lambda e: order.index(e.final))

    # Everything else only records or prints the loss.
    recorders = {_records(small, result) for small in inner_kept if small is not step[0]}
    if None in recorders:
        return None
    outer = plan.inner
    if plan.epoch is not None:
        outer = plan.epoch
        if not (m.matches(outer, _RANGE_FOR) and len(outer.iter.args) == 1):
            return None
        for small in _smalls(outer):
            if small in plan.removed or small is plan.inner or _is_print(small):
                continue
            if not (_assigned_name(small) in recorders and m.matches(small.value, _EMPTY)):
                return None
        if loads_after(cell, {outer.target.value}, outer):
            return None
    if m.findall(plan.inner, m.Break() | m.Continue()):
        return None
    if loads_after(cell, recorders | ({result} if result else set()) | set(finals), outer):
        return None
    return call


def _is_print(small: cst.CSTNode) -> bool:
    return m.matches(small, m.Expr(m.Call(func=m.Name("print"))))


def _assigned_name(small: cst.CSTNode) -> str | None:
    return small.targets[0].target.value if m.matches(small, m.Assign(_ONE_NAME)) else None


def _records(small: cst.CSTNode, result: str | None) -> str | None:
    """The list or total that `small` records the loss in (``losses.append(loss)``)."""
    if result is None:
        return None
    append = m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append")), args=[m.Arg()])
    if m.matches(small, m.Expr(append)) and result in loaded_names(small.value.args[0].value):
        return small.value.func.value.value
    if m.matches(small, m.AugAssign(target=m.Name())) and result in loaded_names(small.value):
        return small.target.value
    return None


def _apply(cell: Cell, plan: _Plan) -> cst.Module | None:
    module = cell.module
    dataset = fresh_name(module, ["dataset", "train_dataset", "train_ds"])
    found = import_alias(module, "tensorflow", "tf")
    if found is None:
        return None
    tf, missing_import = found
    # The dataset expression, one method per line inside parentheses.
    sources = [code_of(e.source) for e in plan.elements]
    tensors = sources[0] if len(sources) == 1 else "(" + ", ".join(sources) + ")"
    chain = [f"{tf}.data.Dataset.from_tensor_slices({tensors})"]
    if plan.elements[0].shuffled is not None:
        chain.append(f".shuffle(len({code_of(plan.elements[0].shuffled)}))")
    drop = ", drop_remainder=True" if plan.drop_remainder else ""
    chain.append(f".batch({code_of(plan.batch_size)}{drop})")
    if plan.take is not None:
        chain.append(f".take({code_of(plan.take)})")
    chain.append(f".prefetch({tf}.data.AUTOTUNE)")
    pipeline = "".join(f"    {part}\n" for part in chain)
    assign = parse_stmt(f"{dataset} = (\n{pipeline})\n")
    edits: dict[cst.CSTNode, object] = {}
    outer = plan.inner if plan.epoch is None else plan.epoch
    if plan.fit is not None:
        fit_call = code_of(plan.fit.func.with_changes(attr=cst.Name("fit")))
        epochs = "" if plan.epoch is None else f", epochs={code_of(plan.epoch.iter.args[0].value)}"
        fit = parse_stmt(f"{fit_call}({dataset}{epochs})\n")
        assign = assign.with_changes(leading_lines=outer.leading_lines)
        edits[outer] = cst.FlattenSentinel([assign, fit])
    else:
        target = ", ".join(e.final for e in plan.elements)
        if plan.enumerate_index:
            target = f"({target})" if len(plan.elements) > 1 else target
            header = f"for {plan.inner.target.value}, {target} in enumerate({dataset}):\n    pass\n"
        else:
            header = f"for {target} in {dataset}:\n    pass\n"
        template = parse_stmt(header)
        remove(edits, plan.removed)
        for arg, name in plan.inline_conversions.items():
            edits[arg] = lambda node, name=name: node.with_changes(value=cst.Name(name))
        edits[plan.inner] = lambda node: node.with_changes(
            target=template.target, iter=template.iter
        )
        edits[outer] = _dataset_before(edits.get(outer), assign)
    module = replace(module, edits)
    return add_import(module, "tensorflow", tf) if missing_import else module


def _dataset_before(previous, assign: cst.BaseStatement):
    """An edit putting `assign` before the loop, with the loop's comments above it (or its
    blank lines, when there are no comments)."""

    def edit(node):
        node = previous(node) if previous is not None else node
        lines = list(node.leading_lines)
        blank = next((k for k, line in enumerate(lines) if line.comment is not None), len(lines))
        first = assign.with_changes(leading_lines=lines[blank:] or lines)
        return cst.FlattenSentinel([first, node.with_changes(leading_lines=[])])

    return edit
