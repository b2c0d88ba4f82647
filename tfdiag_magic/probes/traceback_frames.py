"""Keeps the tool's own frames out of the stacks TensorFlow writes into its error messages.

TensorFlow leaves its own files out of two stacks it prints: the "in user code:" frames of an
error raised while a `tf.function` is converted (`traceback_utils.include_frame`), and the
"defined at (most recent call last):" frames of an op that failed when the graph ran (the
stack `tf_stack.extract_stack` keeps when the op is made, less the files of the thread's
filters, then `error_interpolation._is_framework_filename`). The tool's wrappers sit on those
stacks (the optimizer's `apply`, a `tf.function`'s call, the cell's runner), so without this
the user's error would name files the user never wrote. For the run, the tool's modules join
TensorFlow's own in those lists, and a filter of them goes on the run thread's stack of
filters; `remove` puts both back as they were.

The package's `examples` are code a user runs, not the tool's, and stay in the stacks. Never
raises: where TensorFlow's private lists are missing (another version), the stacks keep the
tool's frames.
"""

from __future__ import annotations

import os
from typing import Any

from ..record import Record
from ..recorder import Recorder
from .patching import Patcher

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tfdiag_magic/
_USER_FACING = frozenset({"examples"})  # the package's code a user runs as their own


def tool_files() -> tuple[str, ...]:
    """The tool's own source files, `examples` left out."""
    found = []
    for folder, subfolders, names in os.walk(PACKAGE_DIR):
        subfolders[:] = sorted(
            name
            for name in subfolders
            if not name.startswith("__") and not (folder == PACKAGE_DIR and name in _USER_FACING)
        )
        found.extend(os.path.join(folder, name) for name in sorted(names) if name.endswith(".py"))
    return tuple(found)


class TracebackFramesProbe:
    name = "traceback frames"

    def __init__(self, launcher_files: tuple[str, ...] = ()) -> None:
        self._launcher_files = launcher_files  # the command line's own (SessionOptions)
        self._patcher = Patcher()
        self._filter: tuple[list[Any], Any] | None = None

    def install(self, recorder: Recorder) -> None:
        del recorder
        try:
            from tensorflow.python.framework import error_interpolation
            from tensorflow.python.util import tf_stack, traceback_utils
        except ImportError:
            return
        ours = tool_files() + tuple(self._launcher_files)
        excluded: Any = getattr(traceback_utils, "_EXCLUDED_PATHS", None)
        if isinstance(excluded, tuple):
            self._patcher.replace(traceback_utils, "_EXCLUDED_PATHS", excluded + ours)
        prefixes: Any = getattr(error_interpolation, "_FRAMEWORK_PATH_PREFIXES", None)
        if isinstance(prefixes, list):
            self._patcher.replace(
                error_interpolation, "_FRAMEWORK_PATH_PREFIXES", [*prefixes, *ours]
            )
        self._filter = _filter_on_this_thread(tf_stack, frozenset(ours))

    def remove(self) -> None:
        self._patcher.restore()
        if self._filter is not None:
            stack, entry = self._filter
            self._filter = None
            if entry in stack:  # the run's own filters, if it left any, stay
                stack.remove(entry)

    def finish(self, record: Record) -> None:
        """Nothing to record: the probe changes what TensorFlow prints, not what it measures."""


def _filter_on_this_thread(tf_stack: Any, files: frozenset[str]) -> tuple[list[Any], Any] | None:
    """Put a filter of `files` on top of this thread's stack of the filters TensorFlow applies
    when it records where an op was created (the "defined at" frames); returns the stack and
    the filter, or None where TensorFlow has no such stack."""
    try:
        stacks = tf_stack._source_filter_stacks
        base = tf_stack.StackTraceFilter

        class ToolFrames(base):  # type: ignore[misc, valid-type]
            def get_filtered_filenames(self) -> frozenset[str]:
                return files | self.parent.get_filtered_filenames()

        stack = stacks[tf_stack._get_thread_key()]
        entry = ToolFrames()
        entry.parent = stack[-1]
        entry.update()
        stack.append(entry)
        return stack, entry
    except Exception:  # another TensorFlow: its stacks keep the tool's frames
        return None
