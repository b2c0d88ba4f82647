"""How a `ProfileResult` shows itself: the text and HTML reports with the profiler's problems
in them, and in a Jupyter kernel with widgets on, the dashboard. `tfdiag_magic.views` installs
this presenter into `result` when imported, so results render without `result` importing views.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..result import ProfileResult

PROBLEMS_TITLE = "Profiler problems (the rest of the report holds)"


class ResultPresenter:
    """The views' `result.Presenter`."""

    def text(self, result: ProfileResult) -> str:
        from .text import render_text

        return with_problems_text(render_text(result.report()), result.problems)

    def html(self, result: ProfileResult, full_page: bool) -> str:
        from .html import render_html

        html = render_html(result.report(), result.finished_record(), full_page=full_page)
        return with_problems_html(html, result.problems)

    def bundle(self, result: ProfileResult) -> dict[str, Any] | None:
        """The dashboard's display bundle in a Jupyter kernel with widgets on; None elsewhere
        (and when widgets cannot be built here), so IPython shows the static views."""
        try:
            from IPython import get_ipython

            from ..config import settings_of
            from .dashboard import dashboard_bundle, in_kernel

            shell = get_ipython()
            if shell is None or not in_kernel(shell) or not settings_of(shell).widgets:
                return None
            data, _dashboard = dashboard_bundle(result)
            return data
        except Exception:  # no widgets here: the static views show instead
            return None


def with_problems_text(text: str, problems: list[str]) -> str:
    """The text report with a line per stage of the profiler that failed, at its end."""
    if not problems:
        return text
    lines = "\n".join(f"  {problem}" for problem in problems)
    return f"{text.rstrip()}\n\n{PROBLEMS_TITLE}:\n{lines}\n"


def with_problems_html(html: str, problems: list[str]) -> str:
    """The HTML report with a line per stage of the profiler that failed, under its title."""
    if not problems:
        return html
    items = "".join(f"<li>{escape(problem)}</li>" for problem in problems)
    block = (
        f'<div class="tfdiag-problems"><p class="err">{PROBLEMS_TITLE}:</p><ul>{items}</ul></div>'
    )
    marker = '<div class="tfdiag">'
    if marker in html:
        return html.replace(marker, marker + block, 1)
    return block + html
