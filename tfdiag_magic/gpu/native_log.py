"""Keeps what TensorFlow's C++ runtime writes to stderr while it first looks for GPUs.

TensorFlow explains a GPU it skipped ("Cannot dlopen some GPU libraries", "failed call to
cuInit") only once, from C++, straight to file descriptor 2, during the first device listing
of the process. `capture_native_stderr` points descriptor 2 at a temporary file for that call,
puts it back, and writes what it caught to the real stderr too, so the user loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# Lines worth keeping as evidence of why TensorFlow registered no GPU.
GPU_LOG_PATTERN = re.compile(
    r"Cannot dlopen|Could not load dynamic library|Could not find cuda drivers|cuInit|"
    r"CUDA_ERROR|Skipping registering GPU devices|driver version|libcud|libnv|cuDNN|"
    r"compute capability|TensorFlow was not built with CUDA",
    re.IGNORECASE,
)
MAX_KEPT_LINES = 40


class CapturedText:
    """What was written to descriptor 2 inside the block (filled when the block ends)."""

    text: str = ""

    def gpu_lines(self) -> list[str]:
        lines = [line.strip() for line in self.text.splitlines()]
        return [line for line in lines if line and GPU_LOG_PATTERN.search(line)][:MAX_KEPT_LINES]


@contextlib.contextmanager
def capture_native_stderr(echo: bool = True) -> Iterator[CapturedText]:
    """Capture file descriptor 2 (C and C++ writes included) for the duration of the block."""
    captured = CapturedText()
    with contextlib.suppress(AttributeError, ValueError, OSError):
        sys.stderr.flush()  # Python's own buffered writes belong before the switch
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", errors="replace")
            if echo and captured.text:
                os.write(2, captured.text.encode("utf-8", errors="replace"))
