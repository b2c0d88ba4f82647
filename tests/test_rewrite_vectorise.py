"""vectorise_element_loop: element loops become NumPy expressions with the same results."""

from __future__ import annotations

import numpy as np

from tfdiag_magic.rewrite import vectorise_element_loop

from .test_rewrite_common import assert_compiles, execute

IN_PLACE_CELL = """import numpy as np

# CPU-bound preprocessing step
def preprocess_data(data):
    for i in range(len(data)):
        data[i] = np.sqrt(data[i]) * 2 - 1  # element by element
    return data

x_train = np.arange(12, dtype="float64").reshape(4, 3)
result = preprocess_data(x_train.copy())
"""

APPEND_CELL = """import numpy as np

def inefficient_preprocessing(data):
    processed_data = []
    for element in data:
        # Simulate computationally expensive preprocessing
        processed_element = np.sum(element**2)
        processed_data.append(processed_element)
    return np.array(processed_data)

rows = inefficient_preprocessing(np.arange(12.0).reshape(4, 3))
flat = inefficient_preprocessing(np.arange(5.0))
"""


def test_in_place_row_loop_becomes_one_expression():
    out = vectorise_element_loop(IN_PLACE_CELL)
    assert out is not None
    assert_compiles(out)
    assert "    data[:] = np.sqrt(np.asarray(data)) * 2 - 1  # element by element\n" in out
    assert "# CPU-bound preprocessing step" in out and "for i in" not in out
    np.testing.assert_allclose(execute(out)["result"], execute(IN_PLACE_CELL)["result"])


def test_append_loop_with_a_reduction_per_row():
    out = vectorise_element_loop(APPEND_CELL)
    assert out is not None
    assert (
        "    # Simulate computationally expensive preprocessing\n"
        "    processed_data = np.sum(np.asarray(data) ** 2, axis=tuple(range(1, np.ndim(data))))\n"
    ) in out
    before, after = execute(APPEND_CELL), execute(out)
    np.testing.assert_allclose(after["rows"], before["rows"])
    np.testing.assert_allclose(after["flat"], before["flat"])  # 1-D: no axis reduced


def test_math_functions_other_destination_and_missing_numpy_import():
    source = """import math
out = []
for v in values:
    out.append(math.sqrt(v) * 2 + offset)
total = sum(len(out) for _ in range(1))
"""
    result = vectorise_element_loop(source)
    assert result == (
        "import math\nimport numpy as np\n"
        "out = np.sqrt(np.asarray(values)) * 2 + offset\n"
        "total = sum(len(out) for _ in range(1))\n"
    )
    ns = execute(result, {"values": [1.0, 4.0, 9.0], "offset": 0.5})
    np.testing.assert_allclose(ns["out"], [2.5, 4.5, 6.5])
    copy_to = """import numpy as np
for k in range(x.shape[0]):
    y[k] = -x[k] ** 2
"""
    result = vectorise_element_loop(copy_to)
    assert "y[:len(x)] = -np.asarray(x) ** 2\n" in result
    ns = execute(result, {"x": np.arange(3.0), "y": np.ones(5)})
    np.testing.assert_allclose(ns["y"], [0.0, -1.0, -4.0, 1.0, 1.0])


def test_loops_that_are_not_elementwise_are_left_alone():
    cases = [
        # depends on the previous element
        "for i in range(len(a)):\n    a[i] = a[i] + a[i - 1]\n",
        # reads the index itself
        "for i in range(len(a)):\n    a[i] = a[i] * i\n",
        # a function that is not elementwise
        "import numpy as np\nfor i in range(len(a)):\n    a[i] = np.sort(a[i])\n",
        # a reduction assigned back into the element's place
        "import numpy as np\nfor i in range(len(a)):\n    a[i] = np.sum(a[i])\n",
        # the list is used as a list afterwards
        "out = []\nfor v in a:\n    out.append(v * 2)\nout.append(0)\n",
        # an element combined with a reduction of itself
        "import numpy as np\nout = []\nfor v in a:\n    out.append(v - np.mean(v))\n",
        # more than the append in the loop
        "out = []\nfor v in a:\n    print(v)\n    out.append(v * 2)\n",
        # the loop index is needed after the loop
        "for i in range(len(a)):\n    a[i] = a[i] * 2\nprint(i)\n",
    ]
    for source in cases:
        assert vectorise_element_loop(source) is None, source
