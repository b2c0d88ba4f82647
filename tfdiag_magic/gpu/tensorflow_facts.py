"""TensorFlow's side of ``%tfgpu``: the build, the GPUs it sees and how they are set up.

Reading these facts must never initialise the TensorFlow runtime, because once it is
initialised, device settings (memory growth, visible devices) can no longer change. The calls
used before initialisation only list physical devices and read settings:
``tf.config.list_physical_devices``, ``get_visible_devices``, ``experimental.get_memory_growth``,
``experimental.get_device_details`` and ``tf.sysconfig.get_build_info``. ``list_logical_devices``
and ``experimental.get_memory_info`` create the runtime, so they are read only when it exists.

They are read without creating even TensorFlow's (uninitialised) context object where the code
has not made it yet (`device_settings`): while none exists, TensorFlow counts as "in graph
mode" and prints its deprecation warnings (``deprecated_args``), and a profiled cell, or a
cell after ``%tfgpu``, must print what it prints without the tool.
"""

from __future__ import annotations

import importlib.metadata
import sys
from types import ModuleType
from typing import Any

from ..tf_runtime import device_settings
from .native_log import capture_native_stderr

# Distributions that install the `tensorflow` module; more than one at once is a broken install.
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tensorflow-aarch64",
    "tensorflow-cpu-aws",
    "tensorflow-rocm",
    "intel-tensorflow",
    "tf-nightly",
    "tf-nightly-cpu",
)
PLUGIN_DISTRIBUTIONS = ("tensorflow-metal", "tensorflow-directml-plugin")
_CONTEXT_MODULE = "tensorflow.python.eager.context"
_MISSING = object()


def try_import_tensorflow() -> tuple[ModuleType | None, str | None]:
    """(tensorflow, None), or (None, why) when it cannot be imported.

    A broken install fails in many ways besides ImportError (a NumPy ABI mismatch raises
    AttributeError or TypeError, a missing CUDA library OSError): the doctor reports each.
    """
    try:
        import tensorflow as tf
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return tf, None


def runtime_initialized() -> bool | None:
    """Whether TensorFlow's eager context exists and is initialised; None if it cannot be told.

    ``Context.ensure_initialized`` sets ``_context_handle`` (TensorFlow 2.x); the device setters
    raise "cannot be modified after being initialized" exactly when it is not None. This reads
    the attribute without creating the context and without importing TensorFlow.
    """
    module = sys.modules.get(_CONTEXT_MODULE)
    if module is None:
        return False
    context_safe = getattr(module, "context_safe", None)
    if context_safe is None:
        return None
    ctx = context_safe()
    if ctx is None:
        return False
    handle = getattr(ctx, "_context_handle", _MISSING)
    if handle is _MISSING:
        initialized = getattr(ctx, "_initialized", None)
        return bool(initialized) if initialized is not None else None
    return handle is not None


# Whether these facts have listed the physical devices on a context of their own: TensorFlow
# logs what it finds (a CUDA library that did not load) on the process's first listing only.
_listed = False


def physical_devices_listed() -> bool:
    """Whether this process has already listed its physical devices (TensorFlow caches it)."""
    context_safe = getattr(sys.modules.get(_CONTEXT_MODULE), "context_safe", None)
    ctx = context_safe() if context_safe is not None else None
    return _listed or (ctx is not None and getattr(ctx, "_physical_devices", None) is not None)


def installed_distributions(names: tuple[str, ...]) -> dict[str, str]:
    """{distribution: version} for those of `names` that are installed."""
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def build_facts(tf: ModuleType) -> dict[str, Any]:
    """``tf.sysconfig.get_build_info()`` and ``is_built_with_cuda``, JSON-able."""
    info = _jsonable(dict(tf.sysconfig.get_build_info()))
    built_with_cuda = bool(tf.test.is_built_with_cuda())
    capabilities = info.get("cuda_compute_capabilities")
    return {
        "built_with_cuda": built_with_cuda,
        "built_with_rocm": bool(info.get("is_rocm_build", False)),
        "cuda_version": _version_text(info.get("cuda_version")),
        "cudnn_version": _version_text(info.get("cudnn_version")),
        "cuda_compute_capabilities": capabilities if isinstance(capabilities, list) else None,
        "build_info": info,
    }


def _version_text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def mixed_precision_policy() -> str | None:
    """The global Keras dtype policy's name, if Keras (or tf_keras) is imported; else None."""
    keras = sys.modules.get("keras")
    if keras is not None:
        config = getattr(keras, "config", None)
        if config is not None and hasattr(config, "dtype_policy"):
            return str(config.dtype_policy().name)
        mixed = getattr(keras, "mixed_precision", None)
        if mixed is not None and hasattr(mixed, "global_policy"):
            return str(mixed.global_policy().name)
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is not None:
        return str(tf_keras.mixed_precision.global_policy().name)
    return None


def _gpu_facts(settings: Any, device: Any, visible: list[Any]) -> dict[str, Any]:
    details = settings.get_device_details(device)
    capability = details.get("compute_capability")
    return {
        "name": device.name,
        "device_type": device.device_type,
        "device_name": details.get("device_name"),
        "compute_capability": [int(capability[0]), int(capability[1])] if capability else None,
        "memory_growth": settings.get_memory_growth(device),
        "visible": device in visible,
    }


def _logical_gpus(tf: ModuleType) -> list[dict[str, Any]]:
    """Logical GPUs with TensorFlow's current and peak memory; only once initialised."""
    logical = []
    for device in tf.config.list_logical_devices("GPU"):
        entry: dict[str, Any] = {"name": device.name, "memory_current": None, "memory_peak": None}
        try:
            info = tf.config.experimental.get_memory_info(device.name)
        except (ValueError, RuntimeError) as exc:  # a device without memory statistics
            entry["memory_error"] = str(exc)
        else:
            entry["memory_current"] = int(info.get("current", 0))
            entry["memory_peak"] = int(info.get("peak", 0))
        logical.append(entry)
    return logical


def tensorflow_facts(
    tf: ModuleType | None, *, full: bool = True, error: str | None = None
) -> dict[str, Any]:
    """Everything ``%tfgpu`` reports about TensorFlow, without initialising its runtime.

    ``full`` adds what is only worth its time in the doctor: the C++ log of the first device
    listing of the process. Logical GPUs and their memory are read only when the runtime is
    already initialised (None otherwise).
    """
    if tf is None:
        return {"available": False, "error": error, "gpus": [], "initialized": False}
    initialized = runtime_initialized()
    facts: dict[str, Any] = {
        "available": True,
        "error": None,
        "version": str(getattr(tf, "__version__", "unknown")),
        "distributions": installed_distributions(TENSORFLOW_DISTRIBUTIONS),
        "plugins": installed_distributions(PLUGIN_DISTRIBUTIONS),
        "initialized": initialized,
    }
    facts.update(build_facts(tf))
    global _listed
    first_listing = not physical_devices_listed()
    settings = device_settings()
    _listed = True
    if full and first_listing:
        with capture_native_stderr() as captured:
            physical = settings.list_physical_devices()
        facts["device_listing_log"] = captured.gpu_lines()
    else:
        physical = settings.list_physical_devices()
        facts["device_listing_log"] = None  # listed earlier in this process: TF logged it then
    visible = settings.get_visible_devices()
    facts["physical_devices"] = {
        kind: sum(1 for d in physical if d.device_type == kind)
        for kind in sorted({d.device_type for d in physical})
    }
    facts["gpus"] = [_gpu_facts(settings, d, visible) for d in physical if d.device_type == "GPU"]
    facts["mixed_precision_policy"] = mixed_precision_policy()
    keras_version = getattr(sys.modules.get("keras"), "__version__", None)
    facts["keras_version"] = str(keras_version) if keras_version else None
    # Set on TensorFlow's context only: none made, none set (its reading would make one).
    own = settings is not sys.modules[_CONTEXT_MODULE].context_safe()
    facts["jit"] = ("" if own else tf.config.optimizer.get_jit()) or "off"
    # None: not read, because reading them would initialise the runtime.
    facts["logical_gpus"] = _logical_gpus(tf) if initialized else None
    return facts
