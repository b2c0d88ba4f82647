"""The one way into NVML: a reference-counted session and one query function.

`nvml_open` starts NVML on the first holder and `nvml_close` shuts it down with the last, so the
profiling run's sampler, ``%tfgpu --watch`` and ``%tfgpu``'s facts can hold it at the same time
without one shutting it down under the others. `nvml_query` asks one question and answers
`default` where the driver cannot (an `NVMLError`: not supported, no permission, GPU lost) or
this nvidia-ml-py lacks the function, keeping NVML's reason when asked to; any other exception
is a bug and is raised. NVML missing (no driver, no library, no `nvidia-ml-py`) is a normal
state: `nvml_open` raises `NVMLUnavailableError` with the reason in words. Importing this module
does not import `pynvml`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

NO_SUCH_QUERY = "this nvidia-ml-py has no such query (upgrade it)"
NOT_INSTALLED = (
    "nvidia-ml-py is not installed, so the NVIDIA driver could not be asked "
    "(pip install nvidia-ml-py)"
)
# Why nvmlInit failed, in words a user can act on, by the NVMLError subclass name.
INIT_FAILURES = {
    "NVMLError_LibraryNotFound": (
        "no NVIDIA driver was found (the NVML library {library} is not installed or not on "
        "the library path; in a container, the GPU and its driver were not passed in)"
    ),
    "NVMLError_DriverNotLoaded": (
        "the NVIDIA driver is installed but not loaded (no NVIDIA GPU, or its kernel module "
        "failed to load)"
    ),
    "NVMLError_NoPermission": "this user may not use NVML (insufficient permissions)",
    "NVMLError_LibRmVersionMismatch": (
        "the NVIDIA driver was updated but the old kernel module is still loaded (reboot)"
    ),
}

_lock = threading.Lock()
_holders = 0


class NVMLUnavailableError(Exception):
    """NVML cannot start: `reason` in words, `error` in NVML's words (None without pynvml)."""

    def __init__(self, reason: str, error: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


def nvml_error_text(exc: BaseException) -> str:
    """NVML's own words for an error ("Not Supported", "Uninitialized", ...)."""
    try:
        text = str(exc)
    except Exception:  # NVMLError.__str__ asks NVML itself for unknown codes
        text = ""
    return text.strip() or type(exc).__name__


def init_failure_reason(exc: BaseException) -> str:
    """Why NVML could not start, in words (see `INIT_FAILURES`)."""
    library = "nvml.dll" if os.name == "nt" else "libnvidia-ml.so.1"
    template = INIT_FAILURES.get(type(exc).__name__)
    if template is not None:
        return template.format(library=library)
    return f"NVML could not start: {nvml_error_text(exc)}"


def nvml_errors() -> tuple[type[BaseException], ...]:
    try:
        import pynvml
    except ImportError:
        return ()
    return (pynvml.NVMLError,)


def nvml_query(
    func: Callable[..., Any] | str | None,
    *args: Any,
    default: Any = None,
    why: dict[str, str] | None = None,
    field: str | None = None,
) -> Any:
    """``func(*args)``; `default` when NVML cannot answer, with its reason in ``why[field]``.

    `func` is a pynvml function, or its name (a name this nvidia-ml-py lacks, or None, is a
    query NVML cannot answer).
    """
    if isinstance(func, str):
        import pynvml

        func = getattr(pynvml, func, None)
    if func is None:
        reason = NO_SUCH_QUERY
    else:
        try:
            return func(*args)
        except nvml_errors() as exc:
            reason = nvml_error_text(exc)
    if why is not None and field is not None:
        why[field] = reason
    return default


def nvml_open() -> Any:
    """Hold the process's NVML session (starting NVML for the first holder); returns `pynvml`.

    Raises `NVMLUnavailableError` when NVML cannot start. Every successful call needs one
    `nvml_close`.
    """
    global _holders
    try:
        import pynvml
    except ImportError:
        raise NVMLUnavailableError(NOT_INSTALLED) from None
    with _lock:
        if _holders == 0:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                raise NVMLUnavailableError(init_failure_reason(exc), nvml_error_text(exc)) from exc
        _holders += 1
    return pynvml


def nvml_close() -> None:
    """Let go of the session; the last holder shuts NVML down (which has nothing to report)."""
    global _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            import pynvml

            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def nvml_holders() -> int:
    """How many hold the session now (0: NVML is shut down)."""
    return _holders


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """`nvml_open` ... `nvml_close` around a block; yields `pynvml`."""
    nvml = nvml_open()
    try:
        yield nvml
    finally:
        nvml_close()


def device_handles(nvml: Any) -> list[tuple[int, Any]]:
    """(index, handle) of every GPU NVML lists and can open; [] when it cannot count them."""
    count = nvml_query(nvml.nvmlDeviceGetCount, default=0)
    found = [(index, nvml_query(nvml.nvmlDeviceGetHandleByIndex, index)) for index in range(count)]
    return [(index, handle) for index, handle in found if handle is not None]
