"""Mixed precision: 16-bit compute with float32 variables, outputs kept in float32.

Inserts ``keras.mixed_precision.set_global_policy(policy)`` (``"mixed_float16"`` unless the
diagnosis advises ``"mixed_bfloat16"``, see ``mixed-precision-available``; spelled as the cell
spells Keras) before the first statement that builds a model, and makes the layer that produces the
model's outputs compute in float32 (``dtype="float32"``) so the loss is computed from float32
outputs: the last layer of ``Sequential([...])``, the last ``model.add(...)`` of a Sequential
model, or the layer whose call gives the ``outputs`` of a functional ``Model(inputs, outputs)``.
When no such layer is found (subclassed models, ``keras.applications``), the policy line comes
with a comment saying which layer needs ``dtype="float32"``.

Limits: cells with a custom ``GradientTape`` step are left alone (None) under mixed_float16: they
also need loss scaling (``keras.optimizers.LossScaleOptimizer`` and ``optimizer.scale_loss``),
which ``model.fit`` does by itself. Cells that already set a policy are left alone. On GPUs the
speed-up needs Tensor Cores (compute capability 7.0 or higher).
"""

from __future__ import annotations

import libcst as cst

from .clear_session import builds_model, model_builders
from .common import (
    Aliases,
    Cell,
    add_import,
    aliases,
    dotted,
    find_kwarg,
    import_alias,
    insert_before,
    leading_comment,
    parse_stmt,
    positional_args,
    replace,
    rewrite_cell,
    set_kwarg,
    single_small,
    walk,
    walk_skipping_defs,
)

_FLOAT32 = cst.SimpleString('"float32"')


def mixed_precision(source: str, policy: str = "mixed_float16") -> str | None:
    """Enable the `policy` before the model is built; keep outputs in float32."""
    return rewrite_cell(source, lambda cell: _rewrite(cell, policy))


def _rewrite(cell: Cell, policy_name: str) -> cst.Module | None:
    module = cell.module
    names = aliases(module)
    for node in walk(module):
        name = dotted(node.func) if isinstance(node, cst.Call) else None
        if name and name.endswith(("set_global_policy", "mixed_precision.set_policy")):
            return None  # a policy is already chosen
        if name and name.endswith("GradientTape") and policy_name == "mixed_float16":
            return None  # a custom step would also need loss scaling
    builders = model_builders(names, module)
    first = next(
        (
            s
            for s in module.body
            if not isinstance(s, cst.FunctionDef | cst.ClassDef)
            and any(builds_model(names, n, builders) for n in walk_skipping_defs(s))
        ),
        None,
    )
    if first is None:
        return None
    keras = names.keras(module)
    missing = False
    if keras is None:
        found = import_alias(module, "keras", "keras")
        if found is None:
            return None
        keras, missing = found
    edits: dict[cst.CSTNode, object] = {}
    outputs = _output_layers(names, module)
    for layer in outputs:
        if find_kwarg(layer, "dtype") is None:
            edits[layer] = lambda call: set_kwarg(call, "dtype", _FLOAT32)
    policy = parse_stmt(f'{keras}.mixed_precision.set_global_policy("{policy_name}")\n')
    if not outputs:
        policy = policy.with_changes(
            leading_lines=leading_comment(
                'The layer that produces the model\'s outputs needs dtype="float32" under this\n'
                "policy, so that the loss is computed in float32."
            )
        )
    insert_before(edits, first, [policy])
    module = replace(module, edits)
    return add_import(module, "keras", keras) if missing else module


def _output_layers(names: Aliases, module: cst.Module) -> list[cst.Call]:
    """The constructor calls of the layers that produce each model's outputs, when clear."""
    layers: list[cst.Call] = []
    sequential_names: set[str] = set()
    for node in walk(module):
        if not isinstance(node, cst.Call):
            continue
        kind = names.keras_name(dotted(node.func))
        if kind in ("Sequential", "models.Sequential"):
            args = positional_args(node)
            layer_list = (
                args[0].value if args else getattr(find_kwarg(node, "layers"), "value", None)
            )
            if isinstance(layer_list, cst.List) and layer_list.elements:
                last = layer_list.elements[-1].value
                if isinstance(last, cst.Call) and _is_layer(names, last):
                    layers.append(last)
        elif kind in ("Model", "models.Model", "Functional"):
            args = positional_args(node)
            outputs = find_kwarg(node, "outputs")
            value = outputs.value if outputs else (args[1].value if len(args) > 1 else None)
            layer = _layer_of_output(names, module, value, node)
            if layer is not None:
                layers.append(layer)
    # model = Sequential() followed by model.add(...) calls: the last add.
    for node in walk(module):
        small = single_small(node)
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and isinstance(small.value, cst.Call)
            and names.keras_name(dotted(small.value.func)) in ("Sequential", "models.Sequential")
            and not small.value.args
        ):
            sequential_names.add(small.targets[0].target.value)
    for name in sequential_names:
        adds = [
            n
            for n in walk(module)
            if isinstance(n, cst.Call)
            and dotted(n.func) == f"{name}.add"
            and n.args
            and isinstance(n.args[0].value, cst.Call)
            and _is_layer(names, n.args[0].value)
        ]
        if adds:
            layers.append(adds[-1].args[0].value)
    return layers


def _is_layer(names: Aliases, call: cst.Call) -> bool:
    return (names.keras_name(dotted(call.func)) or "").startswith("layers.")


def _layer_of_output(
    names: Aliases, module: cst.Module, value: cst.CSTNode | None, model_call: cst.Call
) -> cst.Call | None:
    """``Dense(...)`` of ``outputs = Dense(...)(x)`` (or of the inline output expression)."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Call):
        return value.func if _is_layer(names, value.func) else None
    if not isinstance(value, cst.Name):
        return None
    assigned = []
    for node in walk(module):
        if node is model_call:
            break
        small = node if isinstance(node, cst.Assign) else None
        if (
            small is not None
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and small.targets[0].target.value == value.value
        ):
            assigned.append(small.value)
    if not assigned:
        return None
    last = assigned[-1]
    if (
        isinstance(last, cst.Call)
        and isinstance(last.func, cst.Call)
        and _is_layer(names, last.func)
    ):
        return last.func
    return None
