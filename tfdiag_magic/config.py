"""The extension's settings, an IPython Configurable: ``%config TFProfile.widgets = False``.

`load_ext` registers one `TFProfile` instance with the shell, so ``%config`` and IPython's
profile configuration (``c.TFProfile.widgets = False``) reach it like any of IPython's own.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Float
from traitlets.config import Configurable


class TFProfile(Configurable):
    """How ``%%tfprofile`` shows its report in a notebook."""

    widgets = Bool(
        True,
        help="Show the interactive dashboard (ipywidgets) in notebooks; when False, or outside "
        "a Jupyter kernel, the static HTML and text report is shown instead.",
    ).tag(config=True)
    live = Bool(
        True,
        help="Show a live view (steps, steps/s, step time, memory, ETA) while the cell runs. "
        "Needs widgets.",
    ).tag(config=True)
    live_interval = Float(
        0.5,
        min=0.05,
        help="Seconds between two updates of the live view (at most; updates come with steps).",
    ).tag(config=True)


def register(shell: Any) -> TFProfile:
    """The shell's `TFProfile` settings, created and registered on first use."""
    for configurable in getattr(shell, "configurables", []):
        if type(configurable).__name__ == TFProfile.__name__:
            return configurable  # type: ignore[return-value]
    settings = TFProfile(parent=shell)
    shell.configurables.append(settings)
    return settings


def settings_of(shell: Any) -> TFProfile:
    """The settings registered with `shell`, or the defaults when there are none."""
    for configurable in getattr(shell, "configurables", []):
        if type(configurable).__name__ == TFProfile.__name__:
            return configurable  # type: ignore[return-value]
    return TFProfile()


def in_kernel(shell: Any) -> bool:
    """Whether `shell` is a Jupyter kernel's, whose frontend can show HTML and widgets."""
    return getattr(shell, "kernel", None) is not None
