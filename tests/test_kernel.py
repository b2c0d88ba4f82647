"""``%%tfprofile`` in a real Jupyter kernel: what a notebook user sees in the cell outputs.

One notebook is built in memory and executed once (module-scoped fixture) by nbclient on an
ipykernel started from this virtualenv's Python, through a kernelspec written to a temporary
directory. The tests read the outputs the kernel sent: the report as display data, the cell's
value as execute_result, the error output of a failing profiled cell and its traceback.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from typing import Any

import pytest

from tests.kernels import run_cells

pytestmark = pytest.mark.kernel

KERNEL_NAME = "tfdiag-magic-test"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

CELLS = [
    "import os, sys\nprint(sys.executable)\nprint(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))",
    "%load_ext tfdiag_magic",
    "%%tfprofile -o r\n"
    "import numpy as np, keras\n"
    "x = np.random.default_rng(0).normal(size=(32, 4)).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True)\n"
    "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
    "model.compile(optimizer='sgd', loss='mse')\n"
    "hist = model.fit(x, y, batch_size=8, epochs=2, verbose=0)\n"
    "hist.params['epochs']",
    "print(r.record.phase_counts())\nprint(len(r.steps))",
    "%%tfprofile -q -o r2\n"
    "before_error = 41; print('printed by the failing cell')\n"
    'raise ValueError("boom")\n'
    "after_error = True",
    "print(before_error + 1, 'after_error' in globals())\n"
    "print(r2.record.error.type, r2.record.error.message)",
]
SETUP, LOAD, PROFILED, COUNTS, FAILING, LATER = range(len(CELLS))
FAILING_LINE = 'raise ValueError("boom")'
FAILING_LINENO = 3  # the %%tfprofile line is line 1


@pytest.fixture(scope="module")
def notebook(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The notebook above, executed once in a fresh kernel of this virtualenv."""
    kernels = tmp_path_factory.mktemp("kernels")
    return run_cells(CELLS, kernels, KERNEL_NAME, "tfdiag_magic tests", timeout=180)


def outputs(nb: Any, cell: int, output_type: str) -> list[Any]:
    return [o for o in nb.cells[cell].outputs if o.output_type == output_type]


def stdout(nb: Any, cell: int) -> str:
    return "".join(o.text for o in outputs(nb, cell, "stream") if o.name == "stdout")


def all_text(nb: Any, cell: int) -> str:
    """Every piece of text the cell output, whatever its kind."""
    parts = []
    for output in nb.cells[cell].outputs:
        parts.append(output.get("text", ""))
        parts.extend(str(value) for value in output.get("data", {}).values())
        parts.extend(output.get("traceback", []))
    return "\n".join(parts)


def test_kernel_runs_this_virtualenvs_python_with_quiet_tensorflow_logs(notebook):
    assert outputs(notebook, SETUP, "error") == []
    assert stdout(notebook, SETUP).splitlines() == [sys.executable, "2"]
    assert os.path.realpath(stdout(notebook, SETUP).splitlines()[0]) == os.path.realpath(
        sys.executable
    )


def test_extension_loads_without_output_or_error(notebook):
    assert notebook.cells[LOAD].outputs == []


def test_profiled_cell_displays_the_report_as_html_and_text(notebook):
    assert outputs(notebook, PROFILED, "error") == []
    displays = outputs(notebook, PROFILED, "display_data")
    assert len(displays) == 1
    data = displays[0].data
    assert data["text/plain"].startswith("tfdiag_magic: 8 training steps")
    html = data["text/html"]
    assert '<div class="tfdiag">' in html
    assert "<h3>tfdiag_magic: 8 training steps" in html


def test_profiled_cell_value_is_its_last_expression(notebook):
    results = outputs(notebook, PROFILED, "execute_result")
    assert len(results) == 1
    assert results[0].data["text/plain"] == "2"
    assert results[0].execution_count == notebook.cells[PROFILED].execution_count


def test_output_variable_holds_every_fit_batch_as_a_train_step(notebook):
    assert outputs(notebook, COUNTS, "error") == []
    counts, rows = stdout(notebook, COUNTS).splitlines()
    assert ast.literal_eval(counts) == {"train": 8}  # 2 epochs x 4 batches
    assert int(rows) == 8


def test_failing_profiled_cell_shows_the_users_error_and_line(notebook):
    errors = outputs(notebook, FAILING, "error")
    assert len(errors) == 1
    error = errors[0]
    assert error.ename == "ValueError"
    assert error.evalue == "boom"
    traceback = ANSI.sub("", "\n".join(error.traceback))
    marker = re.compile(rf"^-+> {FAILING_LINENO} {re.escape(FAILING_LINE)}$", re.MULTILINE)
    assert marker.search(traceback), traceback
    assert re.search(rf"Cell In\[\d+\], line {FAILING_LINENO}$", traceback, re.MULTILINE)
    assert not re.search(r"File .*tfdiag_magic[/\\]", traceback), traceback


def test_failing_cell_traceback_names_the_cell_by_its_execution_count(notebook):
    (error,) = outputs(notebook, FAILING, "error")
    traceback = ANSI.sub("", "\n".join(error.traceback))
    match = re.search(rf"Cell In\[(\d+)\], line {FAILING_LINENO}$", traceback, re.MULTILINE)
    assert match, traceback
    assert int(match.group(1)) == notebook.cells[FAILING].execution_count


def test_quiet_failing_cell_shows_its_own_output_but_no_report(notebook):
    assert stdout(notebook, FAILING) == "printed by the failing cell\n"
    assert outputs(notebook, FAILING, "display_data") == []
    assert outputs(notebook, FAILING, "execute_result") == []
    assert "tfdiag_magic:" not in all_text(notebook, FAILING)


def test_later_cell_sees_what_the_failing_cell_assigned_and_its_record(notebook):
    assert outputs(notebook, LATER, "error") == []
    assert stdout(notebook, LATER).splitlines() == ["42 False", "ValueError boom"]
