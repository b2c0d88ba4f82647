"""Text pasted from kept tiles (`views/text_stamps.py`) looks as matplotlib draws it: the same
labels at the same places, drawn once and pasted after."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from tfdiag_magic.views.text_stamps import TextStamps

matplotlib.use("agg")


def _drawn(stamped: bool, draws: int = 1) -> tuple[np.ndarray, TextStamps | None]:
    """A small plot with tick labels, a rotated axis label and a title, drawn `draws` times."""
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plt.figure(figsize=(6, 3), dpi=100)
    try:
        ax = fig.add_subplot(111)
        ax.plot([0, 20000], [0, 3])
        ax.set_ylabel("ms per step")
        ax.set_title("steps")
        fig.subplots_adjust(bottom=0.2, left=0.15)
        canvas = FigureCanvasAgg(fig)
        renderer = canvas.get_renderer()
        stamps = TextStamps.install(renderer) if stamped else None
        for _ in range(draws):
            fig.draw(renderer)
        return np.asarray(canvas.buffer_rgba())[..., :3].astype(float).sum(axis=2), stamps
    finally:
        plt.close(fig)


def test_pasted_text_lies_where_matplotlib_draws_it():
    plain, _ = _drawn(stamped=False)
    stamped, stamps = _drawn(stamped=True, draws=2)  # the second draw pastes every text
    assert stamps is not None and len(stamps.tiles) >= 8  # tick labels, axis label, title
    ink = plain < 3 * 250  # pixels that are not white
    assert ink.sum() > 1000
    # No shift of the whole picture, in any direction, matches it better than none.
    misses = {}
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            moved = np.roll(np.roll(stamped, dy, 0), dx, 1)
            misses[dy, dx] = np.abs(plain - moved)[1:-1, 1:-1].sum()
    assert min(misses, key=misses.get) == (0, 0), misses
    # Half a pixel of rounding moves a glyph's antialiased edges, never its shape: a whole
    # pixel's shift misses far more.
    assert misses[0, 0] < 0.5 * min(miss for at, miss in misses.items() if at != (0, 0)), misses


def test_a_text_is_laid_out_once_and_pasted_after(monkeypatch):
    from matplotlib.backends.backend_agg import RendererAgg

    laid_out = []
    original = RendererAgg.draw_text

    def counting(self, gc, x, y, s, *args, **kwargs):
        laid_out.append(s)
        return original(self, gc, x, y, s, *args, **kwargs)

    monkeypatch.setattr(RendererAgg, "draw_text", counting)
    _drawn(stamped=True, draws=1)
    once = len(laid_out)
    _drawn(stamped=True, draws=3)
    assert once >= 8
    assert len(laid_out) - once == once  # three draws lay out each text as often as one


@pytest.mark.parametrize("text", ["$x^2$"])
def test_mathematical_text_is_drawn_by_matplotlib(text):
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plt.figure(figsize=(2, 1), dpi=100)
    try:
        fig.text(0.5, 0.5, text)
        canvas = FigureCanvasAgg(fig)
        stamps = TextStamps.install(canvas.get_renderer())
        fig.draw(canvas.get_renderer())
        assert not stamps.tiles
    finally:
        plt.close(fig)
