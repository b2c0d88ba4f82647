"""The rewriting of the code's loops (`instrument`, `code_runner`) and the loop runtime.

Every source here is run twice: compiled as Python would, and prepared by
`code_runner.prepare` with the real `LoopRuntime` activated through `LoopProbe` on a real
`Recorder`. The instrumented run must behave exactly like the plain one (values, exceptions,
line numbers) while recording one ``loop`` row per iteration, of the top-level loops and of
the loops of the functions the code defines; after the run those functions have their plain
code again.
"""

from __future__ import annotations

import ast
import math
import textwrap
import traceback
import types
from typing import Any

import numpy as np
import pytest

from tfdiag_magic.code_runner import cell_source, prepare, run
from tfdiag_magic.instrument import RUNTIME, instrument_loops
from tfdiag_magic.instrument_conversions import mark_conversions
from tfdiag_magic.probes.loops import LoopHooks, LoopProbe, LoopRuntime
from tfdiag_magic.record import KINDS, PHASES, Record
from tfdiag_magic.recorder import Recorder

FILENAME = "<cell-under-test>"
LOOP_PHASE = PHASES.index("loop")
LOOP_KIND = KINDS.index("loop")


def _plain(source: str) -> tuple[dict[str, Any], BaseException | None]:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        exec(compile(source, FILENAME, "exec"), namespace)
    except Exception as exc:
        return namespace, exc
    return namespace, None


class Instrumented:
    """The outcome of running a source instrumented, with the loop runtime bound."""

    def __init__(self, source: str, interactivity: str = "none") -> None:
        self.prepared = prepare(source, FILENAME, interactivity=interactivity)
        self.recorder = Recorder()
        self.recorder.loops = list(self.prepared.loops)
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.error: BaseException | None = None
        self.value: Any = None
        probe = LoopProbe(self.prepared.hooks or LoopHooks(), self.namespace)
        probe.install(self.recorder)
        try:
            self.value = run(self.prepared, self.namespace)
        except Exception as exc:
            self.error = exc
        finally:
            probe.remove()
        self.open_loops_after = list(self.recorder.open_loops)
        self.record: Record = self.recorder.finish()
        probe.finish(self.record)

    def loop_id(self, lineno: int) -> int:
        (loop,) = [loop for loop in self.prepared.loops if loop.lineno == lineno]
        return loop.id

    def rows(self, lineno: int) -> np.ndarray:
        steps = self.record.steps
        return np.flatnonzero(
            (steps["kind"] == LOOP_KIND) & (steps["loop"] == self.loop_id(lineno))
        )


def _user_vars(namespace: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in namespace.items() if not k.startswith("__") and not callable(v)}


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _lines(code: types.CodeType) -> set[int]:
    return {line for c in _code_objects(code) for _, _, line in c.co_lines() if line is not None}


def _last_frame_line(exc: BaseException) -> tuple[str, int | None]:
    """File and line of the innermost frame of the profiled source in the traceback."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == FILENAME]
    return frames[-1].filename, frames[-1].lineno


# -- semantics are preserved ----------------------------------------------------------------

SEMANTIC_CASES = {
    "for_else_runs_else_when_exhausted": """
        out = []
        for i in range(3):
            out.append(i)
        else:
            out.append("else")
        """,
    "for_else_skips_else_after_break": """
        out = []
        for i in range(10):
            if i == 4:
                break
            out.append(i)
        else:
            out.append("else")
        """,
    "while_else_runs_else_when_test_fails": """
        out = []
        n = 0
        while n < 4:
            n += 1
            out.append(n)
        else:
            out.append("else")
        """,
    "while_else_skips_else_after_break": """
        out = []
        n = 0
        while True:
            n += 1
            if n > 5:
                break
            out.append(n)
        else:
            out.append("never")
        """,
    "continue_skips_rest_of_body_in_for_and_while": """
        out = []
        for i in range(6):
            if i % 2:
                continue
            out.append(i)
        n = 0
        while n < 6:
            n += 1
            if n % 3:
                continue
            out.append(-n)
        """,
    "nested_loops_with_inner_break_and_outer_continue": """
        out = []
        for i in range(4):
            if i == 1:
                continue
            j = 0
            while j < 5:
                if j == i:
                    break
                out.append((i, j))
                j += 1
        """,
    "loop_variable_keeps_its_last_value_and_unpacking_works": """
        out = []
        for key, value in {"a": 1, "b": 2}.items():
            out.append(key * value)
        last = (key, value)
        """,
    "partly_consumed_iterator_continues_after_break": """
        it = iter(range(8))
        for x in it:
            if x == 2:
                break
        out = list(it)
        del it
        """,
    "break_closes_the_generator_at_the_same_point": """
        out = []
        def gen():
            try:
                yield from range(10)
            finally:
                out.append("closed")
        for x in gen():
            if x == 1:
                break
        out.append("after loop")
        """,
    "loops_inside_if_with_and_try_blocks": """
        import contextlib
        out = []
        if True:
            for i in range(2):
                out.append(("if", i))
        with contextlib.nullcontext():
            for i in range(2):
                out.append(("with", i))
        try:
            for i in range(3):
                if i == 1:
                    raise KeyError(i)
        except KeyError as e:
            out.append(("caught", e.args[0]))
        finally:
            out.append("finally")
        """,
    "return_value_of_functions_with_loops_defined_in_the_cell": """
        def total(xs):
            s = 0
            for x in xs:
                s += x
            return s
        out = []
        for n in (3, 5):
            out.append(total(range(n)))
        """,
}


@pytest.mark.parametrize("name", sorted(SEMANTIC_CASES))
def test_instrumented_loop_leaves_the_same_values_as_plain_python(name):
    source = textwrap.dedent(SEMANTIC_CASES[name])
    plain, plain_error = _plain(source)
    assert plain_error is None
    result = Instrumented(source)
    assert result.error is None
    assert result.prepared.loops  # the cell did have loops to rewrite
    assert _user_vars(result.namespace) == _user_vars(plain)


def test_exception_out_of_a_loop_propagates_unchanged_and_closes_the_loop():
    source = textwrap.dedent(
        """
        seen = []
        for i in range(5):
            seen.append(i)
            if i == 2:
                raise LookupError("item", i)
        """
    )
    _, plain_error = _plain(source)
    result = Instrumented(source)
    assert type(result.error) is type(plain_error) is LookupError
    assert result.error.args == plain_error.args == ("item", 2)
    assert result.namespace["seen"] == [0, 1, 2]
    assert result.open_loops_after == []  # the loop's finally ended it
    rows = result.rows(3)
    assert rows.size == 3  # the failing iteration is recorded too
    assert np.all(np.isfinite(result.record.steps["duration"][rows]))


def test_exception_out_of_a_while_loop_propagates_and_records_the_iterations():
    source = "n = 0\nwhile True:\n    n += 1\n    if n == 4:\n        1 / 0\n"
    result = Instrumented(source)
    assert isinstance(result.error, ZeroDivisionError)
    assert result.namespace["n"] == 4
    assert result.rows(2).size == 4
    assert result.open_loops_after == []


# -- iterations are recorded ----------------------------------------------------------------


def test_for_loop_records_exactly_one_loop_row_per_iteration():
    result = Instrumented("total = 0\nfor i in range(7):\n    total += i\n")
    steps = result.record.steps
    rows = result.rows(2)
    assert rows.size == 7
    assert result.record.step_count == 7
    assert np.all(steps["phase"][rows] == LOOP_PHASE)
    assert np.all(steps["kind"][rows] == LOOP_KIND)
    assert np.all(steps["epoch"][rows] == -1)  # not nested
    assert np.all(np.diff(steps["start"][rows]) > 0)


def test_while_loop_records_one_row_per_pass_including_continued_ones():
    source = "n = 0\nkept = []\nwhile n < 6:\n    n += 1\n    if n % 2:\n        continue\n"
    source += "    kept.append(n)\n"
    result = Instrumented(source)
    assert result.namespace["kept"] == [2, 4, 6]
    assert result.rows(3).size == 6


def test_loop_with_no_iterations_records_no_row():
    result = Instrumented("for i in []:\n    pass\nwhile False:\n    pass\n")
    assert result.error is None
    assert len(result.prepared.loops) == 2
    assert result.record.step_count == 0


def test_break_closes_the_open_iteration_with_a_finite_duration():
    source = "for i in range(100):\n    if i == 3:\n        break\nafter = i\n"
    result = Instrumented(source)
    steps = result.record.steps
    rows = result.rows(1)
    assert result.namespace["after"] == 3
    assert rows.size == 4  # iterations 0, 1, 2 and the one that broke out
    assert np.all(np.isfinite(steps["duration"][rows]))
    assert np.all(steps["duration"][rows] >= 0)
    assert np.all(np.isfinite(steps["data_wait"][rows]))
    assert result.open_loops_after == []


def test_while_break_closes_the_open_iteration():
    source = "n = 0\nwhile True:\n    n += 1\n    if n == 5:\n        break\n"
    result = Instrumented(source)
    rows = result.rows(2)
    assert rows.size == 5
    assert np.all(np.isfinite(result.record.steps["duration"][rows]))


def test_nested_loop_rows_carry_the_outer_iteration_index_as_epoch():
    source = (
        "pairs = []\nfor i in range(3):\n    for j in range(4):\n        pairs.append((i, j))\n"
    )
    result = Instrumented(source)
    steps = result.record.steps
    outer, inner = result.rows(2), result.rows(3)
    assert outer.size == 3
    assert inner.size == 12
    assert steps["epoch"][inner].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert np.all(steps["epoch"][outer] == -1)
    # each inner iteration lies inside the outer iteration it belongs to
    outer_start = steps["start"][outer]
    outer_end = outer_start + steps["duration"][outer]
    for row in inner:
        epoch = steps["epoch"][row]
        assert outer_start[epoch] <= steps["start"][row] <= outer_end[epoch]


def test_inner_while_loop_rows_carry_the_outer_for_iteration_as_epoch():
    source = "for i in range(2):\n    k = 0\n    while k < 3:\n        k += 1\n"
    result = Instrumented(source)
    assert result.record.steps["epoch"][result.rows(3)].tolist() == [0, 0, 0, 1, 1, 1]


def test_loops_are_numbered_in_source_order_outer_before_inner():
    prepared = prepare("for i in range(2):\n    for j in range(2):\n        pass\n", FILENAME)
    assert [(loop.id, loop.lineno) for loop in prepared.loops] == [(0, 1), (1, 2)]


SLOW_SOURCE = """\
import time

def slow_batches(n):
    for i in range(n):
        time.sleep(0.02)
        yield i

got = []
for batch in slow_batches(3):
    got.append(batch)
"""


def test_wait_in_the_generators_next_is_recorded_as_each_iterations_data_wait():
    result = Instrumented(SLOW_SOURCE)
    assert result.namespace["got"] == [0, 1, 2]
    assert [loop.lineno for loop in result.prepared.loops] == [9]  # not the one in the def
    steps = result.record.steps
    rows = result.rows(9)
    assert rows.size == 3
    # each next() slept 20 ms before yielding: the wait cannot be shorter than that
    assert np.all(steps["data_wait"][rows] >= 0.02)
    # the wait lies between one iteration's end and the next one's start
    starts, durations, waits = (steps[c][rows] for c in ("start", "duration", "data_wait"))
    np.testing.assert_allclose(starts[1:] - (starts[:-1] + durations[:-1]), waits[1:], atol=1e-9)


# -- loops of functions: recorded during the run, plain code after it -------------------------

DEFINITIONS_SOURCE = """\
def summed(xs):
    s = 0
    for x in xs:
        s += x
    while s > 100:
        s -= 100
    return s

class Table:
    for k in range(3):
        locals()[f"col{k}"] = k * 10

doubled = lambda xs: [x * 2 for x in xs]

for i in range(2):
    def inner(n):
        for m in range(n):
            pass
        return n

result = (summed(range(5)), Table.col2, doubled([1, 2]), inner(3))
"""


def _holds_hooks(code: types.CodeType) -> bool:
    return any(isinstance(const, LoopHooks) for c in _code_objects(code) for const in c.co_consts)


def _plain_code(source: str, qualname: str) -> types.CodeType:
    plain = compile(source, FILENAME, "exec", dont_inherit=True)  # as Python compiles it
    (code,) = [c for c in _code_objects(plain) if c.co_qualname == qualname]
    return code


def test_loops_of_functions_are_recorded_and_the_functions_get_their_plain_code_back():
    result = Instrumented(DEFINITIONS_SOURCE)
    assert result.error is None
    assert result.namespace["result"] == (10, 20, [2, 4], 3)
    # The functions' loops and the top-level one; not the class body's, nor the lambda's.
    loops = {loop.lineno: loop.function for loop in result.prepared.loops}
    assert loops == {3: "summed", 5: "summed", 15: "", 17: "inner"}
    assert result.rows(3).size == 5 and result.rows(17).size == 3 and result.rows(15).size == 2
    # A function's loop that ran no iteration is not in the record; the cell's own are.
    assert {loop.lineno for loop in result.record.loops} == {3, 15, 17}
    for name in ("summed", "inner"):
        function = result.namespace[name]
        assert function.__code__ == _plain_code(DEFINITIONS_SOURCE, name)
        assert not _holds_hooks(function.__code__)
    assert not _holds_hooks(result.namespace["doubled"].__code__)
    assert _holds_hooks(result.prepared.body)  # the run's own code held them
    # After the run, the functions run as plain Python and record nothing.
    rows = result.recorder.count
    assert result.namespace["summed"](range(30)) == 35
    assert result.recorder.count == rows


def test_nothing_is_bound_in_the_namespace_or_among_the_builtins():
    import builtins

    before = dict(vars(builtins))
    source = "seen = sorted(globals())\nfor i in range(2):\n    pass\n"
    result = Instrumented(source)
    assert result.namespace["seen"] == ["__builtins__", "__name__"]
    assert dict(vars(builtins)) == before
    assert not any(RUNTIME in str(key) for key in result.namespace)


FUNCTION_KINDS_SOURCE = """\
import tensorflow as tf
import keras

def plain(xs):
    for x in xs:
        pass

def generator(xs):
    for x in xs:
        yield x

async def coroutine(xs):
    for x in xs:
        pass

@tf.function
def graph(xs):
    for x in tf.range(3):
        pass

@tf.function(reduce_retracing=True)
def graph_too(xs):
    while xs > 0:
        xs -= 1

def given_to_tf_function(xs):
    for x in xs:
        pass

compiled = tf.function(given_to_tf_function)

def in_a_lambda_layer(xs):
    for x in xs:
        pass

layer = keras.layers.Lambda(in_a_lambda_layer)

class Block(keras.layers.Layer):
    def call(self, x):
        for _ in range(2):
            x = x + 1
        return x

class Deeper(Block):
    def call(self, x):
        for _ in range(2):
            x = x * 2
        return x

class Trainer:
    def fit(self, xs):
        def each(x):
            while False:
                pass
        for x in xs:
            each(x)
"""


def test_which_functions_have_their_loops_instrumented():
    prepared = prepare(FUNCTION_KINDS_SOURCE, FILENAME)
    lines = FUNCTION_KINDS_SOURCE.splitlines()
    found = {(lines[loop.lineno - 1].strip(), loop.function) for loop in prepared.loops}
    assert found == {
        ("for x in xs:", "plain"),
        ("while False:", "Trainer.fit.<locals>.each"),
        ("for x in xs:", "Trainer.fit"),
    }


CONVERSIONS_SOURCE = """\
import tensorflow as tf, keras
def get_batch(i):
    return tf.constant(i)
@tf.function
def step(x):
    return tf.constant(x)
def numbers():
    yield tf.constant(1)
class Feeder:
    table = tf.constant(0)
    def next(self):
        return tf.convert_to_tensor(self)
class Block(keras.layers.Layer):
    def call(self, x):
        return tf.constant(x)
for i in range(3):
    xb = tf.constant(i)
    scale = lambda v: tf.constant(v)
    def inner():
        return tf.constant(value=i)
top = tf.constant(0)
"""


def test_which_conversions_are_marked():
    """A loop's conversions, and those in the bodies of the functions whose loops would be
    rewritten (a helper, a method, a function defined inside a loop); not those of functions
    left as written, of lambdas, of class bodies, or of the top level outside the loops."""
    tree = ast.parse(CONVERSIONS_SOURCE)
    entered: set[int] = set()
    instrument_loops(tree, CONVERSIONS_SOURCE, lambda *_: 0, entered=entered)
    count, in_functions = mark_conversions(tree, entered)
    marked = {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "host"
        and isinstance(node.func.value, ast.Constant)
        and node.func.value.value == RUNTIME
    }
    assert marked == {3, 12, 17, 20}
    assert (count, in_functions) == (4, 3)


BLOCKS_SOURCE = """\
import contextlib
def f(xs, mode):
    out = []
    try:
        for x in xs:
            out.append(x)
        raise ValueError
    except ValueError:
        for x in xs:
            out.append(-x)
    finally:
        out.append("finally")
    match mode:
        case "drain":
            while len(out) > 2:
                out.pop()
    with contextlib.nullcontext():
        if out:
            for x in range(2):
                out.append(x)
    return out
result = f([1, 2], "drain")
"""


def test_loops_in_every_kind_of_block_of_a_function_are_rewritten():
    _, plain_error = _plain(BLOCKS_SOURCE)
    assert plain_error is None
    result = Instrumented(BLOCKS_SOURCE)
    assert result.error is None
    assert result.namespace["result"] == _plain(BLOCKS_SOURCE)[0]["result"] == [1, 2, 0, 1]
    assert [loop.lineno for loop in result.prepared.loops] == [5, 9, 15, 19]
    assert [result.rows(line).size for line in (5, 9, 15, 19)] == [2, 2, 3, 2]


def test_functions_keep_their_code_when_the_two_compilations_cannot_be_paired(monkeypatch):
    """A safety net never seen to be needed: rather no loop recorded than a function that
    keeps rewritten code after the run."""
    from tfdiag_magic import code_runner

    def unpaired(*args: Any) -> None:
        raise code_runner._UnpairedError("test")

    monkeypatch.setattr(code_runner, "pair_functions", unpaired)
    prepared = prepare(DEFINITIONS_SOURCE, FILENAME)
    assert prepared.loops == [] and prepared.hooks is None
    assert not _holds_hooks(prepared.body)


def test_a_function_running_on_another_thread_records_nothing_and_runs_plainly():
    source = (
        "import threading\n"
        "def count(n):\n"
        "    total = 0\n"
        "    for i in range(n):\n"
        "        total += i\n"
        "    k = 0\n"
        "    while k < n:\n"
        "        k += 1\n"
        "    out.append(total + k)\n"
        "out = []\n"
        "worker = threading.Thread(target=count, args=(4,))\n"
        "worker.start()\n"
        "worker.join()\n"
    )
    result = Instrumented(source)
    assert result.error is None
    assert result.namespace["out"] == [10]
    assert result.record.step_count == 0


def test_a_function_still_running_on_a_thread_when_the_run_ends_goes_on_plainly():
    source = (
        "import threading\n"
        "go = threading.Event()\n"
        "def wait_then_count(n):\n"
        "    go.wait(10)\n"
        "    total = 0\n"
        "    for i in range(n):\n"
        "        total += i\n"
        "    while total > 3:\n"
        "        total -= 1\n"
        "    out.append(total)\n"
        "out = []\n"
        "worker = threading.Thread(target=wait_then_count, args=(5,))\n"
        "worker.start()\n"
    )
    result = Instrumented(source)
    assert result.error is None
    # The run is over: the thread's frame still runs the rewritten code, with idle hooks.
    result.namespace["go"].set()
    result.namespace["worker"].join(10)
    assert result.namespace["out"] == [3]
    assert not _holds_hooks(result.namespace["wait_then_count"].__code__)


def test_functions_made_during_the_run_anywhere_get_their_plain_code():
    """Closures kept in a list, a bound method in a dict, a decorated function's original."""
    source = (
        "import functools\n"
        "def make(k):\n"
        "    def add(xs):\n"
        "        for x in xs:\n"
        "            k_total = k + x\n"
        "        return k_total\n"
        "    return add\n"
        "def logged(function):\n"
        "    @functools.wraps(function)\n"
        "    def wrapper(*args):\n"
        "        return function(*args)\n"
        "    return wrapper\n"
        "class Model:\n"
        "    @logged\n"
        "    def fit(self, xs):\n"
        "        n = 0\n"
        "        for x in xs:\n"
        "            n += 1\n"
        "        return n\n"
        "adders = [make(1), make(2)]\n"
        "kept = {'fit': Model().fit}\n"
        "del make\n"
        "values = [add([1, 2]) for add in adders] + [kept['fit']([1, 2, 3])]\n"
    )
    result = Instrumented(source)
    assert result.namespace["values"] == [3, 4, 3]
    namespace = result.namespace
    functions = [*namespace["adders"], namespace["kept"]["fit"].__func__.__wrapped__]
    for function in functions:
        assert not _holds_hooks(function.__code__), function
        assert function.__code__ == _plain_code(source, function.__qualname__)


USUAL_PLACES_SOURCE = """\
import functools
def logged(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args)
    return wrapper
@logged
def decorated(xs):
    for x in xs:
        pass
    return len(xs)
def make(k):
    def add(xs):
        for x in xs:
            k_total = k + x
        return k_total
    return add
class Model:
    @staticmethod
    def count(xs):
        n = 0
        for x in xs:
            n += 1
        return n
    @property
    def size(self):
        while False:
            pass
        return 3
add_one = make(1)
values = (decorated([1, 2]), add_one([1]), Model.count([4, 5, 6]), Model().size)
"""


def test_functions_in_the_usual_places_are_found_without_searching_every_object(monkeypatch):
    """A decorated function's original, a closure, a static method and a property getter:
    found from the namespace; the garbage collector's search of every object (tens of
    milliseconds in a TensorFlow process) is kept for functions held elsewhere."""
    import gc

    searches: list[int] = []
    search = gc.get_referrers
    monkeypatch.setattr(
        gc, "get_referrers", lambda *held: searches.append(len(held)) or search(*held)
    )
    result = Instrumented(USUAL_PLACES_SOURCE)
    assert result.namespace["values"] == (2, 2, 3, 3)
    assert searches == []
    namespace = result.namespace
    functions = [
        namespace["decorated"].__wrapped__,
        namespace["add_one"],
        namespace["Model"].count,
        namespace["Model"].size.fget,
    ]
    for function in functions:
        assert function.__code__ == _plain_code(USUAL_PLACES_SOURCE, function.__qualname__)
    # held only in a list: found by the search
    held = Instrumented(USUAL_PLACES_SOURCE + "kept = [make(2)]\ndel make\n")
    assert searches == [1]
    (kept,) = held.namespace["kept"]
    assert kept.__code__ == _plain_code(USUAL_PLACES_SOURCE, "make.<locals>.add")


def test_hooks_pickled_with_a_function_arrive_idle():
    """cloudpickle (joblib, Ray) pickles a __main__ function's code by value, constants and
    all: the hooks arrive as idle ones, and the function runs plainly there."""
    import pickle

    hooks = LoopHooks()
    hooks.activate(LoopRuntime(Recorder()))
    copy = pickle.loads(pickle.dumps(hooks))
    assert isinstance(copy, LoopHooks) and copy.plain_code == {}
    assert list(copy.iterate_guarded([1, 2], 0)) == [1, 2]
    assert copy.end_guarded(0) is None


def test_a_wait_before_a_helpers_loop_stays_the_next_steps():
    """A function's loop that runs between a batch and its step (an augmentation helper with
    a loop of its own) does not take the batch's wait from the step."""
    source = (
        "import time\n"
        "def batches():\n"
        "    for i in range(3):\n"
        "        time.sleep(0.02)\n"
        "        yield i\n"
        "def augment(b):\n"
        "    for k in range(2):\n"
        "        b += k\n"
        "    return b\n"
        "for b in batches():\n"
        "    augment(b)\n"
        "    record_step()\n"
    )
    prepared = prepare(source, FILENAME)
    recorder = Recorder()
    recorder.loops = list(prepared.loops)
    waits: list[float] = []

    def record_step() -> None:
        waits.append(recorder.take_wait())

    probe = LoopProbe(prepared.hooks)
    probe.install(recorder)
    try:
        run(prepared, {"record_step": record_step})
    finally:
        probe.remove()
    assert len(waits) == 3 and all(wait >= 0.02 for wait in waits), waits


# -- line numbers are kept ------------------------------------------------------------------

RAISE_CASES = {
    "in_for_body": (
        "for i in range(3):\n    x = i\n    if i == 1:\n        raise ValueError(i)\n",
        4,
    ),
    "in_while_body": ("n = 0\nwhile n < 5:\n    n += 1\n    assert n < 3, n\n", 4),
    "in_for_else": ("for i in range(2):\n    pass\nelse:\n    {}['missing']\n", 4),
    "in_nested_loop": (
        "for i in range(2):\n    for j in range(2):\n        if i and j:\n"
        "            raise RuntimeError('deep')\n",
        4,
    ),
    "after_a_loop": ("for i in range(2):\n    pass\n\nint('x')\n", 4),
    "in_loop_header": ("for i in 5:\n    pass\n", 1),
}


@pytest.mark.parametrize("name", sorted(RAISE_CASES))
def test_exception_reports_the_same_line_as_the_original_source(name):
    source, expected_line = RAISE_CASES[name]
    _, plain_error = _plain(source)
    result = Instrumented(source)
    assert plain_error is not None and result.error is not None
    assert type(result.error) is type(plain_error)
    assert str(result.error) == str(plain_error)
    assert _last_frame_line(plain_error) == (FILENAME, expected_line)
    assert _last_frame_line(result.error) == (FILENAME, expected_line)


def test_instrumented_code_uses_exactly_the_line_numbers_of_the_source():
    source = textwrap.dedent(SEMANTIC_CASES["nested_loops_with_inner_break_and_outer_continue"])
    source += DEFINITIONS_SOURCE
    plain_code = compile(source, FILENAME, "exec")
    prepared = prepare(source, FILENAME)
    assert len(prepared.loops) == 6  # 2 top-level above, and 4 below (see its test)
    assert _lines(prepared.body) == _lines(plain_code)
    assert prepared.body.co_filename == FILENAME


def test_syntax_error_is_raised_with_the_line_python_reports():
    source = "x = 1\nfor i in range(3):\n    y = (\n"
    with pytest.raises(SyntaxError) as plain:
        compile(source, FILENAME, "exec")
    with pytest.raises(SyntaxError) as prepared:
        prepare(source, FILENAME)
    assert prepared.value.lineno == plain.value.lineno
    assert prepared.value.filename == FILENAME


# -- the value of the cell ------------------------------------------------------------------


def test_last_expr_returns_the_value_of_the_final_expression():
    result = Instrumented(
        "calls = []\nfor i in range(3):\n    pass\ncalls.append(i) or i * 10", "last_expr"
    )
    assert result.value == 20
    assert result.namespace["calls"] == [2]  # evaluated exactly once


def test_last_expr_gives_none_when_the_cell_ends_with_an_assignment():
    result = Instrumented("x = 41\nx = x + 1", "last_expr")
    assert result.value is None
    assert result.namespace["x"] == 42


def test_last_expr_or_assign_returns_the_value_of_a_final_assignment():
    result = Instrumented(
        "total = 0\nfor i in range(4):\n    total += i\nx = total * 2", "last_expr_or_assign"
    )
    assert result.value == 12
    assert result.namespace["x"] == 12


def test_last_expr_or_assign_returns_the_value_after_an_augmented_assignment():
    result = Instrumented("x = 5\nx += 2", "last_expr_or_assign")
    assert result.value == 7


def test_last_expr_or_assign_still_returns_a_final_expression():
    result = Instrumented("x = 3\nx * x", "last_expr_or_assign")
    assert result.value == 9


def test_last_expr_or_assign_gives_none_for_a_tuple_assignment():
    result = Instrumented("a, b = 1, 2", "last_expr_or_assign")
    assert result.value is None
    assert (result.namespace["a"], result.namespace["b"]) == (1, 2)


def test_interactivity_none_gives_none_but_still_runs_the_final_expression():
    result = Instrumented("calls = []\ncalls.append(1) or 99", "none")
    assert result.value is None
    assert result.namespace["calls"] == [1]


def test_final_expression_error_keeps_its_line_number():
    result = Instrumented("x = 1\n\nx + undefined_name", "last_expr")
    assert isinstance(result.error, NameError)
    assert _last_frame_line(result.error) == (FILENAME, 3)


def test_data_wait_of_a_loop_row_is_never_nan_for_for_loops():
    result = Instrumented("for i in range(3):\n    pass\n")
    waits = result.record.steps["data_wait"][result.rows(1)]
    assert not any(math.isnan(w) for w in waits)


# -- compiler flags and the cell's text -----------------------------------------------------


def test_prepared_code_does_not_inherit_the_tools_future_annotations():
    """code_runner (like this file) has ``from __future__ import annotations``; the user's
    code must not: its annotations stay objects, as when Python compiles it."""
    source = "limit: int = 3\ndef scale(value: float) -> list[int]:\n    return [int(value)]\n"
    namespace: dict[str, Any] = {"__name__": "__main__"}
    run(prepare(source, FILENAME), namespace)
    assert namespace["__annotations__"] == {"limit": int}
    assert namespace["scale"].__annotations__ == {"value": float, "return": list[int]}


@pytest.mark.parametrize(
    ("code", "transformed", "header", "expected"),
    [
        ("x = 1\n", "x = 1\n", "-q", "# %%tfprofile -q\nx = 1\n"),
        ("\n\n  \nx = 1\n1/0\n", "x = 1\n1/0\n", "", "# %%tfprofile \n\n\n\nx = 1\n1/0\n"),
        ("\n\n", "\n\n", "-q", "# %%tfprofile -q\n\n\n"),  # all blank: IPython kept it
        ("y = 2", "y = 2\n", None, "y = 2\n"),  # the line magic: no header line
    ],
    ids=["no-blank-lines", "blank-lines-put-back", "all-blank", "line-magic"],
)
def test_cell_source_keeps_line_n_of_the_cell_on_line_n(
    code: str, transformed: str, header: str | None, expected: str
):
    source = cell_source(code, transformed, header)
    assert source == expected
    if header is not None and code.strip():
        # the first statement is on the cell's own line (the magic's line is line 1)
        first = next(i for i, line in enumerate(code.splitlines()) if line.strip())
        assert source.splitlines()[first + 1] == code.splitlines()[first]
