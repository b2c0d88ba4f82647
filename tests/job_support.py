"""The job scripts of the multi-worker tests: the guide's custom loop is the workshop's own
(`notebooks/jobs/worker_ctl.py`); Keras' fit under the strategy is the tests' (`tests/jobs`)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CUSTOM_LOOP = REPO / "notebooks" / "jobs" / "worker_ctl.py"
KERAS_FIT = REPO / "tests" / "jobs" / "worker_fit.py"
