"""The dashboard of a merged multi-worker job in JupyterLab 4, in a real browser (headless
Chromium): `tfdiag_magic.merge(...)` displayed in a notebook shows Overview and Workers tabs;
the Workers tab plots each worker's time per step along the steps, a line per worker.

The two reports are made by ``python -m tfdiag_magic profile`` on a small training script run
twice with the `TF_CONFIG` of worker 0 and worker 1 of a 2-worker cluster (what a worker of a
job reads; the script itself trains alone, so the test needs no job). The JupyterLab server, the
browser and the cell runner are tests/browser_lab.py's; the screenshot goes to
test-artifacts/browser-workers-tab.png.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.browser_lab import close_notebook, open_notebook, run_cell

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

STEPS = 60
SCRIPT = f"""
import numpy as np, tensorflow as tf, keras
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

x = tf.ones((64, 16))
y = tf.ones((64, 1))
for step in range({STEPS}):
    train_step(x, y)
"""


def _worker_reports(folder) -> None:
    script = folder / "train.py"
    script.write_text(SCRIPT)
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    for index in range(2):
        config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        done = subprocess.run(
            [sys.executable, "-m", "tfdiag_magic", "profile", "--json", "reports/", "train.py"],
            cwd=folder,
            env={**os.environ, "TF_CONFIG": config, "TF_CPP_MIN_LOG_LEVEL": "2"},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]


def test_workers_tab_plots_each_workers_steps(browser, lab, artifacts):
    _worker_reports(lab[1])  # the server's root folder
    cells = ["import tfdiag_magic\nmerged = tfdiag_magic.merge('reports')", "merged"]
    context, page = open_notebook(browser, lab, "workers.ipynb", cells)
    try:
        run_cell(page, 0)
        run_cell(page, 1)
        tabs = page.locator(".jupyter-widgets.lm-TabBar, .jupyter-widgets .lm-TabBar").first
        tabs.wait_for(state="visible", timeout=120_000)
        labels = tabs.locator(".lm-TabBar-tabLabel").all_inner_texts()
        assert labels == ["Overview", "Workers"], labels
        overview = page.locator(".tfdiag-workers").locator("visible=true").first
        assert "worker 0" in overview.inner_text() and "worker 1" in overview.inner_text()
        tabs.locator(".lm-TabBar-tab", has_text="Workers").click()
        plot = page.locator("svg.tfdiag-worker-steps").locator("visible=true").first
        plot.wait_for(state="visible")
        lines = plot.locator("polyline")
        assert lines.count() == 2
        for i in range(2):
            points = lines.nth(i).get_attribute("points").split()
            assert len(points) >= STEPS - 10, len(points)  # the last step has no interval
        box = plot.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100, box
        page.locator(".tfdiag-workers-tab").locator("visible=true").first.screenshot(
            path=str(artifacts / "browser-workers-tab.png")
        )
    except Exception:
        page.screenshot(path=str(artifacts / "browser-workers-failure.png"))
        raise
    finally:
        close_notebook(context, lab)
