"""A profiled cell behaves like the same cell run by plain IPython, and leaves nothing behind.

These tests run ``%%tfprofile`` cells in the real IPython shell of the test process (the `ip`
fixture), on real TensorFlow and Keras: names, the cell's value, shell escapes and line magics,
option errors, nesting, exceptions and their tracebacks, the extension's load/unload cycle, and
that every probe is removed after a run whatever the cell did.
"""

from __future__ import annotations

import builtins
import gc
import json
import logging
import re
import signal
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from tests.helpers import profiled, run_cell
from tfdiag_magic import active
from tfdiag_magic.result import ProfileResult

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RUNTIME_NAME = "_tfdiag_loops_"

# A tiny model and a compiled custom training step that updates weights with a Keras optimizer.
TRAIN_SETUP = """
import numpy as np, tensorflow as tf, keras
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.01)
x = tf.constant(np.ones((4, 3), "float32"))
y = tf.constant(np.ones((4, 1), "float32"))

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


def plain_text(text: str) -> str:
    """Terminal output without its ANSI colour codes."""
    return ANSI.sub("", text)


def error_of(result: Any) -> BaseException | None:
    return result.error_before_exec or result.error_in_exec


@pytest.fixture
def train_ip(ip):
    """The shell with `model`, `opt`, `x`, `y` and a fresh `train_step` tf.function defined."""
    setup = run_cell(ip, TRAIN_SETUP)
    assert setup.success, error_of(setup)
    return ip


# -- names and the cell's value --------------------------------------------------------------


def test_variables_assigned_in_profiled_cell_are_visible_to_later_cells(ip):
    result, _ = profiled(ip, "a = 20\nb = [a, a + 1]\ndef twice(v):\n    return 2 * v")
    assert result.success
    later = run_cell(ip, "twice(a) + b[1]")
    assert later.success
    assert later.result == 61


@pytest.mark.parametrize("options", ["-o r", "-q -o r"], ids=["with-report", "quiet"])
def test_last_expression_value_is_the_cell_result(ip, options: str):
    result, r = profiled(ip, "base = 7\nbase * 6", options)
    assert result.success
    assert result.result == 42
    assert isinstance(r, ProfileResult)


def test_line_magic_profiles_one_statement_and_returns_its_value(ip):
    assigned = run_cell(ip, "%tfprofile -q -o r total = sum(range(5))")
    assert assigned.success
    assert ip.user_ns["total"] == 10
    assert isinstance(ip.user_ns["r"], ProfileResult)
    valued = run_cell(ip, "%tfprofile -q total * 3")
    assert valued.result == 30


def test_trailing_semicolon_expression_is_still_evaluated(ip):
    run_cell(ip, "calls = []")
    plain = run_cell(ip, "calls.append('plain');")
    result, _ = profiled(ip, "calls.append('profiled');")
    assert plain.success and result.success
    assert ip.user_ns["calls"] == ["plain", "profiled"]


def test_trailing_semicolon_suppresses_the_result_as_in_plain_ipython(ip, capsys):
    run_cell(ip, "b = 7")
    plain = run_cell(ip, "b + 1;")
    assert plain.success
    assert plain.result is None  # what IPython does for a non-magic cell
    capsys.readouterr()
    result, _ = profiled(ip, "b + 1;")
    out = capsys.readouterr().out
    assert result.success
    assert result.result is plain.result
    assert "Out[" not in out


def test_shell_escape_and_line_magics_run_inside_profiled_cell(ip, capfd):
    result, _ = profiled(
        ip,
        "!echo hello-from-the-shell\n%time timed_value = 6 * 7\n%who\nnames = %who_ls\n",
    )
    out = capfd.readouterr().out
    assert result.success, error_of(result)
    assert "hello-from-the-shell" in out
    assert "Wall time" in out  # %time's report
    assert ip.user_ns["timed_value"] == 42
    assert "timed_value" in ip.user_ns["names"]
    who_lines = [line for line in out.splitlines() if "timed_value" in line]
    assert who_lines, out  # %who listed the variable %time had just assigned


# -- -o and -q ------------------------------------------------------------------------------


def test_output_option_stores_a_profile_result_with_steps_json_and_summary(train_ip):
    result, r = profiled(train_ip, "for i in range(3):\n    train_step(x, y)", "-q -o r")
    assert result.success, error_of(result)
    assert isinstance(r, ProfileResult)
    assert r.label == "r"
    steps = r.steps
    assert isinstance(steps, pd.DataFrame)
    assert r.record.phase_counts() == {"train": 3, "loop": 3}
    assert len(steps) == 6
    train = steps[steps["phase"] == "train"]
    assert (train["kind"] == "tf_function").all()
    assert np.isfinite(train["loss"]).all()
    assert r.findings == []
    report = json.loads(r.to_json())
    assert report["schema"] == 1
    assert report["steps"]["count"] == 3
    assert report["error"] is None
    summary = r.summary()
    assert isinstance(summary, str)
    assert summary.startswith("tfdiag_magic: 3 training steps")


def test_rerunning_the_same_profiled_cell_records_the_same_steps(train_ip):
    # The second run calls a train_step that the first run already traced.
    cell = "for i in range(3):\n    train_step(x, y)"
    first = profiled(train_ip, cell)[1].record.phase_counts()
    second = profiled(train_ip, cell)[1].record.phase_counts()
    assert first == second == {"train": 3, "loop": 3}


def test_quiet_suppresses_only_the_report(ip, capsys):
    result, r = profiled(ip, "print('printed by the cell')\nanswer = 41 + 1", "-q -o r")
    out = capsys.readouterr().out
    assert result.success
    assert "printed by the cell" in out
    assert "tfdiag_magic:" not in out
    assert r.summary().splitlines()[0] not in out
    assert ip.user_ns["answer"] == 42


def test_without_quiet_the_report_is_printed_after_the_cells_output(ip, capsys):
    result, r = profiled(ip, "print('printed by the cell')", "-o r")
    out = capsys.readouterr().out
    assert result.success
    assert "printed by the cell" in out
    report_lines = [line for line in out.splitlines() if line.startswith("tfdiag_magic:")]
    assert len(report_lines) == 1
    assert r.summary() in out
    assert out.index("printed by the cell") < out.index("tfdiag_magic:")


# -- usage errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cell",
    [
        "%%tfprofile --no-such-option\nran = True",
        "%%tfprofile -o 1bad\nran = True",
        "%%tfprofile -o class\nran = True",
        "%%tfprofile -o\nran = True",
        "%%tfprofile --memory-interval -1\nran = True",
        "%%tfprofile --memory-interval 0\nran = True",
        "%%tfprofile --memory-interval soon\nran = True",
        "%tfprofile --no-such-option ran = True",
        "%tfprofile -o 1bad ran = True",
        "%tfprofile",
        "%tfprofile -q",
        "%tfprofile -q -o r",
    ],
)
def test_bad_options_are_usage_errors_and_the_cell_body_does_not_run(ip, cell: str):
    result = run_cell(ip, cell)
    error = error_of(result)
    assert not result.success
    assert type(error).__name__ == "UsageError", repr(error)
    assert "ran" not in ip.user_ns
    assert "r" not in ip.user_ns
    assert active.recorder() is None


def test_nested_tfprofile_is_refused_and_its_body_does_not_run(ip):
    run_cell(ip, "count = 0")
    result, r = profiled(
        ip,
        "count += 1\n"
        "try:\n"
        "    get_ipython().run_cell_magic('tfprofile', '-q', 'count += 100')\n"
        "except Exception as exc:\n"
        "    inner_error = exc\n"
        "count += 10\n",
    )
    assert result.success, error_of(result)
    assert ip.user_ns["count"] == 11  # the outer body ran once, the inner body never
    inner = ip.user_ns["inner_error"]
    assert type(inner).__name__ == "UsageError"
    assert "already running" in str(inner)
    assert "cannot nest" in str(inner)
    assert "not run" in str(inner)
    assert r.record is not None and r.record.error is None
    assert active.recorder() is None


def test_uncaught_nested_tfprofile_fails_the_outer_cell_with_usage_error(ip):
    run_cell(ip, "count = 0")
    result, r = profiled(
        ip, "count += 1\nget_ipython().run_cell_magic('tfprofile', '', 'count += 100')\ncount += 10"
    )
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert ip.user_ns["count"] == 1
    assert r.record.error.type == "UsageError"
    assert active.recorder() is None


# -- exceptions -----------------------------------------------------------------------------

FAILING_CELL = """\
done_steps = 0
for i in range(3):
    train_step(x, y)
    done_steps += 1
raise (err := ValueError(f"bad input after {done_steps} steps"))
after_the_error = True
"""
RAISING_LINE = 'raise (err := ValueError(f"bad input after {done_steps} steps"))'
RAISING_LINENO = 6  # in the cell, where the %%tfprofile line is line 1


def test_value_error_propagates_unchanged_and_the_partial_record_is_kept(train_ip, capsys):
    result, r = profiled(train_ip, FAILING_CELL)
    capsys.readouterr()
    error = result.error_in_exec
    assert error is train_ip.user_ns["err"]  # the user's own exception object, not a wrapper
    assert type(error) is ValueError
    assert str(error) == "bad input after 3 steps"
    assert train_ip.user_ns["done_steps"] == 3
    assert "after_the_error" not in train_ip.user_ns
    assert isinstance(r, ProfileResult)
    assert r.record.error.type == "ValueError"
    assert r.record.error.message == "bad input after 3 steps"
    assert r.record.phase_counts() == {"train": 3, "loop": 3}
    assert json.loads(r.to_json())["error"]["type"] == "ValueError"


def test_traceback_points_at_the_users_raising_line(train_ip, capsys):
    capsys.readouterr()
    result, _ = profiled(train_ip, FAILING_CELL)
    text = plain_text(capsys.readouterr().out)
    assert isinstance(result.error_in_exec, ValueError)
    marker = re.compile(rf"^-+> {RAISING_LINENO} {re.escape(RAISING_LINE)}$", re.MULTILINE)
    assert marker.search(text), text
    assert re.search(rf"Cell In\[\d+\], line {RAISING_LINENO}$", text, re.MULTILINE), text
    assert "ValueError: bad input after 3 steps" in text
    # The profiler's own frames are hidden: the user sees their code, not ours.
    assert not re.search(r"File .*tfdiag_magic[/\\]", text), text


def test_traceback_names_the_failing_cell_by_its_own_execution_count(train_ip, capsys):
    capsys.readouterr()
    result, _ = profiled(train_ip, FAILING_CELL)
    text = plain_text(capsys.readouterr().out)
    match = re.search(rf"Cell In\[(\d+)\], line {RAISING_LINENO}$", text, re.MULTILINE)
    assert match, text
    assert int(match.group(1)) == result.execution_count


def test_keyboard_interrupt_in_the_cell_propagates_and_the_partial_record_is_kept(train_ip):
    result, r = profiled(
        train_ip, "for i in range(3):\n    train_step(x, y)\nraise KeyboardInterrupt"
    )
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert r.record.error.type == "KeyboardInterrupt"
    assert r.record.phase_counts() == {"train": 3, "loop": 3}
    assert active.recorder() is None
    assert run_cell(train_ip, "1 + 1").result == 2  # the shell goes on


def test_keyboard_interrupt_during_fit_keeps_the_batches_done_before(ip):
    setup = run_cell(
        ip,
        "import numpy as np, keras\n"
        "x = np.ones((32, 3), 'float32'); y = np.ones((32, 1), 'float32')\n"
        "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "class Interrupt(keras.callbacks.Callback):\n"
        "    def on_train_batch_end(self, batch, logs=None):\n"
        "        if batch == 2:\n"
        "            raise KeyboardInterrupt\n",
    )
    assert setup.success, error_of(setup)
    result, r = profiled(
        ip, "model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[Interrupt()])"
    )
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert r.record.error.type == "KeyboardInterrupt"
    assert r.record.phase_counts() == {"train": 3}
    assert r.steps["epoch"].tolist() == [0, 0, 0]


def test_resource_exhausted_error_keeps_the_good_steps_before_it(train_ip):
    # On CPU, TensorFlow refuses a 128 TiB tensor with a real ResourceExhaustedError (OOM).
    result, r = profiled(
        train_ip,
        "for i in range(3):\n    if i == 2:\n        tf.zeros([2**45])\n    train_step(x, y)\n",
    )
    assert isinstance(result.error_in_exec, tf.errors.ResourceExhaustedError)
    assert r.record.error.type == "ResourceExhaustedError"
    assert "OOM" in r.record.error.message
    assert r.record.phase_counts()["train"] == 2
    train = r.steps[r.steps["phase"] == "train"]
    assert np.isfinite(train["loss"]).all()
    assert (train["duration"] > 0).all()


def test_a_failed_call_is_counted_from_one_as_the_function_table_counts_it(ip):
    # Five calls, then a sixth that its signature refuses: the summary's "function call 6" is
    # the table's sixth call (the steps' index, 5, stays in the report).
    result, r = profiled(
        ip,
        "import tensorflow as tf\n"
        "@tf.function(input_signature=(tf.TensorSpec([], tf.int32),))\n"
        "def nxt(n):\n"
        "    return n + 1\n"
        "for i in range(5):\n"
        "    nxt(tf.constant(i))\n"
        "nxt(tf.constant(1.5))\n",
    )
    assert isinstance(result.error_in_exec, TypeError)
    assert r.record.error.step == 5 and r.record.error.phase == "function"
    summary = r.summary()
    assert "5 function calls" in summary and "stopped by TypeError in function call 6" in summary
    assert [f.calls for f in r.record.functions if f.name == "nxt"] == [6]


# -- nothing left behind --------------------------------------------------------------------


def _patched_attributes() -> list[tuple[Any, str]]:
    """Every (owner, name) a probe replaces during a run, on the class that defines it."""
    import keras
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
    from keras.src.callbacks.callback_list import CallbackList
    from keras.src.models.functional import Functional
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    from keras.src.trainers.epoch_iterator import EpochIterator
    from keras.src.trainers.trainer import Trainer
    from tensorflow.python.data.ops import iterator_ops
    from tensorflow.python.distribute import input_lib
    from tensorflow.python.eager import context
    from tensorflow.python.eager.polymorphic_function import (
        polymorphic_function,
        tracing_compilation,
    )

    hooks = [
        f"on_{phase}_batch_{edge}"
        for phase in ("train", "test", "predict")
        for edge in ("begin", "end")
    ]
    trainer = [
        "fit",
        "evaluate",
        "predict",
        "train_on_batch",
        "test_on_batch",
        "predict_on_batch",
    ]
    return [
        *((CallbackList, name) for name in [*hooks, "on_epoch_begin"]),
        *((TensorFlowTrainer, name) for name in trainer),
        (polymorphic_function.Function, "__call__"),
        (tracing_compilation, "_create_concrete_function"),
        (BaseOptimizer, "apply"),
        (Trainer, "compile"),
        (keras.Model, "__init__"),
        (Functional, "__init__"),
        (context.Context, "set_memory_growth"),
        (context.Context, "set_visible_devices"),
        (context.Context, "set_logical_device_configuration"),
        (context.Context, "intra_op_parallelism_threads"),
        (context.Context, "inter_op_parallelism_threads"),
        (EpochIterator, "__iter__"),
        (iterator_ops.OwnedIterator, "__next__"),
        (input_lib.DistributedIteratorBase, "__next__"),
    ]


def _snapshot(namespace: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """The objects a run may touch, each as a tuple of the objects themselves (for `is`)."""
    state: dict[str, tuple[Any, ...]] = {}
    for owner, name in _patched_attributes():
        state[f"{owner.__name__}.{name}"] = (vars(owner).get(name),)
    state["warnings.showwarning"] = (warnings.showwarning,)
    state["gc.callbacks"] = tuple(gc.callbacks)
    # Held off while the probes are removed (session.interrupts_deferred), then given back.
    state["SIGINT handler"] = (signal.getsignal(signal.SIGINT),)
    for logger in ("tensorflow", "keras", "absl"):
        state[f"logger {logger}"] = tuple(logging.getLogger(logger).handlers)
    # The loop runtime is a constant of the instrumented code: no name anywhere, ever.
    state["builtins"] = tuple(name for name in vars(builtins) if "tfdiag" in name)
    state["active recorder"] = (active.recorder(),)
    return state


def _changed(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> list[str]:
    return [
        key
        for key in before
        if len(before[key]) != len(after[key])
        or any(a is not b for a, b in zip(before[key], after[key], strict=False))
    ]


CLEAN_SUCCESS = """\
during = take_snapshot()
import logging, warnings
warnings.warn("a warning from the cell")
logging.getLogger("tensorflow").warning("a logged warning from the cell")
for i in range(2):
    train_step(x, y)
fit_model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
fit_model.compile(optimizer="sgd", loss="mse")
fit_model.fit(np.ones((8, 3)), np.ones((8, 1)), batch_size=4, epochs=1, verbose=0)
fit_model.train_on_batch(np.ones((4, 3)), np.ones((4, 1)))
"""


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (CLEAN_SUCCESS, None),
        ("for i in range(2):\n    train_step(x, y)\nraise ValueError('stop')", "ValueError"),
        (
            "for i in range(2):\n    train_step(x, y)\n    raise KeyboardInterrupt",
            "KeyboardInterrupt",
        ),
        ("get_ipython().run_cell_magic('tfprofile', '', 'pass')", "UsageError"),
        ("while True:\n    train_step(x, y)\n    1 / 0", "ZeroDivisionError"),
    ],
    ids=["success", "value-error", "keyboard-interrupt", "nested", "error-in-while-loop"],
)
def test_every_probe_is_removed_after_the_run(train_ip, body: str, error: str | None):
    namespace = train_ip.user_ns
    namespace["take_snapshot"] = lambda: _snapshot(namespace)
    before = _snapshot(namespace)
    for owner, name in _patched_attributes():
        assert vars(owner).get(name) is not None, (owner, name)  # defined on that very class
    assert before["builtins"] == () and before["active recorder"] == (None,)
    threads_before = set(threading.enumerate())
    result, r = profiled(train_ip, body)
    assert type(error_of(result)).__name__ == (error or "NoneType")
    assert r.record is not None
    after = _snapshot(namespace)
    assert _changed(before, after) == []
    assert set(threading.enumerate()) - threads_before == set()
    assert RUNTIME_NAME not in namespace and RUNTIME_NAME not in vars(builtins)
    assert active.recorder() is None
    if error is None:
        # The keys checked above were the ones the run really replaced.
        changed = set(_changed(before, namespace["during"]))
        # Ctrl-C is held off only while the probes are removed, never while the cell runs.
        assert changed == set(before) - {"builtins", "SIGINT handler"}, set(before) - changed
        assert {w.source for w in r.record.warnings} >= {"warnings", "tensorflow"}


# -- code defined in the cell ---------------------------------------------------------------

DEFINITIONS = """\
def f(n):
    total = 0
    for i in range(n):
        total += i
    k = 0
    while k < 3:
        k += 1
    def inner():
        return [j for j in range(2) for _ in range(1)]
    return total + k + len(inner())

class Acc:
    def run(self, items):
        out = []
        for item in items:
            out.append(item)
        return out

g = lambda xs: [v for v in xs]
for warmup in range(2):
    pass
"""


def _names(code: types.CodeType) -> set[str]:
    """Global and attribute names used by `code` and every code object nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _code_named(code: types.CodeType, name: str) -> types.CodeType:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name:
                return const
            try:
                return _code_named(const, name)
            except LookupError:
                pass
    raise LookupError(name)


def test_functions_defined_in_profiled_cell_keep_their_code(ip):
    """Their loops are recorded while the run calls them; after it, their code is the plain
    compilation's, and a later cell runs them as plain Python."""
    result, r = profiled(ip, DEFINITIONS + "used = f(2), Acc().run([7])\n")
    assert result.success, error_of(result)
    # Line numbers are the cell's, where the %%tfprofile line is line 1. A function's loop is
    # listed once it ran (f's while loop, Acc.run's loop), the cell's own always.
    lines = DEFINITIONS.splitlines()
    ran = {
        (lines.index("    for i in range(n):") + 2, "f"),
        (lines.index("    while k < 3:") + 2, "f"),
        (lines.index("        for item in items:") + 2, "Acc.run"),
        (lines.index("for warmup in range(2):") + 2, ""),
    }
    assert {(loop.lineno, loop.function) for loop in r.record.loops} == ran
    assert r.record.phase_counts() == {"loop": 2 + 3 + 1 + 2}
    ns = ip.user_ns
    # The cell as Python compiles it: under its %%tfprofile line, with the cell's file name.
    plain = compile("#\n" + DEFINITIONS, ns["f"].__code__.co_filename, "exec", dont_inherit=True)
    for function in (ns["f"], ns["Acc"].run, ns["g"]):
        assert RUNTIME_NAME not in _names(function.__code__), function
        assert function.__code__ == _code_named(plain, function.__code__.co_name)
    later = run_cell(ip, "f(4), Acc().run([1, 2]), g((3,))")
    assert later.success, error_of(later)
    assert later.result == (11, [1, 2], [3])


# -- HTML -----------------------------------------------------------------------------------


def test_html_report_escapes_user_controlled_text(ip):
    setup = run_cell(
        ip, "import tensorflow as tf\n@tf.function\ndef double(v):\n    return v * 2\n"
    )
    assert setup.success
    result, r = profiled(
        ip,
        'for s in ["<script>alert(1)</script>", "b"]:\n'
        "    double(tf.constant(1.0))\n"
        'raise ValueError("<script>bad()</script>")\n',
    )
    assert isinstance(result.error_in_exec, ValueError)
    # The user's text really carries the tags into the record ...
    assert "<script>" in r.record.loops[0].source
    assert "<script>" in r.record.error.message
    assert "<script>" in r.record.source
    # ... and every HTML view escapes them.
    views: dict[str, Callable[[], str | None]] = {
        "page": r.to_html,
        "fragment": lambda: r.to_html(full_page=False),
        "notebook": r._repr_html_,
    }
    for name, render in views.items():
        html = render()
        assert html is not None
        assert "<script" not in html.lower(), name
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, name
        assert "&lt;script&gt;bad()&lt;/script&gt;" in html, name


# -- the extension --------------------------------------------------------------------------


def _magic_owner(ip, kind: str) -> str | None:
    function = ip.magics_manager.magics[kind].get("tfprofile")
    owner = getattr(function, "__self__", None)
    return type(owner).__name__ if owner is not None else None


def test_extension_loads_once_unloads_and_reloads(ip, capsys):
    try:
        assert run_cell(ip, "%load_ext tfdiag_magic").success
        assert run_cell(ip, "%load_ext tfdiag_magic").success
        assert _magic_owner(ip, "cell") == _magic_owner(ip, "line") == "TFProfileMagics"
        run_cell(ip, "hits = []")
        assert profiled(ip, "hits.append(1)")[0].success
        assert ip.user_ns["hits"] == [1]  # loading twice did not wrap the magic twice

        assert run_cell(ip, "%unload_ext tfdiag_magic").success
        assert _magic_owner(ip, "cell") is None and _magic_owner(ip, "line") is None
        gone = run_cell(ip, "%%tfprofile -q\nhits.append(2)")
        assert type(error_of(gone)).__name__ == "UsageError"
        assert "Cell magic `%%tfprofile` not found" in str(error_of(gone))
        gone_line = run_cell(ip, "%tfprofile -q hits.append(3)")
        assert type(error_of(gone_line)).__name__ == "UsageError"
        assert ip.user_ns["hits"] == [1]

        assert run_cell(ip, "%reload_ext tfdiag_magic").success
        again, r = profiled(ip, "hits.append(4)\nlen(hits)")
        assert again.success, error_of(again)
        assert again.result == 2
        assert ip.user_ns["hits"] == [1, 4]
        assert isinstance(r, ProfileResult) and r.record is not None

        assert run_cell(ip, "%reload_ext tfdiag_magic").success
        assert profiled(ip, "hits.append(5)")[0].success
        assert ip.user_ns["hits"] == [1, 4, 5]
    finally:
        # The shell is shared by the whole test session: leave the extension loaded.
        if _magic_owner(ip, "cell") is None:
            ip.extension_manager.loaded.discard("tfdiag_magic")
            ip.run_line_magic("load_ext", "tfdiag_magic")
    assert _magic_owner(ip, "cell") == "TFProfileMagics"


def test_help_documents_every_option(ip):
    doc = ip.find_line_magic("tfprofile").__doc__
    for option in (
        "-o NAME",
        "-q",
        "--json PATH",
        "--html PATH",
        "--no-loops",
        "--memory-interval SECONDS",
    ):
        assert option in doc, option
    assert ip.find_cell_magic("tfprofile").__doc__ == doc


def test_top_level_await_is_a_usage_error_and_the_cell_does_not_run(ip):
    result = run_cell(ip, "%%tfprofile\nran = True\nimport asyncio\nawait asyncio.sleep(0)\n")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "await" in str(result.error_in_exec)
    assert "ran" not in ip.user_ns


def test_syntax_error_in_the_cell_is_reported_as_python_would(ip):
    result = run_cell(ip, "%%tfprofile\nran = True\nx = (1,\n")
    assert isinstance(result.error_in_exec, SyntaxError)
    assert "ran" not in ip.user_ns


def test_the_text_report_lists_five_kinds_of_warning_and_counts_the_rest(ip):
    # A review's report said "Warnings (6):" over five lines: the sixth kind was only in the JSON.
    from tfdiag_magic.views.text import render_text

    result, r = profiled(
        ip,
        "import warnings\n"
        # words, not numbers: warnings that differ only in numbers are one warning repeated
        + "".join(
            f"warnings.warn('{kind}: a kind of warning from the cell')\n"
            for kind in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta")
        ),
    )
    assert result.success
    report = r.report()
    assert len(report["warnings"]) == 7
    text = render_text(report)
    listed = [line for line in text.splitlines() if "a kind of warning from the cell" in line]
    assert len(listed) == 5
    assert "  … 2 more kinds (the report's `warnings`)" in text.splitlines()
