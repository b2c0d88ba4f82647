"""Element-by-element NumPy loops become whole-array expressions.

A Python loop that touches one element (or row) per iteration pays the interpreter's cost per
element; the same arithmetic on the whole array runs once, in NumPy's compiled loops (on the
CPU: vectorised NumPy does not use the GPU). Two patterns:

- ``for i in range(len(a)): a[i] = <expr of a[i]>`` becomes ``a[:] = <expr of np.asarray(a)>``
  (in place, as before; ``out[i] = <expr of a[i]>`` becomes ``out[:len(a)] = ...``);
- ``out = []`` right before ``for v in a: out.append(<expr of v>)`` (the value may go through
  one temporary name) becomes ``out = <expr of np.asarray(a)>``; a reduction of the element
  (``np.sum(v ** 2)``) reduces every axis but the first.

The expression may use numbers, names the loop does not assign, ``+ - * / // % **``, NumPy
ufuncs and ``np.clip`` (``math`` functions and ``abs`` map to their NumPy ufuncs). With the
append pattern, ``out`` becomes an array instead of a list, so every later use of it must be
one that takes either (``np.array(out)``, ``np.asarray(out)``, ``np.stack(out)``, ``len(out)``,
``tf.constant(out)``, ``tf.convert_to_tensor(out)``, NumPy reductions such as ``np.sum(out)``).
Limit: a name the expression reads is assumed to broadcast against a whole array the way it did
against one element (true for scalars, and for per-column values against rows).
"""

from __future__ import annotations

import ast

import libcst as cst

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    code_of,
    dotted,
    import_alias,
    loads_after,
    loop_at_line,
    loop_body,
    replace,
    rewrite_cell,
    single_small,
    stored_names,
    walk,
)

_UFUNCS = {
    "sqrt", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "abs", "absolute", "fabs",
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "square",
    "sign", "floor", "ceil", "rint", "negative", "reciprocal", "cbrt", "maximum", "minimum",
    "power", "clip", "arctan2", "hypot", "fmax", "fmin",
}  # fmt: skip
_MATH = {
    "sqrt": "sqrt", "exp": "exp", "log": "log", "log2": "log2", "log10": "log10",
    "log1p": "log1p", "expm1": "expm1", "fabs": "fabs", "sin": "sin", "cos": "cos",
    "tan": "tan", "asin": "arcsin", "acos": "arccos", "atan": "arctan", "sinh": "sinh",
    "cosh": "cosh", "tanh": "tanh", "hypot": "hypot", "atan2": "arctan2",
}  # fmt: skip
_REDUCTIONS = {"sum", "mean", "prod", "max", "min", "std", "var", "amax", "amin", "median"}
_ARRAY_USES = {
    "numpy.array",
    "numpy.asarray",
    "numpy.stack",
    "tensorflow.constant",
    "tensorflow.convert_to_tensor",
}
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


def vectorise_element_loop(source: str, *, loop_lineno: int | None = None) -> str | None:
    """Turn an element-by-element loop into one NumPy expression (see the module doc).

    `loop_lineno` (1-based line in `source`) picks the loop; by default the first that fits.
    """
    return rewrite_cell(source, lambda cell: _rewrite(cell, loop_lineno))


class _UnsupportedError(Exception):
    pass


class _Translator:
    """Rewrites an element expression into the whole-array expression.

    Kinds: "scalar" (same for every element), "elem" (one value per element, shaped like it),
    "reduced" (one value per element, its own axes reduced).
    """

    def __init__(self, names: Aliases, np: str, element, whole: ast.expr, loop_names: set[str],
                 source: str, reductions: bool) -> None:  # fmt: skip
        self.names, self.np = names, np
        self.element = element  # predicate: is this ast node the element?
        self.whole = whole
        self.loop_names = loop_names
        self.source = source
        self.reductions = reductions

    def np_attr(self, name: str) -> ast.expr:
        return ast.parse(f"{self.np}.{name}", mode="eval").body

    def __call__(self, node: ast.expr) -> tuple[ast.expr, str]:
        if self.element(node):
            return self.whole, "elem"
        if isinstance(node, ast.Constant) and type(node.value) in (int, float, complex):
            return node, "scalar"
        if isinstance(node, ast.Name):
            if node.id in self.loop_names:
                raise _UnsupportedError(node.id)
            return node, "scalar"
        if isinstance(node, ast.Attribute) and dotted_ast(node) is not None:
            if dotted_ast(node).split(".")[0] in self.loop_names:
                raise _UnsupportedError(ast.unparse(node))
            return node, "scalar"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand, kind = self(node.operand)
            return ast.UnaryOp(node.op, operand), kind
        if isinstance(node, ast.BinOp) and isinstance(node.op, _OPS):
            left, left_kind = self(node.left)
            right, right_kind = self(node.right)
            return ast.BinOp(left, node.op, right), _combine(left_kind, right_kind)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise _UnsupportedError(ast.unparse(node))

    def call(self, node: ast.Call) -> tuple[ast.expr, str]:
        name = dotted_ast(node.func)
        qualified = self.names.qualify(name) or (name if name in ("abs",) else "")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise _UnsupportedError(ast.unparse(node))
        func = None
        if qualified == "abs":
            func = "abs"
        elif qualified.startswith("math.") and qualified[5:] in _MATH:
            func = _MATH[qualified[5:]]
        elif qualified.startswith("numpy.") and qualified[6:] in _UFUNCS:
            func = qualified[6:]
        elif (
            self.reductions
            and qualified.startswith("numpy.")
            and qualified[6:] in _REDUCTIONS
            and len(node.args) == 1
        ):
            arg, kind = self(node.args[0])
            if kind != "elem":
                raise _UnsupportedError(ast.unparse(node))
            axes = ast.parse(f"tuple(range(1, {self.np}.ndim({self.source})))", mode="eval").body
            call = ast.Call(self.np_attr(qualified[6:]), [arg], [ast.keyword("axis", axes)])
            return call, "reduced"
        if func is None:
            raise _UnsupportedError(ast.unparse(node))
        args, kind = [], "scalar"
        for a in node.args:
            new, arg_kind = self(a)
            args.append(new)
            kind = _combine(kind, arg_kind)
        return ast.Call(self.np_attr(func), args, []), kind


def _combine(a: str, b: str) -> str:
    if {a, b} == {"elem", "reduced"}:
        raise _UnsupportedError("an element combined with a reduction of it")
    for kind in ("elem", "reduced"):
        if kind in (a, b):
            return kind
    return "scalar"


def dotted_ast(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_ast(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _rewrite(cell: Cell, loop_lineno: int | None) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    found = import_alias(module, "numpy", "np")
    if found is None:
        return None
    np, missing = found
    loops = [n for n in walk(module) if isinstance(n, cst.For)]
    if loop_lineno is not None:
        chosen = loop_at_line(cell, loop_lineno)
        loops = [chosen] if isinstance(chosen, cst.For) else []
    for loop in loops:
        edits = _in_place(cell, names, np, loop) or _appended(cell, names, np, loop)
        if edits:
            module = replace(module, edits)
            return add_import(module, "numpy", np) if missing else module
    return None


def _in_place(cell: Cell, names: Aliases, np: str, loop: cst.For) -> dict | None:
    """``for i in range(len(a)): out[i] = f(a[i])``."""
    if loop.orelse is not None or not isinstance(loop.target, cst.Name):
        return None
    index = loop.target.value
    source = _range_over_length(loop.iter)
    body = loop_body(loop)
    small = single_small(body[0]) if len(body) == 1 else None
    if source is None or not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    target = ast.parse(code_of(small.targets[0].target), mode="eval").body
    if not (
        isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Name)
        and isinstance(target.slice, ast.Name)
        and target.slice.id == index
    ):
        return None
    destination = target.value.id

    def is_element(node: ast.expr) -> bool:
        if not (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Name)
            and node.slice.id == index
        ):
            return False
        if isinstance(node.value, ast.Name) and node.value.id == source:
            return True
        raise _UnsupportedError("another array indexed by the loop")

    whole = ast.parse(f"{np}.asarray({source})", mode="eval").body
    value = ast.parse("(" + code_of(small.value) + "\n)", mode="eval").body
    translate = _Translator(names, np, is_element, whole, {index}, source, reductions=False)
    try:
        new_value, kind = translate(value)
    except _UnsupportedError:
        return None
    if kind != "elem" or loads_after(cell, {index}, loop):
        return None
    slice_ = ":" if destination == source else f":len({source})"
    statement = cst.parse_statement(f"{destination}[{slice_}] = {ast.unparse(new_value)}\n")
    return {loop: _replacing(loop, body[0], statement)}


def _range_over_length(iterated: cst.CSTNode) -> str | None:
    """``a`` of ``range(len(a))``, ``range(0, len(a))`` or ``range(a.shape[0])``."""
    if not (isinstance(iterated, cst.Call) and dotted(iterated.func) == "range"):
        return None
    args = [a.value for a in iterated.args if a.keyword is None and not a.star]
    if len(args) != len(iterated.args) or not args or len(args) > 2:
        return None
    if len(args) == 2:
        if not (isinstance(args[0], cst.Integer) and args[0].value == "0"):
            return None
        args = args[1:]
    expr = ast.parse(code_of(args[0]), mode="eval").body
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "len"
        and len(expr.args) == 1
        and isinstance(expr.args[0], ast.Name)
    ):
        return expr.args[0].id
    if (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Attribute)
        and expr.value.attr == "shape"
        and isinstance(expr.value.value, ast.Name)
        and isinstance(expr.slice, ast.Constant)
        and expr.slice.value == 0
    ):
        return expr.value.value.id
    return None


def _appended(cell: Cell, names: Aliases, np: str, loop: cst.For) -> dict | None:
    """``out = []`` then ``for v in a: out.append(f(v))``."""
    if loop.orelse is not None or not isinstance(loop.target, cst.Name):
        return None
    if not isinstance(loop.iter, cst.Name):
        return None
    element, source = loop.target.value, loop.iter.value
    block = cell.parent(loop)
    if not isinstance(block, cst.Module | cst.IndentedBlock):
        return None
    statements = list(block.body)
    position = next(i for i, s in enumerate(statements) if s is loop)
    init = single_small(statements[position - 1]) if position else None
    if not (
        isinstance(init, cst.Assign)
        and len(init.targets) == 1
        and isinstance(init.targets[0].target, cst.Name)
        and isinstance(init.value, cst.List)
        and not init.value.elements
    ):
        return None
    out = init.targets[0].target.value
    body = [single_small(s) for s in loop_body(loop)]
    if not body or None in body or len(body) > 2:
        return None
    append = body[-1]
    if not (
        isinstance(append, cst.Expr)
        and isinstance(append.value, cst.Call)
        and dotted(append.value.func) == f"{out}.append"
        and len(append.value.args) == 1
        and append.value.args[0].keyword is None
        and not append.value.args[0].star
    ):
        return None
    value = append.value.args[0].value
    temporary = None
    if len(body) == 2:
        assign = body[0]
        if not (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
            and isinstance(value, cst.Name)
            and value.value == assign.targets[0].target.value
        ):
            return None
        temporary = value.value
        value = assign.value
    loop_names = stored_names(loop) - {element}
    if source in loop_names or out in loop_names - {temporary}:
        return None

    def is_element(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id == element

    whole = ast.parse(f"{np}.asarray({source})", mode="eval").body
    expr = ast.parse("(" + code_of(value) + "\n)", mode="eval").body
    translate = _Translator(names, np, is_element, whole, loop_names, source, reductions=True)
    try:
        new_value, kind = translate(expr)
    except _UnsupportedError:
        return None
    if kind == "scalar":
        return None
    if loads_after(cell, {element} | ({temporary} if temporary else set()), loop):
        return None
    if not _only_array_uses(cell, names, out, loop):
        return None
    statement = cst.parse_statement(f"{out} = {ast.unparse(new_value)}\n")
    comments = [line for s in loop_body(loop) for line in s.leading_lines if line.comment]
    statement = statement.with_changes(
        leading_lines=[*statements[position - 1].leading_lines, *loop.leading_lines, *comments]
    )
    return {statements[position - 1]: cst.RemovalSentinel.REMOVE, loop: statement}


def _only_array_uses(cell: Cell, names: Aliases, out: str, loop: cst.For) -> bool:
    """Every read of `out` after the loop takes an array as well as a list."""
    tree = ast.parse(cell.body)
    end = max(
        getattr(n, "end_lineno", 0) or 0
        for n in ast.walk(tree)
        if isinstance(n, ast.For) and n.lineno == cell.line(loop) - cell.line_offset
    )
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
            callee = dotted_ast(node.func)
            qualified = names.qualify(callee) or callee
            arg = node.args[0]
            takes_either = (
                qualified in _ARRAY_USES
                or callee == "len"
                or (qualified.startswith("numpy.") and qualified[6:] in _REDUCTIONS)
            )
            if takes_either and isinstance(arg, ast.Name):
                allowed.add(id(arg))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and node.id == out
            and isinstance(node.ctx, ast.Load)
            and node.lineno > end
            and id(node) not in allowed
        ):
            return False
    return True


def _replacing(loop: cst.For, statement: cst.CSTNode, new: cst.BaseStatement) -> cst.CSTNode:
    """`new` in place of `loop`, with the comments above the loop and on its statement."""
    comment = None
    if isinstance(statement, cst.SimpleStatementLine):
        comment = statement.trailing_whitespace
    new = new.with_changes(leading_lines=[*loop.leading_lines])
    if comment is not None and comment.comment is not None:
        new = new.with_changes(trailing_whitespace=comment)
    return new
