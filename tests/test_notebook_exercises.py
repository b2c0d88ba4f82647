"""The workshop notebooks as students use them: their exercises and their Parts run on their own.

- An exercise is a task cell (tagged ``exercise``, its id in the cell metadata
  ``tfdiag_exercise``), a check cell that calls ``workshop_check.check(ID)``
  (notebooks/workshop_check.py grades the profiler's measurements, never the code's text), and
  a collapsed solution (a markdown cell tagged ``solution``). With the solution's code pasted
  into the task cell the check says solved; with the task cell as stored it does not.
- Each Part (from a cell tagged ``part`` to the next) runs in a fresh kernel after the set-up
  cells (tagged ``setup``) and fails nowhere but in cells tagged ``raises-exception``; a
  notebook without Parts is one Part. Part 1 on its own is the first pass of
  tests/test_notebooks.py (the set-up cells come first, then Part 1, in a fresh kernel), which
  also runs every notebook with its exercises solved and checks their grades, the kernel's
  memory, the oneDNN banner and the profiled cells' saved output; here the later Parts run.
- Every notebook ends by telling the student to shut the kernel down.

The Parts' times go to test-artifacts/notebook-exercise-times.json.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.kernels import execute_notebook, write_kernel_spec
from tests.test_notebooks import (
    ALONE,
    CELL_TIMEOUT_S,
    GRADES_CELL,
    MARK,
    NOTEBOOKS,
    cell_text,
    exercises,
    notebook_paths,
    printed,
    read,
    record_time,
    tags,
)

pytestmark = pytest.mark.kernel

sys.path.insert(0, str(NOTEBOOKS))
import workshop_check  # noqa: E402 (notebooks/ is not a package; the notebooks import it so)

TIMES_FILE = "notebook-exercise-times.json"
KERNEL_NAME = "tfdiag-exercises-test"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kernel_spec(tmp_path_factory.mktemp("kernels"), KERNEL_NAME, "exercises test")


def parts(nb: Any) -> list[list[int]]:
    """The indices of each Part's cells, from a cell tagged ``part`` to the next (what comes
    before the first one is the notebook's introduction); without such tags, every cell that
    is not set-up is one Part."""
    tagged = any("part" in tags(cell) for cell in nb.cells)
    found: list[list[int]] = [] if tagged else [[]]
    for index, cell in enumerate(nb.cells):
        if "part" in tags(cell):
            found.append([])
        if found and "setup" not in tags(cell):
            found[-1].append(index)
    return found


def part_params() -> list[Any]:
    """Each notebook's Parts after the first (the first runs alone in the story's first pass)."""
    return [
        pytest.param(
            path,
            number,
            id=f"{path.stem}-part{number + 1}",
            marks=[pytest.mark.alone] if path.name in ALONE else [],
        )
        for path in notebook_paths()
        for number in range(1, len(parts(read(path))))
    ]


def run(nb: Any, kernels: Path) -> tuple[dict[str, Any], float]:
    """Execute `nb` in place, in a fresh kernel in notebooks/, with the report cell after it;
    (the report, seconds)."""
    nb.cells.append(nbformat.v4.new_code_cell(GRADES_CELL))
    start = time.perf_counter()
    execute_notebook(nb, kernels, KERNEL_NAME, timeout=CELL_TIMEOUT_S, cwd=NOTEBOOKS)
    seconds = time.perf_counter() - start
    return printed(nb.cells.pop(), MARK), seconds


def errors_outside_raises_exception(nb: Any) -> list[str]:
    failed = []
    for index, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if errors and "raises-exception" not in tags(cell):
            failed.append(f"cell {index}:\n{cell.source[:300]}\n{cell_text(cell)}")
    return failed


def test_every_notebook_has_graded_exercises_and_ends_with_the_shut_down_note():
    seen = []
    for path in notebook_paths():
        nb = read(path)
        found = exercises(nb)
        assert 1 <= len(found) <= 3, f"{path.name} has {len(found)} exercises"
        for index, exercise, solution in found:
            assert exercise in workshop_check.EXERCISES, f"{path.name}: unknown exercise {exercise}"
            assert solution, f"{path.name}: {exercise} has no solution code after its task cell"
            checks = [c for c in nb.cells[index + 1 :] if f'check("{exercise}")' in c.source]
            assert checks, f"{path.name}: no cell checks {exercise}"
            seen.append(exercise)
        for index, cell in enumerate(nb.cells):
            in_part = any(index in part for part in parts(nb)) or "setup" in tags(cell)
            assert in_part or cell.cell_type == "markdown", f"{path.name} cell {index}"
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        assert "setup" in tags(first_code), f"{path.name}: the first code cell is not set-up"
        assert "Kernel → Shut Down Kernel" in nb.cells[-1].source, path.name
    assert sorted(seen) == sorted(workshop_check.EXERCISES)


def test_the_set_up_cells_come_before_part_one_ends():
    """So that the story's first pass (tests/test_notebooks.py), a fresh kernel running the
    notebook from the top, runs Part 1 exactly as it runs on its own after the set-up cells."""
    for path in notebook_paths():
        nb = read(path)
        setup = [i for i, c in enumerate(nb.cells) if "setup" in tags(c)]
        first = parts(nb)[0]
        assert setup and first and max(setup) < first[-1], f"{path.name}: {setup}, {first}"
        code = [i for i in range(first[-1] + 1) if nb.cells[i].cell_type == "code"]
        assert code == sorted(setup + [i for i in first if nb.cells[i].cell_type == "code"])


@pytest.mark.workshop
@pytest.mark.parametrize(("path", "number"), part_params())
def test_each_part_runs_alone_after_the_set_up_cells(path: Path, number: int, kernels: Path):
    """Students skip ahead, or restart a kernel in the middle: a Part needs only the set-up
    cells before it. The exercises in it, unchanged, are not solved."""
    whole = read(path)
    keep = [i for i, c in enumerate(whole.cells) if "setup" in tags(c)] + parts(whole)[number]
    nb = copy.deepcopy(whole)
    nb.cells = [whole.cells[i] for i in keep]
    report, seconds = run(nb, kernels)
    record_time(f"{path.name} part {number + 1}", seconds, file=TIMES_FILE)
    failed = errors_outside_raises_exception(nb)
    assert not failed, f"{path.name} part {number + 1}:\n" + "\n".join(failed)
    mine = [e for _, e, _ in exercises(nb)]
    for exercise in mine:
        assert exercise in report["grades"], f"{exercise} was not checked"
        is_solved, text = report["grades"][exercise]
        assert not is_solved, f"{exercise} unchanged was judged solved:\n{text}"
