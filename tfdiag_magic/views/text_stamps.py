"""Text drawn from pixels kept by content, for the dashboard's figures that are drawn again on
every move of the range slider.

Matplotlib's Agg renderer lays out and rasterises every glyph of every text each time it is
drawn: a Steps plot's tick labels, axis labels and offset text took about a fifth of a window's
redraw. The labels repeat from window to window ("0", "20000", "step"), so each text is drawn
once, onto a transparent tile, at a whole-pixel position, and later draws of the same text in
the same font, angle and colour paste the tile. Text is placed at whole pixels (half a pixel
from matplotlib's own position at most). Mathematical text and clipped text are drawn as
matplotlib draws them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

MAX_STAMPS = 512  # tiles kept per renderer: a few KiB each


class TextStamps:
    """Installed on one Agg renderer: its `draw_text` pastes kept tiles (`install`)."""

    def __init__(self, renderer: Any) -> None:
        self.renderer = renderer
        self.original = renderer.draw_text
        self.tiles: OrderedDict[tuple, tuple[np.ndarray, int, int] | None] = OrderedDict()

    @classmethod
    def install(cls, renderer: Any) -> TextStamps:
        """Make `renderer.draw_text` paste kept tiles (this renderer alone)."""
        stamps = cls(renderer)
        renderer.draw_text = stamps.draw_text
        return stamps

    def draw_text(
        self,
        gc: Any,
        x: float,
        y: float,
        s: str,
        prop: Any,
        angle: float,
        ismath: Any = False,
        mtext: Any = None,
    ) -> None:
        if ismath or gc.get_clip_rectangle() is not None or gc.get_clip_path()[0] is not None:
            self.original(gc, x, y, s, prop, angle, ismath, mtext)
            return
        ix, iy = round(x), round(y)
        key = (s, hash(prop), angle, gc.get_rgb(), gc.get_alpha(), gc.get_antialiased())
        tile = self.tiles.get(key)
        if tile is None:
            if key in self.tiles:  # a text that draws no pixels (a space)
                return
            tile = self.tiles[key] = self._draw_tile(gc, s, prop, angle, mtext)
            while len(self.tiles) > MAX_STAMPS:
                self.tiles.popitem(last=False)
            if tile is None:
                return
        else:
            self.tiles.move_to_end(key)
        pixels, left, top = tile
        # draw_text's y counts down from the top; draw_image's from the bottom, to the tile's
        # lowest row.
        bottom = self.renderer.height - (iy + top + pixels.shape[0])
        self.renderer.draw_image(gc, ix + left, bottom, pixels)

    def _draw_tile(
        self, gc: Any, s: str, prop: Any, angle: float, mtext: Any
    ) -> tuple[np.ndarray, int, int] | None:
        """The text drawn with its anchor at a whole pixel of a transparent canvas, cut to the
        pixels it drew, with their offset from the anchor (x right, y down); None if none."""
        from matplotlib.backends.backend_agg import RendererAgg

        width, height, descent = self.renderer.get_text_width_height_descent(s, prop, False)
        reach = int(np.ceil(max(width, height) + descent)) + 4
        side = 2 * reach + 1
        canvas = RendererAgg(side, side, self.renderer.dpi)
        canvas.draw_text(gc, reach, reach, s, prop, angle, False, mtext)
        pixels = np.asarray(canvas.buffer_rgba())
        rows = np.flatnonzero(pixels[:, :, 3].any(axis=1))
        columns = np.flatnonzero(pixels[:, :, 3].any(axis=0))
        if rows.size == 0:
            return None
        r0, r1, c0, c1 = int(rows[0]), int(rows[-1]) + 1, int(columns[0]), int(columns[-1]) + 1
        # draw_image takes the rows bottom first.
        return pixels[r1 - 1 : r0 - 1 if r0 else None : -1, c0:c1].copy(), c0 - reach, r0 - reach
