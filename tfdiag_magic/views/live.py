"""The live view: one small widget that follows a profiling run while the cell runs.

It shows the steps done per phase, the current steps/s and step time, a sparkline of step
time over every step so far, host and device memory, the elapsed time, and, inside Keras
``fit``, the progress and an ETA. The recorder calls `LiveView.on_sample` on the main thread
after its memory samples (at most every ``memory_interval``); the view redraws at most every
`interval` seconds, reads only the rows appended since its last redraw, and sends one widget
message per redraw. While no step ends (tracing, a first batch, a long step), a ticker thread
redraws every `tick` seconds so that the elapsed time moves and says when the last step ended;
it is stopped and joined when the view is detached or closed. An error inside the view
switches it off and never reaches the run.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import deque
from html import escape
from time import perf_counter
from typing import Any

import numpy as np

from ..record import PHASES, Phase
from ..units import rate, seconds, size
from .downsample import MinMaxBuckets

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # a widget's MIME type in a bundle
RATE_WINDOW = 3.0  # seconds of recent steps the current steps/s is measured over
QUIET_NOTE = 1.0  # seconds without a step end after which the view says so
SPARK_WIDTH, SPARK_HEIGHT = 320, 56
# Seconds `detach`/`close` wait for the ticker: a redraw takes milliseconds; the run's end (and
# its report) must not wait on a widget message that hangs.
TICKER_JOIN_TIMEOUT = 1.0
STYLE = (
    ".tfdiag-live{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:12px}"
    ".tfdiag-live table{border-collapse:collapse}.tfdiag-live td{padding:1px 10px 1px 0}"
    ".tfdiag-live .muted{opacity:.7}"
    ".tfdiag-live .bar{width:320px;height:6px;background:#8883;border-radius:3px}"
    ".tfdiag-live .bar span{display:block;height:100%;background:#3b82f6;border-radius:3px}"
)


class LiveView:
    """A widget that shows a run while it records; `on_sample` is the recorder's callback."""

    last: LiveView | None = None  # the view shown last in this process (tests read it)

    def __init__(self, interval: float = 0.5, tick: float = 1.0) -> None:
        import ipywidgets as w

        self.interval = interval
        self.tick = tick
        self.enabled = True
        self.updates = 0
        self.ticks = 0  # redraws made by the ticker thread
        self.update_seconds = 0.0  # time spent redrawing, for the overhead benchmark
        self.error: str | None = None
        self._next = 0.0
        self._last_draw = 0.0
        self._last_end: float | None = None  # when the last recorded step ended (after t0)
        self._progress: tuple[int, int] | None = None
        self._lock = threading.Lock()  # one redraw at a time: the main thread or the ticker
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._seen = 0  # rows already read
        self._counts = np.zeros(len(PHASES), dtype=np.int64)
        self._steps = MinMaxBuckets(SPARK_WIDTH // 2)
        self._loops = MinMaxBuckets(SPARK_WIDTH // 2)
        self._recent_ms: float | None = None
        self._history: deque[tuple[float, int]] = deque()
        self._t0: float | None = None
        self._rec: Any = None
        self.widget = w.HTML(self._page("<p>tfdiag_magic: starting the profiling run…</p>"))
        self.widget.add_class("tfdiag-live")
        self.handle: Any = None

    # -- display -------------------------------------------------------------------------------

    def bundle(self) -> dict[str, Any]:
        """The widget view, with text and HTML for frontends that cannot show widgets."""
        view = self.widget._repr_mimebundle_()[WIDGET_VIEW]
        return {
            WIDGET_VIEW: view,
            "text/plain": "tfdiag_magic: profiling run in progress",
            "text/html": "<div class='tfdiag'><p>tfdiag_magic: profiling run in progress</p></div>",
        }

    def show(self) -> None:
        """Display the view as a new output of the running cell (updatable by display id)."""
        from IPython.display import display

        self.handle = display(self.bundle(), raw=True, display_id=True)
        LiveView.last = self

    def replace(self, data: dict[str, Any]) -> None:
        """Put `data` (the final report) where the live view was shown, and close the view.

        JupyterLab renders an updated output with the renderer it already has when the kind
        of output stays the same, and hides that renderer when the widget it showed is
        closed: so the view is first replaced by a line of text, then closed, and only then
        replaced by the report.
        """
        if self.handle is not None:
            self.handle.update(
                {
                    "text/plain": "tfdiag_magic: building the report",
                    "text/html": "<p>tfdiag_magic: building the report</p>",
                },
                raw=True,
            )
        self.close()
        if self.handle is not None:
            self.handle.update(data, raw=True)

    def close(self) -> None:
        self.enabled = False
        try:
            self._stop_ticker()
        finally:
            self.widget.close()

    # -- updates -------------------------------------------------------------------------------

    def attach(self, session: Any) -> None:
        """Follow the running `session`: redraw after its memory samples (on the main thread)
        and, while no step ends, every `tick` seconds from a ticker thread."""
        rec = session.recorder
        self._rec = rec
        self._t0 = rec.t0
        session.add_listener(self.on_sample)
        if self.tick > 0 and self.enabled:
            self._stop.clear()
            self._ticker = threading.Thread(
                target=self._run_ticker, name="tfdiag-live-view", daemon=True
            )
            self._ticker.start()

    def on_sample(self, rec: Any) -> None:
        """The recorder's callback: redraw when `interval` has passed; never raise."""
        if not self.enabled:
            return
        now = perf_counter()
        if now < self._next or not self._lock.acquire(blocking=False):
            return  # too soon, or the ticker is drawing: a later sample redraws
        try:
            self._next = now + self.interval
            self._redraw(rec, now, rec.fit_progress())
            self.update_seconds += perf_counter() - now
        finally:
            self._lock.release()

    def _run_ticker(self) -> None:
        while not self._stop.wait(self.tick):
            now = perf_counter()
            if not self.enabled:
                return
            if now - self._last_draw < self.tick:
                continue  # steps are ending: the main thread redraws
            with self._lock:
                if self._stop.is_set() or self._rec is None:
                    return
                self._redraw(self._rec, now, self._progress)
                self.ticks += 1
                self.update_seconds += perf_counter() - now

    def _stop_ticker(self) -> None:
        self._stop.set()
        ticker, self._ticker = self._ticker, None
        # Not alive: never started (an interrupt inside `attach`), or already ended.
        if ticker is not None and ticker.is_alive() and ticker is not threading.current_thread():
            ticker.join(timeout=TICKER_JOIN_TIMEOUT)

    def _redraw(self, rec: Any, now: float, progress: tuple[int, int] | None) -> None:
        """Redraw; an error switches the view off instead of reaching the run."""
        try:
            self.update(rec, now, progress)
        except Exception as exc:  # the view must never break the run: it switches itself off
            self.enabled = False
            self.error = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                self.widget.value = self._page(
                    f'<p class="muted">Live view stopped ({escape(self.error)}); '
                    "the run goes on and is recorded.</p>"
                )

    def _read_new_rows(self, rec: Any) -> None:
        # The recorder's own reader: it survives the thinnings of a long run's table, and
        # counts the rows a thinning left out before they were read.
        new = rec.rows_since(self._seen)
        self._seen = new.position
        self._counts += new.dropped
        if new.rows.shape[0] == 0:
            return
        phase = new.column("phase").astype(np.int64)
        duration = new.column("duration")
        last_end = float(np.nanmax(new.column("start") + duration))
        if self._last_end is None or last_end > self._last_end:
            self._last_end = last_end
        self._counts += np.bincount(phase, minlength=len(PHASES))[: len(PHASES)]
        steps = phase != Phase.LOOP
        if steps.any():
            self._steps.add(duration[steps])
            self._recent_ms = float(np.median(duration[steps][-32:])) * 1e3
        if (~steps).any():
            self._loops.add(duration[~steps])
            if self._steps.count() == 0:
                self._recent_ms = float(np.median(duration[~steps][-32:])) * 1e3

    def update(
        self, rec: Any, now: float | None = None, progress: tuple[int, int] | None = None
    ) -> None:
        """Read what the recorder appended since the last update and redraw; `progress` is
        (training steps done, total) of a running Keras ``fit``, where known."""
        now = perf_counter() if now is None else now
        self._t0 = rec.t0
        self._rec = rec
        self._read_new_rows(rec)
        plotted = self._plotted_count()
        history = self._history
        history.append((now, plotted))
        while len(history) > 2 and now - history[0][0] > RATE_WINDOW:
            history.popleft()
        steps_per_s = None
        if len(history) > 1 and history[-1][0] > history[0][0]:
            steps_per_s = (history[-1][1] - history[0][1]) / (history[-1][0] - history[0][0])
        self._progress = progress
        self.widget.value = self._page(
            self._body(rec, now - rec.t0, steps_per_s, progress, running=True)
        )
        self._last_draw = now
        self.updates += 1

    def detach(self, session: Any) -> None:
        """Stop following `session` (before it stops), having read the steps not yet shown."""
        session.add_listener(None)
        self._stop_ticker()
        rec, self._rec = self._rec, None
        if rec is not None:
            with contextlib.suppress(Exception):
                self._read_new_rows(rec)

    def finish(self, rec: Any | None, error: BaseException | None) -> None:
        """The last redraw: what was recorded, and how the run ended."""
        if rec is not None:
            with contextlib.suppress(Exception):
                self._read_new_rows(rec)
        end = "finished"
        if isinstance(error, KeyboardInterrupt):
            end = "interrupted"
        elif error is not None:
            end = f"stopped by {type(error).__name__}"
        elapsed = perf_counter() - self._t0 if self._t0 is not None else None
        with contextlib.suppress(Exception):
            self.widget.value = self._page(
                self._body(rec, elapsed, None, None, running=False, end=end)
            )

    # -- rendering -----------------------------------------------------------------------------

    def _plotted_count(self) -> int:
        steps = int(self._counts.sum() - self._counts[Phase.LOOP])
        return steps if steps else int(self._counts[Phase.LOOP])

    @staticmethod
    def _page(body: str) -> str:
        return f'<style>{STYLE}</style><div class="tfdiag-live">{body}</div>'

    def _body(
        self,
        rec: Any,
        elapsed: float | None,
        steps_per_s: float | None,
        progress: tuple[int, int] | None,
        running: bool,
        end: str = "",
    ) -> str:
        counts = ", ".join(
            f"{name} {int(self._counts[i])}" for i, name in enumerate(PHASES) if self._counts[i]
        )
        state = "running" if running else end
        rows = [
            ("elapsed", seconds(elapsed) if elapsed is not None else "–"),
            ("steps", counts or "none yet"),
        ]
        if running:
            rows.append(("steps/s (last 3 s)", rate(steps_per_s)))
        recent = seconds(self._recent_ms / 1e3) if self._recent_ms else "–"
        rows.append(("step time (recent median)", recent))
        if running and elapsed is not None and self._last_end is not None:
            since = elapsed - self._last_end
            if since >= QUIET_NOTE:  # a long step, or work of the cell between steps
                rows.append(("last step ended", f"{seconds(since)} ago"))
        rows.append(("memory", self._memory(rec)))
        bar = ""
        if progress is not None and running:
            done, total = progress
            eta = "–"
            if steps_per_s and steps_per_s > 0:
                eta = seconds((total - done) / steps_per_s)
            rows.append(("fit", f"{done} / {total} training steps, ETA {eta}"))
            bar = (
                f'<div class="bar"><span style="width:{100 * done / max(total, 1):.1f}%">'
                "</span></div>"
            )
        table = "".join(f"<tr><td class='muted'>{k}</td><td>{escape(v)}</td></tr>" for k, v in rows)
        return (
            f"<b>tfdiag_magic</b> <span class='muted'>({escape(state)})</span>"
            f"<table>{table}</table>{bar}{self._sparkline()}"
        )

    @staticmethod
    def _memory(rec: Any) -> str:
        if rec is None:
            return "–"
        parts = []
        rss = getattr(rec, "mem_rss", None)
        if rss is not None and len(rss) and rss[-1] >= 0:
            parts.append(f"host RSS {size(rss[-1])}")
        for device, (current, _peak) in list(getattr(rec, "gpu_memory", {}).items()):
            if len(current) and current[-1] >= 0:
                parts.append(f"{device} {size(current[-1])}")
        return ", ".join(parts) or "–"

    def _sparkline(self) -> str:
        buckets = self._steps if self._steps.count() else self._loops
        if not buckets.lows:
            return ""
        lows = np.maximum(np.array(buckets.lows), 1e-7)
        highs = np.maximum(np.array(buckets.highs), lows)
        top, bottom = math.log10(highs.max()), math.log10(lows.min())
        span = max(top - bottom, 1e-9)

        def y(value: np.ndarray) -> np.ndarray:
            return 2 + (SPARK_HEIGHT - 4) * (top - np.log10(value)) / span

        step = SPARK_WIDTH / max(buckets.size, len(lows))
        xs = (np.arange(len(lows)) + 0.5) * step
        tops = y(highs)
        columns = np.column_stack([xs, tops, np.maximum(y(lows), tops + 1)]).tolist()
        path = " ".join([f"M{x:.1f} {y1:.1f}V{y2:.1f}" for x, y1, y2 in columns])
        label = f"step time, {seconds(float(lows.min()))} – {seconds(float(highs.max()))} (log)"
        return (
            f'<svg width="{SPARK_WIDTH}" height="{SPARK_HEIGHT}" role="img" '
            f'aria-label="{escape(label, quote=True)}">'
            f'<path d="{path}" stroke="#3b82f6" stroke-width="{max(step * 0.8, 1):.1f}" '
            'fill="none"/></svg>'
            f'<div class="muted">{escape(label)}, over {buckets.count()} steps</div>'
        )
