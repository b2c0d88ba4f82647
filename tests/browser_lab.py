"""The real browser's set-up, shared by the browser tests (tests/test_browser*.py): headless
Chromium (Debian's package) driven by Playwright, a JupyterLab server of this virtualenv, and
the steps a person takes in it (open a notebook, run a cell).

The browser and the server are session fixtures (a pytest plugin, registered in conftest.py):
they start once per test process, and the browser tests share one xdist group, so that
under ``make test`` they run on one worker, one after the other, on one server and one
browser. Each test opens its own notebook in its own browser context.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def ensure_chromium() -> str | None:
    """The reason Chromium cannot be had, or None once /usr/bin/chromium is there."""
    if Path(CHROMIUM).exists():
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "chromium is not installed and cannot be (no apt-get, or not root)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return f"could not install chromium: {' '.join(command)}: {done.stderr[-500:]}"
    return None if Path(CHROMIUM).exists() else "chromium installed but not at /usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    reason = ensure_chromium()
    if reason:
        pytest.skip(reason)
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """A JupyterLab server on localhost: (base URL, its root folder, its token)."""
    pytest.importorskip("jupyterlab")
    root = tmp_path_factory.mktemp("lab")
    home = tmp_path_factory.mktemp("lab-home")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
    )
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = (home / "server.log").open("w")
    server = subprocess.Popen(
        command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if server.poll() is not None:
                pytest.fail("JupyterLab exited: " + (home / "server.log").read_text()[-2000:])
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.3)
        else:
            pytest.fail("JupyterLab did not start within 60 s")
        yield f"http://127.0.0.1:{port}", root, token
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def settle_kernel(page: Any, quiet_s: float, limit_s: float = 60.0) -> None:
    """Wait until the notebook's kernel is idle and no dialog has come up for `quiet_s`.

    JupyterLab may raise its "Select Kernel" dialog seconds after the page has loaded, and
    accepting it starts a new kernel in place of the first: in a clean checkout's run, cell 0
    (``%load_ext``) ran on the first kernel and the training cell was lost with it (the new
    kernel started 4 s after the page connected)."""
    quiet_since = time.monotonic()
    deadline = quiet_since + limit_s
    while time.monotonic() < deadline:
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count()
        if accept.count() or not idle:
            if accept.count():
                accept.first.click()
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        page.wait_for_timeout(250)


def run_cell(page: Any, index: int) -> None:
    """Click into cell `index` and run it, once the kernel has settled; again if the kernel was
    not ready to take it. Before the page's first cell the kernel must have been quiet for 5 s
    (the late "Select Kernel" dialog, see `settle_kernel`); by the next cells that time has
    passed, and a second of quiet is enough."""
    settle_kernel(page, quiet_s=5.0 if index == 0 else 1.0)
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputPrompt")
    for _ in range(10):
        # JupyterLab may still raise its "Select Kernel" dialog after the page has loaded.
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        try:
            page.wait_for_function(
                "el => /\\[(\\*|\\d+)\\]/.test(el.innerText)",
                arg=prompt.element_handle(),
                timeout=3000,
            )
            return
        except Exception:
            page.wait_for_timeout(1000)
    raise AssertionError(f"cell {index} did not start running")


def open_notebook(
    browser: Any, lab: tuple[str, Path, str], name: str, cells: list[str], clipboard: bool = False
) -> tuple[Any, Any]:
    """Write a notebook of `cells` as `name` in the server's root and open it in a new browser
    context, with its kernel started and idle: (context, page). `close_notebook` when done."""
    url, root, token = lab
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / name)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    if clipboard:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
    page = context.new_page()
    page.set_default_timeout(60_000)
    # A workspace of its own, empty: the server's default one would also open, as tabs beside
    # this one, the notebooks its earlier tests opened (one of them would take the clicks).
    workspace = Path(name).stem
    page.goto(f"{url}/lab/workspaces/{workspace}/tree/{name}?reset&token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    if accept.count():
        accept.first.click()
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    no_news = page.locator(".jp-Notification-Toast-Close, .jp-toast-button:has-text('No')")
    if no_news.count():
        no_news.first.click()
    return context, page


def close_notebook(context: Any, lab: tuple[str, Path, str]) -> None:
    """Close the browser context and shut down the server's kernels (the server outlives the
    test: its kernels would hold their memory until the end of the session)."""
    context.close()
    url, _, token = lab
    headers = {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{url}/api/kernels", headers=headers)) as r:
        kernels = json.load(r)
    for kernel in kernels:
        request = urllib.request.Request(
            f"{url}/api/kernels/{kernel['id']}", headers=headers, method="DELETE"
        )
        urllib.request.urlopen(request).close()
