"""The dashboard and the live view in a real Jupyter kernel, as a notebook receives them.

A notebook is executed once by nbclient on an ipykernel of this virtualenv (the same set-up as
test_kernel.py). The tests read the cell outputs and the widget state nbclient saved, as
JupyterLab would: the profiled cell's output carries the widget view with the static HTML and
the text beside it; the widget state holds the tabs and the plots; the live view was shown
and updated while the cell ran; widgets switched off give the static report alone; a failing
cell still gets its dashboard and its traceback; nbconvert renders the static view.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import nbformat
import pytest

from tests.kernels import run_cells

pytestmark = pytest.mark.kernel

KERNEL_NAME = "tfdiag-dashboard-test"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

FIT = (
    "import numpy as np, keras\n"
    "x = np.random.default_rng(0).normal(size=(512, 8)).astype('float32')\n"
    "y = x.sum(axis=1, keepdims=True)\n"
    "model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])\n"
    "model.compile(optimizer='sgd', loss='mse')\n"
)
CELLS = [
    "%load_ext tfdiag_magic",
    "%%tfprofile -o r\n" + FIT + "model.fit(x, y, batch_size=8, epochs=3, validation_split=0.25, "
    "verbose=0);",
    "from tfdiag_magic.views.live import LiveView\n"
    "print(LiveView.last.updates, LiveView.last.enabled, LiveView.last.error)",
    "%config TFProfile.widgets = False\n",
    "%%tfprofile -o r_static\nmodel.fit(x, y, batch_size=64, epochs=1, verbose=0);",
    "%config TFProfile.widgets = True\n",
    "%%tfprofile -o r_failed\n"
    "model.fit(x, y, batch_size=64, epochs=1, verbose=0)\n"
    "# a comment with <script>alert('comment')</script>\n"
    "raise ValueError('<script>alert(\"boom\")</script>')",
    "r",
]
LOAD, PROFILED, LIVE, OFF, STATIC, ON, FAILING, SHOW = range(len(CELLS))


@pytest.fixture(scope="module")
def notebook(tmp_path_factory: pytest.TempPathFactory) -> Any:
    kernels = tmp_path_factory.mktemp("kernels")
    return run_cells(CELLS, kernels, KERNEL_NAME, "tfdiag_magic dashboard tests", timeout=240)


def outputs(nb: Any, cell: int, output_type: str) -> list[Any]:
    return [o for o in nb.cells[cell].outputs if o.output_type == output_type]


def widget_state(nb: Any) -> dict[str, Any]:
    return nb.metadata["widgets"][WIDGET_STATE]["state"]


def descendants(state: dict[str, Any], model_id: str) -> list[str]:
    """The model and every model reachable from it through children."""
    seen, todo = [], [model_id]
    while todo:
        current = todo.pop()
        if current in seen or current not in state:
            continue
        seen.append(current)
        children = state[current]["state"].get("children", [])
        todo.extend(child.removeprefix("IPY_MODEL_") for child in children)
    return seen


def dashboard_display(nb: Any, cell: int) -> Any:
    displays = outputs(nb, cell, "display_data")
    assert len(displays) == 1, [d.data.keys() for d in displays]
    return displays[0]


def test_profiled_cell_output_carries_widget_view_static_html_and_text(notebook):
    assert outputs(notebook, PROFILED, "error") == []
    data = dashboard_display(notebook, PROFILED).data
    assert set(data) >= {WIDGET_VIEW, "text/html", "text/plain"}
    assert data["text/plain"].startswith("tfdiag_magic: 144 training steps")
    html = data["text/html"]
    assert '<div class="tfdiag">' in html
    assert html.count('src="data:image/png;base64,') >= 2  # step time and memory
    assert "VBox(" not in html and "HBox(" not in html and "Tab(" not in html


def test_widget_state_holds_the_tabs_and_the_plots(notebook):
    state = widget_state(notebook)
    view = dashboard_display(notebook, PROFILED).data[WIDGET_VIEW]
    models = descendants(state, view["model_id"])
    assert state[view["model_id"]]["state"]["_dom_classes"] == ["tfdiag-dashboard"]
    tabs = [state[m]["state"] for m in models if state[m]["model_name"] == "TabModel"]
    assert len(tabs) == 1
    assert tabs[0]["titles"] == ["Overview", "Steps", "Memory", "GPU", "Findings", "Data"]
    images = [state[m] for m in models if state[m]["model_name"] == "ImageModel"]
    pngs = [
        base64.b64decode(b["data"])
        for image in images
        for b in image.get("buffers", [])
        if b["path"] == ["value"]
    ]
    assert len([p for p in pngs if p.startswith(PNG_MAGIC)]) >= 2  # step time, memory
    sliders = [state[m]["state"] for m in models if state[m]["model_name"] == "IntRangeSliderModel"]
    assert sliders[0]["value"] == [0, 143 + 48]  # 144 train and 48 validation steps
    texts = " ".join(
        state[m]["state"].get("value", "") for m in models if state[m]["model_name"] == "HTMLModel"
    )
    assert "Steps 0–191" in texts  # the window statistics


def test_live_view_was_shown_and_updated_while_the_cell_ran(notebook):
    assert outputs(notebook, LIVE, "error") == []
    updates, _enabled, error = notebook.cells[LIVE].outputs[0].text.split()
    assert int(updates) >= 1
    assert error == "None"
    lives = [
        s["state"]
        for s in widget_state(notebook).values()
        if "tfdiag-live" in s["state"].get("_dom_classes", [])
    ]
    assert lives, "the live view's widget was never sent"
    assert any("train 144" in live["value"] or "train " in live["value"] for live in lives)


def test_widgets_switched_off_show_the_static_report_only(notebook):
    assert outputs(notebook, OFF, "error") == []
    data = dashboard_display(notebook, STATIC).data
    assert WIDGET_VIEW not in data
    assert '<div class="tfdiag">' in data["text/html"]
    assert data["text/plain"].startswith("tfdiag_magic: 8 training steps")


def test_failing_cell_shows_its_dashboard_escaped_and_its_own_traceback(notebook):
    (error,) = outputs(notebook, FAILING, "error")
    assert error.ename == "ValueError"
    assert error.evalue == '<script>alert("boom")</script>'
    traceback = ANSI.sub("", "\n".join(error.traceback))
    assert "raise ValueError" in traceback
    data = dashboard_display(notebook, FAILING).data
    assert WIDGET_VIEW in data
    html = data["text/html"]
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&quot;boom&quot;)&lt;/script&gt;" in html
    models = descendants(widget_state(notebook), data[WIDGET_VIEW]["model_id"])
    for model in models:
        value = widget_state(notebook)[model]["state"].get("value")
        if isinstance(value, str):
            assert "<script" not in value.lower(), value


def test_nbconvert_renders_the_static_view_where_no_widget_state_was_saved(notebook):
    from nbconvert import HTMLExporter

    saved = nbformat.from_dict(json.loads(json.dumps(notebook)))
    saved.metadata.pop("widgets", None)  # as JupyterLab saves by default
    html, _ = HTMLExporter().from_notebook_node(saved)
    assert '<div class="tfdiag">' in html
    assert html.count("data:image/png;base64,") >= 4  # two plots each, two dashboards
    assert "tfdiag_magic: 144 training steps" in html
    assert "VBox(children" not in html and "Tab(children" not in html


def test_nbconvert_with_saved_widget_state_embeds_the_dashboard(notebook):
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter().from_notebook_node(notebook)
    view = dashboard_display(notebook, PROFILED).data[WIDGET_VIEW]
    assert view["model_id"] in html  # rendered by the widget manager from the saved state
    assert WIDGET_STATE in html


def test_a_result_shown_later_is_its_dashboard_again(notebook):
    (result,) = outputs(notebook, SHOW, "execute_result")
    assert set(result.data) >= {WIDGET_VIEW, "text/html", "text/plain"}
    assert result.data["text/plain"].startswith("tfdiag_magic: 144 training steps")
    models = descendants(widget_state(notebook), result.data[WIDGET_VIEW]["model_id"])
    assert any(widget_state(notebook)[m]["model_name"] == "TabModel" for m in models)
