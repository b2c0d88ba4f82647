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
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field

import libcst as cst

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    code_of,
    dotted,
    expr_ast,
    fresh_name,
    import_alias,
    insert_before,
    loaded_names,
    loads_after,
    loop_at_line,
    loop_body,
    parse_expr,
    parse_stmt,
    positional_args,
    remove,
    replace,
    rewrite_cell,
    stored_names,
    walk,
)

_CONVERSIONS = {
    "tensorflow.convert_to_tensor",
    "tensorflow.constant",
    "tensorflow.cast",
    "numpy.asarray",
    "numpy.array",
}


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
    small: cst.CSTNode
    conversion: cst.Call | None = None  # ``xb = tf.constant(x[i:i + bs])``
    final: str = ""  # the name the batch ends in after conversions
    source: cst.BaseExpression | None = None  # whole-array expression for from_tensor_slices
    shuffled: bool = False


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


def _rewrite(cell: Cell, loop_lineno: int | None) -> cst.Module | None:
    names = aliases(cell.module)
    for loop in _candidates(cell, loop_lineno):
        plan = _analyse(cell, names, loop)
        if plan is not None:
            return _apply(cell, names, plan)
    return None


def _is_range_for(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.For)
        and isinstance(node.target, cst.Name)
        and isinstance(node.iter, cst.Call)
        and isinstance(node.iter.func, cst.Name)
        and node.iter.func.value == "range"
        and node.orelse is None
    )


def _candidates(cell: Cell, loop_lineno: int | None) -> list[cst.For]:
    if loop_lineno is None:
        return [n for n in _all_fors(cell.module) if _is_range_for(n)]
    loop = loop_at_line(cell, loop_lineno)
    if loop is None:
        return []
    found = [loop] if _is_range_for(loop) else []
    found += [s for s in loop_body(loop) if _is_range_for(s)]
    return found


def _all_fors(module: cst.Module) -> list[cst.For]:
    return [n for n in walk(module) if isinstance(n, cst.For)]


# --- integer arithmetic on the slice bounds ------------------------------------------------------


def _eval(node: ast.expr, env: dict[str, int], helpers: dict[str, ast.expr], bs: str) -> int:
    """Evaluate a bound for given offset and batch size; ValueError when not plain arithmetic."""
    if bs and ast.dump(node) == bs:
        return env["__bs"]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in helpers:
            return _eval(helpers[node.id], env, helpers, bs)
        raise ValueError(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, helpers, bs)
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, env, helpers, bs)
        right = _eval(node.right, env, helpers, bs)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
    raise ValueError(ast.dump(node))


def _bounds_match(
    lo: ast.expr, up: ast.expr, index: str, helpers: dict[str, ast.expr], bs: str, steps: bool
) -> bool:
    for i, size in itertools.product((0, 1, 3, 7), (2, 5, 16)):
        env = {index: i, "__bs": size}
        try:
            low, high = _eval(lo, env, helpers, bs), _eval(up, env, helpers, bs)
        except (ValueError, KeyError):
            return False
        start = i * size if steps else i
        if (low, high) != (start, start + size):
            return False
    return True


def _factor_of_index(node: ast.expr, index: str, helpers: dict[str, ast.expr]) -> ast.expr | None:
    """``bs`` in a lower bound ``index * bs`` (directly or through a helper name)."""
    if isinstance(node, ast.Name) and node.id in helpers:
        return _factor_of_index(helpers[node.id], index, helpers)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        if isinstance(node.left, ast.Name) and node.left.id == index:
            return node.right
        if isinstance(node.right, ast.Name) and node.right.id == index:
            return node.left
    return None


# --- analysis ------------------------------------------------------------------------------------


def _slice_parts(
    value: cst.BaseExpression,
) -> tuple[cst.BaseExpression, str | None, cst.Slice] | None:
    """(array, perm name, slice) of ``array[lo:up]`` or ``array[perm[lo:up]]``."""
    if not isinstance(value, cst.Subscript) or len(value.slice) != 1:
        return None
    if not isinstance(value.value, cst.Name | cst.Attribute):
        return None
    inner = value.slice[0].slice
    if isinstance(inner, cst.Slice):
        return value.value, None, inner
    if (
        isinstance(inner, cst.Index)
        and isinstance(inner.value, cst.Subscript)
        and isinstance(inner.value.value, cst.Name)
        and len(inner.value.slice) == 1
        and isinstance(inner.value.slice[0].slice, cst.Slice)
    ):
        return value.value, inner.value.value.value, inner.value.slice[0].slice
    return None


def _converted(names: Aliases, value: cst.CSTNode) -> cst.BaseExpression | None:
    """What `value` converts, when it is a conversion (``tf.constant(v)``, ``v.astype(...)``)."""
    if not isinstance(value, cst.Call):
        return None
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value == "astype":
        return func.value
    if names.qualify(dotted(func)) not in _CONVERSIONS:
        return None
    args = positional_args(value)
    if not args or args[0] is not value.args[0]:
        return None
    return args[0].value


def _conversion_of(names: Aliases, value: cst.CSTNode) -> str | None:
    """The batch name that `value` converts (``tf.constant(xb)``, ``xb.astype(...)``)."""
    converted = _converted(names, value)
    return converted.value if isinstance(converted, cst.Name) else None


def _convert_source(conversion: cst.Call, source: cst.BaseExpression) -> cst.Call:
    """The same conversion applied to the whole array instead of one batch."""
    func = conversion.func
    if isinstance(func, cst.Attribute) and func.attr.value == "astype":
        return conversion.with_changes(func=func.with_changes(value=_parenthesised(source)))
    first = conversion.args[0].with_changes(value=source)
    return conversion.with_changes(args=[first, *conversion.args[1:]])


def _parenthesised(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, cst.Name | cst.Attribute | cst.Call | cst.Subscript):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _length_of(cell: Cell, expr: ast.expr, arrays: set[str], depth: int = 0) -> bool:
    """Whether `expr` is the length of one of `arrays`: ``len(x)``, ``x.shape[0]``, a name."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "len":
        return len(expr.args) == 1 and ast.unparse(expr.args[0]) in arrays
    if (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Attribute)
        and expr.value.attr == "shape"
        and isinstance(expr.slice, ast.Constant)
        and expr.slice.value == 0
    ):
        return ast.unparse(expr.value.value) in arrays
    if isinstance(expr, ast.Name) and depth == 0:
        value = _single_assignment(cell, expr.id)
        return value is not None and _length_of(cell, value, arrays, depth + 1)
    return False


def _single_assignment(cell: Cell, name: str) -> ast.expr | None:
    """The value of `name` when the cell binds it exactly once, by a plain assignment."""
    tree = ast.parse(cell.body)
    values = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id == name
    ]
    stores = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == name
    ]
    return values[0] if len(values) == 1 and len(stores) == 1 else None


def _steps_kind(cell: Cell, steps: ast.expr, bs: str, arrays: set[str]) -> str:
    """'floor' for ``len(x) // bs``, 'ceil' for its rounded-up forms, else 'other'."""

    def is_bs(node: ast.expr) -> bool:
        return ast.dump(node) == bs

    if isinstance(steps, ast.Name):
        value = _single_assignment(cell, steps.id)
        return "other" if value is None else _steps_kind(cell, value, bs, arrays)
    if isinstance(steps, ast.BinOp) and isinstance(steps.op, ast.FloorDiv) and is_bs(steps.right):
        left = steps.left
        if _length_of(cell, left, arrays):
            return "floor"
        # (n + bs - 1) // bs
        if (
            isinstance(left, ast.BinOp)
            and isinstance(left.op, ast.Sub)
            and isinstance(left.right, ast.Constant)
            and left.right.value == 1
            and isinstance(left.left, ast.BinOp)
            and isinstance(left.left.op, ast.Add)
            and is_bs(left.left.right)
            and _length_of(cell, left.left.left, arrays)
        ):
            return "ceil"
    # math.ceil(n / bs), int(np.ceil(n / bs))
    node = steps
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int":
        node = node.args[0] if len(node.args) == 1 else node
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "ceil"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.BinOp)
        and isinstance(node.args[0].op, ast.Div)
        and is_bs(node.args[0].right)
        and _length_of(cell, node.args[0].left, arrays)
    ):
        return "ceil"
    return "other"


def _analyse(cell: Cell, names: Aliases, loop: cst.For) -> _Plan | None:
    index = loop.target.value
    range_args = positional_args(loop.iter)
    if len(range_args) != len(loop.iter.args):
        return None
    if len(range_args) == 3:
        if not (isinstance(range_args[0].value, cst.Integer) and range_args[0].value.value == "0"):
            return None
        steps_mode = False
    elif len(range_args) == 1:
        steps_mode = True
    else:
        return None

    # Classify the loop body's small statements.
    helpers: dict[str, ast.expr] = {}
    helper_smalls: set[int] = set()
    elements: list[_Element] = []
    bounds: list[tuple[cst.Slice, _Element]] = []
    conversions: list[tuple[cst.CSTNode, str, str, cst.Call]] = []  # small, target, of, call
    others: list[cst.CSTNode] = []
    for statement in loop_body(loop):
        if not isinstance(statement, cst.SimpleStatementLine):
            others.append(statement)
            continue
        for small in statement.body:
            kind = _classify(names, small, index, helpers)
            if kind is None:
                others.append(small)
            elif kind[0] == "helper":
                helpers[kind[1]] = expr_ast(small.value)
                helper_smalls.add(id(small))
            elif kind[0] == "slices":
                for target, value, conversion in kind[1]:
                    array, perm, bound = _slice_parts(value)
                    element = _Element(target, array, perm, small, conversion=conversion)
                    elements.append(element)
                    bounds.append((bound, element))
            elif kind[0] == "conversion":
                conversions.append((small, kind[1], kind[2], small.value))
    if not elements:
        return None
    targets = [e.target for e in elements]
    if len(set(targets)) != len(targets):
        return None

    # Batch size and slice bounds.
    first_bound = bounds[0][0]
    if first_bound.step is not None or first_bound.lower is None or first_bound.upper is None:
        return None
    if steps_mode:
        factor = _factor_of_index(expr_ast(first_bound.lower), index, helpers)
        if factor is None:
            return None
        batch_size = parse_expr(ast.unparse(factor))
    else:
        batch_size = range_args[2].value
    bs_dump = ast.dump(expr_ast(batch_size))
    for bound, _ in bounds:
        if bound.step is not None or bound.lower is None or bound.upper is None:
            return None
        if not _bounds_match(
            expr_ast(bound.lower), expr_ast(bound.upper), index, helpers, bs_dump, steps_mode
        ):
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
                element.source, element.shuffled = element.array, True
            else:
                # A fixed permutation: the permuted array, in that order.
                element.source = parse_expr(f"{array_name}[{element.perm}]")
        elif array_name in shuffle.permuted:
            element.source, element.shuffled = shuffle.permuted[array_name], True
        else:
            element.source = element.array
    if len({e.shuffled for e in elements}) != 1:
        return None
    arrays = {code_of(e.array) for e in elements} | {code_of(e.source) for e in elements}
    for element in elements:
        if element.conversion is not None:
            element.source = _convert_source(element.conversion, element.source)

    # Batch count.
    drop_remainder, take = False, None
    if steps_mode:
        kind = _steps_kind(cell, expr_ast(range_args[0].value), bs_dump, arrays)
        drop_remainder = kind == "floor"
        take = range_args[0].value if kind == "other" else None
    elif not _length_of(cell, expr_ast(range_args[1].value), arrays):
        return None

    # Conversions of a batch move onto the whole array.
    by_target = {e.target: e for e in elements}
    removed = {id(e.small) for e in elements} | helper_smalls
    for element in elements:
        element.final = element.target
    for small, target, of, call in conversions:
        element = by_target.get(of)
        if element is None or element.final != of:
            others.append(small)
            continue
        element.source = _convert_source(call, element.source)
        element.final = target
        removed.add(id(small))
        if target != of:
            by_target[target] = element

    # What stays in the loop must not need what the rewrite takes away.
    gone = set(helpers) | {e.target for e in elements if e.final != e.target}
    gone |= {e.perm for e in elements if e.perm}
    kept_loads: set[str] = set()
    kept_stores: set[str] = set()
    for node in others:
        kept_loads |= loaded_names(_statement(node))
        kept_stores |= stored_names(_statement(node))
    if not others or kept_loads & gone:
        return None
    enumerate_index = index in kept_loads
    if enumerate_index and not steps_mode:
        return None
    sources_use = set()
    for element in elements:
        sources_use |= loaded_names(element.source)
    sources_use |= loaded_names(batch_size)
    if take is not None:
        sources_use |= loaded_names(take)
    if sources_use & (kept_stores | {index} | {e.final for e in elements}):
        return None
    if epoch is not None and sources_use & shuffle.other_stores:
        return None
    # Names the old loop left bound and that the cell reads afterwards.
    if loads_after(cell, gone | {e.target for e in elements}, loop) - {e.final for e in elements}:
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
    return plan


def _statement(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.BaseSmallStatement):
        return cst.SimpleStatementLine(
            body=[node.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]
        )
    return node


def _classify(names: Aliases, small: cst.CSTNode, index: str, helpers: dict[str, ast.expr]):
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    target = small.targets[0].target
    value = small.value
    if isinstance(target, cst.Name):
        if _slice_parts(value) is not None:
            return "slices", [(target.value, value, None)]
        converted = _converted(names, value)
        if converted is not None and _slice_parts(converted) is not None:
            return "slices", [(target.value, converted, value)]
        of = _conversion_of(names, value)
        if of is not None:
            return "conversion", target.value, of
        used = loaded_names(value)
        if index in used or used & set(helpers):
            try:
                ast_value = expr_ast(value)
            except SyntaxError:
                return None
            if all(
                isinstance(
                    n,
                    ast.BinOp
                    | ast.Name
                    | ast.Constant
                    | ast.UnaryOp
                    | ast.operator
                    | ast.unaryop
                    | ast.Load,
                )
                for n in ast.walk(ast_value)
            ):
                return "helper", target.value
        return None
    if (
        isinstance(target, cst.Tuple)
        and isinstance(value, cst.Tuple)
        and len(target.elements) == len(value.elements)
        and all(isinstance(t.value, cst.Name) for t in target.elements)
        and all(_slice_parts(v.value) is not None for v in value.elements)
    ):
        return "slices", [
            (t.value.value, v.value, None)
            for t, v in zip(target.elements, value.elements, strict=True)
        ]
    return None


def _epoch_loop(cell: Cell, loop: cst.For) -> cst.For | None:
    block = cell.parent(loop)
    owner = cell.parent(block) if block is not None else None
    if isinstance(owner, cst.For) and owner.body is block and owner.orelse is None:
        return owner
    return None


@dataclass
class _Shuffles:
    perms: set[str] = field(default_factory=set)  # index arrays permuted anew every epoch
    permuted: dict[str, cst.BaseExpression] = field(default_factory=dict)  # shuffled -> source
    removed: set[int] = field(default_factory=set)  # small statements that only shuffle
    other_stores: set[str] = field(default_factory=set)  # names the epoch body binds otherwise


def _shuffles(cell: Cell, epoch: cst.For, inner: cst.For) -> _Shuffles | None:
    """The per-epoch shuffling statements before `inner` in `epoch`'s body."""
    found = _Shuffles()
    before = True
    for statement in loop_body(epoch):
        if statement is inner:
            before = False
            continue
        smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
        for small in smalls:
            if before and _shuffle_statement(small, found):
                found.removed.add(id(small))
            else:
                found.other_stores |= stored_names(_statement(small))
    found.other_stores.add(epoch.target.value if isinstance(epoch.target, cst.Name) else "")
    shuffle_names = set(found.perms) | set(found.permuted)
    # Removing the shuffles is safe only when nothing else reads what they made.
    remaining_loads: set[str] = set()
    for statement in loop_body(epoch):
        if statement is inner:
            continue
        smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
        for small in smalls:
            if id(small) not in found.removed:
                remaining_loads |= loaded_names(_statement(small))
    if remaining_loads & shuffle_names:
        return None
    if loads_after(
        cell, set(found.perms) | {k for k, v in found.permuted.items() if k != code_of(v)}, epoch
    ):
        return None
    return found


def _shuffle_statement(small: cst.CSTNode, found: _Shuffles) -> bool:
    # np.random.shuffle(perm) / rng.shuffle(perm)
    if (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and isinstance(small.value.func, cst.Attribute)
        and small.value.func.attr.value == "shuffle"
        and len(small.value.args) == 1
        and isinstance(small.value.args[0].value, cst.Name)
    ):
        found.perms.add(small.value.args[0].value.value)
        return True
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return False
    target, value = small.targets[0].target, small.value
    # perm = np.random.permutation(n) / rng.permutation(n)
    if (
        isinstance(target, cst.Name)
        and isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "permutation"
    ):
        found.perms.add(target.value)
        return True
    # x, y = shuffle(x, y)   (sklearn.utils.shuffle and the like)
    if (
        isinstance(target, cst.Tuple)
        and isinstance(value, cst.Call)
        and (
            (isinstance(value.func, cst.Name) and value.func.value == "shuffle")
            or (isinstance(value.func, cst.Attribute) and value.func.attr.value == "shuffle")
        )
        and len(value.args) == len(target.elements)
        and all(a.keyword is None and isinstance(a.value, cst.Name) for a in value.args)
        and all(isinstance(t.value, cst.Name) for t in target.elements)
    ):
        for t, a in zip(target.elements, value.args, strict=True):
            found.permuted[t.value.value] = a.value
        return True
    # x_s = x[perm]  /  x, y = x[perm], y[perm]
    pairs = []
    if isinstance(target, cst.Name):
        pairs = [(target, value)]
    elif isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple):
        if len(target.elements) != len(value.elements):
            return False
        pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]
    if not pairs:
        return False
    for t, v in pairs:
        if not (
            isinstance(t, cst.Name)
            and isinstance(v, cst.Subscript)
            and isinstance(v.value, cst.Name)
            and len(v.slice) == 1
            and isinstance(v.slice[0].slice, cst.Index)
            and isinstance(v.slice[0].slice.value, cst.Name)
            and v.slice[0].slice.value.value in found.perms
        ):
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
    uses: dict[str, int] = {}
    for node in others:
        for n in ast.walk(ast.parse(code_of(_statement(node)))):
            if isinstance(n, ast.Name) and n.id in finals:
                uses[n.id] = uses.get(n.id, 0) + 1
    moved: list[tuple[cst.Arg, str]] = []
    for node in others:
        for call in walk(node):
            if not isinstance(call, cst.Call):
                continue
            for arg in call.args:
                of = _conversion_of(names, arg.value)
                if of in finals and uses.get(of) == 1 and of not in [m[1] for m in moved]:
                    element = finals[of]
                    element.source = _convert_source(arg.value, element.source)
                    moved.append((arg, of))
    return moved


def _fit_epochs(epoch: cst.For) -> bool:
    return _is_range_for(epoch) and len(epoch.iter.args) == 1


# --- the fit form --------------------------------------------------------------------------------


def _fit_form(
    cell: Cell, plan: _Plan
) -> tuple[cst.CSTNode, cst.Call, cst.BaseExpression | None] | None:
    """(statement to replace, the train_on_batch call, epochs) when the loops can become fit."""
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
    outer: cst.CSTNode = plan.inner
    epochs = None
    if plan.epoch is not None:
        epoch = plan.epoch
        if not _fit_epochs(epoch):
            return None
        for small in _kept_smalls(epoch, plan.epoch_removed):
            if small is plan.inner or _is_print(small):
                continue
            if _is_reset(small, recorders):
                continue
            return None
        epochs = epoch.iter.args[0].value
        outer = epoch
        if loads_after(cell, {epoch.target.value}, epoch):
            return None
    if any(isinstance(n, cst.Break | cst.Continue) for n in walk(plan.inner)):
        return None
    dropped = recorders | ({result} if result else set()) | {e.final for e in plan.elements}
    if loads_after(cell, dropped, outer):
        return None
    return outer, call, epochs


def _kept_smalls(loop: cst.For, removed: set[int]) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    for statement in loop_body(loop):
        if isinstance(statement, cst.SimpleStatementLine):
            out += [s for s in statement.body if id(s) not in removed]
        else:
            out.append(statement)
    return out


def _is_print(small: cst.CSTNode) -> bool:
    return (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and isinstance(small.value.func, cst.Name)
        and small.value.func.value == "print"
    )


def _train_on_batch(small: cst.CSTNode) -> cst.Call | None:
    value = small.value if isinstance(small, cst.Expr | cst.Assign) else None
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "train_on_batch"
    ):
        if isinstance(small, cst.Assign) and _assigned_name(small) is None:
            return None
        return value
    return None


def _assigned_name(small: cst.CSTNode) -> str | None:
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
    ):
        return small.targets[0].target.value
    return None


def _records(small: cst.CSTNode, result: str | None) -> str | None:
    """The list or total that `small` records the loss in (``losses.append(loss)``)."""
    if result is None:
        return None
    if (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and isinstance(small.value.func, cst.Attribute)
        and small.value.func.attr.value == "append"
        and isinstance(small.value.func.value, cst.Name)
        and len(small.value.args) == 1
        and result in loaded_names(small.value.args[0].value)
    ):
        return small.value.func.value.value
    if (
        isinstance(small, cst.AugAssign)
        and isinstance(small.target, cst.Name)
        and result in loaded_names(small.value)
    ):
        return small.target.value
    return None


def _is_reset(small: cst.CSTNode, recorders: set[str]) -> bool:
    """``losses = []`` / ``total = 0`` for one of the loss recorders."""
    name = _assigned_name(small)
    return name in recorders and isinstance(small.value, cst.List | cst.Integer | cst.Float)


# --- building the result -------------------------------------------------------------------------


def _pipeline(tf: str, plan: _Plan) -> str:
    """The dataset expression, one method per line inside parentheses."""
    sources = [code_of(e.source) for e in plan.elements]
    tensors = sources[0] if len(sources) == 1 else "(" + ", ".join(sources) + ")"
    chain = [f"{tf}.data.Dataset.from_tensor_slices({tensors})"]
    if plan.elements[0].shuffled:
        chain.append(f".shuffle(len({code_of(plan.elements[0].array)}))")
    batch = code_of(plan.batch_size)
    chain.append(
        f".batch({batch}, drop_remainder=True)" if plan.drop_remainder else f".batch({batch})"
    )
    if plan.take is not None:
        chain.append(f".take({code_of(plan.take)})")
    chain.append(f".prefetch({tf}.data.AUTOTUNE)")
    return "(\n" + "".join(f"    {part}\n" for part in chain) + ")"


def _apply(cell: Cell, names: Aliases, plan: _Plan) -> cst.Module | None:
    module = cell.module
    fit = _fit_form(cell, plan)
    dataset = fresh_name(module, ["dataset", "train_dataset", "train_ds"])
    found = import_alias(module, "tensorflow", "tf")
    if found is None:
        return None
    tf, missing_import = found
    pipeline = _pipeline(tf, plan)
    edits: dict[cst.CSTNode, object] = {}
    if fit is not None:
        outer, call, epochs = fit
        fit_call = code_of(call.func.with_changes(attr=cst.Name("fit")))
        epochs_arg = f", epochs={code_of(epochs)}" if epochs is not None else ""
        new = [
            parse_stmt(f"{dataset} = {pipeline}\n").with_changes(leading_lines=outer.leading_lines),
            parse_stmt(f"{fit_call}({dataset}{epochs_arg})\n"),
        ]
        edits[outer] = cst.FlattenSentinel(new)
    else:
        finals = [e.final for e in plan.elements]
        target = finals[0] if len(finals) == 1 else ", ".join(finals)
        if plan.enumerate_index:
            inner_target = (
                f"{plan.inner.target.value}, ({target})"
                if len(finals) > 1
                else (f"{plan.inner.target.value}, {target}")
            )
            header = f"for {inner_target} in enumerate({dataset}):\n    pass\n"
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


def _find_by_id(module: cst.Module, node_id: int) -> cst.CSTNode:
    return next(n for n in walk(module) if id(n) == node_id)
