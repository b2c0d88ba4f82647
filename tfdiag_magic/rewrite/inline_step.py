"""An eager training step written inline in a loop becomes one compiled function.

Fixes the eager loops of tutorials and guides, where the step is not a function of its own:
keras-io's "Writing a training loop from scratch" before its `tf.function` section
(``with tf.GradientTape() as tape: ...``, ``tape.gradient``, ``optimizer.apply(...)`` in the
loop's body), TensorFlow's "Custom training: walkthrough" (a cell function ``grad`` that
returns the gradients, applied in the loop), a GAN's two tapes and two updates. The
statements from the first tape (or call of a cell function that takes gradients) to the last
optimizer update of the loop's body move, unchanged, into ``@tf.function def train_step(...)``
defined once before the outermost loop; the loop calls it with the batch, and gets back the
names that code after the step reads (its loss, its logits for a metric).

The compiled step trains the same weights as the eager one, to rounding, unless it draws
random numbers with TensorFlow's stateful random ops inside the step (``tf.random.normal``,
``tf.nn.dropout``; Keras 3's layers draw from seed variables, alike in both): a graph's random
ops take other seeds than eager ones, so their draws differ (a GAN's noise drawn in the loop before
the step is passed in, and stays the same).

Limits, where the rewrite is not safe (None): the step reads a name the loops bind other than
its batch and the tensors the body makes before it (a learning rate per epoch, the index of
``enumerate``, the counter of a loop over ``range``: Python values a graph would freeze or
retrace on), or a value it carries from step to step (``total = total + loss``); it binds the
tape for code after it, breaks, continues or returns; it, or a cell function it calls, does
what `compile_eager_step` leaves alone (``print``, ``.numpy()``, NumPy, building models or
variables).
"""

from __future__ import annotations

import itertools

import libcst as cst
import libcst.matchers as m

from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    block_statements,
    dotted,
    enclosing_loops,
    fresh_name,
    import_alias,
    loaded_names,
    loop_body,
    method_name,
    replace,
    rewrite_cell,
    stored_names,
    walk,
    walk_skipping_defs,
)
from .eager import graph_safe_nodes

_UPDATES = {"apply_gradients", "apply"}
_LEAVES = m.Break() | m.Continue() | m.Return()


def compile_inline_step(source: str) -> str | None:
    """Move a loop's inline eager training step into one `tf.function`; None when no loop of
    the cell has one that can move safely."""
    return rewrite_cell(source, _rewrite)


def _rewrite(cell: Cell) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    functions = {node.name.value: node for node in module.body if isinstance(node, cst.FunctionDef)}
    found = import_alias(module, "tensorflow", "tf")
    if found is None:
        return None
    tf, missing_import = found
    edits: dict[cst.CSTNode, object] = {}
    definitions: dict[cst.CSTNode, list[cst.FunctionDef]] = {}
    taken: set[str] = set()
    for loop in m.findall(module, m.For()):
        if any(isinstance(a, cst.ClassDef) for a in cell.ancestors(loop)):
            continue
        run = _step_run(names, functions, loop)
        if run is None:
            continue
        step = _step_name(module, taken)
        moved = _move(cell, names, functions, loop, run, step, tf)
        if moved is not None:
            taken.add(step)
            outermost, definition, changes = moved
            edits.update(changes)
            definitions.setdefault(outermost, []).append(definition)
    if not definitions:
        return None
    for outermost, new in definitions.items():
        edits[outermost] = lambda node, new=new: cst.FlattenSentinel(
            [*new, node.with_changes(leading_lines=[cst.EmptyLine(indent=False)])]
        )
    edited = replace(module, edits)
    return add_import(edited, "tensorflow", tf) if missing_import else edited


def _step_name(module: cst.Module, taken: set[str]) -> str:
    """``train_step``, or the first of ``train_step_2``, ... that neither the cell nor an
    earlier step of this rewrite uses."""
    numbered = (f"train_step_{i}" for i in itertools.count(2))
    for candidate in itertools.chain(["train_step"], numbered):
        if candidate not in taken and fresh_name(module, [candidate]) == candidate:
            return candidate
    raise AssertionError("unreachable: the candidates never run out")


def _step_run(
    names: Aliases, functions: dict[str, cst.FunctionDef], loop: cst.For
) -> list[cst.BaseStatement] | None:
    """The statements of the loop's body from its first gradient to its last update."""
    body = loop_body(loop)
    updates = [i for i, s in enumerate(body) if _is_update(s)]
    if not updates:
        return None
    gradients = [
        i for i, s in enumerate(body[: updates[-1] + 1]) if _takes_gradients(names, functions, s)
    ]
    if not gradients or gradients[0] > updates[0]:
        return None
    return body[gradients[0] : updates[-1] + 1]


def _is_update(statement: cst.BaseStatement) -> bool:
    """``optimizer.apply_gradients(...)`` or ``optimizer.apply(...)`` as a statement."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    return isinstance(small, cst.Expr) and method_name(small.value) in _UPDATES


def _takes_gradients(
    names: Aliases, functions: dict[str, cst.FunctionDef], statement: cst.BaseStatement
) -> bool:
    """A ``with tf.GradientTape() as tape:`` block, or a call of a cell function that does
    ``tape.gradient`` (and no update of its own)."""
    if isinstance(statement, cst.With):
        return any(
            isinstance(item.item, cst.Call)
            and names.qualify(dotted(item.item.func)) == "tensorflow.GradientTape"
            for item in statement.items
        )
    for node in walk(statement):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            func = functions.get(node.func.value)
            if func is not None:
                methods = {method_name(n) for n in walk_skipping_defs(func)}
                if "gradient" in methods and not methods & _UPDATES:
                    return True
    return False


def _move(
    cell: Cell,
    names: Aliases,
    functions: dict[str, cst.FunctionDef],
    loop: cst.For,
    run: list[cst.BaseStatement],
    step: str,
    tf: str,
) -> tuple[cst.CSTNode, cst.FunctionDef, dict[cst.CSTNode, object]] | None:
    """The loop's step as the function `step`: the loop to define it before, its definition,
    and the edits that call it in the run's place; None where that is not safe."""
    if not _run_graph_safe(names, functions, run):
        return None
    run_block = cst.IndentedBlock(body=run)
    reads, binds = loaded_names(run_block), stored_names(run_block)
    loops = [loop, *enclosing_loops(cell, loop)]
    batch = _batch_names(loop)
    given = [*batch, *_tensors_made_before(names, loop, run[0], batch)]
    params = [name for name in dict.fromkeys(given) if name in reads]
    if not _bound_before_read(run, (reads & binds) - set(params)):
        return None  # a value carried from one step to the next (``total = total + loss``)
    # Every name the loops bind changes while they run: read by the step other than as its
    # batch (a learning rate per epoch, a step counter), a graph would keep its first value.
    changing: set[str] = set()
    for each in loops:
        changing |= stored_names(cst.IndentedBlock(body=loop_body(each)))
        changing |= {n.value for n in m.findall(each.target, m.Name())}
    if (reads - binds - set(params)) & changing:
        return None
    outside = _read_after(cell, loops[-1], run, binds)
    if any(_is_tape(run, name) for name in outside):
        return None
    order = [name for statement in _leaves(run) for name in _in_order(statement)]
    returns = sorted(outside, key=order.index)
    result = ", ".join(returns)
    call = f"{step}({', '.join(params)})"
    head = run[0]
    comments = [line for line in head.leading_lines if line.comment is not None]
    statements = [
        *(s.with_changes(leading_lines=comments) if s is head else s for s in run),
        *([cst.parse_statement(f"return {result}")] if returns else []),
    ]
    definition = cst.FunctionDef(
        name=cst.Name(step),
        params=cst.Parameters(params=[cst.Param(cst.Name(p)) for p in params]),
        body=cst.IndentedBlock(body=statements),
        decorators=[cst.Decorator(decorator=cst.parse_expression(f"{tf}.function"))],
        leading_lines=[cst.EmptyLine(indent=False)],
    )
    new_call = cst.parse_statement(f"{result} = {call}" if returns else call)
    blank = [line for line in head.leading_lines if line.comment is None][:1]
    new_call = new_call.with_changes(leading_lines=blank)
    edits: dict[cst.CSTNode, object] = {head: new_call}
    for statement in run[1:]:
        edits[statement] = cst.RemovalSentinel.REMOVE
    return loops[-1], definition, edits


def _read_after(
    cell: Cell, loop: cst.For | cst.While, run: list[cst.BaseStatement], binds: set[str]
) -> set[str]:
    """Which of the names the run binds code outside it may read with the run's value: in the
    run's own scope, later in the cell with no other binding of the name between, or before
    the run inside `loop`, the outermost loop around it (a later iteration's read)."""
    scope = _def_of(cell, loop)
    first, last = cell.line(run[0]), cell.end_line(run[-1])
    loop_first, loop_last = cell.line(loop), cell.end_line(loop)
    rebound: dict[str, list[int]] = {}
    for each in cell.scopes:
        for assignment in each.assignments:
            if assignment.name in binds and isinstance(assignment.node, cst.CSTNode):
                try:
                    line = cell.line(assignment.node)
                except KeyError:
                    continue
                if not first <= line <= last:
                    rebound.setdefault(assignment.name, []).append(line)
    read = set()
    for name in cell.loads:
        if name.value not in binds or _def_of(cell, name) is not scope:
            continue
        line = cell.line(name)
        if first <= line <= last:
            continue
        if line > last:
            if not any(last < other < line for other in rebound.get(name.value, [])):
                read.add(name.value)
        elif loop_first <= line < first <= loop_last:
            read.add(name.value)
    return read


def _def_of(cell: Cell, node: cst.CSTNode) -> cst.CSTNode | None:
    """The function, lambda or class `node` is in (None: the cell's top level)."""
    return next(
        (
            a
            for a in cell.ancestors(node)
            if isinstance(a, cst.FunctionDef | cst.Lambda | cst.ClassDef)
        ),
        None,
    )


def _run_graph_safe(
    names: Aliases, functions: dict[str, cst.FunctionDef], run: list[cst.BaseStatement]
) -> bool:
    """The run, and every cell function it calls (and they call), can run in a graph."""
    seen: set[str] = set()
    pending: list[cst.CSTNode] = list(run)
    while pending:
        node = pending.pop()
        if not graph_safe_nodes(names, walk_skipping_defs(node)):
            return False
        top = any(node is statement for statement in run)
        if top and any(m.matches(n, _LEAVES) for n in walk_skipping_defs(node)):
            return False
        for call in walk_skipping_defs(node):
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Name):
                name = call.func.value
                if name in functions and name not in seen:
                    seen.add(name)
                    pending.append(functions[name])
    return True


def _batch_names(loop: cst.For) -> list[str]:
    """The names the loop binds to its batch, in order: all of its target's, less the index
    of ``enumerate``; none for a loop over ``range`` (Python numbers, not a batch)."""
    target = loop.target
    if isinstance(loop.iter, cst.Call):
        called = dotted(loop.iter.func)
        if called == "range":
            return []
        if called == "enumerate" and isinstance(target, cst.Tuple) and target.elements:
            target = cst.Tuple(elements=target.elements[1:])
    return [n.value for n in m.findall(target, m.Name())]


def _tensors_made_before(
    names: Aliases, loop: cst.For, head: cst.BaseStatement, batch: list[str]
) -> list[str]:
    """Names the loop's body binds, before the step, to tensors the step may take as
    arguments: what a TensorFlow function returns (``noise = tf.random.normal(...)``), the
    parts of the batch (``x, y = batch``, ``images = batch["image"]``), the next batch of an
    iterator (``x, y = next(iterator)``)."""
    made: list[str] = []
    for statement in loop_body(loop):
        if statement is head:
            break
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and _a_tensor(names, small.value, [*batch, *made]):
                made += [n.value for t in small.targets for n in m.findall(t.target, m.Name())]
    return made


def _a_tensor(names: Aliases, value: cst.BaseExpression, batch: list[str]) -> bool:
    if isinstance(value, cst.Tuple):
        return all(_a_tensor(names, e.value, batch) for e in value.elements)
    if isinstance(value, cst.Subscript):
        value = value.value
    if isinstance(value, cst.Name):
        return value.value in batch
    if isinstance(value, cst.Call):
        called = dotted(value.func)
        return called == "next" or (names.qualify(called) or "").startswith("tensorflow.")
    return False


def _leaves(run: list[cst.BaseStatement]) -> list[cst.CSTNode]:
    """The run's statements in the order they run, a ``with`` block as its items (which bind
    the tape) and then its body's statements."""
    leaves: list[cst.CSTNode] = []
    for statement in run:
        if isinstance(statement, cst.With):
            leaves.extend(statement.items)
            leaves.extend(_leaves(block_statements(statement.body)))
        else:
            leaves.append(statement)
    return leaves


def _names(node: cst.CSTNode, stored: bool) -> set[str]:
    if isinstance(node, cst.WithItem):
        if stored:
            return {n.value for n in m.findall(node.asname, m.Name())} if node.asname else set()
        return loaded_names(cst.Expr(node.item))
    return stored_names(node) if stored else loaded_names(node)


def _bound_before_read(run: list[cst.BaseStatement], names: set[str]) -> bool:
    """Whether each of `names` is bound by a statement of the run before any reads it (a
    statement that reads and binds it, ``x = x + 1``, reads it first)."""
    bound: set[str] = set()
    for leaf in _leaves(run):
        if (_names(leaf, stored=False) & names) - bound:
            return False
        bound |= _names(leaf, stored=True)
    return True


def _in_order(leaf: cst.CSTNode) -> list[str]:
    """The names `leaf` binds, in the order they appear in it."""
    bound = _names(leaf, stored=True)
    seen = [n.value for n in m.findall(leaf, m.Name()) if n.value in bound]
    return list(dict.fromkeys(seen))


def _is_tape(run: list[cst.BaseStatement], name: str) -> bool:
    """Whether `name` is bound by a ``with ... as name`` of the run (a tape cannot leave a
    graph)."""
    return any(
        isinstance(leaf, cst.WithItem) and name in _names(leaf, stored=True)
        for leaf in _leaves(run)
    )
