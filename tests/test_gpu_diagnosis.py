"""The GPU doctor's diagnosis on recorded facts of machines these tests do not run on.

`diagnosis.problems` and `diagnosis.verdict` are pure functions of the fact dicts, so each GPU
case is a recorded fact dict (the shape `facts.collect_facts` returns): an H100 with memory
growth off, a PCIe link at x8 gen 3 of x16 gen 5, throttled clocks, other processes on the
GPU, CUDA_VISIBLE_DEVICES hiding the GPUs, a driver older than the build's CUDA, missing CUDA
libraries, native Windows, macOS without tensorflow-metal, and mixed-precision advice.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest

from tfdiag_magic.diagnose.gpu_facts import version_tuple
from tfdiag_magic.diagnose.gpu_rules import problems, verdict
from tfdiag_magic.diagnose.gpu_rules.reasons import cuda_visible_devices_hides_all, no_gpu_reasons
from tfdiag_magic.gpu.report import GPUReport
from tfdiag_magic.rewrite import MEMORY_GROWTH_CELL

GIB = 1024**3
H100_MEMORY = 85_520_809_984  # what NVML reports for an H100 80GB HBM3 (79.6 GiB)


def h100_facts(**tensorflow: Any) -> dict[str, Any]:
    """A recorded Linux machine with one idle H100 and the CUDA build of TensorFlow 2.21."""
    facts: dict[str, Any] = {
        "schema": 1,
        "tensorflow": {
            "available": True,
            "error": None,
            "version": "2.21.0",
            "distributions": {"tensorflow": "2.21.0"},
            "plugins": {},
            "initialized": False,
            "built_with_cuda": True,
            "built_with_rocm": False,
            "cuda_version": "12.5.1",
            "cudnn_version": "9",
            "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"],
            "build_info": {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9"},
            "device_listing_log": [],
            "physical_devices": {"CPU": 1, "GPU": 1},
            "gpus": [
                {
                    "name": "/physical_device:GPU:0",
                    "device_type": "GPU",
                    "device_name": "NVIDIA H100 80GB HBM3",
                    "compute_capability": [9, 0],
                    "memory_growth": None,
                    "visible": True,
                }
            ],
            "mixed_precision_policy": "float32",
            "keras_version": "3.15.1",
            "jit": "off",
            "logical_gpus": None,
        },
        "nvml": {
            "available": True,
            "reason": None,
            "error": None,
            "driver_version": "570.86.15",
            "cuda_driver_version": "12.8",
            "device_count": 1,
            "devices": [
                {
                    "index": 0,
                    "name": "NVIDIA H100 80GB HBM3",
                    "uuid": "GPU-5f1c0b9e-8a3d-4c55-9b0e-1d2c3b4a5f60",
                    "memory_total": H100_MEMORY,
                    "memory_used": 560 * 1024**2,
                    "memory_free": H100_MEMORY - 560 * 1024**2,
                    "compute_capability": [9, 0],
                    "pcie_gen": 5,
                    "pcie_gen_max": 5,
                    "pcie_width": 16,
                    "pcie_width_max": 16,
                    "utilization_gpu": 0,
                    "utilization_memory": 0,
                    "temperature_c": 31,
                    "power_w": 71.5,
                    "power_limit_w": 700.0,
                    "performance_state": 0,
                    "sm_clock_mhz": 345,
                    "sm_clock_max_mhz": 1980,
                    "memory_clock_mhz": 2619,
                    "memory_clock_max_mhz": 2619,
                    "clock_event_mask": 1,
                    "clock_event_reasons": ["gpu_idle"],
                    "mig_mode": False,
                    "mig_mode_pending": False,
                    "ecc_mode": True,
                    "ecc_errors": {"corrected_volatile": 0, "uncorrected_volatile": 0},
                    "processes": [],
                    "unavailable": {},
                }
            ],
            "unavailable": {},
        },
        "env": {
            "CUDA_VISIBLE_DEVICES": None,
            "CUDA_DEVICE_ORDER": None,
            "TF_FORCE_GPU_ALLOW_GROWTH": None,
            "TF_GPU_ALLOCATOR": None,
            "TF_CPP_MIN_LOG_LEVEL": None,
            "TF_ENABLE_ONEDNN_OPTS": None,
            "TF_XLA_FLAGS": None,
            "LD_LIBRARY_PATH": None,
        },
        "platform": {
            "system": "Linux",
            "sys_platform": "linux",
            "machine": "x86_64",
            "python": "3.11.7",
            "wsl": False,
        },
        "cuda_libraries": {
            "checked": True,
            "libraries": {
                "libcudart.so.12": "/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/"
                "libcudart.so.12",
                "libcublas.so.12": "/venv/lib/python3.11/site-packages/nvidia/cublas/lib/"
                "libcublas.so.12",
                "libcudnn.so.9": "/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/"
                "libcudnn.so.9",
            },
            "missing": [],
            "searched": ["/venv/lib/python3.11/site-packages/nvidia/cudnn/lib"],
        },
    }
    facts["tensorflow"].update(tensorflow)
    return facts


def tf_sees_no_gpu(facts: dict[str, Any]) -> dict[str, Any]:
    facts["tensorflow"]["gpus"] = []
    facts["tensorflow"]["physical_devices"] = {"CPU": 1}
    return facts


def device(facts: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return facts["nvml"]["devices"][index]


def codes(facts: dict[str, Any]) -> list[str]:
    return [p["code"] for p in problems(facts)]


def the(facts: dict[str, Any], code: str) -> dict[str, Any]:
    found = [p for p in problems(facts) if p["code"] == code]
    assert len(found) == 1, f"expected one {code}, got {codes(facts)}"
    return found[0]


def cpu_only_without_driver() -> dict[str, Any]:
    """This development machine, recorded: tensorflow-cpu and no NVIDIA driver."""
    facts = tf_sees_no_gpu(h100_facts())
    facts["tensorflow"].update(
        distributions={"tensorflow-cpu": "2.21.0"},
        built_with_cuda=False,
        cuda_version=None,
        cudnn_version=None,
        cuda_compute_capabilities=None,
    )
    facts["nvml"] = {
        "available": False,
        "reason": "no NVIDIA driver was found (the NVML library libnvidia-ml.so.1 is not "
        "installed or not on the library path; in a container, the GPU and its driver were "
        "not passed in)",
        "error": "NVML Shared Library Not Found",
        "driver_version": None,
        "cuda_driver_version": None,
        "devices": [],
    }
    del facts["cuda_libraries"]
    return facts


# -- a GPU TensorFlow can use ----------------------------------------------------------------


def test_h100_with_memory_growth_off_gives_the_verdict_with_its_memory():
    facts = h100_facts()
    assert verdict(facts) == (
        "TensorFlow sees 1 GPU (NVIDIA H100 80GB HBM3, compute capability 9.0); memory growth "
        "is off, so TensorFlow will reserve almost all of its 79.6 GiB."
    )
    assert "gpu-not-used" not in codes(facts)


def test_memory_growth_off_before_initialisation_offers_the_magic_and_the_cell():
    finding = the(h100_facts(), "memory-growth-disabled")
    assert finding["severity"] == "warning"
    assert "GPU:0 (NVIDIA H100 80GB HBM3), 79.6 GiB" in finding["message"]
    assert "%tfgpu --memory-growth" in finding["fix"]
    assert MEMORY_GROWTH_CELL in finding["fix"]
    assert finding["evidence"]["initialized"] is False


def test_memory_growth_off_after_initialisation_says_restart():
    facts = h100_facts(initialized=True)
    finding = the(facts, "memory-growth-disabled")
    assert "Restart the kernel" in finding["fix"]
    assert "%tfgpu --memory-growth" not in finding["fix"]
    assert "has reserved almost all of its 79.6 GiB" in verdict(facts)


def test_memory_growth_on_or_forced_by_the_environment_is_no_problem():
    on = h100_facts()
    on["tensorflow"]["gpus"][0]["memory_growth"] = True
    assert "memory-growth-disabled" not in codes(on)
    assert verdict(on).endswith("; memory growth is on.")
    forced = h100_facts()
    forced["env"]["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    assert "memory-growth-disabled" not in codes(forced)


def test_memory_growth_explicitly_false_is_reported_like_the_default():
    facts = h100_facts()
    facts["tensorflow"]["gpus"][0]["memory_growth"] = False
    assert "memory-growth-disabled" in codes(facts)


def test_two_identical_gpus_are_counted_in_the_verdict():
    facts = h100_facts()
    gpu = facts["tensorflow"]["gpus"][0]
    facts["tensorflow"]["gpus"].append({**gpu, "name": "/physical_device:GPU:1"})
    facts["nvml"]["devices"].append({**device(facts), "index": 1})
    text = verdict(facts)
    assert text.startswith(
        "TensorFlow sees 2 GPUs (2 × NVIDIA H100 80GB HBM3, compute capability 9.0)"
    )
    assert "almost all of their memory" in text


def test_h100_in_float32_gets_bfloat16_advice():
    finding = the(h100_facts(), "mixed-precision-available")
    assert finding["severity"] == "info"
    assert 'set_global_policy("mixed_bfloat16")' in finding["fix"]
    assert "TensorFloat-32" in finding["message"]
    assert finding["evidence"]["compute_capabilities"] == {"/physical_device:GPU:0": [9, 0]}


def test_volta_in_float32_gets_float16_advice():
    facts = h100_facts()
    facts["tensorflow"]["gpus"][0].update(
        device_name="Tesla V100-SXM2-16GB", compute_capability=[7, 0]
    )
    finding = the(facts, "mixed-precision-available")
    assert 'set_global_policy("mixed_float16")' in finding["fix"]
    assert "do not use their Tensor Cores" in finding["message"]


def test_mixed_precision_already_on_gives_no_advice():
    assert "mixed-precision-available" not in codes(
        h100_facts(mixed_precision_policy="mixed_bfloat16")
    )


def test_mixed_float16_on_a_gpu_without_tensor_cores_is_a_warning():
    facts = h100_facts(mixed_precision_policy="mixed_float16")
    facts["tensorflow"]["gpus"][0].update(
        device_name="Tesla P100-PCIE-16GB", compute_capability=[6, 0]
    )
    finding = the(facts, "mixed-precision-without-tensor-cores")
    assert "Tesla P100-PCIE-16GB" in finding["message"]
    assert 'set_global_policy("float32")' in finding["fix"]


def test_mixed_float16_on_the_cpu_is_a_warning_but_bfloat16_is_not():
    facts = cpu_only_without_driver()
    facts["tensorflow"]["mixed_precision_policy"] = "mixed_float16"
    assert "runs on the CPU" in the(facts, "mixed-precision-without-tensor-cores")["message"]
    facts["tensorflow"]["mixed_precision_policy"] = "mixed_bfloat16"
    assert "mixed-precision-without-tensor-cores" not in codes(facts)


# -- PCIe, throttling, other processes, ECC --------------------------------------------------


def test_pcie_link_at_x8_gen3_of_x16_gen5_while_busy():
    facts = h100_facts()
    device(facts).update(pcie_gen=3, pcie_width=8, utilization_gpu=97)
    finding = the(facts, "pcie-link-degraded")
    assert "x8 of x16 lanes and generation 3 of 5 while busy" in finding["message"]
    assert "x16 slot" in finding["fix"] and "BIOS" in finding["fix"]
    assert finding["evidence"]["pcie_width"] == 8
    assert "PCIe link runs below its maximum" in verdict(facts)


def test_pcie_generation_lowered_while_idle_is_normal_but_a_narrow_link_is_not():
    idle = h100_facts()
    device(idle).update(pcie_gen=1, utilization_gpu=0)
    assert "pcie-link-degraded" not in codes(idle)
    text = " ".join(GPUReport.from_facts(idle).text().split())
    assert "gen 1 of 5, x16 of x16 lanes (current of max); an idle GPU lowers its link" in text
    narrow = h100_facts()
    device(narrow).update(pcie_width=8, utilization_gpu=0)
    assert "x8 of x16 lanes" in the(narrow, "pcie-link-degraded")["message"]


def test_thermal_throttling_is_a_warning_with_the_temperature():
    facts = h100_facts()
    device(facts).update(
        clock_event_reasons=["sw_thermal_slowdown", "hw_thermal_slowdown"],
        temperature_c=89,
        sm_clock_mhz=1100,
    )
    finding = the(facts, "gpu-clocks-throttled")
    assert finding["severity"] == "warning"
    assert "89 °C" in finding["message"]
    assert "SM clock 1100 of 1980 MHz" in finding["message"]
    assert "cooling" in finding["fix"]


def test_power_cap_under_load_is_information_and_idle_is_nothing():
    capped = h100_facts()
    device(capped).update(clock_event_reasons=["sw_power_cap"], power_w=699.0)
    finding = the(capped, "gpu-power-capped")
    assert finding["severity"] == "info"
    assert "(699 W of 700 W)" in finding["message"]
    assert not {"gpu-clocks-throttled", "gpu-power-capped"} & set(codes(h100_facts()))


def test_other_processes_on_the_gpu_are_named_with_their_memory_and_self_is_left_out():
    facts = h100_facts()
    device(facts)["processes"] = [
        {
            "pid": 4242,
            "name": "python3",
            "memory_used": 20 * GIB,
            "kinds": ["compute"],
            "is_self": False,
        },
        {
            "pid": os.getpid(),
            "name": "python",
            "memory_used": GIB,
            "kinds": ["compute"],
            "is_self": True,
        },
    ]
    finding = the(facts, "gpu-shared")
    assert "python3 (pid 4242, 20.0 GiB)" in finding["message"]
    assert f"pid {os.getpid()}" not in finding["message"]
    assert "(25% of its memory)" in finding["message"]
    assert finding["evidence"]["memory_used_by_others"] == 20 * GIB
    assert "CUDA_VISIBLE_DEVICES" in finding["fix"]


def _host_pid_process(pid: int, gib_used: int) -> dict[str, Any]:
    """A process as NVML lists it in a container: the host's PID, no name in this namespace."""
    used = gib_used * GIB
    return {"pid": pid, "name": None, "memory_used": used, "kinds": ["compute"], "is_self": False}


def test_a_nameless_process_where_this_one_holds_the_gpu_unlisted_is_likely_itself():
    # TensorFlow's runtime is up with the GPU visible, so this process holds a context on it,
    # yet NVML lists only a process by a PID unknown here: in a container, the host's PID.
    facts = h100_facts(initialized=True)
    device(facts)["processes"] = [_host_pid_process(2712345, 70)]
    finding = the(facts, "gpu-shared")
    assert finding["severity"] == "info"
    assert "one of them is likely this process itself" in finding["message"]
    assert "unknown process (pid 2712345, 70.0 GiB)" in finding["message"]
    assert finding["evidence"]["this_process_listed"] is False
    # Before the runtime is up this process holds no context: the process is another's.
    facts = h100_facts(initialized=False)
    device(facts)["processes"] = [_host_pid_process(2712345, 70)]
    assert the(facts, "gpu-shared")["severity"] == "warning"
    # A named process beside it is certainly another: a warning.
    facts = h100_facts(initialized=True)
    named = {**_host_pid_process(4242, 2), "name": "python3"}
    device(facts)["processes"] = [_host_pid_process(2712345, 70), named]
    assert the(facts, "gpu-shared")["severity"] == "warning"


def test_uncorrected_ecc_errors_are_reported():
    facts = h100_facts()
    device(facts)["ecc_errors"] = {"corrected_volatile": 12, "uncorrected_volatile": 3}
    assert "3 uncorrected ECC error(s)" in the(facts, "gpu-memory-errors")["message"]


# -- TensorFlow sees no GPU ------------------------------------------------------------------


def test_this_machine_recorded_cpu_build_and_no_driver():
    facts = cpu_only_without_driver()
    assert verdict(facts) == (
        "No GPU is visible to TensorFlow: this is the CPU-only build (tensorflow-cpu), and no "
        "NVIDIA driver was found."
    )
    assert codes(facts) == ["no-gpu"]
    finding = the(facts, "no-gpu")
    assert finding["severity"] == "info"
    assert finding["evidence"]["reasons"] == ["cpu-only-build", "no-driver"]
    assert "pip uninstall -y tensorflow-cpu" in finding["fix"]
    assert "--gpus all" in finding["fix"]


def test_cpu_build_on_a_machine_with_a_gpu_is_gpu_not_used():
    facts = cpu_only_without_driver()
    facts["nvml"] = h100_facts()["nvml"]
    finding = the(facts, "gpu-not-used")
    assert finding["severity"] == "error"
    assert "NVML sees 1 GPU(s): GPU 0 (NVIDIA H100 80GB HBM3)" in finding["message"]
    assert finding["evidence"]["reasons"] == ["cpu-only-build"]
    assert "pip install 'tensorflow[and-cuda]'" in finding["fix"]


@pytest.mark.parametrize("value", ["", "-1", "1", "NoDevFiles", "GPU-00000000"])
def test_cuda_visible_devices_that_hides_every_gpu(value):
    facts = tf_sees_no_gpu(h100_facts())
    facts["env"]["CUDA_VISIBLE_DEVICES"] = value
    assert verdict(facts) == (
        f"No GPU is visible to TensorFlow: CUDA_VISIBLE_DEVICES={value!r} hides every GPU."
    )
    finding = the(facts, "gpu-not-used")
    assert finding["evidence"]["reasons"] == ["cuda-visible-devices"]
    assert "restart the kernel" in finding["fix"]


@pytest.mark.parametrize("value", ["0", "0,1", "GPU-5f1c0b9e", None])
def test_cuda_visible_devices_that_keeps_the_gpu(value):
    assert not cuda_visible_devices_hides_all(value, h100_facts()["nvml"]["devices"])


def test_gpu_hidden_by_set_visible_devices():
    facts = h100_facts()
    facts["tensorflow"]["gpus"][0]["visible"] = False
    finding = the(facts, "gpu-not-used")
    assert finding["evidence"]["reasons"] == ["hidden-by-set-visible-devices"]


def test_driver_older_than_the_builds_cuda_major_is_why_no_gpu_is_seen():
    facts = tf_sees_no_gpu(h100_facts())
    facts["nvml"].update(driver_version="520.61.05", cuda_driver_version="11.8")
    finding = the(facts, "gpu-not-used")
    assert finding["evidence"]["reasons"] == ["driver-too-old"]
    assert (
        "the NVIDIA driver supports CUDA 11.8 but this TensorFlow needs CUDA 12.5.1"
        in finding["message"]
    )
    assert "driver-older-than-build" not in codes(facts)  # said once, as the reason


def test_driver_a_minor_version_behind_is_a_warning_when_the_gpu_works():
    facts = h100_facts()
    facts["nvml"]["cuda_driver_version"] = "12.2"
    finding = the(facts, "driver-older-than-build")
    assert finding["severity"] == "warning"
    assert "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in finding["message"]
    assert "12.5 or newer" in finding["fix"]


def test_missing_cuda_libraries_are_named():
    facts = tf_sees_no_gpu(h100_facts())
    facts["cuda_libraries"]["libraries"]["libcudnn.so.9"] = None
    facts["cuda_libraries"]["missing"] = ["libcudnn.so.9"]
    finding = the(facts, "gpu-not-used")
    assert finding["evidence"]["reasons"] == ["cuda-libraries-missing"]
    assert "TensorFlow could not load its CUDA libraries (libcudnn.so.9)" in finding["message"]
    assert "tensorflow[and-cuda]==2.21.0" in finding["fix"]


def test_tensorflows_dlopen_log_line_is_the_evidence():
    facts = tf_sees_no_gpu(h100_facts())
    line = (
        "W0000 gpu_device.cc:2344] Cannot dlopen some GPU libraries. Please make sure the "
        "missing libraries mentioned above are installed properly."
    )
    facts["tensorflow"]["device_listing_log"] = [line]
    reasons = no_gpu_reasons(facts)
    assert [r["code"] for r in reasons] == ["cuda-libraries-missing"]
    assert reasons[0]["detail"] == line


def test_gpu_older_than_the_build_supports():
    facts = tf_sees_no_gpu(h100_facts())
    device(facts).update(name="Tesla K80", compute_capability=[3, 7])
    reasons = no_gpu_reasons(facts)
    assert [r["code"] for r in reasons] == ["gpu-too-old"]
    assert "GPU 0 (Tesla K80) has compute capability 3.7" in reasons[0]["reason"]
    assert "6.0 and newer" in reasons[0]["detail"]


def test_unexplained_case_points_at_tensorflows_own_log_and_the_level_that_hides_it():
    facts = tf_sees_no_gpu(h100_facts())
    facts["env"]["TF_CPP_MIN_LOG_LEVEL"] = "3"
    reasons = no_gpu_reasons(facts)
    assert [r["code"] for r in reasons] == ["unexplained"]
    assert "TF_CPP_MIN_LOG_LEVEL=3 hides" in reasons[0]["detail"]
    assert "TF_CPP_MIN_LOG_LEVEL'] = '0'" in reasons[0]["fix"]


def test_native_windows_after_tensorflow_2_10():
    facts = cpu_only_without_driver()
    facts["platform"].update(system="Windows", sys_platform="win32", machine="AMD64")
    facts["tensorflow"].update(version="2.15.0", distributions={"tensorflow-intel": "2.15.0"})
    facts["nvml"] = h100_facts()["nvml"]
    finding = the(facts, "gpu-not-used")
    assert finding["evidence"]["reasons"] == ["native-windows"]
    assert "WSL2" in finding["fix"]


def test_macos_needs_tensorflow_metal():
    facts = cpu_only_without_driver()
    facts["platform"].update(system="Darwin", sys_platform="darwin", machine="arm64")
    facts["tensorflow"]["distributions"] = {"tensorflow": "2.16.2"}
    finding = the(facts, "gpu-not-used")
    assert "this Mac has an Apple GPU" in finding["message"]
    assert finding["evidence"]["reasons"] == ["macos-needs-metal"]
    assert "pip install tensorflow-metal" in finding["fix"]


def test_two_tensorflow_builds_installed_together():
    facts = h100_facts(distributions={"tensorflow": "2.21.0", "tensorflow-cpu": "2.21.0"})
    finding = the(facts, "several-tensorflow-builds")
    assert "pip uninstall -y tensorflow tensorflow-cpu" in finding["fix"]


def test_tensorflow_that_cannot_be_imported():
    facts = cpu_only_without_driver()
    facts["tensorflow"] = {
        "available": False,
        "error": "ModuleNotFoundError: No module named 'tensorflow'",
        "gpus": [],
        "initialized": False,
    }
    assert codes(facts) == ["tensorflow-missing"]
    assert verdict(facts) == (
        "TensorFlow cannot be imported in this Python (ModuleNotFoundError: No module named "
        "'tensorflow')."
    )


def test_warnings_are_added_to_the_verdict_as_a_second_sentence():
    facts = h100_facts()
    device(facts)["processes"] = [
        {"pid": 7, "name": "python3", "memory_used": GIB, "kinds": ["compute"], "is_self": False}
    ]
    assert verdict(facts).endswith(". Also: 1 other process(es) use GPU 0.")


def test_problems_come_most_severe_first():
    facts = tf_sees_no_gpu(h100_facts(distributions={"tensorflow": "2.21.0", "tf-nightly": "2.22"}))
    facts["env"]["CUDA_VISIBLE_DEVICES"] = "-1"
    severities = [p["severity"] for p in problems(facts)]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert severities[0] == "error"


def test_session_facts_without_dynamic_nvml_fields_are_diagnosed_too():
    facts = h100_facts()
    for name in list(device(facts)):
        if name not in {
            "index",
            "name",
            "uuid",
            "memory_total",
            "memory_used",
            "compute_capability",
            "pcie_gen",
            "pcie_gen_max",
            "pcie_width",
            "pcie_width_max",
            "unavailable",
        }:
            del device(facts)[name]
    assert codes(facts) == ["memory-growth-disabled", "mixed-precision-available"]
    GPUReport.from_facts(facts).text()  # renders without the dynamic fields


def test_version_tuple():
    assert version_tuple("12.5.1") == (12, 5, 1)
    assert version_tuple("2.21.0-rc1") == (2, 21, 0)
    assert version_tuple("9") == (9,)
    assert version_tuple(None) is None and version_tuple("unknown") is None


# -- the views of a recorded report ----------------------------------------------------------


def test_text_report_of_a_recorded_h100_shows_every_nvml_field():
    facts = h100_facts()
    device(facts)["unavailable"] = {"power_limit": "Not Supported"}
    device(facts)["power_limit_w"] = None
    text = " ".join(GPUReport.from_facts(facts).text().split())  # unwrapped
    for expected in (
        "TensorFlow sees 1 GPU (NVIDIA H100 80GB HBM3",
        "[warning] memory-growth-disabled",
        "driver version",
        "570.86.15",
        "CUDA version the driver supports",
        "0.5 GiB used of 79.6 GiB",
        "0 % (memory controller 0 %)",
        "31 °C",
        "72 W / not available (Not Supported)",
        "345 of 1980 MHz",
        "gpu_idle",
        "gen 5 of 5, x16 of x16 lanes",
        "MIG mode",
        "0 uncorrected, 0 corrected",
        "CUDA_VISIBLE_DEVICES",
    ):
        assert expected in text, expected


def test_html_report_escapes_what_the_machine_reports():
    facts = h100_facts()
    hostile = "<img src=x onerror=alert(1)>"
    device(facts)["name"] = hostile
    facts["tensorflow"]["gpus"][0]["device_name"] = hostile
    facts["env"]["CUDA_VISIBLE_DEVICES"] = "<script>alert(2)</script>"
    html = GPUReport.from_facts(facts)._repr_html_()
    assert hostile not in html and "<script>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;" in html


def test_report_json_round_trip():
    report = GPUReport.from_facts(copy.deepcopy(h100_facts()))
    loaded = json.loads(report.to_json())
    assert loaded["schema"] == 1
    assert loaded["verdict"] == report.verdict
    assert [p["code"] for p in loaded["problems"]] == report.codes
    assert loaded["facts"]["nvml"]["devices"][0]["pcie_width_max"] == 16
