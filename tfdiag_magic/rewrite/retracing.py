"""Fixes for a tf.function that traces again and again.

A tf.function traces a new graph for every new Python value of a scalar argument, every new
input shape or dtype, and every new tf.function object. Four rewrites, one per cause:

- `scalars_to_tensors`: at the call sites, wrap the named arguments in ``tf.constant(...)``, so a
  changing Python number becomes a tensor of one shape and dtype (one trace).
- `reduce_retracing`: ``@tf.function(reduce_retracing=True)``, so varying shapes generalise to
  ``None`` dimensions after the first retrace.
- `input_signature`: ``@tf.function(input_signature=[...])``: one trace for all inputs that fit.
- `hoist_function`: a ``tf.function`` created inside a loop body (``g = tf.function(f)``, a
  decorated ``def``, ``tf.function(lambda ...)``) moves before the loop when it does not depend
  on anything the loop assigns, so one function object (and its traces) is reused.

Limits: the function is found by name, as a ``def`` decorated with tf.function, as the target of
``name = tf.function(...)`` or as the function passed to ``tf.function(name)``; call sites are
calls of that exact (dotted) name, of a name bound to ``tf.function(name)``, or (for a method
the cell defines) ``obj.name(...)``. Arguments passed with ``*args``/``**kwargs`` are not
touched.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import BuiltinScope, GlobalScope

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    code_of,
    dotted,
    find_kwarg,
    hoist_target,
    import_alias,
    insert_before,
    loaded_names,
    parse_expr,
    positional_args,
    remove,
    replace,
    rewrite_cell,
    scopes_of,
    set_kwarg,
    single_small,
    walk,
)
from .eager import is_tf_function

# --- finding the tf.function -------------------------------------------------------------------


def _defs(module: cst.Module, name: str) -> list[cst.FunctionDef]:
    return [n for n in walk(module) if isinstance(n, cst.FunctionDef) and n.name.value == name]


def _tf_function_sites(
    names: Aliases, module: cst.Module, function: str
) -> list[tuple[cst.CSTNode, cst.FunctionDef | None]]:
    """Where `function` becomes a tf.function: (decorator or ``tf.function(...)`` call, its def).

    The def is the Python function traced, when the cell defines it.
    """
    sites: list[tuple[cst.CSTNode, cst.FunctionDef | None]] = []
    for node in walk(module):
        if isinstance(node, cst.FunctionDef) and node.name.value == function:
            sites += [(d, node) for d in node.decorators if is_tf_function(names, d.decorator)]
        elif isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
            call = node.value
            if not is_tf_function(names, call) or not call.args or call.args[0].keyword:
                continue
            targets = {dotted(t.target) for t in node.targets}
            wrapped = dotted(call.args[0].value)
            if function in targets or wrapped == function:
                defs = _defs(module, wrapped) if wrapped else []
                sites.append((call, defs[0] if len(defs) == 1 else None))
    return sites


def _with_tf_function_kwarg(
    names: Aliases, site: cst.CSTNode, name: str, value: cst.BaseExpression
) -> object:
    """An edit that sets keyword `name` on a tf.function decorator or call."""

    def edit(node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(node, cst.Decorator):
            expr = node.decorator
            call = expr if isinstance(expr, cst.Call) else cst.Call(func=expr, args=[])
            return node.with_changes(decorator=set_kwarg(call, name, value))
        return set_kwarg(node, name, value)

    return edit


def _tf_call_of(site: cst.CSTNode) -> cst.Call | None:
    expr = site.decorator if isinstance(site, cst.Decorator) else site
    return expr if isinstance(expr, cst.Call) else None


def _is_true(expr: cst.CSTNode | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


# --- reduce_retracing / input_signature --------------------------------------------------------


def reduce_retracing(source: str, *, function: str) -> str | None:
    """Add ``reduce_retracing=True`` to the tf.function of `function`."""

    def transform(cell: Cell) -> cst.Module | None:
        names = aliases(cell.module)
        edits = {}
        for site, _ in _tf_function_sites(names, cell.module, function):
            call = _tf_call_of(site)
            if call is not None:
                current = find_kwarg(call, "reduce_retracing") or find_kwarg(
                    call, "experimental_relax_shapes"
                )
                if current is not None and _is_true(current.value):
                    continue
            edits[site] = _with_tf_function_kwarg(names, site, "reduce_retracing", cst.Name("True"))
        return replace(cell.module, edits) if edits else None

    return rewrite_cell(source, transform)


def input_signature(source: str, *, function: str, specs: list[str]) -> str | None:
    """Add ``input_signature=[...]`` (from the spec expressions given) to `function`'s tf.function.

    Specs are written with ``tf.``; they follow the cell's own alias for TensorFlow. None when
    the function already has a signature, when the number of specs does not fit its positional
    parameters, or when a spec does not parse.
    """

    def transform(cell: Cell) -> cst.Module | None:
        module = cell.module
        names = aliases(module)
        found = import_alias(module, "tensorflow", "tf")
        if found is None:
            return None
        tf, missing = found
        try:
            exprs = [_retarget_tf(parse_expr(spec), tf) for spec in specs]
        except cst.ParserSyntaxError:
            return None
        if not exprs:
            return None
        signature = cst.List([cst.Element(e) for e in exprs])
        if len(exprs) > 1:
            signature = parse_expr("[" + ", ".join(code_of(e) for e in exprs) + "]")
        edits = {}
        for site, func in _tf_function_sites(names, module, function):
            call = _tf_call_of(site)
            if call is not None and find_kwarg(call, "input_signature") is not None:
                return None
            if func is not None and not _signature_fits(func, len(exprs)):
                return None
            edits[site] = _with_tf_function_kwarg(names, site, "input_signature", signature)
        if not edits:
            return None
        module = replace(module, edits)
        return add_import(module, "tensorflow", tf) if missing else module

    return rewrite_cell(source, transform)


def _signature_fits(func: cst.FunctionDef, count: int) -> bool:
    """A signature of `count` specs covers the positional parameters without defaults."""
    params = func.params
    if (
        isinstance(params.star_arg, cst.Param)
        or params.star_kwarg is not None
        or params.kwonly_params
    ):
        return False
    positional = [*params.posonly_params, *params.params]
    if positional and positional[0].name.value in ("self", "cls"):
        positional = positional[1:]
    required = [p for p in positional if p.default is None]
    return len(required) <= count <= len(positional)


def _retarget_tf(expr: cst.BaseExpression, tf: str) -> cst.BaseExpression:
    if tf == "tf":
        return expr

    class Rename(cst.CSTTransformer):
        def leave_Attribute(self, original, updated):  # noqa: N802 (libcst's naming)
            if isinstance(updated.value, cst.Name) and updated.value.value == "tf":
                return updated.with_changes(value=parse_expr(tf))
            return updated

    return expr.visit(Rename())


# --- scalars_to_tensors -------------------------------------------------------------------------


def scalars_to_tensors(source: str, *, function: str, arguments: list[str | int]) -> str | None:
    """Wrap the given arguments of every call of `function` in ``tf.constant(...)``.

    `arguments` name parameters (keyword name or 0-based position); with the function's def in
    the cell a name also finds the argument passed by position, and a position the one passed
    by keyword. Arguments already wrapped in ``tf.constant``/``tf.convert_to_tensor`` are left.
    """

    def transform(cell: Cell) -> cst.Module | None:
        module = cell.module
        names = aliases(module)
        found = import_alias(module, "tensorflow", "tf")
        if found is None:
            return None
        tf, missing = found
        params = _parameters(names, module, function)
        callees = _callee_names(names, module, function)
        methods = _is_method(module, function)
        edits: dict[cst.CSTNode, object] = {}
        # The body must work with a tensor where it had a Python number (see `_body_edits`).
        body = _body_edits(module, function, arguments, params, tf)
        if body is None:
            return None
        float_dtype, body_edits = body
        edits.update(body_edits)
        dtype = f", dtype={tf}.float32" if float_dtype else ""
        for node in walk(module):
            if not isinstance(node, cst.Call):
                continue
            callee = dotted(node.func)
            if callee not in callees and not (
                methods
                and isinstance(node.func, cst.Attribute)
                and callee is not None
                and node.func.attr.value == function
            ):
                continue
            for arg in _selected_args(node, arguments, params):
                if _already_tensor(names, arg.value):
                    continue
                wrapped = parse_expr(f"{tf}.constant(__value__{dtype})")
                wrapped = wrapped.with_changes(
                    args=[cst.Arg(arg.value), *wrapped.args[1:]]  # type: ignore[attr-defined]
                )
                edits[arg] = lambda a, wrapped=wrapped: a.with_changes(value=wrapped)
        if len(edits) == len(body_edits):
            return None
        module = replace(module, edits)
        return add_import(module, "tensorflow", tf) if missing else module

    return rewrite_cell(source, transform)


# Builtins that need a Python number: given a tensor inside a traced function they raise
# (`int(t)`, `float(t)`, `round`, `bool`), or they compare it as a Python bool (`min`, `max`).
_NEEDS_NUMBER = frozenset({"int", "float", "round", "bool", "len", "str", "format"})
_TENSOR_FORMS = {"min": "minimum", "max": "maximum"}


def _body_edits(
    module: cst.Module,
    function: str,
    arguments: list[str | int],
    params: list[str] | None,
    tf: str,
) -> tuple[bool, dict[cst.CSTNode, object]] | None:
    """What the function's body needs to take the converted arguments as tensors: whether a
    float32 tensor is the right one (the body divides it or mixes it with float literals: an
    int32 tensor divided gives float64, which a float32 loss cannot multiply), and ``min``/
    ``max`` of two values, one of them the argument, as ``tf.minimum``/``tf.maximum``. None
    when the body uses the argument where only a Python number will do (``int(step)``,
    ``float(step)``, ``round``, ``len``, ``str``): no rewrite, rather than one that breaks.
    Without the function's def in the cell, nothing is known: ints stay ints."""
    defs = _defs(module, function.split(".")[-1])
    if len(defs) != 1:
        return False, {}
    names = {a for a in arguments if isinstance(a, str)}
    names |= {params[a] for a in arguments if isinstance(a, int) and params and a < len(params)}
    if not names:
        return False, {}

    def uses(node: cst.CSTNode) -> bool:
        return any(isinstance(n, cst.Name) and n.value in names for n in walk(node))

    float_dtype = False
    edits: dict[cst.CSTNode, object] = {}
    for node in walk(defs[0].body):
        if isinstance(node, cst.BinaryOperation) and uses(node):
            divides = isinstance(node.operator, cst.Divide)
            floats = any(isinstance(n, cst.Float) for n in walk(node))
            float_dtype = float_dtype or divides or floats
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and uses(node):
            callee = node.func.value
            if callee in _NEEDS_NUMBER:
                return None
            if callee in _TENSOR_FORMS:
                if len(node.args) != 2 or any(a.star or a.keyword for a in node.args):
                    return None
                if any(isinstance(n, cst.Float) for n in walk(node)):
                    float_dtype = True
                edits[node.func] = parse_expr(f"{tf}.{_TENSOR_FORMS[callee]}")
    return float_dtype, edits


def _callee_names(names: Aliases, module: cst.Module, function: str) -> set[str]:
    """`function` and the names bound to ``tf.function(function)`` (the name traced is the
    Python function's, the name called may be the wrapper's)."""
    callees = {function}
    for node in walk(module):
        if (
            isinstance(node, cst.Assign)
            and isinstance(node.value, cst.Call)
            and is_tf_function(names, node.value)
            and node.value.args
            and dotted(node.value.args[0].value) == function
        ):
            callees |= {dotted(t.target) for t in node.targets} - {None}
    return callees


def _is_method(module: cst.Module, function: str) -> bool:
    """Whether the cell defines `function` as a method (then ``obj.function(...)`` calls it)."""
    for node in walk(module):
        if isinstance(node, cst.ClassDef):
            for statement in node.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value == function:
                    return True
    return False


def _parameters(names: Aliases, module: cst.Module, function: str) -> list[str] | None:
    """The positional parameter names of the Python function behind `function`, when known."""
    candidates = _defs(module, function.split(".")[-1])
    if not candidates:
        for _, func in _tf_function_sites(names, module, function):
            if func is not None:
                candidates = [func]
                break
    if len(candidates) != 1:
        return None
    params = candidates[0].params
    positional = [p.name.value for p in [*params.posonly_params, *params.params]]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    return positional


def _selected_args(call: cst.Call, arguments: list[str | int], params: list[str] | None):
    positional = positional_args(call)
    starred = any(a.star for a in call.args)
    chosen: list[cst.Arg] = []
    for wanted in arguments:
        if isinstance(wanted, int):
            index = wanted
            keyword = params[wanted] if params is not None and wanted < len(params) else None
        else:
            keyword = wanted
            index = params.index(wanted) if params is not None and wanted in params else None
        arg = find_kwarg(call, keyword) if keyword is not None else None
        if arg is None and index is not None and not starred and index < len(positional):
            arg = positional[index]
        if arg is not None and arg not in chosen:
            chosen.append(arg)
    return chosen


def _already_tensor(names: Aliases, expr: cst.BaseExpression) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    return names.qualify(dotted(expr.func)) in (
        "tensorflow.constant",
        "tensorflow.convert_to_tensor",
        "tensorflow.Variable",
    )


# --- hoist_function ------------------------------------------------------------------------------


def hoist_function(source: str) -> str | None:
    """Move tf.functions created inside loop bodies before the loop, when that is safe.

    Safe means: what the function reads (its wrapped function, decorator arguments, defaults,
    free names of its body) is not assigned anywhere in the loop, the name it binds is bound
    nowhere else in the loop, and the loop does not read that name before the definition.
    A function moves out of as many enclosing loops as this holds for.
    """
    return rewrite_cell(source, _hoist)


def _hoist(cell: Cell) -> cst.Module | None:
    names = aliases(cell.module)
    edits: dict[cst.CSTNode, object] = {}
    for statement in list(walk(cell.module)):
        created = _created_function(names, statement)
        if created is None:
            continue
        bound, reads = created
        target = hoist_target(cell, statement, reads, {bound})
        if target is None:
            continue
        remove(edits, [statement])
        insert_before(edits, target, [statement])
    return replace(cell.module, edits) if edits else None


def _created_function(names: Aliases, statement: cst.CSTNode) -> tuple[str, set[str]] | None:
    """(name bound, names read) for ``g = tf.function(...)`` or a def decorated with it."""
    if isinstance(statement, cst.FunctionDef):
        if not any(is_tf_function(names, d.decorator) for d in statement.decorators):
            return None
        return statement.name.value, _free_names(statement)
    small = single_small(statement)
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and isinstance(small.value, cst.Call)
        and is_tf_function(names, small.value)
    ):
        return small.targets[0].target.value, loaded_names(small.value)
    return None


def _free_names(func: cst.FunctionDef) -> set[str]:
    """Names a def reads from outside: decorators, defaults and its body's non-local names
    (libcst's scope analysis: reads that resolve to no binding inside the def)."""
    return {
        access.node.value
        for scope in scopes_of(func)
        for access in scope.accesses
        if isinstance(access.node, cst.Name)
        and all(isinstance(r.scope, GlobalScope | BuiltinScope) for r in access.referents)
    }
