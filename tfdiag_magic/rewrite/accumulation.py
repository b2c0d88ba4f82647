"""Gradient accumulation: the update of a large batch from several small ones.

For when a batch does not fit in memory: run ``steps`` micro-batches of ``batch / steps``
samples and apply the mean of their gradients once. With a loss that is a mean over the batch
this is the update of one batch of ``steps`` times the micro-batch size.

Two forms:

(a) Keras training (``model.compile(optimizer=...)``; no GradientTape in the cell): the Keras 3
    optimizer accumulates by itself with ``gradient_accumulation_steps=steps``. Added to the
    optimizer constructed in the cell (inline in ``compile`` or assigned to the name passed to
    it); an optimizer given by name (``optimizer="adam"``) becomes its class.
(b) A custom step: ``grads = tape.gradient(...)`` followed in the same block by
    ``optimizer.apply_gradients(zip(grads, variables))`` (or ``optimizer.apply(grads,
    variables)``). The apply becomes: add ``grads / steps`` to accumulator variables, count the
    micro-batch in a ``tf.Variable``, and every ``steps`` micro-batches apply the accumulated
    gradients and only then zero the accumulators. The accumulators are created once, by the
    first step (under ``tf.init_scope``, so also inside a tf.function), from the variables being
    trained; the counter is created before the step. (The version in a much-read article zeroes
    its accumulator every batch and tests an undefined ``i``: it never accumulates.)

In both forms a batch size the cell states as a number (``fit(batch_size=...)``,
``.batch(n)``, ``BATCH_SIZE = n``) is divided by ``steps``; when one is not divisible by
``steps`` the rewrite returns None. Micro-batches left over at the end of an epoch carry over
into the next update. None when the structure is not recognised, when there are several
apply sites, or (form a) when the installed Keras lacks ``gradient_accumulation_steps``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from .batch_size import batch_size_literals, is_keras_compile
from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    code_of,
    dotted,
    find_kwarg,
    fresh_name,
    import_alias,
    insert_before,
    int_value,
    leading_comment,
    parse_expr,
    parse_stmts,
    positional_args,
    replace,
    rewrite_cell,
    set_kwarg,
    stored_names,
)

# Keras names under optimizers. that are not Keras 3 optimizers taking the option.
_NOT_ACCUMULATING = ("optimizers.schedules.", "optimizers.legacy.", "optimizers.LossScale")
_OPTIMIZER_CLASSES = {
    "adam": "Adam",
    "adamw": "AdamW",
    "sgd": "SGD",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "adadelta": "Adadelta",
    "adamax": "Adamax",
    "nadam": "Nadam",
    "ftrl": "Ftrl",
    "lion": "Lion",
    "adafactor": "Adafactor",
}


def gradient_accumulation(source: str, *, steps: int) -> str | None:
    """Accumulate gradients over `steps` micro-batches per optimizer update (see module doc)."""
    if steps < 2:
        return None
    return rewrite_cell(source, lambda cell: _rewrite(cell, steps))


def keras_supports_accumulation() -> bool:
    """Whether the installed Keras optimizers take ``gradient_accumulation_steps``."""
    return _keras_supports_accumulation(os.environ.get("TF_USE_LEGACY_KERAS", ""))


@functools.cache
def _keras_supports_accumulation(legacy: str) -> bool:
    if legacy.lower() in ("1", "true"):
        return False
    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.submodule_search_locations:
        return False
    for location in spec.submodule_search_locations:
        path = Path(location) / "src" / "optimizers" / "base_optimizer.py"
        if path.is_file() and "gradient_accumulation_steps" in path.read_text(encoding="utf-8"):
            return True
    return False


def _rewrite(cell: Cell, steps: int) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    edits: dict[cst.CSTNode, object] = {}
    literals = batch_size_literals(cell, training_only=True)
    for literal in literals:
        value = int_value(literal)
        if value is None or value % steps:
            return None
        edits[literal] = cst.Integer(str(value // steps))

    tape = m.Call(m.MatchIfTrue(lambda func: (dotted(func) or "").endswith("GradientTape")))
    if m.findall(module, tape):
        return _custom_step(cell, names, steps, edits)
    return _keras_optimizer(cell, names, steps, edits)


# --- (a) the Keras optimizer does it ------------------------------------------------------------


def _keras_optimizer(
    cell: Cell, names: Aliases, steps: int, edits: dict[cst.CSTNode, object]
) -> cst.Module | None:
    if not keras_supports_accumulation():
        return None
    module = cell.module
    compiles = m.findall(module, m.MatchIfTrue(is_keras_compile))
    if not compiles:
        return None
    keras = names.keras(module)
    missing = False
    steps_value = cst.Integer(str(steps))
    changed = False
    for call in compiles:
        arg = find_kwarg(call, "optimizer")
        if arg is None:
            positional = positional_args(call)
            arg = positional[0] if positional else None
        if arg is None:
            continue
        value = arg.value
        constructor = _optimizer_constructor(names, module, value, call)
        if constructor is not None:
            edits[constructor] = lambda c: set_kwarg(c, "gradient_accumulation_steps", steps_value)
            changed = True
        elif isinstance(value, cst.SimpleString) and value.evaluated_value.lower() in (
            _OPTIMIZER_CLASSES
        ):
            if keras is None:
                found = import_alias(module, "keras", "keras")
                if found is None:
                    return None
                keras, missing = found
            cls = _OPTIMIZER_CLASSES[value.evaluated_value.lower()]
            edits[value] = parse_expr(
                f"{keras}.optimizers.{cls}(gradient_accumulation_steps={steps})"
            )
            changed = True
        else:
            return None  # an optimizer from elsewhere: not ours to change
    if not changed:
        return None
    module = replace(module, edits)
    return add_import(module, "keras", keras) if missing else module


def _optimizer_constructor(
    names: Aliases, module: cst.Module, value: cst.CSTNode, compile_call: cst.Call
) -> cst.Call | None:
    """The ``keras.optimizers.X(...)`` call that `value` is, or that its name was assigned."""
    if isinstance(value, cst.Call):
        kind = names.keras_name(dotted(value.func)) or ""
        if not kind.startswith("optimizers.") or kind.startswith(_NOT_ACCUMULATING):
            return None
        return value
    if not isinstance(value, cst.Name):
        return None
    # The assignments of the name that come before the compile call (in source order).
    found = m.findall(
        module,
        m.Assign([m.AssignTarget(m.Name(value.value))])
        | m.MatchIfTrue(lambda n: n is compile_call),
    )
    assigned = found[: found.index(compile_call)]
    if len(assigned) != 1:
        return None
    return _optimizer_constructor(names, module, assigned[0].value, compile_call)


# --- (b) a custom GradientTape step --------------------------------------------------------------


def _custom_step(
    cell: Cell, names: Aliases, steps: int, edits: dict[cst.CSTNode, object]
) -> cst.Module | None:
    module = cell.module
    sites = []
    for statement in m.findall(module, _APPLY):
        site = _apply_site(cell, statement)
        if site is not None:
            sites.append((statement, *site))
    if len(sites) != 1:
        return None
    statement, optimizer, grads, variables = sites[0]
    found = import_alias(module, "tensorflow", "tf")
    if found is None:
        return None
    tf, missing = found
    steps_name = fresh_name(module, ["accum_steps", "accumulation_steps"])
    grads_name = fresh_name(module, ["accum_grads", "accumulated_grads"])
    count_name = fresh_name(module, ["accum_count", "micro_batch_count"])
    opt, var = code_of(optimizer), code_of(variables)

    replacement = parse_stmts(
        f"""if not {grads_name}:
    # First step: one zeroed accumulator per trained variable, created outside any graph.
    with {tf}.init_scope():
        {grads_name}.extend(
            {tf}.Variable({tf}.zeros_like(v), trainable=False) for v in {var}
        )
for acc, grad in zip({grads_name}, {grads}):
    if grad is not None:
        acc.assign_add({tf}.convert_to_tensor(grad) / {steps_name})
{count_name}.assign_add(1)
if {count_name} % {steps_name} == 0:
    # Apply the mean gradient of the last {steps_name} micro-batches, then start again.
    {opt}.apply_gradients(
        zip([{tf}.convert_to_tensor(a) for a in {grads_name}], {var})
    )
    for acc in {grads_name}:
        acc.assign({tf}.zeros_like(acc))
"""
    )
    replacement[0] = replacement[0].with_changes(leading_lines=statement.leading_lines)
    edits[statement] = cst.FlattenSentinel(replacement)

    definitions = parse_stmts(
        f"""{steps_name} = {steps}
{grads_name} = []  # accumulated gradients, one variable per trained variable
{count_name} = {tf}.Variable(0, dtype={tf}.int64, trainable=False)  # micro-batches so far
"""
    )
    definitions[0] = definitions[0].with_changes(
        leading_lines=leading_comment(
            f"Gradient accumulation: one optimizer update per {steps_name} micro-batches."
        )
    )
    top = statement
    for ancestor in cell.ancestors(statement):
        if isinstance(ancestor, cst.BaseStatement) and cell.parent(ancestor) is module:
            top = ancestor
            break
    insert_before(edits, top, definitions, copy_blank_lines=True)
    module = replace(module, edits)
    return add_import(module, "tensorflow", tf) if missing else module


_PAIR = [
    m.Arg(m.SaveMatchedNode(m.Name(), "grads"), keyword=None, star=""),
    m.Arg(m.SaveMatchedNode(m.DoNotCare(), "variables"), keyword=None, star=""),
]
_ZIP = m.Call(m.Name("zip"), _PAIR)
_OPTIMIZER = m.SaveMatchedNode(m.DoNotCare(), "optimizer")
# ``optimizer.apply_gradients(zip(grads, variables))`` (or ``list(zip(...))``) or
# ``optimizer.apply(grads, variables)``, a line of its own
_APPLY = m.SimpleStatementLine(
    [
        m.Expr(
            m.Call(
                m.Attribute(_OPTIMIZER, m.Name("apply_gradients")),
                [m.Arg(_ZIP | m.Call(m.Name("list"), [m.Arg(_ZIP)]))],
            )
            | m.Call(m.Attribute(_OPTIMIZER, m.Name("apply")), _PAIR)
        )
    ]
)
_GRADIENT = m.SimpleStatementLine(
    [m.Assign([m.AssignTarget(m.Name())], m.Call(m.Attribute(attr=m.Name("gradient"))))]
)


def _apply_site(
    cell: Cell, statement: cst.SimpleStatementLine
) -> tuple[cst.BaseExpression, str, cst.BaseExpression] | None:
    """(optimizer, gradients name, variables) when `statement` (an `_APPLY`) applies a tape's
    gradients.

    The gradients must come from ``... = tape.gradient(...)``, the last binding of that name
    before `statement` in the same block.
    """
    found = m.extract(statement, _APPLY)
    block = cell.parent(statement)
    if found is None or not isinstance(block, cst.IndentedBlock | cst.Module):
        return None
    grads = found["grads"].value
    last_assignment = None
    for other in block.body:
        if other is statement:
            break
        if grads in stored_names(other):
            last_assignment = other
    if last_assignment is None or not m.matches(last_assignment, _GRADIENT):
        return None
    return found["optimizer"], grads, found["variables"]
