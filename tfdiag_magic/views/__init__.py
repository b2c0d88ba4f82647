"""Views: pure consumers of a Record and its findings (text, HTML, widgets). No probing here.

Importing the package installs the presenter results render with (`present.ResultPresenter`).
"""

from __future__ import annotations

from ..result import use_presenter
from .present import ResultPresenter

use_presenter(ResultPresenter())
