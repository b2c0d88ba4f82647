"""Eager TensorFlow calls that make a new kernel on every call, which the eager runtime caches
and keeps: memory that grows per call with nothing kept by the code.

- A random op (``tf.random.normal``, ``tf.random.uniform``, ``tf.nn.dropout``, ...) without a
  ``seed=`` of its own while a global seed is set (``tf.random.set_seed``): TensorFlow gives
  each call a fresh op seed (`random_seed.get_seed` draws one from the context's generator,
  `context.internal_operation_seed`), and the seeds are attributes of the op.
- ``tf.py_function``: each call registers the Python function under a new token
  (`script_ops._internal_py_func`, `_py_funcs.insert`), an attribute of the op, and appends it
  to the default graph's `_py_funcs_used_in_graph`.

Measured on TensorFlow 2.21 (CPU, this machine), RSS per 1000 eager calls: `tf.random.normal`,
`uniform`, `shuffle`, `categorical`, `tf.nn.dropout`, `tf.image.random_flip_left_right` under a
global seed +35 MiB (2.4 ms a call against 0.19 ms without the seed); none without the global
seed, none with ``seed=1`` on the op, none from a `tf.random.Generator`, 0.06 MiB from a
tf.function making the op. `tf.py_function` +36 MiB (2.6 ms a call), 0.11 MiB inside a
tf.function, none calling the Python function itself; `tf.numpy_function` none.

This module reads the code only (the calls, with `ast`); the rules say whether the run set a
global seed (``Record.facts["global_seed"]``) and whether memory grew where the calls ran.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# The stateful random ops of `tf.random` and their positional index of `seed` (an op given a
# seed positionally has one). `tf.random.stateless_*` take a seed tensor: no kernel per call.
RANDOM_OPS: dict[str, int] = {
    "normal": 4,
    "uniform": 4,
    "truncated_normal": 4,
    "shuffle": 1,
    "categorical": 3,
    "gamma": 4,
    "poisson": 3,
    "random_normal": 4,
    "random_uniform": 4,
    "random_shuffle": 1,
    "random_gamma": 4,
    "random_poisson": 3,
    "multinomial": 2,
}
# Other TensorFlow calls that draw from the same seeds: (module path, name) -> seed index.
OTHER_RANDOM: dict[tuple[str, str], int] = {
    ("nn", "dropout"): 3,
    ("image", "random_flip_left_right"): 1,
    ("image", "random_flip_up_down"): 1,
    ("image", "random_brightness"): 2,
    ("image", "random_contrast"): 3,
    ("image", "random_hue"): 2,
    ("image", "random_saturation"): 3,
    ("image", "random_crop"): 2,
    ("image", "random_jpeg_quality"): 3,
}
TENSORFLOW = "tensorflow"


RANDOM = "random"  # a random op without a seed of its own: a kernel per call under a global seed
PY_FUNCTION = "py_function"  # a kernel per call always


@dataclass
class KernelCall:
    """An eager TensorFlow call that can make a new kernel every time it runs."""

    line: int  # the call's line in the code given (numbered as the code's frames number it)
    name: str  # as the code spells it: "tf.random.normal"
    kind: str  # RANDOM or PY_FUNCTION


def kernel_per_call_calls(
    code: str, first: int, last: int, modules: dict[str, str] | None = None
) -> list[KernelCall]:
    """The calls that make a kernel per call (random ops without a ``seed=``, `tf.py_function`)
    that the lines `first` to `last` of `code` run eagerly: the calls on those lines, and in
    the functions of `code` that those lines call (and so on), leaving out the bodies of
    tf.functions (a graph makes its op once).

    `modules` maps names bound before the code ran to the modules they are (``tf`` ->
    ``tensorflow``); a name the code binds by its own imports wins.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names = dict(modules or {})
    names.setdefault("tf", TENSORFLOW)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.partition(".")[0]
                names[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    functions = {
        node.name: node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    graph = _tf_function_names(tree, names) | {
        name for name, node in functions.items() if _is_tf_function(node, names)
    }
    found: list[KernelCall] = []
    seen: set[str] = set()
    pending: list[ast.AST] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt)
        and first <= node.lineno
        and (node.end_lineno or node.lineno) <= last
    ]
    if not pending:  # `first`..`last` inside one statement: that statement
        pending = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.stmt)
            and node.lineno <= first
            and last <= (node.end_lineno or node.lineno)
            and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ][-1:]
    while pending:
        for node in _walk_eager(pending.pop(), graph):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            if callee in functions and callee not in graph and callee not in seen:
                seen.add(callee)
                pending.append(functions[callee])
                continue
            name = _dotted(node.func)
            kind = _kernel_per_call(node, name, names) if name else None
            if kind is not None:
                found.append(KernelCall(line=node.lineno, name=name, kind=kind))
    unique = {(c.line, c.name): c for c in found}
    return sorted(unique.values(), key=lambda c: c.line)


def _walk_eager(node: ast.AST, graph: set[str]):
    """The nodes under `node`, leaving out the bodies of tf.functions it defines."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.name in graph:
                continue
            stack.append(child)


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _qualified(name: str, names: dict[str, str]) -> str | None:
    head, _, rest = name.partition(".")
    base = names.get(head)
    if base is None:
        return None
    return f"{base}.{rest}" if rest else base


def _kernel_per_call(call: ast.Call, name: str, names: dict[str, str]) -> str | None:
    qualified = _qualified(name, names)
    if qualified is None or not qualified.startswith(TENSORFLOW + "."):
        return None
    path = qualified[len(TENSORFLOW) + 1 :].split(".")
    if path[:2] == ["compat", "v1"] or path[:2] == ["compat", "v2"]:
        path = path[2:]
    if path == ["py_function"]:  # not compat.v1.py_func (numpy_function: none measured)
        return PY_FUNCTION
    return RANDOM if _unseeded_random(call, path) else None


def _unseeded_random(call: ast.Call, path: list[str]) -> bool:
    if len(path) == 2 and path[0] == "random" and path[1] in RANDOM_OPS:
        seed_at = RANDOM_OPS[path[1]]
    elif len(path) == 1 and path[0] in RANDOM_OPS and path[0].startswith("random_"):
        seed_at = RANDOM_OPS[path[0]]  # tf.random_normal, tf.random_uniform (compat.v1)
    elif len(path) == 2 and (path[0], path[1]) in OTHER_RANDOM:
        seed_at = OTHER_RANDOM[(path[0], path[1])]
    else:
        return False
    if any(keyword.arg == "seed" for keyword in call.keywords):
        return False
    if any(keyword.arg is None for keyword in call.keywords):  # **kwargs: may hold a seed
        return False
    return len(call.args) <= seed_at and not any(isinstance(a, ast.Starred) for a in call.args)


def _is_tf_function(node: ast.FunctionDef | ast.AsyncFunctionDef, names: dict[str, str]) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = _dotted(target)
        if name and _qualified(name, names) == f"{TENSORFLOW}.function":
            return True
    return False


def _tf_function_names(tree: ast.AST, names: dict[str, str]) -> set[str]:
    """Functions the code wraps as ``f = tf.function(g)``: g's body runs as a graph."""
    wrapped: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            name = _dotted(node.func)
            if name and _qualified(name, names) == f"{TENSORFLOW}.function":
                wrapped.add(node.args[0].id)
    return wrapped
