"""Why TensorFlow sees no GPU: the reasons `gpu-not-used` and `no-gpu` give, likeliest first.

Each reason is ``{"code", "reason", "detail", "fix"}``: ``reason`` a short phrase for the
verdict ("this is the CPU-only build (tensorflow-cpu)"), ``detail`` the explanation, ``fix``
what to do. Pure functions of the GPU doctor's fact dict.
"""

from __future__ import annotations

import re
from typing import Any

from ..gpu_facts import cc_text, device_label, version_tuple

Facts = dict[str, Any]


def cuda_visible_devices_hides_all(value: str | None, devices: list[dict[str, Any]]) -> bool:
    """Whether CUDA_VISIBLE_DEVICES leaves CUDA no GPU at all.

    CUDA reads the list up to its first invalid entry, so the first entry decides: empty, a
    negative index, an index past the GPUs NVML counts, a UUID no GPU has, or a word such as
    "NoDevFiles" (set by some schedulers) all hide every GPU.
    """
    if value is None:
        return False
    first = value.split(",")[0].strip()
    if first == "" or first.startswith("-"):
        return True
    if first.isdigit():
        return bool(devices) and int(first) >= len(devices)
    if first.upper().startswith(("GPU-", "MIG-")):
        uuids = [str(d.get("uuid") or "") for d in devices]
        if not any(uuids):
            return False  # no UUIDs to compare with: cannot tell
        return not any(uuid.upper().startswith(first.upper()) for uuid in uuids)
    return True


def _build_minimum_capability(tf: dict[str, Any]) -> tuple[int, int] | None:
    """The oldest compute capability a CUDA build has kernels for ("sm_60" -> (6, 0))."""
    found = []
    for entry in tf.get("cuda_compute_capabilities") or []:
        match = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)", str(entry))
        if match:
            found.append((int(match.group(1)), int(match.group(2))))
    return min(found) if found else None


def _reason(code: str, reason: str, detail: str, fix: str) -> dict[str, str]:
    return {"code": code, "reason": reason, "detail": detail, "fix": fix}


def no_gpu_reasons(facts: Facts) -> list[dict[str, str]]:
    """Why TensorFlow sees no GPU: each ``{"code", "reason", "detail", "fix"}``, likeliest first.

    ``reason`` is a short phrase for the verdict ("this is the CPU-only build
    (tensorflow-cpu)"), ``detail`` the explanation, ``fix`` what to do.
    """
    tf, nvml, env = (facts.get(k) or {} for k in ("tensorflow", "nvml", "env"))
    plat = facts.get("platform") or {}
    system = plat.get("system")
    devices = list(nvml.get("devices") or []) if nvml.get("available") else []
    reasons: list[dict[str, str]] = []
    tf_version = version_tuple(tf.get("version")) or (0,)
    distributions = sorted(tf.get("distributions") or {}) or ["tensorflow"]
    built_cuda = bool(tf.get("built_with_cuda"))
    built_rocm = bool(tf.get("built_with_rocm"))

    if system == "Windows" and tf_version >= (2, 11):
        reasons.append(
            _reason(
                "native-windows",
                f"TensorFlow {tf.get('version')} has no GPU support on native Windows",
                "TensorFlow 2.10 was the last release to support GPUs on native Windows.",
                "Run TensorFlow in WSL2 (Ubuntu) with pip install 'tensorflow[and-cuda]'; the "
                "Windows NVIDIA driver provides the GPU inside WSL2. Or use tensorflow 2.10.",
            )
        )
    elif system == "Darwin":
        if "tensorflow-metal" not in (tf.get("plugins") or {}):
            reasons.append(
                _reason(
                    "macos-needs-metal",
                    "on macOS the GPU needs the tensorflow-metal plugin, which is not installed",
                    "TensorFlow for macOS runs on the CPU unless the Metal plugin registers "
                    "the Apple GPU.",
                    "pip install tensorflow-metal (a version matching TensorFlow "
                    f"{tf.get('version')}), then restart the kernel.",
                )
            )
        else:
            reasons.append(
                _reason(
                    "metal-registered-no-gpu",
                    "tensorflow-metal is installed but registered no GPU",
                    "The plugin is usually built for one TensorFlow minor version; with "
                    "another it fails to load.",
                    "Install the tensorflow and tensorflow-metal versions that Apple lists as "
                    "compatible, then restart the kernel.",
                )
            )
    elif not built_cuda and not built_rocm:
        names = ", ".join(distributions)
        reasons.append(
            _reason(
                "cpu-only-build",
                f"this is the CPU-only build ({names})",
                f"The installed TensorFlow ({names} {tf.get('version')}) was built without "
                "CUDA (tf.test.is_built_with_cuda() is False), so it never looks for a GPU.",
                f"pip uninstall -y {' '.join(distributions)} && pip install "
                "'tensorflow[and-cuda]' (Linux; it brings the CUDA and cuDNN libraries), then "
                "restart the kernel.",
            )
        )

    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cuda_visible_devices_hides_all(cvd, devices):
        reasons.append(
            _reason(
                "cuda-visible-devices",
                f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU",
                "CUDA reads CUDA_VISIBLE_DEVICES once, when the process first uses it (for "
                "TensorFlow: its first device listing); with this value no GPU is left.",
                "Unset CUDA_VISIBLE_DEVICES (or set it to the GPU's index, e.g. 0) in the "
                "environment that starts Jupyter, or in the first cell before importing "
                "TensorFlow (os.environ['CUDA_VISIBLE_DEVICES'] = '0'); then restart the kernel.",
            )
        )

    hidden = [g for g in tf.get("gpus") or [] if not g.get("visible", True)]
    if hidden:
        reasons.append(
            _reason(
                "hidden-by-set-visible-devices",
                f"tf.config.set_visible_devices hid {len(hidden)} GPU(s)",
                "TensorFlow lists the GPU but this process made it invisible.",
                "Remove the tf.config.set_visible_devices(...) call (or include the GPU in "
                "it) and restart the kernel.",
            )
        )

    if system != "Darwin" and not built_rocm:
        if not nvml.get("available"):
            reason = nvml.get("reason") or "NVML is not available"
            short = (
                "no NVIDIA driver was found"
                if "no NVIDIA driver was found" in reason
                else reason.split(" (")[0]
            )
            reasons.append(
                _reason(
                    "no-driver",
                    short,
                    f"NVML: {reason}.",
                    "Use a machine with an NVIDIA GPU and install its driver (nvidia-smi must "
                    "work); in Docker, start the container with --gpus all (NVIDIA Container "
                    "Toolkit); on a cloud notebook, choose a GPU runtime.",
                )
            )
        elif not devices:
            reasons.append(
                _reason(
                    "no-gpu-in-machine",
                    "the NVIDIA driver sees no GPU",
                    nvml.get("reason") or "NVML lists no device.",
                    "Check nvidia-smi; in a container or VM, pass the GPU through to it.",
                )
            )

    if built_cuda and devices:
        driver = version_tuple(nvml.get("cuda_driver_version"))
        build = version_tuple(tf.get("cuda_version"))
        if driver and build and driver[0] < build[0]:
            reasons.append(
                _reason(
                    "driver-too-old",
                    f"the NVIDIA driver supports CUDA {nvml.get('cuda_driver_version')} but "
                    f"this TensorFlow needs CUDA {tf.get('cuda_version')}",
                    f"Driver {nvml.get('driver_version')} is older than the CUDA major version "
                    "TensorFlow was built with; CUDA cannot start on it.",
                    f"Update the NVIDIA driver to one for CUDA {build[0]}.x or newer "
                    "(nvidia-smi shows the CUDA version a driver supports), or install a "
                    "TensorFlow built for the older CUDA.",
                )
            )
        minimum = _build_minimum_capability(tf)
        too_old = [
            d
            for d in devices
            if minimum and d.get("compute_capability") and tuple(d["compute_capability"]) < minimum
        ]
        if too_old:
            names = ", ".join(
                f"{device_label(d)} has compute capability {cc_text(d['compute_capability'])}"
                for d in too_old
            )
            reasons.append(
                _reason(
                    "gpu-too-old",
                    f"the GPU is older than this build supports ({names})",
                    f"This TensorFlow has kernels for compute capability {minimum[0]}."
                    f"{minimum[1]} and newer, and ignores older GPUs.",
                    "Use a newer GPU, or an older TensorFlow release that still supports it.",
                )
            )
        libraries = facts.get("cuda_libraries") or {}
        missing = list(libraries.get("missing") or [])
        log = [line for line in tf.get("device_listing_log") or [] if "dlopen" in line]
        if missing or log:
            what = ", ".join(missing) if missing else "see TensorFlow's log line"
            reasons.append(
                _reason(
                    "cuda-libraries-missing",
                    f"TensorFlow could not load its CUDA libraries ({what})",
                    (log[0] if log else "Not found in the folders the loader searches: ")
                    + ("" if log else ", ".join(libraries.get("searched") or [])),
                    f"pip install 'tensorflow[and-cuda]=={tf.get('version')}' installs matching "
                    "CUDA and cuDNN libraries as pip packages next to TensorFlow; or add the "
                    "folders that hold them to LD_LIBRARY_PATH before Python starts. Then "
                    "restart the kernel.",
                )
            )
        if not reasons:
            level = str(env.get("TF_CPP_MIN_LOG_LEVEL") or "0")
            hidden_log = (
                f" TF_CPP_MIN_LOG_LEVEL={level} hides TensorFlow's own warning about it."
                if level.isdigit() and int(level) >= 2
                else ""
            )
            reasons.append(
                _reason(
                    "unexplained",
                    f"TensorFlow registered none of the {len(devices)} GPU(s) NVML sees, for a "
                    "reason not visible from here",
                    "The build, the driver and the libraries look right." + hidden_log,
                    "In a fresh kernel, set os.environ['TF_CPP_MIN_LOG_LEVEL'] = '0' before "
                    "importing TensorFlow, run tf.config.list_physical_devices('GPU') and read "
                    "the lines TensorFlow prints about the GPU.",
                )
            )
    return reasons


def gpu_presence(facts: Facts) -> str | None:
    """Evidence that this machine has a GPU TensorFlow could use, in words; None if none."""
    nvml = facts.get("nvml") or {}
    devices = list(nvml.get("devices") or []) if nvml.get("available", True) else []
    if devices:
        return f"NVML sees {len(devices)} GPU(s): {', '.join(device_label(d) for d in devices)}"
    plat = facts.get("platform") or {}
    if plat.get("system") == "Darwin" and plat.get("machine") == "arm64":
        return "this Mac has an Apple GPU"
    return None
