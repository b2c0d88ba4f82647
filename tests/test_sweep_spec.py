"""Sweep specifications and the override of the cell's own assignment, without TensorFlow.

``NAME=V1,V2,...`` parses into Python values (literals, bare words as strings, commas inside
brackets and quotes kept); malformed specifications raise SweepSpecError. The override keeps the
right-hand side running and every line number where it was.
"""

from __future__ import annotations

import ast
import traceback

import pytest

from tfdiag_magic.experiments.override import drop_top_level_assignments
from tfdiag_magic.experiments.sweep_spec import SweepSpecError, parse_sweep_spec


def test_ints_floats_strings_and_literals_parse_to_python_values():
    assert parse_sweep_spec("batch_size=16,64,256").values == (16, 64, 256)
    assert parse_sweep_spec("lr=1e-3, 3e-4,0.1").values == (1e-3, 3e-4, 0.1)
    assert parse_sweep_spec("opt=adam,sgd,'rms prop'").values == ("adam", "sgd", "rms prop")
    assert parse_sweep_spec("flag=True,False,None").values == (True, False, None)
    assert parse_sweep_spec("x=-1,+2").values == (-1, 2)
    spec = parse_sweep_spec("policy=mixed_float16,float32")
    assert spec.name == "policy" and spec.values == ("mixed_float16", "float32")
    assert spec.labels == ["'mixed_float16'", "'float32'"]


def test_commas_inside_brackets_and_quotes_belong_to_the_value():
    spec = parse_sweep_spec("shape=(32, 32),(64,64),[1, [2, 3]],{'a': (1, 2)},'x,y'")
    assert spec.values == ((32, 32), (64, 64), [1, [2, 3]], {"a": (1, 2)}, "x,y")


def test_whole_spec_quoted_in_the_magic_line_and_trailing_comma():
    assert parse_sweep_spec('"shape=(1, 2),(3, 4)"').values == ((1, 2), (3, 4))
    assert parse_sweep_spec("n=1,2,").values == (1, 2)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("batch_size", "needs NAME=VALUES"),
        ("=1,2", "not a variable name"),
        ("1x=1,2", "not a variable name"),
        ("class=1,2", "not a variable name"),
        ("n=", "lists no values"),
        ("n=1,,2", "value 2 of n is empty"),
        ("n=(1,2", "unclosed '('"),
        ("n=1,2)", "unbalanced ')'"),
        ("n=[1,2),3", "unbalanced ')'"),
        ("n='a,b", "unclosed quote"),
        ("n=1/3", "not a Python literal"),
        ("n=[a, b]", "not a Python literal"),
        ("n=big model", "not a Python literal"),
        ("n=1,2,1", "given twice"),
    ],
)
def test_malformed_specifications_say_what_is_wrong(spec, message):
    with pytest.raises(SweepSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_sweep_spec(spec)


CELL = """# %%tfprofile --sweep batch_size=8
import math
batch_size = 32  # the cell's own default
a = batch_size_copy = batch_size
first, (batch_size, *rest) = 0, (99, 1, 2)
batch_size: int = 64
batch_size *= 2

def inner():
    batch_size = 5
    return batch_size

if True:
    batch_size_in_block = batch_size
seen = (a, batch_size, inner(), first, rest)
raise ValueError(batch_size)
"""


def test_override_drops_only_top_level_bindings_and_keeps_line_numbers():
    tree = ast.parse(CELL, "<cell>")
    lines = drop_top_level_assignments(tree, "batch_size")
    assert lines == [3, 5, 6]  # the augmented assignment on line 7 derives from the value
    namespace = {"batch_size": 8}
    with pytest.raises(ValueError) as caught:
        exec(compile(tree, "<cell>", "exec"), namespace)
    # The value swept in wins over the cell's assignments; `*= 2` and the function's own
    # local still apply; every other target of those statements is still bound.
    assert namespace["seen"] == (8, 16, 5, 0, [1, 2])
    assert namespace["batch_size_copy"] == 8
    assert caught.value.args == (16,)
    frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert frame.lineno == 16  # the `raise` line: nothing moved


def test_override_of_a_name_the_cell_never_assigns_changes_nothing():
    tree = ast.parse("x = 1\ny = x + 1\n")
    before = ast.dump(tree)
    assert drop_top_level_assignments(tree, "batch_size") == []
    assert ast.dump(tree) == before
