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
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    code_of,
    dotted,
    expr_ast,
    import_alias,
    loads_after,
    loop_at_line,
    loop_body,
    replace,
    rewrite_cell,
    stored_names,
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


def vectorise_element_loop(source: str, *, loop_lineno: int | None = None) -> str | None:
    """Turn an element-by-element loop into one NumPy expression (see the module doc).

    `loop_lineno` (1-based line in `source`) picks the loop; by default the first that fits.
    """
    return rewrite_cell(source, lambda cell: _rewrite(cell, loop_lineno))


class _UnsupportedError(Exception):
    pass


_NUMBER = m.Integer() | m.Float() | m.Imaginary()
_CONSTANT_NAMES = ("True", "False", "None")  # constants to `ast`, so never taken as scalars
_OPS = m.Add() | m.Subtract() | m.Multiply() | m.Divide() | m.FloorDivide() | m.Modulo() | m.Power()


def _sole_index(index, value=None) -> m.Subscript:
    """``value[index]``: one index, no slice and no trailing comma (matchers of both)."""
    return m.Subscript(
        value or m.DoNotCare(), [m.SubscriptElement(m.Index(index), comma=~m.Comma())]
    )


@dataclass
class _Translator:
    """Rewrites an element expression into the whole-array expression.

    Kinds: "scalar" (same for every element), "elem" (one value per element, shaped like it),
    "reduced" (one value per element, its own axes reduced).
    """

    names: Aliases
    np: str
    element: Callable[[cst.CSTNode], bool]  # is this node the element?
    source: str  # the array looped over
    loop_names: set[str]
    reductions: bool

    def np_call(self, func: str, *args: cst.BaseExpression | cst.Arg) -> cst.Call:
        call = cst.ensure_type(cst.parse_expression(f"{self.np}.{func}()"), cst.Call)
        return call.with_changes(args=[a if isinstance(a, cst.Arg) else cst.Arg(a) for a in args])

    def __call__(self, node: cst.CSTNode) -> tuple[cst.BaseExpression, str]:
        if self.element(node):
            return self.np_call("asarray", cst.Name(self.source)), "elem"
        if m.matches(node, _NUMBER):
            return node, "scalar"
        name = dotted(node)
        if name is not None:
            if name.split(".")[0] in {*self.loop_names, *_CONSTANT_NAMES}:
                raise _UnsupportedError(name)
            return node, "scalar"
        if m.matches(node, m.UnaryOperation(m.Minus() | m.Plus())):
            operand, kind = self(node.expression)
            return node.with_changes(expression=operand), kind
        if m.matches(node, m.BinaryOperation(operator=_OPS)):
            left, left_kind = self(node.left)
            right, right_kind = self(node.right)
            return node.with_changes(left=left, right=right), _combine(left_kind, right_kind)
        if m.matches(node, m.Call(args=[m.ZeroOrMore(m.Arg(keyword=None, star=""))])):
            return self.call(node)
        raise _UnsupportedError(code_of(node))

    def call(self, node: cst.Call) -> tuple[cst.BaseExpression, str]:
        name = dotted(node.func)
        qualified = self.names.qualify(name) or (name if name == "abs" else "")
        module, _, func = qualified.rpartition(".")
        if qualified == "abs" or (module == "numpy" and func in _UFUNCS):
            pass
        elif module == "math" and func in _MATH:
            func = _MATH[func]
        elif self.reductions and module == "numpy" and func in _REDUCTIONS and len(node.args) == 1:
            arg, kind = self(node.args[0].value)
            if kind != "elem":
                raise _UnsupportedError(code_of(node))
            axes = cst.parse_expression(f"tuple(range(1, {self.np}.ndim({self.source})))")
            return self.np_call(func, arg, cst.Arg(axes, keyword=cst.Name("axis"))), "reduced"
        else:
            raise _UnsupportedError(code_of(node))
        args, kind = [], "scalar"
        for arg in node.args:
            new, arg_kind = self(arg.value)
            args.append(new)
            kind = _combine(kind, arg_kind)
        return self.np_call(func, *args), kind


def _combine(a: str, b: str) -> str:
    if {a, b} == {"elem", "reduced"}:
        raise _UnsupportedError("an element combined with a reduction of it")
    for kind in ("elem", "reduced"):
        if kind in (a, b):
            return kind
    return "scalar"


def _translated(translate: _Translator, expr: cst.BaseExpression) -> tuple[str, str] | None:
    """The whole-array expression (laid out as `ast` prints it) and its kind, if it has one."""
    try:
        new, kind = translate(expr)
    except _UnsupportedError:
        return None
    return ast.unparse(expr_ast(new)), kind


def _rewrite(cell: Cell, loop_lineno: int | None) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    found = import_alias(module, "numpy", "np")
    if found is None:
        return None
    np, missing = found
    loops = m.findall(module, m.For())
    if loop_lineno is not None:
        chosen = loop_at_line(cell, loop_lineno)
        loops = [chosen] if isinstance(chosen, cst.For) else []
    for loop in loops:
        edits = _in_place(cell, names, np, loop) or _appended(cell, names, np, loop)
        if edits:
            module = replace(module, edits)
            return add_import(module, "numpy", np) if missing else module
    return None


_ZERO = m.Name("False") | m.MatchIfTrue(
    lambda n: isinstance(n, cst.BaseNumber) and n.evaluated_value == 0
)
_KEYWORDS = m.ZeroOrMore(m.Arg(keyword=m.Name(), star="") | m.Arg(star="**"))
# ``len(a)`` (keywords allowed, as before) or ``a.shape[0]`` (any literal equal to 0)
_SIZE_OF = m.Call(
    m.Name("len"),
    [_KEYWORDS, m.Arg(m.SaveMatchedNode(m.Name(), "array"), keyword=None, star=""), _KEYWORDS],
) | _sole_index(_ZERO, m.Attribute(m.SaveMatchedNode(m.Name(), "array"), m.Name("shape")))
_RANGE = m.Call(
    m.Name("range"),
    [
        m.ZeroOrOne(m.Arg(m.Integer("0"), keyword=None, star="")),
        m.Arg(_SIZE_OF, keyword=None, star=""),
    ],
)
_AT = _sole_index(m.SaveMatchedNode(m.Name(), "at"), m.SaveMatchedNode(m.Name(), "destination"))
_ASSIGN = m.SaveMatchedNode(m.Assign([m.AssignTarget(_AT)]), "assign")
# ``for i in range(len(a)): out[i] = ...``
_IN_PLACE = m.For(
    m.SaveMatchedNode(m.Name(), "index"),
    _RANGE,
    m.IndentedBlock([m.SimpleStatementLine([_ASSIGN])]) | m.SimpleStatementSuite([_ASSIGN]),
    orelse=None,
)


def _in_place(cell: Cell, names: Aliases, np: str, loop: cst.For) -> dict | None:
    """``for i in range(len(a)): out[i] = f(a[i])``."""
    found = m.extract(loop, _IN_PLACE)
    if found is None or found["at"].value != found["index"].value:
        return None
    index, source = found["index"].value, found["array"].value
    destination = found["destination"].value

    def is_element(node: cst.CSTNode) -> bool:
        if not m.matches(node, _sole_index(m.Name(index))):
            return False
        if m.matches(node.value, m.Name(source)):
            return True
        raise _UnsupportedError("another array indexed by the loop")

    translate = _Translator(names, np, is_element, source, {index}, reductions=False)
    new = _translated(translate, found["assign"].value)
    if new is None or new[1] != "elem" or loads_after(cell, {index}, loop):
        return None
    slice_ = ":" if destination == source else f":len({source})"
    statement = cst.parse_statement(f"{destination}[{slice_}] = {new[0]}\n")
    return {loop: _replacing(loop, loop_body(loop)[0], statement)}


def _appended(cell: Cell, names: Aliases, np: str, loop: cst.For) -> dict | None:
    """``out = []`` then ``for v in a: out.append(f(v))``."""
    block = cell.parent(loop)
    plain = m.For(m.Name(), m.Name(), orelse=None, asynchronous=None)  # not ``async for``
    if not m.matches(loop, plain) or not m.matches(block, m.Module() | m.IndentedBlock()):
        return None
    element, source = loop.target.value, loop.iter.value
    position = next(i for i, statement in enumerate(block.body) if statement is loop)
    empty_list = m.Assign([m.AssignTarget(m.SaveMatchedNode(m.Name(), "out"))], m.List([]))
    init = m.extract(block.body[position - 1], m.SimpleStatementLine([empty_list]))
    if not position or init is None:
        return None
    out = init["out"].value
    value = m.SaveMatchedNode(m.DoNotCare(), "value")
    append = m.Expr(
        m.Call(m.Attribute(m.Name(out), m.Name("append")), [m.Arg(value, keyword=None, star="")])
    )
    temporary = m.SaveMatchedNode(m.Name(), "temporary")
    assign = m.Assign([m.AssignTarget(temporary)], m.SaveMatchedNode(m.DoNotCare(), "assigned"))
    found = m.extract(
        loop.body,
        m.SimpleStatementSuite([append])
        | m.IndentedBlock(
            [m.ZeroOrOne(m.SimpleStatementLine([assign])), m.SimpleStatementLine([append])]
        ),
    )
    if found is None:
        return None
    value, temporary = found["value"], found.get("temporary")
    if temporary is not None:
        if not m.matches(value, m.Name(temporary.value)):
            return None
        value, temporary = found["assigned"], temporary.value
    loop_names = stored_names(loop) - {element}
    if source in loop_names or out in loop_names - {temporary}:
        return None
    translate = _Translator(
        names,
        np,
        lambda node: m.matches(node, m.Name(element)),
        source,
        loop_names,
        reductions=True,
    )
    new = _translated(translate, value)
    if new is None or new[1] == "scalar":
        return None
    if loads_after(cell, {element} | ({temporary} if temporary else set()), loop):
        return None
    if not _only_array_uses(cell, names, out, loop):
        return None
    statement = cst.parse_statement(f"{out} = {new[0]}\n")
    comments = [line for s in loop_body(loop) for line in s.leading_lines if line.comment]
    statement = statement.with_changes(
        leading_lines=[*block.body[position - 1].leading_lines, *loop.leading_lines, *comments]
    )
    return {block.body[position - 1]: cst.RemovalSentinel.REMOVE, loop: statement}


def _only_array_uses(cell: Cell, names: Aliases, out: str, loop: cst.For) -> bool:
    """Every read of `out` after the loop takes an array as well as a list."""
    allowed = set()
    for call in m.findall(cell.module, m.Call(args=[m.Arg(m.Name(), keyword=None, star="")])):
        callee = dotted(call.func)
        qualified = names.qualify(callee) or callee or ""
        module, _, func = qualified.rpartition(".")
        if (
            qualified in _ARRAY_USES
            or callee == "len"
            or (module == "numpy" and func in _REDUCTIONS)
        ):
            allowed.add(id(call.args[0].value))
    end = cell.end_line(loop)
    return not any(
        n.value == out and cell.line(n) > end and id(n) not in allowed for n in cell.loads
    )


def _replacing(loop: cst.For, statement: cst.CSTNode, new: cst.BaseStatement) -> cst.CSTNode:
    """`new` in place of `loop`, with the comments above the loop and on its statement."""
    comment = None
    if isinstance(statement, cst.SimpleStatementLine):
        comment = statement.trailing_whitespace
    new = new.with_changes(leading_lines=[*loop.leading_lines])
    if comment is not None and comment.comment is not None:
        new = new.with_changes(trailing_whitespace=comment)
    return new
