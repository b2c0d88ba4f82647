"""A profiled cell behaves exactly as the same cell run plainly: a differential test.

Each case runs twice in the real IPython shell of the test process, once plainly and once under
``%%tfprofile -q``, each time from a fresh state (empty namespace, cleared Keras session, seeds
set by the cell itself). Then a plain cell observes what the run left behind. Compared between
the two runs: every name the cell bound (values, arrays, tensors, weights), the cell's value,
its stdout and stderr, its warnings, its exception (type, message, and the frames of the user's
code, whose lines must be the cell's real lines also when it starts with blank lines), and what
the next cell sees: random draws (NumPy, ``random``, TensorFlow, Keras), the order a seeded
shuffle yields in the next epoch, an iterator's next element, how often a generator was called,
trained weights and losses.

What a cell magic cannot change is not compared: the traceback's first frame is IPython's call
of the magic (``get_ipython().run_cell_magic(...)``, as for ``%%time``), and frames of the
tool's own code are hidden by ``__tracebackhide__``.
"""

from __future__ import annotations

import dataclasses
import difflib
import linecache
import os
import re
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import IPython
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdiag_magic

from .helpers import DEEPEST_RECURSION, FAILING_OP_IN_A_FUNCTION

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
IPYTHON_DIR = str(Path(IPython.__file__).resolve().parent)
TOOL_DIR = str(Path(tfdiag_magic.__file__).resolve().parent)
MAGIC_CALL = "get_ipython().run_cell_magic("
# Names IPython binds for its history; `_tfprofile_<N>` is the tool's documented result name
# for a run with a rewrite, like IPython's `_<N>`; `__warningregistry__` is the warnings
# module's record of what it showed, keyed by line numbers (checked by `Run.warnings`).
SHELL_NAMES = re.compile(
    r"^(_+|_i+\d*|_\d+|_[oid]h|In|Out|get_ipython|exit|quit|_tfprofile_\d+|__warningregistry__)$"
)


# -- running a cell twice --------------------------------------------------------------------


@dataclass
class Run:
    """What a user can observe of one run of a cell, in comparable form."""

    success: bool
    value: Any
    names: dict[str, Any]
    stdout: str
    stderr: str
    warnings: list[tuple[str, str, str, int | str]]
    error: tuple[str, str] | None
    frames: list[tuple[str, str, int, str]]
    shown: str  # stdout without its ANSI colours, as the user reads it
    observed: dict[str, Any]
    exception: BaseException | None


def snapshot(value: Any, depth: int = 0) -> Any:
    """`value` in a form that compares by content: arrays by dtype, shape and bytes."""
    if depth > 6:
        return ("deep", type(value).__qualname__)
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return value
    if isinstance(value, float):
        return ("float", repr(value))  # NaN equals NaN, -0.0 differs from 0.0
    if isinstance(value, ModuleType):
        return ("module", value.__name__)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        return ("array", array.dtype.str, array.shape, array.tobytes())
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return ("tensor", snapshot(value.numpy(), depth + 1))
    if isinstance(value, keras.callbacks.History):
        return ("history", snapshot(value.history, depth + 1), value.epoch)
    if isinstance(value, keras.layers.Layer):
        weights = [snapshot(w, depth + 1) for w in value.get_weights()]
        return ("layer", type(value).__qualname__, weights)
    if isinstance(value, keras.optimizers.Optimizer):
        return ("optimizer", [snapshot(v, depth + 1) for v in value.variables])
    if isinstance(value, (list, tuple)):
        return (type(value).__qualname__, [snapshot(v, depth + 1) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: snapshot(v, depth + 1) for k, v in value.items()})
    if isinstance(value, (set, frozenset)):
        return ("set", sorted(repr(v) for v in value))
    return ("object", type(value).__module__, type(value).__qualname__)


def user_frames(error: BaseException | None) -> list[tuple[str, str, int, str]]:
    """(file, function, line number, line text) of the user's frames of `error`'s traceback.

    A cell's file is named "<cell>" (its real name carries the execution count), and a file
    autograph generated "<autograph>". IPython's
    frames, the tool's and the magic's own call line are left out: see the module docstring.
    """
    if error is None:
        return []
    frames = []
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename.startswith((IPYTHON_DIR, TOOL_DIR)):
            continue
        if (frame.line or "").startswith(MAGIC_CALL):
            continue
        in_cell = not os.path.isfile(frame.filename)
        name = "<cell>" if in_cell else frame.filename
        if os.path.basename(name).startswith("__autograph_generated_file"):
            name = "<autograph>"  # a temporary file of a new name for each conversion
        frames.append((name, frame.name, frame.lineno or 0, frame.line or ""))
    return frames


def _warning(caught: warnings.WarningMessage) -> tuple[str, str, str, int | str]:
    """A shown warning; one from a cell is placed by its line's text (see `assert_same`)."""
    where = (caught.filename, caught.lineno)
    if not os.path.isfile(caught.filename):
        where = ("<cell>", linecache.getline(caught.filename, caught.lineno).strip())
    return (caught.category.__name__, str(caught.message), *where)


def _message(error: BaseException) -> str:
    """The error's message, less what differs between any two runs of a cell: TensorFlow's
    graph node counters (``[Op:__inference_..._217]``) and the cell's file name and line in a
    traceback that TensorFlow writes into the message (the line is checked by `frames`)."""
    text = re.sub(r"_\d+\]", "_N]", str(error))
    return re.sub(r'File "<ipython-input-[^"]*>", line \d+', 'File "<cell>"', text)


def run_once(ip, capsys, cell: str, observe: str, profiled: bool) -> Run:
    """Run `cell` from a fresh state, plainly or under ``%%tfprofile -q``; then `observe`."""
    ip.reset(new_session=False)
    keras.backend.clear_session()
    before = set(ip.user_ns)
    capsys.readouterr()
    # Entering catch_warnings resets the registry of warnings already shown once, so both runs
    # show the same warnings whichever runs first.
    with warnings.catch_warnings(record=True) as caught:
        result = ip.run_cell(("%%tfprofile -q\n" if profiled else "") + cell, store_history=True)
    out, err = capsys.readouterr()
    names = {
        name: snapshot(value)
        for name, value in ip.user_ns.items()
        if name not in before and not SHELL_NAMES.match(name)
    }
    error = result.error_before_exec or result.error_in_exec
    observed: dict[str, Any] = {}
    if observe:
        seen = set(ip.user_ns)
        check = ip.run_cell(observe, store_history=True)
        assert check.success, check.error_in_exec
        observed = {
            name: snapshot(value)
            for name, value in ip.user_ns.items()
            if name not in seen and not SHELL_NAMES.match(name)
        }
    capsys.readouterr()
    return Run(
        success=result.success,
        value=snapshot(result.result),
        names=names,
        # An error's stdout holds its traceback: compared by `frames`. `Out[N]` counts cells.
        stdout=re.sub(r"^Out\[\d+\]", "Out[N]", out, flags=re.MULTILINE) if error is None else "",
        stderr=err,
        warnings=[_warning(w) for w in caught],
        error=None if error is None else (type(error).__qualname__, _message(error)),
        frames=user_frames(error),
        shown=ANSI.sub("", out),
        observed=observed,
        exception=error,
    )


def run_twice(ip, capsys, cell: str, observe: str = "") -> tuple[Run, Run]:
    plain = run_once(ip, capsys, cell, observe, profiled=False)
    profiled = run_once(ip, capsys, cell, observe, profiled=True)
    return plain, profiled


def assert_same(plain: Run, profiled: Run) -> None:
    """Every observable of the two runs is equal; line numbers of cell frames are checked
    apart (`assert_real_lines`), as IPython numbers a plain cell from its first non-blank line."""
    assert profiled.error == plain.error, "\n".join(
        difflib.unified_diff(
            str(plain.error).split("\\n"), str(profiled.error).split("\\n"), lineterm=""
        )
    )
    assert profiled.success == plain.success
    assert profiled.value == plain.value
    assert profiled.stdout == plain.stdout
    assert profiled.stderr == plain.stderr
    assert profiled.warnings == plain.warnings
    assert set(profiled.names) == set(plain.names)
    for name, value in plain.names.items():
        assert profiled.names[name] == value, f"{name} differs under the profiler"
    assert set(profiled.observed) == set(plain.observed)
    for name, value in plain.observed.items():
        assert profiled.observed[name] == value, f"{name}, observed after the cell, differs"

    def without_cell_lines(frames: list[tuple[str, str, int, str]]) -> list[tuple]:
        return [(f, name, line if f != "<cell>" else 0, text) for f, name, line, text in frames]

    assert without_cell_lines(profiled.frames) == without_cell_lines(plain.frames)


def assert_real_lines(run: Run, cell: str) -> None:
    """Each cell frame of a profiled run points at the line with that text in the typed cell
    (the ``%%tfprofile`` line is line 1), and IPython's display shows those line numbers."""
    typed = ("%%tfprofile -q\n" + cell).splitlines()
    cell_frames = [frame for frame in run.frames if frame[0] == "<cell>"]
    assert cell_frames, run.frames
    for _, _, lineno, text in cell_frames:
        assert 0 < lineno <= len(typed) and typed[lineno - 1].strip() == text, (lineno, text)
        shown = rf"^-+> {lineno}\s+{re.escape(text)}$"
        assert re.search(shown, run.shown, re.MULTILINE), run.shown


# -- names, value, output, warnings, exceptions ------------------------------------------------

NAMES_CELL = """\
import sys, warnings
import numpy as np
total = 0
for i in range(10):
    if i == 7:
        break
    if i % 2:
        continue
    total += i
else:
    total = -1
count = 3
while count:
    count -= 1
squares = [k * k for k in range(4)]
table = {name: len(name) for name in ("a", "bb")}
def twice(v):
    return 2 * v
class Box:
    size = twice(total)
temporary = 1
del temporary
values = np.arange(5.0) / 3
print("out", total, squares)
sys.stderr.write("err line\\n")
warnings.warn("a warning from the cell")
twice(Box.size) + count
"""


def test_names_value_output_and_warnings_are_as_in_a_plain_cell(ip, capsys):
    plain, profiled = run_twice(ip, capsys, NAMES_CELL)
    assert plain.success and plain.value == 48 and "out 12" in plain.stdout  # the case ran
    assert plain.warnings and "err line" in plain.stderr
    assert_same(plain, profiled)


GLOBALS_CELL = """\
import re
for i in range(2):
    pass
history_names = re.compile(r"^(_+|_i+\\d*|_\\d+|_[oid]h|In|Out|get_ipython|exit|quit)$")
names_seen = sorted(name for name in globals() if not history_names.match(name))
"""


def test_a_recursion_goes_as_deep_as_in_a_plain_cell(ip, capsys):
    """The tool's frames (the magic's, the session's) sit under the cell's code: Python's limit
    is raised by as many while it runs, and put back after. (Without it the cell's recursion
    ended 5 levels sooner; within one level, as the C calls of IPython's magic machinery count
    towards the limit too and no frame shows them: measured 0 or 1.)"""
    import sys

    limit = sys.getrecursionlimit()
    cell = DEEPEST_RECURSION + "depth = deepest()\ndepth"
    plain, profiled = run_twice(ip, capsys, cell)
    assert plain.value > 900 and abs(profiled.value - plain.value) <= 1, (plain, profiled)
    # The rest of the run as in a plain cell, that depth aside.
    names = {**profiled.names, "depth": plain.names["depth"]}
    same = {"value": plain.value, "stdout": plain.stdout, "names": names}
    assert_same(plain, dataclasses.replace(profiled, **same))
    assert sys.getrecursionlimit() == limit


def test_globals_seen_by_the_cell_while_it_runs_are_the_plain_ones(ip, capsys):
    plain, profiled = run_twice(ip, capsys, GLOBALS_CELL)
    assert "history_names" in plain.names["names_seen"][1]
    assert_same(plain, profiled)


def test_trailing_semicolon_shows_nothing_and_keeps_the_side_effects(ip, capsys):
    plain, profiled = run_twice(ip, capsys, "shown = []\nshown.append(1) or 5;")
    assert plain.value is None and plain.names["shown"] == ("list", [1])
    assert "Out[" not in profiled.shown
    assert_same(plain, profiled)


def test_line_magic_gives_the_statements_value_as_the_plain_statement(ip, capsys):
    plain = run_once(ip, capsys, "sum(range(10))", "", profiled=False)
    ip.reset(new_session=False)
    magic = ip.run_cell("%tfprofile -q sum(range(10))", store_history=True)
    assert magic.success
    assert snapshot(magic.result) == plain.value == 45


FAILING_CELL = """\
import numpy as np
done = []
def check(batch):
    if batch == 2:
        raise ValueError(f"bad batch {batch}")
    return batch
for batch in range(5):
    done.append(check(batch))
never = True
"""


@pytest.mark.parametrize("blank_lines", [0, 3], ids=["no-blank-lines", "3-leading-blank-lines"])
def test_exception_is_the_same_and_points_at_the_users_real_lines(ip, capsys, blank_lines: int):
    cell = "\n" * blank_lines + FAILING_CELL
    plain, profiled = run_twice(ip, capsys, cell)
    assert plain.error == ("ValueError", "bad batch 2")
    assert [frame[1] for frame in plain.frames] == ["<module>", "check"]
    assert_same(plain, profiled)
    assert_real_lines(profiled, cell)
    raising = 1 + blank_lines + FAILING_CELL.splitlines().index("for batch in range(5):") + 2
    assert re.search(rf"Cell In\[\d+\], line {raising}$", profiled.shown, re.MULTILINE)


MODEL_CALL_FAILING_CELL = """\
import numpy as np
import keras

class Doubler(keras.Model):
    def call(self, x):
        if x.shape[-1] != 4:
            raise ValueError(f"expected 4 features, got {x.shape[-1]}")
        return x * 2.0

model = Doubler()
outputs = []
for width in (4, 4, 3, 4):  # the model called eagerly, as the model-call probe times it
    outputs.append(model(np.ones((1, width), "float32")))
"""


def test_exception_inside_an_eager_model_call_in_a_loop_is_the_same(ip, capsys):
    plain, profiled = run_twice(ip, capsys, MODEL_CALL_FAILING_CELL)
    assert plain.error[0] == "ValueError" and "expected 4 features, got 3" in plain.error[1]
    assert_same(plain, profiled)
    assert_real_lines(profiled, MODEL_CALL_FAILING_CELL)
    assert "model_calls.py" not in profiled.shown  # the tool's wrapper is no frame of it


RETRACING_CELL = """\
import tensorflow as tf

@tf.function
def scale(x, factor):
    return x * factor

x = tf.ones((3,))
for step in range(6):
    y = scale(x, 0.1 * (step + 1))  # a new Python float every call
"""

PREDICT_LOOP_CELL = """\
import numpy as np
import keras

keras.utils.set_random_seed(3)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
samples = np.linspace(-1, 1, 32).reshape(8, 4).astype("float32")
outputs = []
for i in range(len(samples)):  # one sample at a time
    outputs.append(model.predict(samples[i : i + 1], verbose=0)[0])
"""


@pytest.mark.parametrize("cell", [RETRACING_CELL, PREDICT_LOOP_CELL], ids=["retracing", "loop"])
def test_leading_blank_lines_keep_the_findings_loop_lines_and_rewrites(ip, cell: str):
    """The same cell with 3 blank lines first: the same findings and rewrites (with the blank
    lines), and loop lines that are the cell's own."""
    ip.reset(new_session=False)
    keras.backend.clear_session()
    direct = ip.run_cell("%%tfprofile -q -o r\n" + cell, store_history=True)
    assert direct.success, direct.error_in_exec
    first = ip.user_ns["r"]
    ip.reset(new_session=False)
    keras.backend.clear_session()
    blank = ip.run_cell("%%tfprofile -q -o r\n\n\n\n" + cell, store_history=True)
    assert blank.success, blank.error_in_exec
    second = ip.user_ns["r"]
    assert [loop.lineno for loop in second.record.loops] == [
        loop.lineno + 3 for loop in first.record.loops
    ]
    loop_line = 2 + cell.splitlines().index(next(s for s in cell.splitlines() if "for " in s))
    assert [loop.lineno for loop in first.record.loops] == [loop_line]
    rewrites = {f.code: f.rewrite for f in first.findings if f.rewrite}
    assert rewrites, [f.code for f in first.findings]  # the case has something to rewrite
    blank_rewrites = {f.code: f.rewrite for f in second.findings if f.rewrite}
    assert set(blank_rewrites) == set(rewrites)
    for code, rewrite in rewrites.items():
        assert blank_rewrites[code] == "\n\n\n" + rewrite, code


# -- what the next cell sees --------------------------------------------------------------------

SEED = """\
import random
import keras, numpy as np, tensorflow as tf
keras.utils.set_random_seed(7)
"""

# Random draws of every generator a user may rely on after the cell.
DRAWS = """\
after_np = np.random.rand(3)
after_py = [random.random() for _ in range(3)]
after_tf = tf.random.uniform([3])
after_keras = keras.random.uniform([3])
"""


def test_random_draws_after_a_cell_are_the_plain_ones(ip, capsys):
    cell = SEED + "drawn = np.random.rand(2), random.random(), tf.random.normal([2])\n"
    plain, profiled = run_twice(ip, capsys, cell, DRAWS)
    assert (
        plain.observed["after_np"] != run_once(ip, capsys, SEED, DRAWS, False).observed["after_np"]
    )  # the draws depend on what the cell drew: the comparison can see a difference
    assert_same(plain, profiled)


SHUFFLE_FIT_CELL = (
    SEED
    + """\
seen = []
def note(i):
    seen.append(int(i))
    return i
def as_example(i):
    value = tf.reshape(tf.cast(i, "float32"), [1])
    return value, 2 * value
numbers = (
    tf.data.Dataset.range(8)
    .shuffle(8, seed=1)
    .map(lambda i: tf.py_function(note, [i], tf.int64))
    .map(as_example)
    .batch(2)
)
model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
history = model.fit(numbers, epochs=2, verbose=0)
"""
)
NEXT_EPOCH = "next_epoch = [int(x[0, 0]) for x, _ in numbers]\nevery_element = list(seen)\n"


def test_seeded_shuffle_order_in_every_epoch_and_the_next_one_after_fit(ip, capsys):
    """`seen` holds the order of every epoch of the fit; `next_epoch` the order after it."""
    plain, profiled = run_twice(ip, capsys, SHUFFLE_FIT_CELL, NEXT_EPOCH + DRAWS)
    seen = plain.observed["every_element"][1]
    assert len(seen) == 24 and seen[:8] != seen[8:16]  # two epochs and the next one, reshuffled
    assert_same(plain, profiled)


ITERATOR_CELL = """\
import tensorflow as tf
letters = iter("abcdefgh")
for letter in letters:
    if letter == "c":
        break
batches = iter(tf.data.Dataset.range(100).batch(2))
for step, batch in enumerate(batches):
    if step == 2:
        break
model_free = [int(v) for v in next(batches)]
"""


def test_iterators_left_half_consumed_give_the_same_next_element(ip, capsys):
    plain, profiled = run_twice(ip, capsys, ITERATOR_CELL, "next_letter = next(letters)\n")
    assert plain.observed["next_letter"] == "d"
    assert plain.names["model_free"] == ("list", [6, 7])
    assert_same(plain, profiled)


# How many tf.data iterators are alive as each epoch's first step begins: a tool that held the
# previous epoch's iterator would keep its buffers (a shuffle buffer) beside the new one's.
LIVE_ITERATORS_CELL = (
    SEED
    + """\
import gc
from tensorflow.python.data.ops.iterator_ops import OwnedIterator
def live_iterators():
    return sum(isinstance(o, OwnedIterator) for o in gc.get_objects())
class CountIterators(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.counts = []
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            self.counts.append(live_iterators())
x = np.ones((96, 4), "float32")
known = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).shuffle(96).batch(8)
unknown = known.filter(lambda a, b: True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
known_counts, unknown_counts = CountIterators(), CountIterators()
model.fit(known, epochs=3, verbose=0, callbacks=[known_counts])
model.fit(unknown, epochs=3, verbose=0, callbacks=[unknown_counts])
optimizer = keras.optimizers.SGD(0.01)
@tf.function
def train_step(iterator):
    a, b = next(iterator)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(a) - b) ** 2)
    weights = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
    return loss
loop_counts = []
for epoch in range(3):
    iterator = iter(known)
    loop_counts.append(live_iterators())
    for _ in range(5):
        train_step(iterator)
known_seen, unknown_seen = known_counts.counts, unknown_counts.counts
"""
)


def test_each_epochs_iterator_is_let_go_where_a_plain_run_lets_it_go(ip, capsys):
    plain, profiled = run_twice(ip, capsys, LIVE_ITERATORS_CELL)
    assert plain.names["known_seen"][1] == [1, 1, 1], plain.names["known_seen"]
    assert plain.names["loop_counts"][1] == [1, 1, 1], plain.names["loop_counts"]
    assert_same(plain, profiled)


# An iterator stepped until it runs out, as TensorFlow's guides write it: the error that ends
# each epoch passed through the step's frames (the iterator among their locals); the tool must
# not keep it. The garbage collector is off, so what lives is what is referenced.
RUN_OUT_CELL = """\
import gc
import tensorflow as tf
from tensorflow.python.data.ops.iterator_ops import OwnedIterator
def live_iterators():
    return sum(isinstance(o, OwnedIterator) for o in gc.get_objects())
ds = tf.data.Dataset.range(12).batch(4)
total = tf.Variable(0, dtype=tf.int64)
@tf.function
def step(iterator):
    total.assign_add(tf.reduce_sum(next(iterator)))
gc.collect()
gc.disable()
try:
    live = []
    for epoch in range(3):
        iterator = iter(ds)
        live.append(live_iterators())
        while True:
            try:
                step(iterator)
            except tf.errors.OutOfRangeError:
                break
    del iterator
    live.append(live_iterators())
finally:
    gc.enable()
"""


def test_an_iterator_that_ran_out_is_let_go_where_a_plain_run_lets_it_go(ip, capsys):
    plain, profiled = run_twice(ip, capsys, RUN_OUT_CELL)
    assert plain.names["live"][1] == [1, 1, 1, 0], plain.names["live"]
    assert_same(plain, profiled)


# A fit that fails, retried with a new model as one retries after running out of memory: the
# failed model goes once the code lets it go.
FAILED_FIT_CELL = (
    SEED
    + """\
import gc, weakref
def attempt(width):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(width), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model
model = attempt(64)
first = weakref.ref(model)
try:
    model.fit(np.ones((16, 5), "float32"), np.ones((16, 1), "float32"), epochs=1, verbose=0)
except ValueError:
    failed = True
del model
gc.collect()
failed_model_alive = first() is not None
model = attempt(8)
history = model.fit(np.ones((16, 4), "float32"), np.ones((16, 1), "float32"), verbose=0)
"""
)


def test_a_failed_fits_model_goes_when_the_code_lets_it_go(ip, capsys):
    plain, profiled = run_twice(ip, capsys, FAILED_FIT_CELL)
    assert plain.names["failed"] is True and plain.names["failed_model_alive"] is False
    assert_same(plain, profiled)


# A callback that predicts every batch, with a callback of its own: what the nested predict
# makes (its callbacks, its epoch iterator over its inputs) goes when it returns.
NESTED_PREDICT_CELL = (
    SEED
    + """\
import gc, weakref
from keras.src.backend.tensorflow.trainer import TFEpochIterator
gc.collect()
class Seen(keras.callbacks.Callback):
    made = weakref.WeakSet()
    def __init__(self):
        super().__init__()
        Seen.made.add(self)
    def on_predict_batch_end(self, batch, logs=None):
        pass
class PredictEachBatch(keras.callbacks.Callback):
    def __init__(self, x):
        super().__init__()
        self.x, self.alive = x, []
    def on_train_batch_end(self, batch, logs=None):
        self.model.predict(self.x, verbose=0, callbacks=[Seen()])
        epoch_iterators = sum(isinstance(o, TFEpochIterator) for o in gc.get_objects())
        self.alive.append((len(Seen.made), epoch_iterators))
x = np.ones((32, 4), "float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
gc.disable()
try:
    watcher = PredictEachBatch(x[:8])
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[watcher])
finally:
    gc.enable()
alive = watcher.alive
"""
)


def test_a_nested_predicts_callbacks_and_inputs_go_when_it_returns(ip, capsys):
    plain, profiled = run_twice(ip, capsys, NESTED_PREDICT_CELL)
    assert len(plain.names["alive"][1]) == 8 and plain.names["alive"][1][0][1][0] == 0
    assert_same(plain, profiled)


# Keras prefetches from a generator, so how far it reads ahead of the last step depends on
# timing even in plain runs: the generators here are finite, read to their end, and count only
# what they yield. `opened` counts how often tf.data started the generator: once per epoch.
GENERATOR_FIT_CELL = (
    SEED
    + """\
calls = 0
opened = 0
def batches(count=6):
    global calls
    for _ in range(count):
        calls += 1
        yield np.full((2, 1), calls, "float32"), np.ones((2, 1), "float32")
model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
source = batches()
history = model.fit(source, steps_per_epoch=3, epochs=2, verbose=0)
def epoch():
    global opened
    opened += 1
    yield from batches(4)
signature = (tf.TensorSpec((2, 1), "float32"), tf.TensorSpec((2, 1), "float32"))
from_generator = tf.data.Dataset.from_generator(epoch, output_signature=signature)
history_data = model.fit(from_generator, epochs=2, verbose=0)
"""
)


def test_generator_is_called_as_often_as_in_a_plain_run(ip, capsys):
    observe = "calls_after, opened_after = calls, opened\n"
    plain, profiled = run_twice(ip, capsys, GENERATOR_FIT_CELL, observe + DRAWS)
    assert plain.observed["calls_after"] == 6 + 2 * 4
    assert plain.observed["opened_after"] == 2
    assert_same(plain, profiled)


FAILING_GENERATOR_CELL = (
    SEED
    + """\
calls = 0
def batches():
    global calls
    while True:
        calls += 1
        if calls == 4:
            raise OSError("the file went away")
        yield np.ones((2, 1), "float32"), np.ones((2, 1), "float32")
model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(batches(), steps_per_epoch=3, epochs=3, verbose=0)
"""
)


def test_generator_that_raises_in_fit_is_not_called_again_after_it(ip, capsys):
    plain, profiled = run_twice(ip, capsys, FAILING_GENERATOR_CELL, "calls_after = calls\n")
    assert plain.error is not None and "the file went away" in plain.error[1]
    assert_same(plain, profiled)


# -- trained weights and losses with fixed seeds ------------------------------------------------

MODEL = """\
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                          keras.layers.Dropout(0.2), keras.layers.Dense(1)])
x = np.random.rand(16, 3).astype("float32")
y = x.sum(axis=1, keepdims=True)
"""
COMPILE = 'model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")\n'

TRAINING = {
    "fit-arrays": COMPILE + "history = model.fit(x, y, batch_size=4, epochs=3, verbose=0)\n",
    "fit-tf-data": COMPILE
    + """\
data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(16, seed=2).batch(4)
history = model.fit(data, epochs=3, verbose=0)
after_fit = [float(v[0, 0]) for v, _ in data]
""",
    "tf-function-loop": """\
optimizer = keras.optimizers.SGD(0.05)
@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
losses = []
for epoch in range(3):
    for start in range(0, 16, 4):
        losses.append(float(train_step(x[start:start + 4], y[start:start + 4])))
""",
    "eager-loop": """\
optimizer = keras.optimizers.SGD(0.05)
losses = []
for start in list(range(0, 16, 4)) * 2:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x[start:start + 4], training=True) - y[start:start + 4]) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    losses.append(float(loss))
""",
    "generator": COMPILE
    + """\
def batches():
    for _ in range(8):  # finite, read to its end: see GENERATOR_FIT_CELL
        index = np.random.randint(0, 16, size=4)
        yield x[index], y[index]
history = model.fit(batches(), steps_per_epoch=4, epochs=2, verbose=0)
""",
    "pydataset": COMPILE
    + """\
class Batches(keras.utils.PyDataset):
    def __init__(self):
        super().__init__()
        self.reads = 0
        self.epochs_ended = 0
    def __len__(self):
        return 4
    def __getitem__(self, index):
        self.reads += 1
        return x[index * 4:(index + 1) * 4], y[index * 4:(index + 1) * 4]
    def on_epoch_end(self):
        self.epochs_ended += 1
batches = Batches()
history = model.fit(batches, epochs=3, verbose=0)
reads, epochs_ended = batches.reads, batches.epochs_ended
""",
    # keras-io's U-Net example's `OxfordPets` subclass of it calls no `super().__init__()`:
    # Keras warns once, from its own line, and the tool's read of the settings must not warn
    # again (it once did, through Keras' `use_multiprocessing` property).
    "pydataset-without-super": COMPILE
    + """class Batches(keras.utils.PyDataset):
    def __init__(self):
        self.reads = 0
    def __len__(self):
        return 4
    def __getitem__(self, index):
        self.reads += 1
        return x[index * 4:(index + 1) * 4], y[index * 4:(index + 1) * 4]
batches = Batches()
history = model.fit(batches, epochs=2, verbose=0)
reads, settings = batches.reads, sorted(vars(batches))
""",
}


@pytest.mark.parametrize("name", list(TRAINING))
def test_training_gives_the_same_weights_losses_and_draws_after_it(ip, capsys, name: str):
    cell = SEED + MODEL + TRAINING[name]
    plain, profiled = run_twice(ip, capsys, cell, "weights = model.get_weights()\n" + DRAWS)
    assert plain.success, plain.exception
    assert (
        plain.observed["weights"]
        != run_once(ip, capsys, SEED + MODEL, "weights = model.get_weights()\n", False).observed[
            "weights"
        ]
    )  # it trained: weights moved
    assert_same(plain, profiled)


# -- functions with loops, defined in the profiled cell and used after it ---------------------

FUNCTIONS_CELL = (
    SEED
    + """\
import functools
class Base:
    def total(self, values):
        s = 0
        for v in values:
            s += v
        return s
class Child(Base):
    def total(self, values, bonus=1):
        t = super().total(values)
        for v in values:
            t += bonus
        return t
def make_scaler(k):
    def scale(values):
        out = []
        for v in values:
            out.append(k * v)
        return out
    return scale
def squares(n):
    for i in range(n):
        yield i * i
@tf.function
def graph_sum(x):
    total = tf.constant(0.0)
    for i in range(3):
        total += x * i
    return total
def logged(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper
@logged
def countdown(n):
    seen = []
    while n > 0:
        seen.append(n)
        n -= 1
    return seen
def check(values):
    for v in values:
        if v < 0:
            raise ValueError(f"negative value {v}")
    return len(values)
class Track(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.keys = []
    def on_epoch_end(self, epoch, logs=None):
        for key in sorted(logs or {}):
            self.keys.append(key)
double = make_scaler(2)
gen = squares(5)
first = next(gen)
used = (Child().total([1, 2, 3]), double([1, 2]), countdown(3), check([1, 2]))
traced = float(graph_sum(tf.constant(2.0)))
model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
track = Track()
history = model.fit(np.ones((4, 1)), np.ones((4, 1)), epochs=2, verbose=0, callbacks=[track])
"""
)
# A plain cell after it: the functions (and the generator left half-way, and a Keras callback
# in a later fit) behave as plain ones; their tracebacks, sources, signatures and code are the
# plain run's; no name or object of the tool is left in the namespace, the builtins or code.
USE_FUNCTIONS_LATER = """\
import builtins, inspect, traceback, types
later = (Child().total([4, 5], bonus=2), double([3]), make_scaler(3)([1]), countdown(2))
rest = list(gen)
retraced = float(graph_sum(tf.constant([1.0, 2.0]))[1])
try:
    check([1, -4])
except ValueError as error:
    failure = [
        (frame.name, frame.line, frame.lineno - check.__code__.co_firstlineno)
        for frame in traceback.extract_tb(error.__traceback__)[1:]
    ]
functions = (Base.total, Child.total, make_scaler, double, squares, countdown,
             countdown.__wrapped__, check, Track.on_epoch_end, logged, graph_sum.python_function)
def code_shape(code):  # not co_code: IPython compiles a plain cell statement by statement
    lines = sorted({line - code.co_firstlineno for *_, line in code.co_lines() if line})
    return (code.co_name, code.co_names, code.co_varnames, code.co_freevars, lines,
            [code_shape(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts])
def tool_objects(code):
    found = [name for name in code.co_names + code.co_varnames if "tfdiag" in name]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += tool_objects(const)
        elif type(const).__module__.startswith("tfdiag"):
            found.append(repr(const))
    return found
shapes = [code_shape(f.__code__) for f in functions]
sources = [inspect.getsource(f) for f in functions]  # a class's source needs a file
signatures = [str(inspect.signature(f)) for f in (Child.total, countdown, double)]
first_lines = [f.__code__.co_firstlineno - Base.total.__code__.co_firstlineno for f in functions]
leftovers = sorted(name for name in [*globals(), *vars(builtins)] if "tfdiag" in name)
leftovers += [found for f in functions for found in tool_objects(f.__code__)]
later_track = Track()
model.fit(np.ones((4, 1)), np.ones((4, 1)), epochs=1, verbose=0, callbacks=[later_track])
later_keys = later_track.keys
"""


def test_functions_with_loops_defined_in_the_cell_behave_as_plain_ones_after_it(ip, capsys):
    plain, profiled = run_twice(ip, capsys, FUNCTIONS_CELL, USE_FUNCTIONS_LATER)
    assert plain.success, plain.exception
    assert plain.observed["later"] == (
        "tuple",
        [13, ("list", [6]), ("list", [3]), ("list", [2, 1])],
    )
    assert plain.observed["rest"] == ("list", [1, 4, 9, 16])
    assert plain.observed["failure"] == (
        "list",
        [("tuple", ["check", 'raise ValueError(f"negative value {v}")', 3])],
    )
    assert plain.observed["leftovers"] == ("list", [])
    assert_same(plain, profiled)


FAILING_IN_A_FUNCTIONS_LOOP = """\
def load_all(batches):
    loaded = []
    for batch in batches:
        if batch == 2:
            raise ValueError(f"bad batch {batch}")
        loaded.append(batch)
    return loaded
def main():
    while True:
        return load_all(range(5))
main()
"""


def test_exception_from_a_functions_loop_points_at_the_users_real_lines(ip, capsys):
    plain, profiled = run_twice(ip, capsys, FAILING_IN_A_FUNCTIONS_LOOP, "again = main\n")
    assert plain.error == ("ValueError", "bad batch 2")
    assert [frame[1] for frame in plain.frames] == ["<module>", "main", "load_all"]
    assert_same(plain, profiled)
    assert_real_lines(profiled, FAILING_IN_A_FUNCTIONS_LOOP)


# An optimizer update that fails while the tf.function is converted: TensorFlow writes the
# stack "in user code:" into the message, through the tool's wrapper of the optimizer's apply.
FAILING_UPDATE_IN_A_FUNCTION = """\
import tensorflow as tf
import keras

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
optimizer = keras.optimizers.Adam()

@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip([grads[0], tf.zeros((4,))], model.trainable_variables))
    return loss

for step in range(3):
    train_step(tf.ones((2, 4)))
"""


def _defined_at(message: str) -> list[str]:
    """The frames of a "defined at" stack in `message`, less the magic's own call (the cell's
    first line calling IPython's run_cell_magic), which no cell magic can leave out."""
    frames = re.findall(r'^\s*File "([^"]+)", line \d+, in (\S+)', message, re.MULTILINE)
    kept = []
    for index, (file, function) in enumerate(frames):
        after = frames[index + 1] if index + 1 < len(frames) else ("", "")
        if after[1] == "run_cell_magic" or function == "run_cell_magic":
            continue
        kept.append(f"{file} {function}")
    return kept


def test_tensorflows_stack_in_user_code_names_no_file_of_the_tool(ip, capsys):
    from tensorflow.python.util import traceback_utils

    excluded = traceback_utils._EXCLUDED_PATHS
    plain, profiled = run_twice(ip, capsys, FAILING_UPDATE_IN_A_FUNCTION)
    assert "in user code:" in plain.error[1], plain.error
    assert TOOL_DIR not in str(profiled.exception)  # it named optimizer_updates.py
    assert_same(plain, profiled)
    assert traceback_utils._EXCLUDED_PATHS is excluded  # put back as it was


def test_tensorflows_defined_at_stack_names_no_file_of_the_tool(ip, capsys):
    from tensorflow.python.framework import error_interpolation
    from tensorflow.python.util import tf_stack

    filters = list(tf_stack._source_filter_stacks[tf_stack._get_thread_key()])
    prefixes = error_interpolation._FRAMEWORK_PATH_PREFIXES
    plain, profiled = run_twice(ip, capsys, FAILING_OP_IN_A_FUNCTION)
    assert plain.error[0] == "InvalidArgumentError", plain.error
    assert "defined at" in plain.error[1], plain.error
    # It named magics.py, code_runner.py and tf_functions.py.
    assert TOOL_DIR not in str(profiled.exception)
    ipython_input = re.compile(r"<ipython-input-[^>]*>")
    shown = [ipython_input.sub("<cell>", frame) for frame in _defined_at(str(profiled.exception))]
    expected = [ipython_input.sub("<cell>", frame) for frame in _defined_at(str(plain.exception))]
    assert shown == expected
    assert tf_stack._source_filter_stacks[tf_stack._get_thread_key()] == filters
    assert error_interpolation._FRAMEWORK_PATH_PREFIXES is prefixes


# A fresh shell's first TensorFlow cell, plainly and profiled, each in its own interpreter: while
# TensorFlow's context does not exist, a deprecated argument prints its warning, so the tool
# must not make that context (nor after a cell that uses no TensorFlow).
FIRST_CELLS = """
import sys
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "tfdiag_magic")
magic = "%%tfprofile -q\\n" if sys.argv[1] == "profiled" else ""
ip.run_cell(magic + "print('no TensorFlow here')\\n")
ip.run_cell(magic + '''
import tensorflow as tf
def numbers():
    yield 1.0
dataset = tf.data.Dataset.from_generator(numbers, output_types=tf.float32)
print(sum(1 for _ in dataset))
''')
"""


def test_a_fresh_shells_first_cells_print_tensorflows_deprecation_warning_as_plainly():
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

    def warnings_of(how: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", FIRST_CELLS, how],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        assert done.stdout.startswith("no TensorFlow here\n"), done.stdout
        # The cell's name and line differ by the magic's line; the warning's text must not.
        # (TensorFlow's logger writes to stdout in an interactive shell.)
        lines = (done.stdout + done.stderr).splitlines()
        return [
            re.sub(r"<ipython-input-[^>]*>:\d+:", "CELL:N:", line)
            for line in lines
            if "deprecated" in line
        ]

    plain = warnings_of("plain")
    assert len(plain) == 1 and "output_types is deprecated" in plain[0], plain
    assert warnings_of("profiled") == plain
