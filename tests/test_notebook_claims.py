"""What the notebooks' text says of their runs holds on a busy machine: each notebook, with its
exercises solved, run again and again beside a CPU hog on one core; every run must tell the
story (`test_notebooks.check_story`: the findings, the fixes that resolve them, the verdicts the
text states, the pictures it reads) and judge every solution solved (the checks that ask for a
measurably faster run included).

Not part of `make test` (about a minute per notebook and run): ``make test-claims`` runs it,
five runs per notebook, ``--claims-runs N`` for another count.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tests.conftest import start_cpu_hog, stop_cpu_hog
from tests.kernels import execute_notebook, write_kernel_spec
from tests.test_notebooks import (
    CELL_TIMEOUT_S,
    GRADES_CELL,
    MARK,
    NOTEBOOKS,
    REPORT_CELL,
    REPORT_MARK,
    cell_text,
    check_story,
    notebook_paths,
    solved,
)

pytestmark = [pytest.mark.kernel, pytest.mark.claims]
KERNEL_NAME = "tfdiag-claims-test"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "run_number" in metafunc.fixturenames:
        runs = metafunc.config.getoption("claims_runs")
        metafunc.parametrize(
            ("path", "run_number"),
            [(p, n) for p in notebook_paths() for n in range(1, runs + 1)],
            ids=[f"{p.stem}-run{n}" for p in notebook_paths() for n in range(1, runs + 1)],
        )


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kernel_spec(tmp_path_factory.mktemp("kernels"), KERNEL_NAME, "claims test")


def _printed(cell: nbformat.NotebookNode, mark: str) -> dict:
    text = cell_text(cell)
    line = next((ln for ln in text.splitlines() if ln.startswith(mark)), None)
    assert line is not None, f"the report cell printed nothing:\n{text}"
    return json.loads(line[len(mark) :])


def test_the_text_holds_through_a_cpu_hog(path: Path, run_number: int, kernels: Path):
    nb = solved(path)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT_CELL))
    nb.cells.append(nbformat.v4.new_code_cell(GRADES_CELL))
    hog = start_cpu_hog()
    try:
        execute_notebook(nb, kernels, KERNEL_NAME, timeout=CELL_TIMEOUT_S, cwd=NOTEBOOKS)
    finally:
        stop_cpu_hog(hog)
    grades = _printed(nb.cells.pop(), MARK)["grades"]
    runs = _printed(nb.cells.pop(), REPORT_MARK)
    check_story(path.name, runs)
    for exercise, (is_solved, text) in grades.items():
        assert is_solved, (
            f"run {run_number}, {exercise}: the solution was not judged solved:\n{text}"
        )
