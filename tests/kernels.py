"""Real Jupyter kernels for the tests: a kernel spec that runs this virtualenv's Python, and
notebooks executed in such a kernel with nbclient."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def write_kernel_spec(
    kernels: Path,
    name: str,
    display_name: str,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> Path:
    """Write the kernel spec `name` under `kernels` (for `KernelSpecManager(kernel_dirs=...)`)
    running `python` (this virtualenv's by default)."""
    spec = kernels / name
    spec.mkdir(parents=True, exist_ok=True)
    kernel: dict[str, Any] = {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
    }
    if env:
        kernel["env"] = env
    (spec / "kernel.json").write_text(json.dumps(kernel), encoding="utf-8")
    return kernels


def execute_notebook(
    nb: Any,
    kernels: Path,
    name: str,
    *,
    timeout: int = 240,
    allow_errors: bool = True,
    cwd: Path = REPO,
    on_cell_executed: Any = None,
) -> Any:
    """Execute `nb` in place in a fresh kernel `name` from the specs in `kernels`;
    `on_cell_executed(cell=..., cell_index=..., execute_reply=...)` is nbclient's hook, called
    as each cell ends."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    manager = AsyncKernelManager(
        kernel_name=name, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)])
    )
    NotebookClient(
        nb,
        km=manager,
        kernel_name=name,
        timeout=timeout,
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(cwd)}},
        on_cell_executed=on_cell_executed,
        shutdown_kernel="immediate",
    ).execute(cleanup_kc=True)  # nbclient leaves a kernel it did not start running: stop it
    return nb


def run_cells(
    cells: list[str], kernels: Path, name: str, display_name: str, *, timeout: int = 240
) -> Any:
    """A notebook of `cells`, executed top to bottom in a fresh kernel (errors kept as
    outputs), with TensorFlow's C++ log quiet."""
    import nbformat

    write_kernel_spec(kernels, name, display_name, env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return execute_notebook(nb, kernels, name, timeout=timeout)
