"""The rewrite library's shared helpers: cell parsing, the magic line, aliases, imports, diffs."""

from __future__ import annotations

import itertools
import linecache

import libcst as cst
import pytest

from tfdiag_magic.rewrite import common

_cells = itertools.count()


def execute(source: str, namespace: dict | None = None) -> dict:
    """Run a (rewritten) cell as plain Python; its %%tfprofile line, if any, is left out.

    The source is registered with linecache under a name of its own, as IPython does for a
    cell, so that AutoGraph can read the functions it converts.
    """
    namespace = {} if namespace is None else namespace
    _, body = common.split_magic_line(source)
    filename = f"<cell-{next(_cells)}>"
    linecache.cache[filename] = (len(body), None, body.splitlines(True), filename)
    exec(compile(body, filename, "exec"), namespace)
    return namespace


def assert_compiles(source: str) -> None:
    _, body = common.split_magic_line(source)
    compile(body, "<cell>", "exec")


def test_magic_line_is_kept_and_not_parsed():
    header, body = common.split_magic_line("%%tfprofile -q -o r\nx = 1\n")
    assert header == "%%tfprofile -q -o r\n"
    assert body == "x = 1\n"
    cell = common.parse_cell("%%tfprofile\nx = 1\n")
    assert cell is not None and cell.line_offset == 1


@pytest.mark.parametrize(
    "source",
    ["!pip install tensorflow\nx = 1\n", "%time x = 1\n", "%%time\nx = 1\n", "def f(:\n"],
)
def test_cells_that_are_not_python_do_not_parse(source):
    assert common.parse_cell(source) is None


def test_line_numbers_count_the_magic_line():
    cell = common.parse_cell("%%tfprofile\n# c\nfor i in range(3):\n    pass\n")
    loop = common.loops_in(cell.module)[0]
    assert cell.line(loop) == 3
    assert common.loop_at_line(cell, 3) is loop


def test_finish_refuses_unchanged_and_non_compiling_results():
    cell = common.parse_cell("x = 1\n")
    assert common.finish(cell, cell.module) is None
    assert common.finish(cell, "x = (\n") is None
    assert common.finish(cell, "return 1\n") is None
    assert common.finish(cell, "x = 2\n") == "x = 2\n"


def test_aliases_follow_the_cells_imports():
    module = cst.parse_module(
        "import tensorflow as tfl\nimport numpy\nfrom tensorflow.keras import layers as L\n"
        "from keras.models import Sequential\n"
    )
    names = common.aliases(module)
    assert names.tf == "tfl"
    assert names.np == "numpy"
    assert names.keras_name("L.Dense") == "layers.Dense"
    assert names.keras_name("Sequential") == "models.Sequential"
    assert names.keras_name("numpy.zeros") is None
    assert names.keras(module) == "tfl.keras"


def test_keras_alias_prefers_what_the_cell_uses():
    plain = cst.parse_module("import tensorflow as tf\nimport keras\nm = keras.Sequential()\n")
    assert common.aliases(plain).keras(plain) == "keras"
    tf_keras = cst.parse_module("import tensorflow as tf\nm = tf.keras.Sequential()\n")
    assert common.aliases(tf_keras).keras(tf_keras) == "tf.keras"
    from_tf = cst.parse_module("from tensorflow import keras\nm = keras.Sequential()\n")
    assert common.aliases(from_tf).keras(from_tf) == "keras"
    neither = cst.parse_module("import numpy as np\n")
    assert common.aliases(neither).keras(neither) is None


def test_ensure_import_adds_after_leading_imports_or_reuses_the_alias():
    module = cst.parse_module("# data\nimport numpy as np\n\nx = np.zeros(3)\n")
    new, alias = common.ensure_import(module, "tensorflow", "tf")
    assert alias == "tf"
    assert new.code == "# data\nimport numpy as np\nimport tensorflow as tf\n\nx = np.zeros(3)\n"
    again, alias = common.ensure_import(new, "tensorflow", "tf")
    assert again is new and alias == "tf"
    taken = cst.parse_module("tf = 3\n")
    assert common.ensure_import(taken, "tensorflow", "tf") is None


def test_unified_diff_shows_the_change():
    diff = common.unified_diff("a = 1\nb = 2", "a = 1\nb = 3\n")
    assert "-b = 2\n" in diff and "+b = 3\n" in diff
    assert diff.startswith("--- cell\n+++ cell (rewritten)\n")
    assert common.unified_diff("same\n", "same\n") == ""


def test_arguments_are_removed_and_set_with_tidy_commas():
    call = cst.parse_expression("f(a, b=1, c=2)")
    without_c = common.remove_args(call, [call.args[2]])
    assert common.code_of(without_c) == "f(a, b=1)"
    multi = cst.parse_expression("f(\n    a,\n    b=1,\n)")
    assert common.code_of(common.remove_args(multi, [multi.args[1]])) == "f(\n    a,\n)"
    assert common.code_of(common.set_kwarg(call, "b", cst.Integer("5"))) == "f(a, b=5, c=2)"
    added = common.set_kwarg(multi, "d", cst.Name("x"))
    assert common.code_of(added) == "f(\n    a,\n    b=1,\n    d=x,\n)"
    assert common.code_of(common.set_kwarg(cst.parse_expression("g()"), "k", cst.Integer("1"))) == (
        "g(k=1)"
    )


def test_appended_keyword_follows_the_calls_layout():
    def added(source: str) -> str:
        return common.code_of(common.set_kwarg(cst.parse_expression(source), "k", cst.Integer("8")))

    assert added("f(\n    a\n)") == "f(\n    a,\n    k=8\n)"
    aligned = "m.compile(optimizer='adam',\n          loss='mse',  # why\n          metrics=[])"
    assert added(aligned) == (
        "m.compile(optimizer='adam',\n          loss='mse',  # why\n          metrics=[],\n"
        "          k=8)"
    )
