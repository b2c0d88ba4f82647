"""tf.data chains that run their preprocessing one element at a time, without overlap.

- ``.map(f)`` and ``.interleave(f, ...)`` without ``num_parallel_calls`` get
  ``num_parallel_calls=tf.data.AUTOTUNE`` (output order is kept: ``deterministic`` stays at its
  default).
- The chain that builds the dataset used for training (passed to ``fit`` or iterated by a
  ``for`` loop) gets ``.prefetch(tf.data.AUTOTUNE)`` at its end when it has no prefetch.

Recent TensorFlow releases already parallelise stateless map functions and add a final prefetch
through tf.data's default optimisations; the explicit options matter with those optimisations
off, with stateful or ``py_function`` maps, and on older releases, and say what is intended.
``.cache()`` is added only when asked (``cache=True``: the input-bound finding measured work
that every epoch redoes before its first batch), right after the last ``map`` that comes before
the training chain's first ``shuffle``, and only when that map's function is a lambda or a
function defined in the cell whose text names nothing random: after a random augmentation a
cache would freeze it, and after a shuffle it would replay the first epoch's order.

A chain is recognised when it starts at ``tf.data.…``, at a Keras ``*_dataset_from_*``
utility, at ``tfds.load`` or at a name assigned from such a chain.

Given what the run read of the dataset itself (the input-bound finding passes it), the rewrite
proposes only what the dataset lacks: no prefetch where a prefetch already follows its last
stage that does work (Keras' ``timeseries_dataset_from_array`` and
``image_dataset_from_directory`` prefetch, then batch), ``num_parallel_calls`` only on the maps
and interleaves whose function the dataset runs one element at a time, no cache where it
caches or after a function that draws random numbers. Without those facts it reads the cell
alone, as above.
"""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst
import libcst.matchers as m

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    dotted,
    find_kwarg,
    import_alias,
    method_name,
    parse_expr,
    positional_args,
    replace,
    rewrite_cell,
    set_kwarg,
)

# Positional index of num_parallel_calls in each method.
_PARALLEL_POSITION = {"map": 1, "interleave": 3}


# Methods that make a chain's elements differ from epoch to epoch: no cache after them.
_RANDOM_METHODS = frozenset({"shuffle", "random", "sample_from_datasets", "choose_from_datasets"})
_RANDOM_WORDS = ("random", "shuffle", "augment", "flip", "crop", "noise", "rng", "dropout")


def tune_input_pipeline(
    source: str,
    cache: bool = False,
    *,
    prefetched: bool | None = None,
    cached: bool | None = None,
    sequential: tuple[tuple[str, str], ...] | None = None,
    random_functions: tuple[str, ...] = (),
) -> str | None:
    """Parallel map/interleave and a final prefetch in the cell's tf.data chains; with `cache`,
    also ``.cache()`` after the training chain's deterministic map.

    What the run read of the training dataset, where known: `prefetched` (a prefetch already
    follows its last stage that does work), `cached`, `sequential` (the (method, function
    name) of each map or interleave that runs one element at a time: only those get
    ``num_parallel_calls``), `random_functions` (functions that draw random numbers: no cache
    after them). None: not known, the cell alone decides.
    """
    facts = _Facts(prefetched, cached, sequential, frozenset(random_functions))
    return rewrite_cell(source, lambda cell: _rewrite(cell, cache, facts))


class _Facts(NamedTuple):
    prefetched: bool | None
    cached: bool | None
    sequential: tuple[tuple[str, str], ...] | None
    random_functions: frozenset[str]

    def runs_sequentially(self, call: cst.Call) -> bool:
        """Whether the dataset runs this map/interleave call one element at a time (True where
        nothing is known of the dataset)."""
        if self.sequential is None:
            return True
        name = _function_name(call)
        return name is not None and (method_name(call), name) in self.sequential


def _function_name(call: cst.Call) -> str | None:
    """The name tf.data gives the function of a map/interleave call: the function's own name
    ("lambda" for a lambda); None where the cell does not say it."""
    given = find_kwarg(call, "map_func")
    args = positional_args(call)
    function = given.value if given is not None else (args[0].value if args else None)
    if isinstance(function, cst.Lambda):
        return "lambda"
    if isinstance(function, cst.Name):
        return function.value
    if isinstance(function, cst.Attribute):
        return function.attr.value
    return None


def _is_source(names: Aliases, expr: cst.CSTNode) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    name = dotted(expr.func)
    qualified = names.qualify(name) or ""
    if qualified.startswith("tensorflow.data.") or qualified == "tensorflow_datasets.load":
        return True
    keras_name = names.keras_name(name) or ""
    return "_dataset_from_" in keras_name


def dataset_names(names: Aliases, module: cst.Module) -> set[str]:
    """Names the cell assigns from tf.data chains (also through other such names)."""
    found: set[str] = set()
    assigns = m.findall(module, m.Assign([m.AssignTarget(m.Name())]))
    changed = True
    while changed:
        new = {a.targets[0].target.value for a in assigns if _is_chain(names, a.value, found)}
        changed = bool(new - found)
        found |= new
    return found


def _is_chain(names: Aliases, expr: cst.CSTNode, datasets: set[str]) -> bool:
    """Whether `expr` is a method chain from a dataset source or from a name in `datasets`."""
    calls = _chain_calls(names, expr)
    root = calls[-1].func.value if calls else expr  # the source call, or the name continued
    if isinstance(root, cst.Name):
        return root.value in datasets
    return _is_source(names, root)


def _chain_calls(names: Aliases, expr: cst.CSTNode) -> list[cst.Call]:
    """The method calls of a chain down to its source (or the name it continues), outermost
    first."""
    calls = []
    while m.matches(expr, m.Call(m.Attribute())) and not _is_source(names, expr):
        calls.append(expr)
        expr = expr.func.value
    return calls


def _rewrite(cell: Cell, cache: bool, facts: _Facts) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    datasets = dataset_names(names, module)
    found = import_alias(module, "tensorflow", "tf")
    if found is None:
        return None
    tf, missing = found
    autotune = parse_expr(f"{tf}.data.AUTOTUNE")
    edits: dict[cst.CSTNode, object] = {}

    # Parallel map / interleave.
    for node in m.findall(module, m.Call(m.Attribute(attr=m.Name("map") | m.Name("interleave")))):
        method = method_name(node)
        if not _is_chain(names, node.func.value, datasets):
            continue
        if find_kwarg(node, "num_parallel_calls") is not None:
            continue
        if not facts.runs_sequentially(node):
            continue
        if len(positional_args(node)) > _PARALLEL_POSITION[method] or any(
            a.star for a in node.args
        ):
            continue
        edits[node] = lambda call: set_kwarg(call, "num_parallel_calls", autotune)

    # A cache after the deterministic map of the chain that feeds training.
    if cache and not facts.cached:
        for chain in _training_chains(cell, names, datasets):
            target = _cache_point(module, _chain_calls(names, chain), facts.random_functions)
            if target is not None:
                edits[target] = _append_cache(edits.get(target))

    # A final prefetch on the chain that feeds training, unless the dataset prefetches already.
    for chain in _training_chains(cell, names, datasets) if not facts.prefetched else []:
        calls = _chain_calls(names, chain)
        if any(method_name(c) == "prefetch" for c in calls):
            continue
        edits[chain] = _append_prefetch(edits.get(chain), autotune)

    if not edits:
        return None
    module = replace(module, edits)
    return add_import(module, "tensorflow", tf) if missing else module


def _cache_point(
    module: cst.Module, calls: list[cst.Call], random_functions: frozenset[str] = frozenset()
) -> cst.Call | None:
    """The map call a cache goes right after: the last map before the first shuffle (or other
    random method) of the chain, when no cache is there yet and its function is known to the
    cell, names nothing random, and is not among the `random_functions` the run saw."""
    ordered = list(reversed(calls))  # from the source outwards
    if any(method_name(c) == "cache" for c in ordered):
        return None
    candidate = None
    for call in ordered:
        method = method_name(call)
        if method in _RANDOM_METHODS:
            break
        if method == "map":
            candidate = call
    if candidate is None or not _deterministic_function(module, candidate):
        return None
    if _function_name(candidate) in random_functions:
        return None
    return candidate


def _deterministic_function(module: cst.Module, call: cst.Call) -> bool:
    args = positional_args(call)
    given = find_kwarg(call, "map_func")
    function = given.value if given is not None else (args[0].value if args else None)
    if isinstance(function, cst.Lambda):
        text = cst.Module(body=[]).code_for_node(function)
    elif isinstance(function, cst.Name):
        defs = m.findall(module, m.FunctionDef(m.Name(function.value)))
        if len(defs) != 1:
            return False
        text = cst.Module(body=[]).code_for_node(defs[0])
    else:
        return False
    lowered = text.lower()
    return not any(word in lowered for word in _RANDOM_WORDS)


def _append_cache(previous: object):
    def edit(node: cst.Call) -> cst.Call:
        if callable(previous):
            node = previous(node)
        inner = node.with_changes(lpar=[], rpar=[])
        return cst.Call(
            func=cst.Attribute(value=inner, attr=cst.Name("cache")),
            lpar=node.lpar,
            rpar=node.rpar,
        )

    return edit


def _append_prefetch(previous: object, autotune: cst.BaseExpression):
    def edit(node: cst.Call) -> cst.Call:
        if callable(previous):
            node = previous(node)
        dot = cst.Dot()
        if isinstance(node.func, cst.Attribute):
            # The chain's own layout (same line or one method per line), without the comment
            # that ends the line before.
            dot = node.func.dot
            before = dot.whitespace_before
            if isinstance(before, cst.ParenthesizedWhitespace):
                dot = dot.with_changes(
                    whitespace_before=before.with_changes(
                        first_line=cst.TrailingWhitespace(), empty_lines=[]
                    )
                )
        inner = node.with_changes(lpar=[], rpar=[])
        return cst.Call(
            func=cst.Attribute(value=inner, dot=dot, attr=cst.Name("prefetch")),
            args=[cst.Arg(autotune)],
            lpar=node.lpar,
            rpar=node.rpar,
        )

    return edit


def _training_chains(cell: Cell, names: Aliases, datasets: set[str]) -> list[cst.Call]:
    """The chain expressions that build what ``fit`` trains on or a ``for`` loop iterates."""
    module = cell.module
    used: list[cst.CSTNode] = []
    for node in m.findall(module, m.Call(m.Attribute(attr=m.Name("fit"))) | m.For()):
        if isinstance(node, cst.Call):
            arg = find_kwarg(node, "x")
            positional = positional_args(node)
            arg = arg or (positional[0] if positional else None)
            if arg is not None:
                used.append(arg.value)
        else:
            iterated = node.iter
            if m.matches(iterated, m.Call(m.Name("enumerate"), [m.Arg(), m.ZeroOrMore()])):
                iterated = iterated.args[0].value
            used.append(iterated)
    chains: list[cst.Call] = []
    for value in used:
        if isinstance(value, cst.Call) and _is_chain(names, value, datasets):
            chains.append(value)
        elif isinstance(value, cst.Name) and value.value in datasets:
            chain = _last_top_level_assignment(module, value.value)
            if chain is not None and chain not in chains:
                chains.append(chain)
    return [c for c in chains if isinstance(c, cst.Call)]


def _last_top_level_assignment(module: cst.Module, name: str) -> cst.CSTNode | None:
    """The value of the last top-level ``name = ...``, when every binding of `name` is one."""
    assign = m.Assign([m.AssignTarget(m.Name(name))])
    values = [s.body[0].value for s in module.body if m.matches(s, m.SimpleStatementLine([assign]))]
    bindings = m.findall(module, m.AssignTarget(m.Name(name)) | m.For(m.Name(name)))
    if not values or len(bindings) != len(values):
        return None
    return values[-1]


def is_dataset(names: Aliases, expr: cst.CSTNode, datasets: set[str]) -> bool:
    """Whether `expr` is a tf.data chain or a name the cell assigns from one."""
    if isinstance(expr, cst.Name):
        return expr.value in datasets
    return _is_chain(names, expr, datasets)
