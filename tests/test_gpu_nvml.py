"""NVML facts for ``%tfgpu`` on whatever this machine has, and NVML's real failure paths.

Without an NVIDIA driver (the usual CI case) `nvmlInit` really fails with
NVMLError_LibraryNotFound, and every query before a successful init really fails with
NVMLError_Uninitialized: the tests run the real `pynvml` into both. Single-field failures
("Not Supported", "Insufficient Permissions", a function an older driver lacks) are real
`pynvml.NVMLError` instances raised by the functions handed to `FieldReader`, the wrapper every
query goes through. On a machine where NVML works, the GPU branch checks the live facts.
Also here: the capture of TensorFlow's C++ stderr, and the search for CUDA libraries.
"""

from __future__ import annotations

import os
import sys

import psutil
import pynvml
import pytest

from tfdiag_magic.gpu.cuda_libraries import find_cuda_libraries, wanted_libraries
from tfdiag_magic.gpu.native_log import capture_native_stderr
from tfdiag_magic.gpu.nvml_facts import (
    FieldReader,
    clock_event_names,
    device_facts,
    init_failure_reason,
    nvml_error_text,
    nvml_facts,
    process_name,
)


def _nvml_state() -> tuple[str, BaseException | None]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return "no-init", exc
    try:
        return ("ok", None) if pynvml.nvmlDeviceGetCount() > 0 else ("no-gpu", None)
    finally:
        pynvml.nvmlShutdown()


NVML_STATE, NVML_INIT_ERROR = _nvml_state()
needs_no_nvml = pytest.mark.skipif(NVML_STATE != "no-init", reason="NVML initialises here")
needs_nvml = pytest.mark.skipif(NVML_STATE != "ok", reason="no GPU that NVML can see here")

DEVICE_FIELDS = (
    "name",
    "uuid",
    "memory_total",
    "memory_used",
    "compute_capability",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
)


# -- NVML absent: the real failure -----------------------------------------------------------


@needs_no_nvml
def test_nvml_facts_without_a_driver_are_a_normal_explained_state():
    facts = nvml_facts()
    assert facts["available"] is False
    assert facts["devices"] == []
    assert facts["driver_version"] is None and facts["cuda_driver_version"] is None
    assert facts["error"] == nvml_error_text(NVML_INIT_ERROR)
    assert facts["reason"] == init_failure_reason(NVML_INIT_ERROR)
    if isinstance(NVML_INIT_ERROR, pynvml.NVMLError_LibraryNotFound):
        assert facts["error"] == "NVML Shared Library Not Found"
        assert facts["reason"].startswith("no NVIDIA driver was found (the NVML library ")


@needs_no_nvml
def test_cheap_nvml_facts_give_the_same_answer():
    assert nvml_facts(full=False) == nvml_facts(full=True)


def test_every_query_before_init_fails_alone_with_nvmls_own_words():
    """No nvmlInit: the real pynvml answers each query "Uninitialized", field by field."""
    facts = device_facts(pynvml, None, 0, full=True)
    for field in (*DEVICE_FIELDS, "utilization_gpu", "temperature_c", "power_w", "mig_mode"):
        assert facts[field] is None, field
    why = facts["unavailable"]
    for query in ("name", "uuid", "memory", "compute_capability", "pcie_gen", "pcie_width_max"):
        assert why[query] == "Uninitialized", query
    for query in ("utilization", "temperature", "power", "power_limit", "sm_clock", "mig_mode"):
        assert why[query] == "Uninitialized", query
    assert facts["processes"] is None
    assert why["compute_processes"] == why["graphics_processes"] == "Uninitialized"
    assert facts["clock_event_reasons"] is None


def test_driver_query_without_init_is_uninitialized_not_an_exception():
    reader = FieldReader()
    assert reader.read("driver_version", pynvml.nvmlSystemGetDriverVersion) is None
    assert reader.unavailable == {"driver_version": "Uninitialized"}


@pytest.mark.parametrize(
    ("code", "exception", "words"),
    [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVMLError_NotSupported, "Not Supported"),
        (
            pynvml.NVML_ERROR_NO_PERMISSION,
            pynvml.NVMLError_NoPermission,
            "Insufficient Permissions",
        ),
        (
            pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            pynvml.NVMLError_FunctionNotFound,
            "Function Not Found",
        ),
        (pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVMLError_GpuIsLost, "GPU is lost"),
    ],
)
def test_one_failing_field_degrades_alone(code, exception, words):
    def fails(*args):
        raise pynvml.NVMLError(code)

    error = pynvml.NVMLError(code)
    assert isinstance(error, exception)  # pynvml maps the code to its subclass
    reader = FieldReader()
    assert reader.read("temperature", fails, "handle") is None
    assert reader.read("name", lambda handle: "NVIDIA H100 80GB HBM3", "handle") == (
        "NVIDIA H100 80GB HBM3"
    )
    assert reader.read("pcie_gen", lambda handle: 5, "handle") == 5
    assert reader.unavailable == {"temperature": words}


def test_a_query_this_nvidia_ml_py_lacks_is_not_available_with_the_reason():
    reader = FieldReader()
    missing = getattr(pynvml, "nvmlDeviceGetSomethingFromTheFuture", None)
    assert reader.read("future", missing, "handle") is None
    assert "upgrade" in reader.unavailable["future"]


def test_an_error_that_is_not_nvmls_is_not_swallowed():
    def broken(handle):
        raise ValueError("a bug, not an NVML answer")

    with pytest.raises(ValueError, match="a bug"):
        FieldReader().read("name", broken, "handle")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver was found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "the NVIDIA driver is installed but not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "this user may not use NVML"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "reboot"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML could not start: Unknown Error"),
    ],
)
def test_init_failures_are_explained_in_words(code, expected):
    assert expected in init_failure_reason(pynvml.NVMLError(code))


def test_clock_event_mask_is_decoded():
    assert clock_event_names(None) is None
    assert clock_event_names(0) == []
    assert clock_event_names(0x1) == ["gpu_idle"]
    assert clock_event_names(0x4 | 0x20) == ["sw_power_cap", "sw_thermal_slowdown"]
    assert clock_event_names(0x1000) == ["other(0x1000)"]


def test_process_name_falls_back_to_psutil_when_nvml_cannot_say():
    assert process_name(pynvml, os.getpid()) == psutil.Process().name()


# -- NVML present: a GPU machine -------------------------------------------------------------


@needs_nvml
def test_nvml_facts_on_a_gpu_machine():
    facts = nvml_facts()
    assert facts["available"] is True and facts["reason"] is None
    assert isinstance(facts["driver_version"], str)
    assert facts["devices"]
    for device in facts["devices"]:
        for field in DEVICE_FIELDS:
            # every field has a value, or NVML's reason why not
            assert device[field] is not None or device["unavailable"], field
        assert device["memory_total"] > 0
        assert device["processes"] is None or all("is_self" in p for p in device["processes"])


@needs_nvml
def test_cheap_nvml_facts_keep_the_static_fields_only():
    device = nvml_facts(full=False)["devices"][0]
    assert set(DEVICE_FIELDS) <= set(device)
    assert "utilization_gpu" not in device and "processes" not in device


# -- TensorFlow's C++ stderr -----------------------------------------------------------------


def test_native_stderr_is_captured_and_written_through(capfd):
    capfd.readouterr()
    with capture_native_stderr() as captured:
        os.write(2, b"I0000 port.cc] unrelated line\n")
        os.write(2, b"W0000 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n")
    assert "unrelated line" in captured.text
    assert captured.gpu_lines() == ["W0000 gpu_device.cc:2344] Cannot dlopen some GPU libraries."]
    assert "Cannot dlopen" in capfd.readouterr().err  # the user still sees it


def test_native_stderr_is_restored_when_the_block_raises(capfd):
    with pytest.raises(RuntimeError), capture_native_stderr(echo=False) as captured:
        os.write(2, b"before the error\n")
        raise RuntimeError("boom")
    assert captured.text == "before the error\n"
    capfd.readouterr()
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


# -- CUDA libraries --------------------------------------------------------------------------


def test_wanted_libraries_follow_the_builds_versions():
    assert wanted_libraries("12.5.1", "9") == [
        "libcudart.so.12",
        "libcublas.so.12",
        "libcudnn.so.9",
    ]
    assert wanted_libraries(None, None) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="searched on Linux only")
def test_cuda_libraries_are_found_on_ld_library_path(tmp_path, monkeypatch):
    (tmp_path / "libcudart.so.12").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    found = find_cuda_libraries("12.5.1", "9")
    assert found["libraries"]["libcudart.so.12"] == str(tmp_path / "libcudart.so.12")
    assert str(tmp_path) in found["searched"]
    if found["libraries"]["libcudnn.so.9"] is None:
        assert "libcudnn.so.9" in found["missing"]
