"""The workshop notebooks as students use them: their exercises, their Parts run on their own,
and their size against a Binder session.

- An exercise is a task cell (tagged ``exercise``, its id in the cell metadata
  ``tfdiag_exercise``), a check cell that calls ``workshop_check.check(ID)``
  (notebooks/workshop_check.py grades the profiler's measurements, never the code's text), and
  a collapsed solution (a markdown cell tagged ``solution``). With the solution's code pasted
  into the task cell the check says solved; with the task cell as stored it does not.
- Each Part (from a cell tagged ``part`` to the next) runs in a fresh kernel after the set-up
  cells (tagged ``setup``) and fails nowhere but in cells tagged ``raises-exception``; a
  notebook without Parts is one Part.
- A notebook with every exercise solved keeps its kernel's peak memory (VmHWM) within 1 GiB,
  half of what a Binder session gets, prints no oneDNN start-up banner, and ends by telling the
  student to shut the kernel down.

``pytest -s`` prints each notebook's kernel peak and each profiled cell's saved output size; the
runs' times go to test-artifacts/notebook-exercise-times.json.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.kernels import execute_notebook, write_kernel_spec
from tests.test_notebooks import (
    CELL_TIMEOUT_S,
    MAX_KERNEL_PEAK_BYTES,
    MAX_KERNEL_PRIVATE_BYTES,
    NOTEBOOKS,
    cell_text,
    notebook_paths,
    record_time,
    tags,
)

pytestmark = pytest.mark.kernel

sys.path.insert(0, str(NOTEBOOKS))
import workshop_check  # noqa: E402 (notebooks/ is not a package; the notebooks import it so)

MAX_PROFILED_OUTPUT_BYTES = 50 * 1000
SOLUTION_CODE = re.compile(r"```python\n(.*?)```", re.DOTALL)
MARK = "TFDIAG-EXERCISES "
# Runs in the kernel after the notebook: every check's answer and the kernel's peak memory.
REPORT_CELL = f"""
import json as _json
import workshop_check as _check
print({MARK!r} + _json.dumps({{
    "grades": {{k: [g.solved, str(g)] for k, g in _check.GRADES.items()}},
    "peak": _check.peak_memory_bytes(),
    "private": _check.private_peak_bytes(),
}}))
"""
TIMES_FILE = "notebook-exercise-times.json"
KERNEL_NAME = "tfdiag-exercises-test"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kernel_spec(tmp_path_factory.mktemp("kernels"), KERNEL_NAME, "exercises test")


def read(path: Path) -> Any:
    return nbformat.read(path, as_version=4)


def exercises(nb: Any) -> list[tuple[int, str, str]]:
    """(task cell index, exercise id, the solution's code) of each exercise, in order."""
    found = []
    for index, cell in enumerate(nb.cells):
        if "exercise" not in tags(cell):
            continue
        solution = next(
            (c for c in nb.cells[index + 1 :] if "solution" in tags(c)),
            nbformat.v4.new_markdown_cell(),
        )
        match = SOLUTION_CODE.search(solution.source)
        found.append(
            (index, cell.metadata.get("tfdiag_exercise", ""), match.group(1) if match else "")
        )
    return found


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
    return [
        pytest.param(path, number, id=f"{path.stem}-part{number + 1}")
        for path in notebook_paths()
        for number in range(len(parts(read(path))))
    ]


def run(nb: Any, kernels: Path) -> tuple[dict[str, Any], float]:
    """Execute `nb` in place, in a fresh kernel in notebooks/, with the report cell after it;
    (the report, seconds)."""
    nb.cells.append(nbformat.v4.new_code_cell(REPORT_CELL))
    start = time.perf_counter()
    execute_notebook(nb, kernels, KERNEL_NAME, timeout=CELL_TIMEOUT_S, cwd=NOTEBOOKS)
    seconds = time.perf_counter() - start
    text = cell_text(nb.cells.pop())
    line = next((ln for ln in text.splitlines() if ln.startswith(MARK)), None)
    assert line is not None, f"the report cell printed no report:\n{text}"
    return json.loads(line[len(MARK) :]), seconds


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


def solved(path: Path) -> Any:
    """The notebook with each exercise's solution pasted into its task cell."""
    nb = read(path)
    for index, _exercise, solution in exercises(nb):
        nb.cells[index].source = solution.rstrip("\n")
    return nb


_solved_runs: dict[Path, Any] = {}


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_solutions_solve_the_exercises_within_binder_memory(path: Path, kernels: Path):
    nb = solved(path)
    report, seconds = run(nb, kernels)
    _solved_runs[path] = nb
    record_time(f"{path.name} (exercises solved)", seconds, file=TIMES_FILE)
    tasks = {index for index, _, _ in exercises(nb)}
    failed = errors_outside_raises_exception(nb)
    assert not failed, "\n".join(failed)
    for index in tasks:
        errors = [o for o in nb.cells[index].outputs if o.output_type == "error"]
        assert not errors, f"the solution of cell {index} failed:\n{cell_text(nb.cells[index])}"
    grades = report["grades"]
    assert sorted(grades) == sorted(e for _, e, _ in exercises(nb)), grades
    for exercise, (is_solved, text) in grades.items():
        assert is_solved, f"{exercise}: the solution was not judged solved:\n{text}"
        print(f"\n{text}")

    peak, private = report["peak"], report["private"]
    print(f"\n{path.name}: kernel peak memory {peak / 10**6:.0f} MB ({private / 10**6:.0f} MB own)")
    assert peak <= MAX_KERNEL_PEAK_BYTES, f"{path.name}: kernel peak {peak / 10**6:.0f} MB"
    assert private <= MAX_KERNEL_PRIVATE_BYTES, f"{path.name}: own {private / 10**6:.0f} MB"
    banner = [i for i, c in enumerate(nb.cells) if "oneDNN custom operations" in cell_text(c)]
    assert not banner, f"{path.name}: TensorFlow's oneDNN banner in cells {banner}"


def profiled_output_sizes(nb: Any) -> dict[int, int]:
    """The saved size (bytes of JSON) of each %%tfprofile cell's outputs."""
    return {
        index: len(json.dumps(cell.outputs))
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and cell.source.startswith("%%tfprofile")
    }


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_saved_output_of_a_profiled_cell_is_small(path: Path, kernels: Path):
    if path not in _solved_runs:
        nb = solved(path)
        run(nb, kernels)
        _solved_runs[path] = nb
    sizes = profiled_output_sizes(_solved_runs[path])
    print(f"\n{path.name}: saved output of each profiled cell (bytes): {sizes}")
    too_big = {i: s for i, s in sizes.items() if s > MAX_PROFILED_OUTPUT_BYTES}
    assert not too_big, f"{path.name}: profiled cells over 50 KB: {too_big}"


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
