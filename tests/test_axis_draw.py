"""A kept figure's axes drawn without measuring their tick labels (`dash_figures.draw_axis`)
look exactly as matplotlib draws them, and an axis with an offset text is left to matplotlib."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from tfdiag_magic.views.dash_figures import draw_axis

matplotlib.use("agg")


def _axis_pixels(x_range: tuple[float, float], lean: bool, monkeypatch) -> tuple[np.ndarray, int]:
    """Both axes of a small plot drawn alone on a cleared canvas, by `draw_axis` or by
    matplotlib; with the number of tick labels measured on the way."""
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    measured = []
    original = Text.get_window_extent

    def counting(self, *args, **kwargs):
        measured.append(self.get_text())
        return original(self, *args, **kwargs)

    fig = plt.figure(figsize=(5, 2.5), dpi=100)
    try:
        ax = fig.add_subplot(111)
        ax.plot(x_range, [0.5, 3.0])
        ax.grid(True)
        ax.set_xlabel("step")
        ax.set_ylabel("ms per step")
        ax.xaxis.set_label_coords(0.5, -0.15)  # fixed, as a kept figure places them
        ax.yaxis.set_label_coords(-0.1, 0.5)
        fig.subplots_adjust(bottom=0.25, left=0.18)
        canvas = FigureCanvasAgg(fig)
        renderer = canvas.get_renderer()
        fig.draw(renderer)  # a first full draw, as a kept figure has had
        renderer.clear()
        monkeypatch.setattr(Text, "get_window_extent", counting)
        for axis in (ax.xaxis, ax.yaxis):
            draw_axis(axis, renderer) if lean else axis.draw(renderer)
        monkeypatch.undo()
        return np.asarray(canvas.buffer_rgba()).copy(), len(measured)
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    "x_range, offset",
    [((0, 20000), False), ((1_000_000, 1_003_000), True)],
    ids=["plain", "offset"],
)
def test_axes_drawn_without_measuring_look_as_matplotlib_draws_them(x_range, offset, monkeypatch):
    theirs, measured_by_matplotlib = _axis_pixels(x_range, lean=False, monkeypatch=monkeypatch)
    ours, measured = _axis_pixels(x_range, lean=True, monkeypatch=monkeypatch)
    assert (theirs[..., 3] > 0).sum() > 2000  # ticks, labels, grid: there is something drawn
    assert np.array_equal(ours, theirs)
    assert measured_by_matplotlib >= 8  # matplotlib measures every tick label
    if offset:  # the x axis' offset text ("+1e6") is placed by its labels: matplotlib draws it
        assert 0 < measured < measured_by_matplotlib
    else:
        assert measured == 0
