"""Where the CUDA libraries a CUDA build of TensorFlow loads could come from, on Linux.

A CUDA build of TensorFlow that registers no GPU most often could not load ``libcudart`` or
``libcudnn``. This module looks for the versions the build names (``tf.sysconfig`` CUDA and
cuDNN versions) in the places the loader and TensorFlow's wheel look: the ``nvidia/*/lib``
folders that ``tensorflow[and-cuda]`` installs, ``LD_LIBRARY_PATH``, the folders listed in
``/etc/ld.so.conf.d`` and the usual system folders. It only checks files; it loads nothing.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Any

SYSTEM_DIRS = (
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/sbsa-linux/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/lib",
)


def wanted_libraries(cuda_version: str | None, cudnn_version: str | None) -> list[str]:
    """The sonames a build needs, from its CUDA and cuDNN versions ("12.5.1", "9")."""
    wanted = []
    cuda_major = _major(cuda_version)
    if cuda_major is not None:
        wanted += [f"libcudart.so.{cuda_major}", f"libcublas.so.{cuda_major}"]
    cudnn_major = _major(cudnn_version)
    if cudnn_major is not None:
        wanted.append(f"libcudnn.so.{cudnn_major}")
    return wanted


def _major(version: str | None) -> int | None:
    if not version:
        return None
    head = str(version).split(".", 1)[0]
    return int(head) if head.isdigit() else None


def search_dirs() -> list[str]:
    """Folders searched, in order, without duplicates."""
    dirs: list[str] = []
    for entry in sys.path:
        dirs += sorted(glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib")))
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for conf in sorted(glob.glob("/etc/ld.so.conf.d/*.conf")):
        try:
            lines = Path(conf).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        dirs += [line.strip() for line in lines if line.strip().startswith("/")]
    dirs += SYSTEM_DIRS
    seen: set[str] = set()
    unique = []
    for d in dirs:
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            unique.append(d)
    return unique


def find_cuda_libraries(cuda_version: str | None, cudnn_version: str | None) -> dict[str, Any]:
    """{"libraries": {soname: path or None}, "missing": [...], "searched": [...]} on Linux."""
    if not sys.platform.startswith("linux"):
        return {"checked": False, "reason": "checked on Linux only", "libraries": {}}
    wanted = wanted_libraries(cuda_version, cudnn_version)
    dirs = search_dirs()
    found: dict[str, str | None] = {}
    for soname in wanted:
        found[soname] = next(
            (os.path.join(d, soname) for d in dirs if os.path.exists(os.path.join(d, soname))),
            None,
        )
    return {
        "checked": True,
        "libraries": found,
        "missing": [name for name, path in found.items() if path is None],
        "searched": dirs,
    }
