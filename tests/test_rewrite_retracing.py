"""Retracing fixes: scalars as tensors, reduce_retracing, signatures, hoisting; run for real."""

from __future__ import annotations

from tfdiag_magic.rewrite import (
    hoist_function,
    input_signature,
    reduce_retracing,
    scalars_to_tensors,
)

from .test_rewrite_common import assert_compiles, execute

SCALAR_CELL = """import tensorflow as tf

@tf.function
def scale(x, factor):
    return x * factor  # multiply

x = tf.ones((3,))
for step in range(5):
    lr = 0.1 * (step + 1)  # a new Python float every step
    y = scale(x, lr)
"""

KEYWORD_CELL = """import tensorflow as tensorflow_
import keras

w = tensorflow_.Variable(tensorflow_.ones((2,)))

def update(batch, learning_rate, clip=1.0):
    w.assign_sub(learning_rate * tensorflow_.clip_by_value(batch, -clip, clip))
    return w

fast_update = tensorflow_.function(update)
for epoch in range(4):
    fast_update(
        tensorflow_.ones((2,)),
        learning_rate=0.5 / (epoch + 1),  # decays
    )
"""


def test_scalar_argument_is_wrapped_and_traces_once():
    out = scalars_to_tensors(SCALAR_CELL, function="scale", arguments=["factor"])
    assert out is not None
    assert_compiles(out)
    assert "y = scale(x, tf.constant(lr))" in out
    assert "# a new Python float every step" in out and "# multiply" in out
    assert execute(SCALAR_CELL)["scale"].experimental_get_tracing_count() == 5
    assert execute(out)["scale"].experimental_get_tracing_count() == 1


def test_position_finds_a_keyword_argument_through_the_wrapped_def():
    out = scalars_to_tensors(KEYWORD_CELL, function="fast_update", arguments=[1])
    assert out is not None
    assert "learning_rate=tensorflow_.constant(0.5 / (epoch + 1)),  # decays" in out
    assert execute(KEYWORD_CELL)["fast_update"].experimental_get_tracing_count() == 4
    ns = execute(out)
    assert ns["fast_update"].experimental_get_tracing_count() == 1
    expected = 1.0 - sum(0.5 / (e + 1) for e in range(4))
    assert abs(float(ns["w"][0]) - expected) < 1e-5


def test_scalars_to_tensors_returns_none_when_nothing_to_wrap():
    assert scalars_to_tensors(SCALAR_CELL, function="other", arguments=["factor"]) is None
    wrapped = SCALAR_CELL.replace("scale(x, lr)", "scale(x, tf.constant(lr))")
    assert scalars_to_tensors(wrapped, function="scale", arguments=["factor"]) is None
    assert scalars_to_tensors(SCALAR_CELL, function="scale", arguments=[5]) is None


SHAPES_CELL = """import tensorflow as tf

# sums rows
@tf.function
def total(batch):
    return tf.reduce_sum(batch)

for n in range(1, 6):
    total(tf.ones((n, 2)))  # a new shape each time
"""


def test_reduce_retracing_on_decorator_cuts_traces():
    out = reduce_retracing(SHAPES_CELL, function="total")
    assert out is not None
    assert "# sums rows\n@tf.function(reduce_retracing=True)\ndef total(batch):" in out
    assert execute(SHAPES_CELL)["total"].experimental_get_tracing_count() == 5
    assert execute(out)["total"].experimental_get_tracing_count() <= 2
    assert reduce_retracing(out, function="total") is None  # already there


def test_reduce_retracing_on_wrapping_call_keeps_other_options():
    source = "import tensorflow as tf\nstep = tf.function(train, jit_compile=False)\n"
    out = reduce_retracing(source, function="step")
    assert out == (
        "import tensorflow as tf\n"
        "step = tf.function(train, jit_compile=False, reduce_retracing=True)\n"
    )
    # The traced Python function's own name finds the same call.
    assert reduce_retracing(source, function="train") == out
    assert reduce_retracing(source, function="missing") is None


def test_input_signature_gives_one_trace():
    spec = "tf.TensorSpec(shape=[None, 2], dtype=tf.float32)"
    out = input_signature(SHAPES_CELL, function="total", specs=[spec])
    assert out is not None
    assert "@tf.function(input_signature=[tf.TensorSpec(shape=[None, 2], dtype=tf.float32)])" in out
    assert execute(out)["total"].experimental_get_tracing_count() == 1


def test_input_signature_follows_the_alias_and_checks_the_parameters():
    out = input_signature(
        KEYWORD_CELL,
        function="fast_update",
        specs=["tf.TensorSpec([2], tf.float32)", "tf.TensorSpec([], tf.float32)"],
    )
    assert out is not None
    assert (
        "tensorflow_.function(update, input_signature=[tensorflow_.TensorSpec([2], "
        "tensorflow_.float32), tensorflow_.TensorSpec([], tensorflow_.float32)])" in out
    )
    # One spec cannot cover two parameters without defaults; three is too many.
    one = ["tf.TensorSpec([2], tf.float32)"]
    assert input_signature(KEYWORD_CELL, function="fast_update", specs=one) is None
    assert input_signature(KEYWORD_CELL, function="fast_update", specs=one * 4) is None
    assert input_signature(SHAPES_CELL, function="total", specs=["tf.TensorSpec(("]) is None


HOIST_CELL = """import tensorflow as tf
traces = []

def square(v):
    traces.append(1)  # runs once per trace
    return v * v

for epoch in range(3):
    for step in range(2):
        fn = tf.function(square)  # a new function every step
        out = fn(tf.constant(float(step)))
"""


def test_tf_function_created_in_nested_loops_moves_out_of_both():
    out = hoist_function(HOIST_CELL)
    assert out is not None
    assert_compiles(out)
    assert "fn = tf.function(square)  # a new function every step\nfor epoch in range(3):" in out
    assert len(execute(HOIST_CELL)["traces"]) == 6
    assert len(execute(out)["traces"]) == 1


def test_decorated_def_and_lambda_move_only_as_far_as_their_inputs_allow():
    source = """import tensorflow as tf
calls = []
for scale in [1.0, 2.0]:
    for i in range(3):
        # the step
        @tf.function
        def step(v):
            calls.append(1)
            return v * scale
        double = tf.function(lambda v: v * 2)
        step(tf.constant(1.0)), double(tf.constant(1.0))
"""
    out = hoist_function(source)
    assert out is not None
    # `step` reads `scale`, set by the outer loop: it leaves only the inner loop.
    assert "for scale in [1.0, 2.0]:\n    # the step\n    @tf.function\n    def step(v):" in out
    # The lambda depends on nothing the loops set: it leaves both.
    assert "double = tf.function(lambda v: v * 2)\nfor scale in" in out
    assert len(execute(out)["calls"]) == 2
    assert len(execute(source)["calls"]) == 6


def test_functions_depending_on_the_loop_stay():
    depends = """import tensorflow as tf
for k in range(3):
    f = tf.function(lambda v: v * k)
    f(tf.constant(1))
"""
    assert hoist_function(depends) is None
    used_before = """import tensorflow as tf
for k in range(3):
    if k:
        g(1)
    g = tf.function(h)
"""
    assert hoist_function(used_before) is None
    conditional = """import tensorflow as tf
for k in range(3):
    if k == 0:
        g = tf.function(h)
"""
    assert hoist_function(conditional) is None
    assert hoist_function("import tensorflow as tf\ng = tf.function(h)\n") is None


def test_traced_name_finds_calls_through_the_wrapper_and_methods():
    by_traced_name = scalars_to_tensors(
        KEYWORD_CELL, function="update", arguments=["learning_rate"]
    )
    assert by_traced_name is not None
    assert "learning_rate=tensorflow_.constant(0.5 / (epoch + 1)),  # decays" in by_traced_name
    method_cell = """import tensorflow as tf

class Scaler(tf.Module):
    @tf.function
    def apply(self, x, scale):
        return x * scale

scaler = Scaler()
for s in (1.0, 2.0, 3.0):
    scaler.apply(tf.ones(2), s)
"""
    out = scalars_to_tensors(method_cell, function="apply", arguments=["scale"])
    assert out is not None
    assert "scaler.apply(tf.ones(2), tf.constant(s))" in out
    assert execute(method_cell)["scaler"].apply.experimental_get_tracing_count() == 3
    assert execute(out)["scaler"].apply.experimental_get_tracing_count() == 1


def test_a_cell_using_tf_imported_in_an_earlier_cell_is_rewritten_with_that_tf():
    from tfdiag_magic.rewrite.namespace import namespace_modules

    cell = SCALAR_CELL.removeprefix("import tensorflow as tf\n")
    # Without knowing what `tf` is, the rewrite cannot tell tf.function from anything else.
    assert scalars_to_tensors(cell, function="scale", arguments=["factor"]) is None
    with namespace_modules({"tf": "tensorflow", "np": "numpy"}):
        out = scalars_to_tensors(cell, function="scale", arguments=["factor"])
    assert out is not None
    assert "y = scale(x, tf.constant(lr))" in out
    assert "import tensorflow" not in out  # the notebook's own `tf` is used, not re-imported
    # A name the cell binds itself is the cell's, whatever the notebook bound to it.
    shadowed = "tf = None\n" + cell
    with namespace_modules({"tf": "tensorflow"}):
        assert scalars_to_tensors(shadowed, function="scale", arguments=["factor"]) is None


def test_scalars_to_tensors_keeps_the_body_working_with_a_tensor():
    """The retracing demo's warm-up: `min(1.0, (step + 1) / 20)` with a tensor step raises in
    a traced function, and an int32 step divided is float64, which a float32 loss cannot
    multiply: the rewrite uses tf.minimum and a float32 step."""
    source = (
        "import tensorflow as tf\n"
        "@tf.function\n"
        "def train_step(x, step):\n"
        "    warmup = min(1.0, (step + 1) / 20)\n"
        "    return tf.reduce_mean(x) * warmup\n"
        "for step in range(30):\n"
        "    train_step(x, step)\n"
    )
    out = scalars_to_tensors(source, function="train_step", arguments=["step"])
    assert "warmup = tf.minimum(1.0, (step + 1) / 20)\n" in out
    assert "train_step(x, tf.constant(step, dtype=tf.float32))\n" in out
    import tensorflow as tf

    namespace = {"x": tf.ones((4,))}
    exec(compile(out, "<rewrite>", "exec"), namespace)  # runs: the body takes the tensor
    assert namespace["train_step"].experimental_get_tracing_count() == 1


def test_scalars_to_tensors_leaves_a_body_that_needs_a_python_number():
    source = (
        "import tensorflow as tf\n"
        "@tf.function\n"
        "def head(x, n):\n"
        "    return x[: int(n)]\n"
        "for n in range(1, 6):\n"
        "    head(x, n)\n"
    )
    assert scalars_to_tensors(source, function="head", arguments=["n"]) is None


def test_scalars_to_tensors_keeps_an_index_an_integer():
    source = (
        "import tensorflow as tf\n"
        "@tf.function\n"
        "def pick(x, i):\n"
        "    return tf.gather(x, i)\n"
        "for i in range(5):\n"
        "    pick(x, i)\n"
    )
    out = scalars_to_tensors(source, function="pick", arguments=["i"])
    assert "pick(x, tf.constant(i))\n" in out
