"""A `fit` on in-memory arrays gets tf.data datasets built once (keras-epoch-setup).

``model.fit(x, y, batch_size=B, validation_split=s, epochs=E, ...)`` makes Keras build a tf.data
pipeline from the arrays at the start of every epoch, and another from the validation part at
its end. The rewrite builds both once, before the call, as Keras would split and batch them:

    split_at = int(len(x) * (1 - s))            # Keras keeps the first part for training
    train_data = (tf.data.Dataset.from_tensor_slices((x[:split_at], y[:split_at]))
                  .shuffle(split_at).batch(B).prefetch(tf.data.AUTOTUNE))
    val_data = (tf.data.Dataset.from_tensor_slices((x[split_at:], y[split_at:]))
                .batch(B).prefetch(tf.data.AUTOTUNE))
    model.fit(train_data, validation_data=val_data, epochs=E, ...)

``validation_data=(x_val, y_val)`` becomes a dataset the same way; ``shuffle=False`` drops the
shuffle (Keras shuffles the whole training part each epoch; a buffer of its size does too).
pandas data goes through ``np.asarray`` first, with the float type Keras casts it to where it
casts it (a frame with a float64 column is cast whole, its bool columns from `pd.get_dummies`
included: as an array of mixed columns it is one of Python objects, which tf.data refuses), and
in the shape Keras gives it: a series becomes one column, ``(n, 1)``, as Keras' own adapter
makes it (``.reshape(len(x), -1)``, which leaves a frame's rows as they are). Fed as ``(n,)``,
the model of TensorFlow's "Basic regression" tutorial (one `Horsepower` series) traced its
functions on batches of rank 1, and its later `evaluate` on the series failed ("Cannot take
the length of shape with unknown rank").
Limits: ``x`` and ``y`` must be names, attributes or subscripts (each is read twice: the
slices), passed as the first two arguments or as ``x=``/``y=``; a call with other arguments
(``sample_weight``, ``class_weight``, ``steps_per_epoch``...), ``**kwargs``, or a ``shuffle``
that is not a literal is left alone.
"""

from __future__ import annotations

import libcst as cst

from .common import (
    Cell,
    add_import,
    code_of,
    import_alias,
    insert_before,
    leading_comment,
    loaded_names,
    method_name,
    parse_stmts,
    positional_args,
    remove_args,
    replace,
    rewrite_cell,
    set_kwarg,
    small_statements,
    stored_names,
    walk,
)

# Arguments of fit the rewrite keeps or turns into the datasets; any other leaves the call alone.
_KEPT = {"epochs", "verbose", "callbacks", "initial_epoch", "validation_freq"}
_TURNED = {"x", "y", "batch_size", "validation_split", "validation_data", "shuffle"}
_SIMPLE = cst.Name | cst.Attribute | cst.Subscript
COMMENT = (
    "keras-epoch-setup: the datasets are built once; each epoch starts an iterator over\n"
    "them instead of building a pipeline from the arrays again."
)


def datasets_built_once(
    source: str, *, pandas: bool = False, x_cast: str = "", y_cast: str = ""
) -> str | None:
    """Every ``fit(x, y, ...)`` of the cell on arrays gets its datasets built before it (see
    the module's docstring); `pandas`: the data was a pandas frame or series, which Keras cast
    to the float types `x_cast` and `y_cast` ("": kept as it was)."""
    casts = (x_cast, y_cast)

    def transform(cell: Cell) -> cst.Module | None:
        module = cell.module
        # Names for tf (and np) as the cell has them, or the ones to import after the edits.
        imports = [("tensorflow", "tf")] + ([("numpy", "np")] if pandas else [])
        found = [import_alias(module, qualified, alias) for qualified, alias in imports]
        if any(item is None for item in found):
            return None
        names = [name for name, _ in found]
        tf_name, np_name = names[0], (names[1] if pandas else None)
        taken = stored_names(module) | loaded_names(module)
        edits: dict[cst.CSTNode, object] = {}
        for statement in walk(module):
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            smalls = small_statements(statement)
            if len(smalls) != 1 or not isinstance(smalls[0], cst.Expr | cst.Assign):
                continue
            call = smalls[0].value
            if method_name(call) != "fit":
                continue
            plan = _plan(call, tf_name, np_name, casts, taken)
            if plan is None:
                continue
            new_call, code = plan
            small = smalls[0].with_changes(value=new_call)
            statements = parse_stmts(code)
            statements[0] = statements[0].with_changes(leading_lines=leading_comment(COMMENT))
            edits[statement] = statement.with_changes(body=[small])
            insert_before(edits, statement, statements)
        if not edits:
            return None
        edited = replace(module, edits)
        for (qualified, _), (name, missing) in zip(imports, found, strict=True):
            if missing:
                edited = add_import(edited, qualified, name)
        return edited

    return rewrite_cell(source, transform)


def _fresh(taken: set[str], base: str) -> str:
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _as_array(np_name: str, code: str, cast: str) -> str:
    """pandas data `code` as the NumPy array Keras makes of it: of the float type `cast` where
    Keras casts it, and in rows of columns (Keras makes a series one column, `(n, 1)`; a
    frame's rows are already so)."""
    array = f'{np_name}.asarray({code}, dtype="{cast}")' if cast else f"{np_name}.asarray({code})"
    return f"{array}.reshape(len({code}), -1)"


def _plan(
    call: cst.Call, tf_name: str, np_name: str | None, casts: tuple[str, str], taken: set[str]
) -> tuple[cst.Call, str] | None:
    """The new call and the code that builds its datasets, or None when the call is not one
    the rewrite handles."""
    if any(a.star for a in call.args):
        return None
    positional = positional_args(call)
    if len(positional) > 2:
        return None
    keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
    if set(keywords) - _KEPT - _TURNED:
        return None
    x_arg = positional[0] if positional else keywords.get("x")
    y_arg = positional[1] if len(positional) > 1 else keywords.get("y")
    if x_arg is None or y_arg is None:
        return None
    if not isinstance(x_arg.value, _SIMPLE) or not isinstance(y_arg.value, _SIMPLE):
        return None
    shuffle = True
    if "shuffle" in keywords:
        value = keywords["shuffle"].value
        if not (isinstance(value, cst.Name) and value.value in ("True", "False")):
            return None
        shuffle = value.value == "True"
    x, y = code_of(x_arg.value), code_of(y_arg.value)
    lines = []
    if np_name is not None:  # pandas: its arrays, once
        arrays = _fresh(taken, "features"), _fresh(taken, "labels")
        pairs = zip((x, y), casts, strict=True)
        as_arrays = (_as_array(np_name, code, cast) for code, cast in pairs)
        lines.append(f"{arrays[0]}, {arrays[1]} = {', '.join(as_arrays)}")
        x, y = arrays
    batch = keywords.get("batch_size")
    batch_code = code_of(batch.value) if batch is not None else "32"
    if batch_code == "None":
        batch_code = "32"
    dataset = f"{tf_name}.data.Dataset.from_tensor_slices"
    prefetch = f".prefetch({tf_name}.data.AUTOTUNE)"
    train = _fresh(taken, "train_data")
    val_code = None
    split = keywords.get("validation_split")
    given = keywords.get("validation_data")
    if split is not None and given is None:
        split_at = _fresh(taken, "split_at")
        lines.append(f"{split_at} = int(len({x}) * (1 - {code_of(split.value)}))")
        train_slices, count = f"({x}[:{split_at}], {y}[:{split_at}])", split_at
        val_code = f"({x}[{split_at}:], {y}[{split_at}:])"
    else:
        train_slices, count = f"({x}, {y})", f"len({x})"
        if given is not None:
            value = given.value
            if not (isinstance(value, cst.Tuple) and len(value.elements) == 2):
                return None
            if split is not None:
                return None  # Keras ignores validation_split then; leave the call as it is
            xv, yv = (code_of(e.value) for e in value.elements)
            if np_name is not None:
                pairs = zip((xv, yv), casts, strict=True)
                xv, yv = (_as_array(np_name, code, cast) for code, cast in pairs)
            val_code = f"({xv}, {yv})"
    shuffled = f"\n    .shuffle({count})" if shuffle else ""
    lines.append(
        f"{train} = (\n    {dataset}({train_slices}){shuffled}\n"
        f"    .batch({batch_code})\n    {prefetch}\n)"
    )
    val = None
    if val_code is not None:
        val = _fresh(taken, "val_data")
        lines.append(
            f"{val} = (\n    {dataset}({val_code})\n    .batch({batch_code})\n    {prefetch}\n)"
        )
    doomed = [a for a in call.args if a is not x_arg and (a is y_arg or (a.keyword is not None
              and a.keyword.value in ("batch_size", "validation_split", "shuffle")))]  # fmt: skip
    new_call = remove_args(call, doomed)
    new_call = new_call.with_changes(
        args=[a.with_changes(value=cst.Name(train)) if a is x_arg else a for a in new_call.args]
    )
    if val is not None:
        new_call = set_kwarg(new_call, "validation_data", cst.Name(val))
    return new_call, "\n".join(lines) + "\n"
