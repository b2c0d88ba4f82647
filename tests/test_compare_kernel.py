"""Compare and sweep in a real Jupyter kernel, as a notebook receives them.

A notebook runs once under nbclient on an ipykernel of this virtualenv (as in
test_dashboard_kernel.py): a per-batch predict loop stored with ``-o before``, its fix run with
``--compare before``, and a batch-size sweep. The dashboards hold a Compare and a Sweep tab
first; the Findings tab of the first run inserts its rewrite under ``%%tfprofile --compare``.
"""

from __future__ import annotations

import html
from typing import Any

import pytest

from tests.kernels import run_cells

from .test_dashboard_kernel import WIDGET_VIEW, descendants, outputs, widget_state

pytestmark = pytest.mark.kernel

KERNEL_NAME = "tfdiag-compare-test"
LOOP = """import numpy as np, keras
x = np.random.default_rng(0).normal(size=(256, 16)).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
batch_size = 32
preds = []
for i in range(0, len(x), batch_size):
    xb = x[i:i + batch_size]
    preds.append(model.predict(xb, verbose=0))
"""
FIXED = LOOP.replace("model.predict(xb, verbose=0)", "model.predict_on_batch(xb)")
SWEEP = """import numpy as np, keras
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, x[:, :1], batch_size=batch_size, epochs=1, verbose=0);
"""
CELLS = [
    "%load_ext tfdiag_magic",
    "%%tfprofile -o before\n" + LOOP,
    "%%tfprofile --compare before -o after\n" + FIXED,
    "%%tfprofile --sweep batch_size=16,128 -o sw\n" + SWEEP,
    "print(after.comparison.verdict)\nprint(sw.recommendation.value)",
]
LOAD, BEFORE, AFTER, SWEPT, PRINT = range(len(CELLS))


@pytest.fixture(scope="module")
def notebook(tmp_path_factory: pytest.TempPathFactory) -> Any:
    kernels = tmp_path_factory.mktemp("kernels")
    return run_cells(CELLS, kernels, KERNEL_NAME, "tfdiag_magic compare tests", timeout=240)


def _dashboard(nb: Any, cell: int) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The cell's display data, its Tab model's state, and every HTML widget's value."""
    assert outputs(nb, cell, "error") == [], outputs(nb, cell, "error")
    displays = [d for d in outputs(nb, cell, "display_data") if WIDGET_VIEW in d.data]
    assert len(displays) == 1
    data = displays[0].data
    state = widget_state(nb)
    models = descendants(state, data[WIDGET_VIEW]["model_id"])
    (tab,) = [state[m]["state"] for m in models if state[m]["model_name"] == "TabModel"]
    texts = [state[m]["state"]["value"] for m in models if state[m]["model_name"] == "HTMLModel"]
    return data, tab, texts


def test_compare_run_dashboard_holds_a_compare_tab_first(notebook):
    data, tab, texts = _dashboard(notebook, AFTER)
    assert tab["titles"] == ["Compare", "Overview", "Steps", "Memory", "GPU", "Findings", "Data"]
    assert tab.get("selected_index", 0) in (0, None)
    compare = [t for t in texts if "tfdiag-compare" in t]
    assert len(compare) == 1
    assert "Compared with <code>before</code>" in compare[0]
    assert "resolved" in compare[0].lower() and "<td>throughput</td>" in compare[0]
    assert "Compared with before:" in data["text/plain"]
    assert "tfdiag-compare" in data["text/html"]
    printed = "".join(o.text for o in outputs(notebook, PRINT, "stream"))
    verdict, best = printed.strip().splitlines()
    assert "faster" in verdict
    assert best == "128"


def test_first_run_inserts_its_rewrite_under_compare(notebook):
    _data, tab, texts = _dashboard(notebook, BEFORE)
    assert tab["titles"][0] == "Overview"
    inserts = [t for t in texts if 'class="tfdiag-rewrite"' in t]
    assert inserts
    assert html.escape("%%tfprofile --compare before\nimport numpy as np") in inserts[0]


def test_sweep_dashboard_holds_a_sweep_tab_with_its_plot(notebook):
    data, tab, texts = _dashboard(notebook, SWEPT)
    assert tab["titles"][0] == "Sweep"
    sweep = [t for t in texts if "tfdiag-sweep" in t]
    assert len(sweep) == 1
    assert "<b>Recommendation</b>: batch_size=128" in sweep[0]
    assert 'src="data:image/png;base64,' in sweep[0]
    assert "Sweep of batch_size over 2 values" in data["text/plain"]
    progress = "".join(o.text for o in outputs(notebook, SWEPT, "stream"))
    assert "tfdiag_magic sweep 2/2: batch_size=128" in progress
