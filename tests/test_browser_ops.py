"""The dashboard's Ops tab in JupyterLab 4, in a real browser (headless Chromium).

A ``%%tfprofile --ops`` cell trains a small Keras model; the dashboard that replaces the live
view has an Ops tab last; opened, it lists the window's top ops, a MatMul among them, and the
per-step split. The JupyterLab server, the browser and the cell runner are tests/browser_lab.py's;
the screenshot goes to test-artifacts/browser-ops-tab.png.
"""

from __future__ import annotations

import pytest

from tests.browser_lab import close_notebook, open_notebook, run_cell
from tests.test_browser import TABS

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

CELLS = [
    "%load_ext tfdiag_magic",
    "%%tfprofile --ops -o r\n"
    "import numpy as np, keras\n"
    "x = np.random.default_rng(0).normal(size=(4096, 16)).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True)\n"
    "model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation='relu'), "
    "keras.layers.Dense(1)])\n"
    "model.compile(optimizer='sgd', loss='mse')\n"
    "model.fit(x, y, batch_size=32, epochs=2, verbose=0);",
]


def test_ops_tab_lists_the_window_ops(browser, lab, artifacts):
    context, page = open_notebook(browser, lab, "ops.ipynb", CELLS)
    try:
        run_cell(page, 0)
        run_cell(page, 1)
        dashboard = page.locator(".tfdiag-dashboard").first
        dashboard.wait_for(state="visible", timeout=180_000)
        labels = dashboard.locator(".lm-TabBar-tabLabel").all_inner_texts()
        assert labels == [*TABS, "Ops"]
        dashboard.locator(".lm-TabBar-tab", has_text="Ops").click()
        table = dashboard.locator("table.tfdiag-ops").locator("visible=true").first
        table.wait_for(state="visible")
        types = table.locator("tr td:nth-child(2)").all_inner_texts()
        assert any("MatMul" in t for t in types), types
        text = dashboard.locator(".widget-tab-contents").inner_text()
        assert "Ops window: window of" in text and "host ops" in text
        dashboard.screenshot(path=str(artifacts / "browser-ops-tab.png"))
    except Exception:
        page.screenshot(path=str(artifacts / "browser-ops-failure.png"))
        raise
    finally:
        close_notebook(context, lab)
