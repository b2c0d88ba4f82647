"""Binder: an environment built from binder/ alone runs the quick start notebook.

The test does what repo2docker does with this repository (it reads only binder/, since that
folder exists): a fresh Python 3.11 virtual environment, ``pip install -r
binder/requirements.txt``, then ``binder/postBuild`` run from the root of a copy of the repository
(the project's tracked files, nothing of this checkout's .venv). It then checks what the
workshop needs from that environment (the project imports from it, JupyterLab has the widget
manager) and executes notebooks/00_quickstart.ipynb on a kernel of that environment with nbclient,
with the checks of tests/test_notebooks.py.

Three differences from repo2docker, all for speed: pip may use its cache (repo2docker passes
--no-cache-dir), it does not compile the installed modules to bytecode (``--no-compile``: the
kernel compiles those it imports; 15 s less of the install here), and the environment is a venv
rather than repo2docker's conda environment. When
pip cannot reach a package index (it cannot download one small pinned requirement, or the install
fails with a connection error) the test is skipped, with pip's own words as the reason; any other
failure of the install fails the test. ``pytest -s`` prints the time of each stage; they
are also written to test-artifacts/binder-times.json.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kernels import write_kernel_spec
from tests.test_notebooks import EXPECTED_FINDINGS, EXPECTED_RESOLVED, execute, record_time

pytestmark = [pytest.mark.kernel, pytest.mark.workshop]

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"
QUICKSTART = "00_quickstart.ipynb"
KERNEL_NAME = "tfdiag-binder-test"
INSTALL_TIMEOUT_S = 1200
# What pip prints when no index can be reached (urllib3 and pip's own messages).
NETWORK_ERRORS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ProxyError",
    "Max retries exceeded",
    "Read timed out",
    "ConnectTimeoutError",
)


def python311() -> str | None:
    if sys.version_info[:2] == (3, 11):
        return sys.executable  # venv makes the new environment from the base interpreter
    return shutil.which("python3.11")


def run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def pip_or_skip(result: subprocess.CompletedProcess, what: str) -> None:
    """Fail on a failed install, or skip when the failure is that no index could be reached."""
    if result.returncode == 0:
        return
    output = result.stdout + result.stderr
    for marker in NETWORK_ERRORS:
        if marker in output:
            line = next(ln for ln in output.splitlines() if marker in ln)
            pytest.skip(f"{what}: pip could not reach a package index: {line.strip()[:300]}")
    pytest.fail(f"{what} failed (exit {result.returncode}):\n{output[-6000:]}")


def index_or_skip(python: Path, env: dict[str, str], dest: Path) -> None:
    """Skip unless pip can download a small pinned requirement from its index, cache bypassed.

    With no network, pip only says that no version was found, which would read like a bad pin;
    asking for one package that is certainly on the index tells the two apart, quickly.
    """
    pins = (BINDER / "requirements.txt").read_text().splitlines()
    probe = next(line for line in pins if line.startswith("six=="))
    options = ["--no-deps", "--no-cache-dir", "--retries", "1", "--timeout", "20"]
    fetched = run(
        [str(python), "-m", "pip", "download", *options, "-d", str(dest), probe], 180, env=env
    )
    if fetched.returncode != 0:
        last = (fetched.stdout + fetched.stderr).strip().splitlines()[-1:]
        pytest.skip(f"pip cannot download {probe} from its package index: {' '.join(last)}")


def copy_of_repository(target: Path) -> Path:
    """The repository's tracked files (and new files not ignored), as repo2docker copies them."""
    listed = run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], 60, cwd=REPO
    )
    assert listed.returncode == 0, listed.stderr
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO / name
        if not source.is_file():
            continue  # deleted in the working tree
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    return target


@pytest.fixture
def binder_env(tmp_path: Path):
    """A fresh venv built from binder/ alone; removed after the test (it holds ~2 GB)."""
    python = python311()
    if python is None:
        pytest.skip("no Python 3.11 to build the Binder environment with (binder/runtime.txt)")
    venv = tmp_path / "binder-venv"
    yield python, venv, tmp_path
    shutil.rmtree(venv, ignore_errors=True)
    shutil.rmtree(tmp_path / "repo", ignore_errors=True)


def test_binder_environment_builds_and_runs_the_quick_start(binder_env):
    python, venv, tmp_path = binder_env
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"
    times: dict[str, float] = {}

    start = time.perf_counter()
    made = run([python, "-m", "venv", str(venv)], 300)
    assert made.returncode == 0, made.stderr
    bin_dir = venv / "bin"
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)

    index_or_skip(bin_dir / "python", env, tmp_path / "probe")
    installed = run(
        [
            *(str(bin_dir / "python"), "-m", "pip", "install", "--no-compile"),
            *("-r", str(BINDER / "requirements.txt")),
        ],
        INSTALL_TIMEOUT_S,
        env=env,
    )
    pip_or_skip(installed, "pip install -r binder/requirements.txt")
    times["requirements"] = time.perf_counter() - start

    start = time.perf_counter()
    repo = copy_of_repository(tmp_path / "repo")
    post_build = run(["bash", str(repo / "binder" / "postBuild")], 600, cwd=repo, env=env)
    pip_or_skip(post_build, "binder/postBuild")
    times["postBuild"] = time.perf_counter() - start

    # The project comes from the new environment, the one the kernel will run.
    where = run(
        [
            str(bin_dir / "python"),
            "-c",
            "import tfdiag_magic, tensorflow; print(tfdiag_magic.__file__)",
        ],
        300,
        env=env,
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    checked = run([str(bin_dir / "python"), "-m", "pip", "check"], 120, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # JupyterLab of that environment has the widget manager the dashboard needs.
    extensions = run([str(bin_dir / "jupyter"), "labextension", "list"], 120, env=env)
    listing = extensions.stdout + extensions.stderr
    assert "@jupyter-widgets/jupyterlab-manager" in listing and "enabled" in listing, listing

    kernels = write_kernel_spec(
        tmp_path / "kernels",
        KERNEL_NAME,
        "Binder environment (test)",
        env={"PATH": env["PATH"], "VIRTUAL_ENV": str(venv)},
        python=str(bin_dir / "python"),
    )
    notebooks = repo / "notebooks"
    nb, runs, seconds = execute(notebooks / QUICKSTART, kernels, KERNEL_NAME, cwd=notebooks)
    times["quickstart"] = seconds
    for index, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        assert not errors, f"cell {index} failed in the Binder environment: {errors[0].evalue}"
    for name, code in EXPECTED_FINDINGS[QUICKSTART].items():
        assert code in runs[name]["findings"], runs[name]
    for name, code in EXPECTED_RESOLVED[QUICKSTART].items():
        assert code in runs[name]["comparison"]["resolved"], runs[name]["comparison"]

    for stage, value in times.items():
        record_time(stage, value, file="binder-times.json")
