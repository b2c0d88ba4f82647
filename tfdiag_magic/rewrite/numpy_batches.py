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
    insert_before,
    loaded_names,
    loads_after,
    loop_at_line,
    loop_body,
    parse_expr,
    parse_stmt,
    remove,
    replace,
    rewrite_cell,
    stored_names,
)

_CONVERSIONS = {
    "tensorflow.convert_to_tensor",
    "tensorflow.constant",
    "tensorflow.cast",
    "numpy.asarray",
    "numpy.array",
}

_RANGE_FOR = m.For(target=m.Name(), iter=m.Call(func=m.Name("range")), orelse=None)
# ``array[lo:up]`` or ``array[perm[lo:up]]``
_SLICED = m.Subscript(
    value=m.SaveMatchedNode(m.Name() | m.Attribute(), "array"),
    slice=[
        m.SubscriptElement(
            m.SaveMatchedNode(m.Slice(), "bound")
            | m.Index(
                m.Subscript(
                    value=m.SaveMatchedNode(m.Name(), "perm"),
                    slice=[m.SubscriptElement(m.SaveMatchedNode(m.Slice(), "bound"))],
                )
            )
        )
    ],
)
_ASTYPE = m.Call(func=m.Attribute(attr=m.Name("astype")))
_FIRST_POSITIONAL = m.Call(args=[m.Arg(keyword=None, star=""), m.ZeroOrMore()])
_TRAIN_ON_BATCH = m.Call(func=m.Attribute(attr=m.Name("train_on_batch")))
_ONE_NAME = [m.AssignTarget(m.Name())]
_ARITHMETIC = {cst.Add: operator.add, cst.Subtract: operator.sub, cst.Multiply: operator.mul}


def numpy_batches_to_dataset(source: str, *, loop_lineno: int | None = None) -> str | None:
    """Rewrite a loop over hand-sliced NumPy batches into a tf.data pipeline.

    `loop_lineno` (1-based line in `source`) picks the loop: the batch loop itself or the
    epoch loop around it. None when no such loop is recognised or the rewrite is unsafe.
    """
    return rewrite_cell(source, lambda cell: _rewrite(cell, loop_lineno))


# --- the plan ------------------------------------------------------------------------------------


@dataclass
class _Element:
    """One sliced array: ``target = array[lo:up]`` (or ``array[perm[lo:up]]``)."""

    target: str
    array: cst.BaseExpression
    perm: str | None
    bound: cst.Slice
    small: cst.CSTNode
    conversion: cst.Call | None = None  # ``xb = tf.constant(x[i:i + bs])``
    final: str = ""  # the name the batch ends in after conversions
    source: cst.BaseExpression | None = None  # whole-array expression for from_tensor_slices
    shuffled: cst.BaseExpression | None = None  # the array shuffled anew every epoch


@dataclass
class _Helper:
    """``start = i * bs``: a name the slice bounds are computed through."""

    name: str
    value: cst.BaseExpression


@dataclass
class _Conversion:
    """``xb = tf.constant(xb)``: a conversion of the batch `of`, bound to `target`."""

    small: cst.Assign
    target: str
    of: str


@dataclass
class _Fit:
    """The loops become ``outer`` -> ``model.fit(dataset, epochs=epochs)``."""

    outer: cst.For
    call: cst.Call  # the train_on_batch call
    epochs: cst.BaseExpression | None


@dataclass
class _Shuffles:
    perms: set[str] = field(default_factory=set)  # index arrays permuted anew every epoch
    permuted: dict[str, cst.BaseExpression] = field(default_factory=dict)  # shuffled -> source
    removed: set[int] = field(default_factory=set)  # small statements that only shuffle
    other_stores: set[str] = field(default_factory=set)  # names the epoch body binds otherwise


@dataclass
class _Plan:
    inner: cst.For
    epoch: cst.For | None
    elements: list[_Element]
    batch_size: cst.BaseExpression
    drop_remainder: bool
    take: cst.BaseExpression | None
    removed: set[int]  # ids of small statements removed from the inner loop
    epoch_removed: set[int] = field(default_factory=set)
    enumerate_index: bool = False
    # Call arguments ``conv(batch)`` whose conversion moved onto the source: arg -> batch name.
    inline_conversions: list[tuple[cst.Arg, str]] = field(default_factory=list)
    fit: _Fit | None = None


def _rewrite(cell: Cell, loop_lineno: int | None) -> cst.Module | None:
    names = aliases(cell.module)
    for loop in _candidates(cell, loop_lineno):
        plan = _analyse(cell, names, loop)
        if plan is not None:
            return _apply(cell, plan)
    return None


def _candidates(cell: Cell, loop_lineno: int | None) -> list[cst.For]:
    if loop_lineno is None:
        return m.findall(cell.module, _RANGE_FOR)
    loop = loop_at_line(cell, loop_lineno)
    if loop is None:
        return []
    return [s for s in [loop, *loop_body(loop)] if m.matches(s, _RANGE_FOR)]


# --- integer arithmetic on the slice bounds ------------------------------------------------------


def _eval(node: cst.BaseExpression, env: dict[str, int], helpers: dict, bs: cst.CSTNode) -> int:
    """Evaluate a bound for given offset and batch size; ValueError when not plain arithmetic."""
    if node.deep_equals(bs):
        return env["__bs"]
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.Name):
        if node.value in env:
            return env[node.value]
        if node.value in helpers:
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


# --- analysis ------------------------------------------------------------------------------------


def _converted(names: Aliases, value: cst.CSTNode) -> cst.BaseExpression | None:
    """What `value` converts, when it is a conversion (``tf.constant(v)``, ``v.astype(...)``)."""
    if m.matches(value, _ASTYPE):
        return value.func.value
    if m.matches(value, _FIRST_POSITIONAL) and names.qualify(dotted(value.func)) in _CONVERSIONS:
        return value.args[0].value
    return None


def _conversion_of(names: Aliases, value: cst.CSTNode) -> str | None:
    """The batch name that `value` converts (``tf.constant(xb)``, ``xb.astype(...)``)."""
    converted = _converted(names, value)
    return converted.value if isinstance(converted, cst.Name) else None


def _convert_source(conversion: cst.Call, source: cst.BaseExpression) -> cst.Call:
    """The same conversion applied to the whole array instead of one batch."""
    if m.matches(conversion, _ASTYPE):
        if not m.matches(source, m.Name() | m.Attribute() | m.Call() | m.Subscript()):
            source = source.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return conversion.with_changes(func=conversion.func.with_changes(value=source))
    first = conversion.args[0].with_changes(value=source)
    return conversion.with_changes(args=[first, *conversion.args[1:]])


def _classify(
    names: Aliases, small: cst.CSTNode, index: str, helpers: dict
) -> list[_Element] | _Helper | _Conversion | None:
    """What a small statement of the batch loop is: slices, a bound helper, a conversion."""
    if not m.matches(small, m.Assign(targets=[m.AssignTarget()])):
        return None
    target, value = small.targets[0].target, small.value
    if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple):
        pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=False)]
        if len(target.elements) != len(value.elements):
            return None
    elif isinstance(target, cst.Name):
        pairs = [(target, value)]
        converted = _converted(names, value)
        if converted is not None and m.extract(converted, _SLICED):
            return [_element(target.value, converted, small, conversion=value)]
        of = _conversion_of(names, value)
        if of is not None:
            return _Conversion(small, target.value, of)
        used = {n.value for n in m.findall(value, m.Name())}
        if not m.extract(value, _SLICED):
            if _is_arithmetic(value) and (index in used or used & set(helpers)):
                return _Helper(target.value, value)
            return None
    else:
        return None
    if not all(isinstance(t, cst.Name) and m.extract(v, _SLICED) for t, v in pairs):
        return None
    return [_element(t.value, v, small) for t, v in pairs]


def _element(target: str, value: cst.BaseExpression, small: cst.CSTNode, **kw) -> _Element:
    parts = m.extract(value, _SLICED)
    return _Element(target, parts["array"], _perm(parts), parts["bound"], small, **kw)


def _perm(parts: dict) -> str | None:
    return parts["perm"].value if "perm" in parts else None


def _length_of(cell: Cell, expr: cst.CSTNode, arrays: set[str], depth: int = 0) -> bool:
    """Whether `expr` is the length of one of `arrays`: ``len(x)``, ``x.shape[0]``, a name."""
    if m.matches(expr, m.Call(func=m.Name("len"), args=[m.Arg()])):
        return code_of(expr.args[0].value) in arrays
    shape0 = m.Subscript(
        value=m.Attribute(attr=m.Name("shape")), slice=[m.SubscriptElement(m.Index(m.Integer("0")))]
    )
    if m.matches(expr, shape0):
        return code_of(expr.value.value) in arrays
    if isinstance(expr, cst.Name) and depth == 0:
        value = _single_assignment(cell, expr.value)
        return value is not None and _length_of(cell, value, arrays, depth + 1)
    return False


def _single_assignment(cell: Cell, name: str) -> cst.BaseExpression | None:
    """The value of `name` when the cell binds it exactly once, by a plain assignment."""
    values = m.findall(cell.module, m.Assign(targets=[m.AssignTarget(m.Name(name))]))
    return values[0].value if len(values) == 1 and cell.bindings(name) == 1 else None


def _steps_kind(cell: Cell, steps: cst.CSTNode, bs: cst.CSTNode, arrays: set[str]) -> str:
    """'floor' for ``len(x) // bs``, 'ceil' for its rounded-up forms, else 'other'."""
    is_bs = m.MatchIfTrue(bs.deep_equals)
    if isinstance(steps, cst.Name):
        value = _single_assignment(cell, steps.value)
        return "other" if value is None else _steps_kind(cell, value, bs, arrays)
    if m.matches(steps, m.BinaryOperation(operator=m.FloorDivide(), right=is_bs)):
        if _length_of(cell, steps.left, arrays):
            return "floor"
        # (n + bs - 1) // bs
        minus_one = m.BinaryOperation(
            left=m.BinaryOperation(operator=m.Add(), right=is_bs),
            operator=m.Subtract(),
            right=m.Integer("1"),
        )
        if m.matches(steps.left, minus_one) and _length_of(cell, steps.left.left.left, arrays):
            return "ceil"
    # math.ceil(n / bs), int(np.ceil(n / bs))
    if m.matches(steps, m.Call(func=m.Name("int"), args=[m.Arg()])):
        steps = steps.args[0].value
    ceil = m.Call(
        func=m.Attribute(attr=m.Name("ceil")),
        args=[m.Arg(m.BinaryOperation(operator=m.Divide(), right=is_bs))],
    )
    if m.matches(steps, ceil) and _length_of(cell, steps.args[0].value.left, arrays):
        return "ceil"
    return "other"


def _analyse(cell: Cell, names: Aliases, loop: cst.For) -> _Plan | None:
    index = loop.target.value
    range_args = [a.value for a in loop.iter.args]
    if any(a.keyword is not None or a.star for a in loop.iter.args):
        return None
    if len(range_args) == 3 and m.matches(range_args[0], m.Integer("0")):
        steps_mode = False
    elif len(range_args) == 1:
        steps_mode = True
    else:
        return None

    # Classify the loop body's small statements.
    helpers: dict[str, cst.BaseExpression] = {}
    elements: list[_Element] = []
    conversions: list[_Conversion] = []
    others: list[cst.CSTNode] = []
    removed: set[int] = set()
    for statement in loop_body(loop):
        smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
        for small in smalls:
            match _classify(names, small, index, helpers):
                case None:
                    others.append(small)
                case _Helper(name=name, value=value):
                    helpers[name] = value
                    removed.add(id(small))
                case _Conversion() as conversion:
                    conversions.append(conversion)
                case list() as sliced:
                    elements += sliced
    targets = [e.target for e in elements]
    if not elements or len(set(targets)) != len(targets):
        return None

    # Batch size and slice bounds.
    if steps_mode:
        lower = elements[0].bound.lower
        batch_size = _factor_of_index(lower, index, helpers) if lower is not None else None
        if batch_size is None:
            return None
    else:
        batch_size = range_args[2]
    if not all(_bounds_match(e.bound, index, helpers, batch_size, steps_mode) for e in elements):
        return None

    # Where the batches come from: an epoch loop around may shuffle them.
    epoch = _epoch_loop(cell, loop)
    shuffle = _shuffles(cell, epoch, loop) if epoch is not None else _Shuffles()
    if shuffle is None:
        return None
    for element in elements:
        array_name = code_of(element.array)
        if element.perm is not None:
            if element.perm in shuffle.perms:
                element.source = element.shuffled = element.array
            else:
                # A fixed permutation: the permuted array, in that order.
                element.source = parse_expr(f"{array_name}[{element.perm}]")
        elif array_name in shuffle.permuted:
            element.source = element.shuffled = shuffle.permuted[array_name]
        else:
            element.source = element.array
    if len({e.shuffled is None for e in elements}) != 1:
        return None
    arrays = {code_of(e.array) for e in elements} | {code_of(e.source) for e in elements}
    for element in elements:
        if element.conversion is not None:
            element.source = _convert_source(element.conversion, element.source)

    # Batch count.
    drop_remainder, take = False, None
    if steps_mode:
        kind = _steps_kind(cell, range_args[0], batch_size, arrays)
        drop_remainder = kind == "floor"
        take = range_args[0] if kind == "other" else None
    elif not _length_of(cell, range_args[1], arrays):
        return None

    # Conversions of a batch move onto the whole array.
    by_target = {e.target: e for e in elements}
    removed |= {id(e.small) for e in elements}
    for element in elements:
        element.final = element.target
    for conversion in conversions:
        element = by_target.get(conversion.of)
        if element is None or element.final != conversion.of:
            others.append(conversion.small)
            continue
        element.source = _convert_source(conversion.small.value, element.source)
        element.final = conversion.target
        removed.add(id(conversion.small))
        by_target[conversion.target] = element

    # What stays in the loop must not need what the rewrite takes away.
    gone = set(helpers) | {e.target for e in elements if e.final != e.target}
    gone |= {e.perm for e in elements if e.perm}
    kept_loads = set().union(*(loaded_names(node) for node in others))
    kept_stores = set().union(*(stored_names(node) for node in others))
    if not others or kept_loads & gone:
        return None
    enumerate_index = index in kept_loads
    if enumerate_index and not steps_mode:
        return None
    finals = {e.final for e in elements}
    read = [e.source for e in elements] + [batch_size] + ([take] if take is not None else [])
    sources_use = set().union(*(loaded_names(node) for node in read))
    if sources_use & (kept_stores | {index} | finals):
        return None
    if epoch is not None and sources_use & shuffle.other_stores:
        return None
    # Names the old loop left bound and that the cell reads afterwards.
    if loads_after(cell, gone | set(targets), loop) - finals:
        return None

    plan = _Plan(
        inner=loop,
        epoch=epoch,
        elements=elements,
        batch_size=batch_size,
        drop_remainder=drop_remainder,
        take=take,
        removed=removed,
        epoch_removed=shuffle.removed,
        enumerate_index=enumerate_index,
    )
    plan.inline_conversions = _inline_conversions(names, others, elements)
    plan.fit = _fit_form(cell, plan)
    return plan


def _epoch_loop(cell: Cell, loop: cst.For) -> cst.For | None:
    block = cell.parent(loop)
    owner = cell.parent(block) if block is not None else None
    if isinstance(owner, cst.For) and owner.orelse is None and owner.body is block:
        return owner
    return None


def _shuffles(cell: Cell, epoch: cst.For, inner: cst.For) -> _Shuffles | None:
    """The per-epoch shuffling statements before `inner` in `epoch`'s body."""
    found = _Shuffles()
    before = True
    kept: list[cst.CSTNode] = []
    for statement in loop_body(epoch):
        if statement is inner:
            before = False
            continue
        smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
        for small in smalls:
            if before and _shuffle_statement(small, found):
                found.removed.add(id(small))
            else:
                kept.append(small)
    found.other_stores = set().union(*(stored_names(small) for small in kept))
    found.other_stores.add(epoch.target.value if isinstance(epoch.target, cst.Name) else "")
    # Removing the shuffles is safe only when nothing else reads what they made.
    if any(loaded_names(small) & (found.perms | set(found.permuted)) for small in kept):
        return None
    made = found.perms | {k for k, v in found.permuted.items() if k != code_of(v)}
    if loads_after(cell, made, epoch):
        return None
    return found


def _shuffle_statement(small: cst.CSTNode, found: _Shuffles) -> bool:
    shuffle = m.Name("shuffle") | m.Attribute(attr=m.Name("shuffle"))
    # np.random.shuffle(perm) / rng.shuffle(perm)
    if m.matches(small, m.Expr(m.Call(func=m.Attribute(attr=m.Name("shuffle")), args=[m.Arg()]))):
        if isinstance(small.value.args[0].value, cst.Name):
            found.perms.add(small.value.args[0].value.value)
            return True
        return False
    if not m.matches(small, m.Assign(targets=[m.AssignTarget()])):
        return False
    target, value = small.targets[0].target, small.value
    # perm = np.random.permutation(n) / rng.permutation(n)
    if m.matches(small, m.Assign(_ONE_NAME, m.Call(m.Attribute(attr=m.Name("permutation"))))):
        found.perms.add(target.value)
        return True
    # x, y = shuffle(x, y)   (sklearn.utils.shuffle and the like)
    if m.matches(
        small,
        m.Assign(
            [m.AssignTarget(m.Tuple([m.ZeroOrMore(m.Element(m.Name()))]))],
            m.Call(func=shuffle, args=[m.ZeroOrMore(m.Arg(m.Name(), keyword=None))]),
        ),
    ) and len(value.args) == len(target.elements):
        for t, a in zip(target.elements, value.args, strict=True):
            found.permuted[t.value.value] = a.value
        return True
    # x_s = x[perm]  /  x, y = x[perm], y[perm]
    if isinstance(target, cst.Name):
        pairs = [(target, value)]
    elif isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple):
        if len(target.elements) != len(value.elements):
            return False
        pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]
    else:
        return False
    by_perm = m.Subscript(
        value=m.Name(),
        slice=[m.SubscriptElement(m.Index(m.Name(m.MatchIfTrue(found.perms.__contains__))))],
    )
    if not all(isinstance(t, cst.Name) and m.matches(v, by_perm) for t, v in pairs):
        return False
    for t, v in pairs:
        found.permuted[t.value] = v.value
    return True


def _inline_conversions(
    names: Aliases, others: list[cst.CSTNode], elements: list[_Element]
) -> list[tuple[cst.Arg, str]]:
    """Call arguments ``conv(batch)`` in the kept statements: the conversion moves to the source.

    Only when that argument is the one use of the batch name in the loop.
    """
    finals = {e.final: e for e in elements}
    uses = [n.value for node in others for n in m.findall(node, m.Name())]
    moved: list[tuple[cst.Arg, str]] = []
    for node in others:
        for arg in m.findall(node, m.Arg()):
            of = _conversion_of(names, arg.value)
            if of in finals and uses.count(of) == 1 and of not in [name for _, name in moved]:
                element = finals[of]
                element.source = _convert_source(arg.value, element.source)
                moved.append((arg, of))
    return moved


def _fit_form(cell: Cell, plan: _Plan) -> _Fit | None:
    """How the loops become one ``model.fit``, when they only train on batches and log."""
    inner_kept = [s for s in _kept_smalls(plan.inner, plan.removed) if not _is_print(s)]
    step = [s for s in inner_kept if _train_on_batch(s) is not None]
    if len(step) != 1 or plan.enumerate_index:
        return None
    call = _train_on_batch(step[0])
    result = _assigned_name(step[0])
    finals = [e.final for e in plan.elements]
    args = call.args
    if len(args) != len(finals) or any(a.keyword is not None or a.star for a in args):
        return None
    order = []
    converted = {id(arg): name for arg, name in plan.inline_conversions}
    for arg in args:
        if id(arg) in converted:
            order.append(converted[id(arg)])
        elif isinstance(arg.value, cst.Name) and arg.value.value in finals:
            order.append(arg.value.value)
        else:
            return None
    if len(set(order)) != len(order):
        return None
    plan.elements.sort(key=lambda e: order.index(e.final))

    # Everything else only records or prints the loss.
    recorders: set[str] = set()
    for small in inner_kept:
        if small is step[0]:
            continue
        name = _records(small, result)
        if name is None:
            return None
        recorders.add(name)
    outer: cst.For = plan.inner
    epochs = None
    if plan.epoch is not None:
        epoch = plan.epoch
        if not (m.matches(epoch, _RANGE_FOR) and len(epoch.iter.args) == 1):
            return None
        for small in _kept_smalls(epoch, plan.epoch_removed):
            if small is not plan.inner and not _is_print(small) and not _is_reset(small, recorders):
                return None
        epochs = epoch.iter.args[0].value
        outer = epoch
        if loads_after(cell, {epoch.target.value}, epoch):
            return None
    if m.findall(plan.inner, m.Break() | m.Continue()):
        return None
    dropped = recorders | ({result} if result else set()) | set(finals)
    if loads_after(cell, dropped, outer):
        return None
    return _Fit(outer, call, epochs)


def _kept_smalls(loop: cst.For, removed: set[int]) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    for statement in loop_body(loop):
        if isinstance(statement, cst.SimpleStatementLine):
            out += [s for s in statement.body if id(s) not in removed]
        else:
            out.append(statement)
    return out


def _is_print(small: cst.CSTNode) -> bool:
    return m.matches(small, m.Expr(m.Call(func=m.Name("print"))))


def _train_on_batch(small: cst.CSTNode) -> cst.Call | None:
    if m.matches(small, m.Expr(_TRAIN_ON_BATCH) | m.Assign(_ONE_NAME, _TRAIN_ON_BATCH)):
        return small.value
    return None


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


def _is_reset(small: cst.CSTNode, recorders: set[str]) -> bool:
    """``losses = []`` / ``total = 0`` for one of the loss recorders."""
    return _assigned_name(small) in recorders and m.matches(
        small.value, m.List() | m.Integer() | m.Float()
    )


# --- building the result -------------------------------------------------------------------------


def _pipeline(tf: str, plan: _Plan) -> str:
    """The dataset expression, one method per line inside parentheses."""
    sources = [code_of(e.source) for e in plan.elements]
    tensors = sources[0] if len(sources) == 1 else "(" + ", ".join(sources) + ")"
    chain = [f"{tf}.data.Dataset.from_tensor_slices({tensors})"]
    if plan.elements[0].shuffled is not None:
        chain.append(f".shuffle(len({code_of(plan.elements[0].shuffled)}))")
    batch = code_of(plan.batch_size)
    chain.append(
        f".batch({batch}, drop_remainder=True)" if plan.drop_remainder else f".batch({batch})"
    )
    if plan.take is not None:
        chain.append(f".take({code_of(plan.take)})")
    chain.append(f".prefetch({tf}.data.AUTOTUNE)")
    return "(\n" + "".join(f"    {part}\n" for part in chain) + ")"


def _apply(cell: Cell, plan: _Plan) -> cst.Module | None:
    module = cell.module
    dataset = fresh_name(module, ["dataset", "train_dataset", "train_ds"])
    found = import_alias(module, "tensorflow", "tf")
    if found is None:
        return None
    tf, missing_import = found
    pipeline = _pipeline(tf, plan)
    edits: dict[cst.CSTNode, object] = {}
    if plan.fit is not None:
        outer, call, epochs = plan.fit.outer, plan.fit.call, plan.fit.epochs
        fit_call = code_of(call.func.with_changes(attr=cst.Name("fit")))
        epochs_arg = f", epochs={code_of(epochs)}" if epochs is not None else ""
        new = [
            parse_stmt(f"{dataset} = {pipeline}\n").with_changes(leading_lines=outer.leading_lines),
            parse_stmt(f"{fit_call}({dataset}{epochs_arg})\n"),
        ]
        edits[outer] = cst.FlattenSentinel(new)
    else:
        target = ", ".join(e.final for e in plan.elements)
        if plan.enumerate_index:
            target = f"({target})" if len(plan.elements) > 1 else target
            header = f"for {plan.inner.target.value}, {target} in enumerate({dataset}):\n    pass\n"
        else:
            header = f"for {target} in {dataset}:\n    pass\n"
        template = parse_stmt(header)
        edits[plan.inner] = lambda node: node.with_changes(
            target=template.target, iter=template.iter
        )
        remove(edits, _smalls_by_id(plan.inner, plan.removed))
        for arg, name in plan.inline_conversions:
            edits[arg] = lambda node, name=name: node.with_changes(value=cst.Name(name))
        outer = plan.inner
        if plan.epoch is not None:
            outer = plan.epoch
            remove(edits, _smalls_by_id(plan.epoch, plan.epoch_removed))
        insert_before(edits, outer, [parse_stmt(f"{dataset} = {pipeline}\n")])
        _move_comments(edits, outer)
    module = replace(module, edits)
    return add_import(module, "tensorflow", tf) if missing_import else module


def _smalls_by_id(loop: cst.For, ids: set[int]) -> list[cst.CSTNode]:
    """The small statements (or compound ones) of `loop`'s body whose id is in `ids`."""
    found = []
    for statement in loop_body(loop):
        if id(statement) in ids:
            found.append(statement)
        elif isinstance(statement, cst.SimpleStatementLine):
            found += [s for s in statement.body if id(s) in ids]
    return found


def _move_comments(edits: dict[cst.CSTNode, object], outer: cst.CSTNode) -> None:
    """Comments above the loop stay above the code that now starts there (the dataset line)."""
    previous = edits[outer]

    def edit(node):
        result = previous(node)
        nodes = list(result.nodes)
        loop = nodes[-1]
        if loop.leading_lines:
            nodes[0] = nodes[0].with_changes(leading_lines=loop.leading_lines)
            nodes[-1] = loop.with_changes(leading_lines=[])
        return cst.FlattenSentinel(nodes)

    edits[outer] = edit
