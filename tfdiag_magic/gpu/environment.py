"""The environment variables and platform facts that decide whether TensorFlow can use a GPU."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_XLA_FLAGS",
    "LD_LIBRARY_PATH",
)


def environment_facts() -> dict[str, str | None]:
    """The value of each variable in `ENV_VARS`, None when unset."""
    return {name: os.environ.get(name) for name in ENV_VARS}


def platform_facts() -> dict[str, Any]:
    return {
        "system": platform.system(),
        "sys_platform": sys.platform,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "wsl": "microsoft" in platform.release().lower(),
    }
