"""The GPU doctor's diagnosis: a verdict and problems with fixes, from the fact dicts alone.

Pure functions of the facts that `facts.collect_facts` (or ``session_facts``) returns, so they
are tested on recorded facts of machines this code never ran on. Each problem is a dict:
``{"code", "severity" ("error" | "warning" | "info"), "title", "message", "fix", "evidence"}``.
The codes ``gpu-not-used``, ``memory-growth-disabled`` and ``mixed-precision-available`` are
the ones ``%%tfprofile``'s findings catalogue reads.
"""

from __future__ import annotations

import re
from typing import Any

Facts = dict[str, Any]
Problem = dict[str, Any]

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
GIB = 1024**3

MEMORY_GROWTH_CELL = """\
import tensorflow as tf
for gpu in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(gpu, True)"""

# Clock-event reasons that mean the GPU is slowed against its will, with what to look at.
THROTTLE_CAUSES = {
    "sw_thermal_slowdown": "too hot (driver thermal limit)",
    "hw_thermal_slowdown": "too hot (hardware thermal protection)",
    "hw_slowdown": "hardware slowdown (temperature or power supply)",
    "hw_power_brake_slowdown": "power brake asserted by the board's power supply",
}


def problem(
    code: str,
    severity: str,
    title: str,
    message: str,
    fix: str,
    evidence: dict[str, Any],
) -> Problem:
    return {
        "code": code,
        "severity": severity,
        "title": title,
        "message": message,
        "fix": fix,
        "evidence": evidence,
    }


# -- reading the facts -----------------------------------------------------------------------


def _tf(facts: Facts) -> dict[str, Any]:
    return facts.get("tensorflow") or {}


def _nvml(facts: Facts) -> dict[str, Any]:
    return facts.get("nvml") or {}


def _env(facts: Facts) -> dict[str, Any]:
    return facts.get("env") or {}


def visible_tf_gpus(facts: Facts) -> list[dict[str, Any]]:
    return [g for g in _tf(facts).get("gpus") or [] if g.get("visible", True)]


def nvml_devices(facts: Facts) -> list[dict[str, Any]]:
    nvml = _nvml(facts)
    return list(nvml.get("devices") or []) if nvml.get("available") else []


def version_tuple(text: Any) -> tuple[int, ...] | None:
    """ "12.5.1" -> (12, 5, 1); "2.21.0-rc1" -> (2, 21, 0); None when there is no number."""
    if text is None:
        return None
    numbers = re.findall(r"\d+", str(text).split("-")[0].split("+")[0])
    return tuple(int(n) for n in numbers[:3]) if numbers else None


def _cc_text(capability: Any) -> str | None:
    if not capability:
        return None
    return f"{capability[0]}.{capability[1]}"


def gib(value: int | float | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


def _growth_forced(facts: Facts) -> bool:
    return str(_env(facts).get("TF_FORCE_GPU_ALLOW_GROWTH") or "").strip().lower() == "true"


def gpu_capability(facts: Facts, gpu: dict[str, Any]) -> tuple[int, int] | None:
    """A TensorFlow GPU's compute capability, from TensorFlow or else NVML by name."""
    capability = gpu.get("compute_capability")
    if not capability:
        named = [d for d in nvml_devices(facts) if d.get("name") == gpu.get("device_name")]
        capability = named[0].get("compute_capability") if named else None
    return (int(capability[0]), int(capability[1])) if capability else None


def gpu_memory_total(facts: Facts, gpu: dict[str, Any]) -> int | None:
    """NVML's total memory for a TensorFlow GPU, matched by name (None when ambiguous)."""
    totals = {
        d.get("memory_total")
        for d in nvml_devices(facts)
        if d.get("name") and d.get("name") == gpu.get("device_name")
    }
    totals.discard(None)
    return totals.pop() if len(totals) == 1 else None


def _label(gpu: dict[str, Any]) -> str:
    short = str(gpu.get("name", "GPU")).replace("/physical_device:", "")
    return f"{short} ({gpu['device_name']})" if gpu.get("device_name") else short


def _nvml_label(device: dict[str, Any]) -> str:
    name = device.get("name") or "name not available"
    return f"GPU {device.get('index')} ({name})"


# -- why TensorFlow sees no GPU --------------------------------------------------------------


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
    tf, nvml, env = _tf(facts), _nvml(facts), _env(facts)
    plat = facts.get("platform") or {}
    system = plat.get("system")
    devices = nvml_devices(facts)
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
                f"{_nvml_label(d)} has compute capability {_cc_text(d['compute_capability'])}"
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
            level = str(_env(facts).get("TF_CPP_MIN_LOG_LEVEL") or "0")
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


def join_reasons(phrases: list[str]) -> str:
    if len(phrases) <= 1:
        return "".join(phrases)
    if len(phrases) == 2:
        return f"{phrases[0]}, and {phrases[1]}"
    return "; ".join(phrases[:-1]) + f"; and {phrases[-1]}"


def _gpu_presence(facts: Facts) -> str | None:
    """Evidence that this machine has a GPU TensorFlow could use, in words; None if none."""
    devices = nvml_devices(facts)
    if devices:
        names = ", ".join(_nvml_label(d) for d in devices)
        return f"NVML sees {len(devices)} GPU(s): {names}"
    plat = facts.get("platform") or {}
    if plat.get("system") == "Darwin" and plat.get("machine") == "arm64":
        return "this Mac has an Apple GPU"
    return None


def _no_gpu_problem(facts: Facts) -> list[Problem]:
    reasons = no_gpu_reasons(facts)
    presence = _gpu_presence(facts)
    fixes = "\n".join(f"- {r['fix']}" for r in reasons)
    evidence = {
        "tensorflow_gpus": 0,
        "nvml_gpus": len(nvml_devices(facts)),
        "reasons": [r["code"] for r in reasons],
    }
    because = join_reasons([r["reason"] for r in reasons]) or "no reason found"
    if presence:
        return [
            problem(
                "gpu-not-used",
                "error",
                "TensorFlow cannot use the GPU",
                f"TensorFlow sees no GPU although {presence}: {because}.",
                fixes,
                evidence,
            )
        ]
    return [
        problem(
            "no-gpu",
            "info",
            "No GPU",
            f"No GPU is visible to TensorFlow: {because}. Training runs on the CPU.",
            fixes,
            evidence,
        )
    ]


# -- problems with GPUs TensorFlow does see --------------------------------------------------


def _driver_older_than_build(facts: Facts) -> list[Problem]:
    tf, nvml = _tf(facts), _nvml(facts)
    driver = version_tuple(nvml.get("cuda_driver_version"))
    build = version_tuple(tf.get("cuda_version"))
    if not (tf.get("built_with_cuda") and driver and build) or driver[:2] >= build[:2]:
        return []
    if driver[0] < build[0] and not visible_tf_gpus(facts):
        return []  # already the reason given by gpu-not-used
    evidence = {
        "driver_version": nvml.get("driver_version"),
        "driver_cuda_version": nvml.get("cuda_driver_version"),
        "build_cuda_version": tf.get("cuda_version"),
    }
    fix = (
        f"Update the NVIDIA driver to one that supports CUDA {build[0]}.{build[1]} or newer "
        "(nvidia-smi shows the CUDA version a driver supports)."
    )
    if driver[0] < build[0]:
        message = (
            f"The driver supports CUDA {nvml.get('cuda_driver_version')}, older than the CUDA "
            f"{tf.get('cuda_version')} this TensorFlow was built with."
        )
        return [
            problem("driver-older-than-build", "error", "Driver too old", message, fix, evidence)
        ]
    message = (
        f"The driver supports CUDA {nvml.get('cuda_driver_version')} and this TensorFlow was "
        f"built with CUDA {tf.get('cuda_version')}. CUDA's minor-version compatibility lets it "
        "run, but kernels that must be compiled from PTX at run time need a driver at least as "
        "new as the build (they fail with CUDA_ERROR_UNSUPPORTED_PTX_VERSION)."
    )
    return [
        problem(
            "driver-older-than-build",
            "warning",
            "Driver older than the build",
            message,
            fix,
            evidence,
        )
    ]


def _several_builds(facts: Facts) -> list[Problem]:
    distributions = _tf(facts).get("distributions") or {}
    if len(distributions) < 2:
        return []
    listed = ", ".join(f"{name} {version}" for name, version in sorted(distributions.items()))
    return [
        problem(
            "several-tensorflow-builds",
            "warning",
            "Several TensorFlow builds installed",
            f"{listed} are installed together. They all install the same `tensorflow` module, "
            "so the files of whichever was installed last overwrote the others: the build that "
            "runs may not be the one you chose.",
            f"pip uninstall -y {' '.join(sorted(distributions))}, then install exactly one "
            "(e.g. pip install 'tensorflow[and-cuda]') and restart the kernel.",
            {"distributions": distributions},
        )
    ]


def _memory_growth(facts: Facts) -> list[Problem]:
    gpus = visible_tf_gpus(facts)
    off = [g for g in gpus if g.get("memory_growth") is not True]
    if not off or _growth_forced(facts):
        return []
    initialized = bool(_tf(facts).get("initialized"))
    labels = ", ".join(
        _label(g) + (f", {gib(gpu_memory_total(facts, g))}" if gpu_memory_total(facts, g) else "")
        for g in off
    )
    allocator = _env(facts).get("TF_GPU_ALLOCATOR")
    when = (
        "TensorFlow has reserved" if initialized else "when its runtime starts, TensorFlow reserves"
    )
    message = (
        f"Memory growth is off on {labels}: {when} almost all of the GPU's memory, "
        "so no other process (a second notebook, another framework) can use it, and the "
        "memory in use says nothing about what the model needs."
    )
    if allocator:
        message += f" TF_GPU_ALLOCATOR={allocator} is set: that allocator decides the reservation."
    if initialized:
        fix = (
            "The runtime is already initialised, so this can no longer change in this kernel. "
            "Restart the kernel and run this cell first:\n"
            + MEMORY_GROWTH_CELL
            + "\n(or set TF_FORCE_GPU_ALLOW_GROWTH=true in the environment that starts Jupyter)"
        )
    else:
        fix = (
            "Run %tfgpu --memory-growth now (the runtime is not initialised yet), or put this "
            "cell first in the notebook:\n" + MEMORY_GROWTH_CELL
        )
    return [
        problem(
            "memory-growth-disabled",
            "warning",
            "Memory growth is off",
            message,
            fix,
            {
                "gpus": [g.get("name") for g in off],
                "initialized": initialized,
                "TF_FORCE_GPU_ALLOW_GROWTH": _env(facts).get("TF_FORCE_GPU_ALLOW_GROWTH"),
                "TF_GPU_ALLOCATOR": allocator,
            },
        )
    ]


def _mixed_precision(facts: Facts) -> list[Problem]:
    policy = _tf(facts).get("mixed_precision_policy")
    gpus = visible_tf_gpus(facts)
    capabilities = {g.get("name"): gpu_capability(facts, g) for g in gpus}
    tensor_cores = {name: cc for name, cc in capabilities.items() if cc and cc >= (7, 0)}
    evidence = {
        "policy": policy,
        "compute_capabilities": {k: list(v) if v else None for k, v in capabilities.items()},
    }
    if (policy is None or policy == "float32") and tensor_cores:
        oldest = min(tensor_cores.values())  # advice that holds for every GPU in use
        shown = "the default float32" if policy is None else "float32"
        names = ", ".join(
            f"{g.get('name', 'GPU').replace('/physical_device:', '')} ("
            + (f"{g['device_name']}, " if g.get("device_name") else "")
            + f"compute capability {_cc_text(tensor_cores[g.get('name')])})"
            for g in gpus
            if g.get("name") in tensor_cores
        )
        if oldest >= (8, 0):
            why = (
                "float32 matrix multiplications already use TensorFloat-32 on these Tensor "
                "Cores; bfloat16 compute halves activation memory and uses the faster 16-bit "
                "Tensor Core paths, without loss scaling."
            )
            fix_policy = "mixed_bfloat16"
        else:
            why = (
                "in float32 these GPUs do not use their Tensor Cores at all; float16 compute "
                "does (Keras adds loss scaling for it in fit())."
            )
            fix_policy = "mixed_float16"
        return [
            problem(
                "mixed-precision-available",
                "info",
                "Mixed precision would use the Tensor Cores",
                f"{names} has Tensor Cores and the Keras dtype policy is {shown}: {why}",
                f'keras.mixed_precision.set_global_policy("{fix_policy}") before building the '
                "model; keep the model's last layer in float32 (e.g. "
                "layers.Activation('softmax', dtype='float32')) for numerically stable outputs.",
                evidence,
            )
        ]
    if policy == "mixed_float16" and not tensor_cores:
        if gpus:
            where = ", ".join(
                f"{_label(g)} (compute capability {_cc_text(capabilities[g.get('name')]) or '?'})"
                for g in gpus
            )
            message = (
                f"The Keras policy is mixed_float16 but {where} has no Tensor Cores (compute "
                "capability below 7.0): float16 compute is rarely faster there and adds casts."
            )
        else:
            message = (
                "The Keras policy is mixed_float16 but TensorFlow runs on the CPU, where float16 "
                "arithmetic has no fast path and is usually much slower than float32."
            )
        return [
            problem(
                "mixed-precision-without-tensor-cores",
                "warning",
                "Mixed precision without Tensor Cores",
                message,
                'keras.mixed_precision.set_global_policy("float32") (or remove the '
                "set_global_policy call) before building the model.",
                evidence,
            )
        ]
    return []


# -- problems NVML sees ----------------------------------------------------------------------


def _pcie(facts: Facts) -> list[Problem]:
    found = []
    for device in nvml_devices(facts):
        width, width_max = device.get("pcie_width"), device.get("pcie_width_max")
        gen, gen_max = device.get("pcie_gen"), device.get("pcie_gen_max")
        narrow = bool(width and width_max and width < width_max)
        slow = bool(gen and gen_max and gen < gen_max)
        busy = (device.get("utilization_gpu") or 0) > 0
        # GPUs lower the link generation while idle to save power: only a busy GPU's counts.
        if not (narrow or (slow and busy)):
            continue
        parts = []
        if narrow:
            parts.append(f"x{width} of x{width_max} lanes")
        if slow:
            parts.append(f"generation {gen} of {gen_max}")
        fixes = []
        if narrow:
            fixes.append(
                "Put the GPU in a full x16 slot: check the board's manual for slots that share "
                "lanes (a x16 slot drops to x8 when its neighbour is used) and avoid x1/x8 risers"
            )
        if slow:
            fixes.append(
                "check the slot's PCIe generation and the BIOS PCIe speed setting (Auto / "
                f"Gen{gen_max}), and the riser cable if there is one"
            )
        found.append(
            problem(
                "pcie-link-degraded",
                "warning",
                f"GPU {device.get('index')}'s PCIe link runs below its maximum",
                f"The PCIe link of {_nvml_label(device)} runs at {' and '.join(parts)}"
                + (" while busy" if slow and busy else "")
                + ": copies between host and GPU (the input pipeline's batches) are slower by "
                "the same factor.",
                "; ".join(fixes) + ".",
                {
                    "gpu": device.get("index"),
                    "pcie_width": width,
                    "pcie_width_max": width_max,
                    "pcie_gen": gen,
                    "pcie_gen_max": gen_max,
                    "utilization_gpu": device.get("utilization_gpu"),
                },
            )
        )
    return found


def _other_processes(facts: Facts) -> list[Problem]:
    found = []
    for device in nvml_devices(facts):
        others = [p for p in device.get("processes") or [] if not p.get("is_self")]
        if not others:
            continue
        described = ", ".join(
            f"{p.get('name') or 'unknown process'} (pid {p.get('pid')}"
            + (f", {gib(p['memory_used'])}" if p.get("memory_used") is not None else "")
            + ")"
            for p in others
        )
        held = sum(p.get("memory_used") or 0 for p in others)
        total = device.get("memory_total")
        share = f" ({held / total:.0%} of its memory)" if total and held else ""
        found.append(
            problem(
                "gpu-shared",
                "warning",
                f"{len(others)} other process(es) use GPU {device.get('index')}",
                f"{_nvml_label(device)} is also used by {described}{share}. They hold memory "
                "this process cannot use and share its compute time. (In a container the PIDs "
                "may be the host's, and a process outside it has no name here.)",
                "If they are other notebook kernels, shut those kernels down (a kernel keeps its "
                "GPU memory until it exits), or stop the processes (kill PID); otherwise use "
                "another GPU: set CUDA_VISIBLE_DEVICES to its index before TensorFlow starts.",
                {
                    "gpu": device.get("index"),
                    "processes": others,
                    "memory_used_by_others": held,
                    "memory_total": total,
                },
            )
        )
    return found


def _throttling(facts: Facts) -> list[Problem]:
    found = []
    for device in nvml_devices(facts):
        reasons = device.get("clock_event_reasons") or []
        causes = [THROTTLE_CAUSES[r] for r in reasons if r in THROTTLE_CAUSES]
        evidence = {
            "gpu": device.get("index"),
            "clock_event_reasons": reasons,
            "temperature_c": device.get("temperature_c"),
            "power_w": device.get("power_w"),
            "power_limit_w": device.get("power_limit_w"),
            "sm_clock_mhz": device.get("sm_clock_mhz"),
            "sm_clock_max_mhz": device.get("sm_clock_max_mhz"),
        }
        clocks = ""
        if device.get("sm_clock_mhz") and device.get("sm_clock_max_mhz"):
            clocks = f" (SM clock {device['sm_clock_mhz']} of {device['sm_clock_max_mhz']} MHz)"
        if causes:
            temperature = device.get("temperature_c")
            found.append(
                problem(
                    "gpu-clocks-throttled",
                    "warning",
                    f"GPU {device.get('index')} is throttled",
                    f"{_nvml_label(device)} lowers its clocks{clocks}: {'; '.join(causes)}"
                    + (f"; it is at {temperature} °C" if temperature is not None else "")
                    + ".",
                    "Improve cooling (airflow, fan curve, room temperature, dust) and check the "
                    "power connectors and supply; nvidia-smi -q -d PERFORMANCE,TEMPERATURE shows "
                    "the limits in force.",
                    evidence,
                )
            )
        elif "sw_power_cap" in reasons:
            power = device.get("power_w")
            limit = device.get("power_limit_w")
            drawn = f" ({power:.0f} W of {limit:.0f} W)" if power and limit else ""
            found.append(
                problem(
                    "gpu-power-capped",
                    "info",
                    f"GPU {device.get('index')} is at its power limit",
                    f"{_nvml_label(device)} lowers its clocks to stay within its power limit"
                    f"{drawn}{clocks}. Under full load this is normal.",
                    "Nothing to do unless the limit was lowered on purpose (nvidia-smi -q -d "
                    "POWER shows the default and the enforced limit; nvidia-smi -pl sets it).",
                    evidence,
                )
            )
    return found


def _memory_errors(facts: Facts) -> list[Problem]:
    found = []
    for device in nvml_devices(facts):
        errors = device.get("ecc_errors") or {}
        uncorrected = errors.get("uncorrected_volatile")
        if uncorrected:
            found.append(
                problem(
                    "gpu-memory-errors",
                    "warning",
                    f"GPU {device.get('index')} has uncorrected memory errors",
                    f"{_nvml_label(device)} reported {uncorrected} uncorrected ECC error(s) since "
                    "the driver loaded: results computed on it may be wrong.",
                    "Tell whoever runs the machine: the GPU needs a reset (nvidia-smi -r) and, if "
                    "the errors return, a check or replacement.",
                    {"gpu": device.get("index"), "ecc_errors": errors},
                )
            )
    return found


# -- everything ------------------------------------------------------------------------------


def problems(facts: Facts) -> list[Problem]:
    """Every problem the facts show, errors first."""
    tf = _tf(facts)
    found: list[Problem] = []
    if not tf.get("available", True):
        found.append(
            problem(
                "tensorflow-missing",
                "error",
                "TensorFlow cannot be imported",
                f"import tensorflow failed: {tf.get('error')}",
                "pip install 'tensorflow[and-cuda]' (Linux with an NVIDIA GPU) or pip install "
                "tensorflow-cpu, in the environment of this kernel; then restart the kernel.",
                {"error": tf.get("error")},
            )
        )
    elif tf.get("error"):
        found.append(
            problem(
                "tensorflow-facts-unreadable",
                "warning",
                "TensorFlow's device facts could not be read",
                str(tf.get("error")),
                "Run %tfgpu for the full report.",
                {"error": tf.get("error")},
            )
        )
    else:
        if not visible_tf_gpus(facts):
            found += _no_gpu_problem(facts)
        found += _driver_older_than_build(facts)
        found += _several_builds(facts)
        found += _memory_growth(facts)
        found += _mixed_precision(facts)
    found += _pcie(facts)
    found += _other_processes(facts)
    found += _throttling(facts)
    found += _memory_errors(facts)
    return sorted(found, key=lambda p: SEVERITY_ORDER.get(p["severity"], 3))


def _describe_gpus(gpus: list[dict[str, Any]], facts: Facts) -> str:
    groups: dict[tuple[str, str | None], int] = {}
    for gpu in gpus:
        key = (gpu.get("device_name") or "name unknown", _cc_text(gpu_capability(facts, gpu)))
        groups[key] = groups.get(key, 0) + 1
    parts = []
    for (name, cc), count in groups.items():
        prefix = f"{count} × " if count > 1 else ""
        parts.append(prefix + name + (f", compute capability {cc}" if cc else ""))
    return "; ".join(parts)


def verdict(facts: Facts, found: list[Problem] | None = None) -> str:
    """One or two sentences: what TensorFlow can use, and the most important thing to fix."""
    tf = _tf(facts)
    found = problems(facts) if found is None else found
    if not tf.get("available", True):
        return f"TensorFlow cannot be imported in this Python ({tf.get('error')})."
    gpus = visible_tf_gpus(facts)
    if not gpus:
        reasons = no_gpu_reasons(facts)
        first = f"No GPU is visible to TensorFlow: {join_reasons([r['reason'] for r in reasons])}."
        if not reasons:
            first = "No GPU is visible to TensorFlow."
    else:
        count = len(gpus)
        first = (
            f"TensorFlow sees {count} GPU{'s' if count > 1 else ''} ({_describe_gpus(gpus, facts)})"
        )
        off = [g for g in gpus if g.get("memory_growth") is not True]
        if not off or _growth_forced(facts):
            first += "; memory growth is on."
        else:
            totals = {gpu_memory_total(facts, g) for g in off}
            amount = (
                f"its {gib(totals.pop())}"
                if len(totals) == 1 and None not in totals and count == 1
                else "their memory"
                if count > 1
                else "its memory"
            )
            if tf.get("initialized"):
                first += (
                    f"; memory growth is off, so TensorFlow has reserved almost all of {amount}."
                )
            else:
                first += (
                    f"; memory growth is off, so TensorFlow will reserve almost all of {amount}."
                )
    skip = {"gpu-not-used", "no-gpu", "memory-growth-disabled"}
    urgent = [p["title"] for p in found if p["severity"] != "info" and p["code"] not in skip]
    if urgent:
        return f"{first} Also: {'; '.join(urgent)}."
    return first
