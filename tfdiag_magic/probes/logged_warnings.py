"""Warnings probe: what TensorFlow, Keras and Python's `warnings` emitted during the run.

The user still sees every warning as before: the probe passes each one on to the original
`warnings.showwarning`, and its logging handler sits beside the loggers' own handlers.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from ..record import Record
from ..recorder import Recorder

LOGGERS = ("tensorflow", "keras", "absl")


class _RecordingHandler(logging.Handler):
    def __init__(self, rec: Recorder) -> None:
        super().__init__(level=logging.WARNING)
        self._rec = rec

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        self._rec.add_warning(record.name, record.levelname, message)
        if not self._others_handle(record):
            # Without our handler, logging would have printed this through its last resort.
            last_resort = logging.lastResort
            if last_resort is not None and record.levelno >= last_resort.level:
                last_resort.handle(record)

    def _others_handle(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return True
            if not logger.propagate:
                return False
            logger = logger.parent  # type: ignore[assignment]
        return False


class WarningsProbe:
    name = "warnings"

    def __init__(self) -> None:
        self._original: Any = None
        self._handler: _RecordingHandler | None = None

    def install(self, recorder: Recorder) -> None:
        original = warnings.showwarning
        self._original = original

        def showwarning(message: Any, category: type, *args: Any, **kwargs: Any) -> Any:
            recorder.add_warning("warnings", getattr(category, "__name__", "Warning"), str(message))
            return original(message, category, *args, **kwargs)

        warnings.showwarning = showwarning
        self._installed = showwarning
        self._handler = _RecordingHandler(recorder)
        for name in LOGGERS:
            logging.getLogger(name).addHandler(self._handler)

    def remove(self) -> None:
        if self._original is not None:
            # Put the original back only if nothing replaced ours in the meantime.
            if warnings.showwarning is self._installed:
                warnings.showwarning = self._original
            self._original = None
        if self._handler is not None:
            for name in LOGGERS:
                logging.getLogger(name).removeHandler(self._handler)
            self._handler = None

    def finish(self, record: Record) -> None:
        """Nothing left to add: the warnings are in the recorder's."""
