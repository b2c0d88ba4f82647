"""GPU findings on recorded runs: device-memory-growth, gpu-not-used, memory-growth-disabled,
mixed-precision-available, and oom with a GPU allocator's message.

This machine has no GPU, so each case is a Record built by hand in the shape a run on a GPU
machine records: TensorFlow's and NVML's facts as `gpu.session_facts` reads them, the
allocator's memory per step (``gpu:GPU:0:current`` / ``:peak``) and NVML's samples
(``nvml0:util``, ``nvml0:mem_used``). Each finding has a case that triggers it and cases that
must not.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from tests.helpers import profiled
from tfdiag_magic.diagnose import diagnose
from tfdiag_magic.record import (
    KINDS,
    PHASES,
    STEP_COLUMNS,
    ErrorInfo,
    KerasCall,
    Record,
)

GIB = 1 << 30
MIB = 1 << 20
A100_MEMORY = 42_505_273_344  # what NVML reports for an A100-SXM4-40GB


def gpu_facts(**gpu: Any) -> dict[str, Any]:
    """A Linux machine with one A100 and the CUDA build of TensorFlow, as a run records it."""
    tf_gpu = {
        "name": "/physical_device:GPU:0",
        "device_type": "GPU",
        "device_name": "NVIDIA A100-SXM4-40GB",
        "compute_capability": [8, 0],
        "memory_growth": False,
        "visible": True,
    }
    tf_gpu.update(gpu)
    return {
        "schema": 1,
        "tensorflow": {
            "available": True,
            "error": None,
            "version": "2.21.0",
            "distributions": {"tensorflow": "2.21.0"},
            "initialized": True,
            "built_with_cuda": True,
            "cuda_version": "12.5.1",
            "cudnn_version": "9",
            "physical_devices": {"CPU": 1, "GPU": 1},
            "gpus": [tf_gpu],
            "mixed_precision_policy": "float32",
        },
        "nvml": {
            "available": True,
            "error": None,
            "driver_version": "570.86.15",
            "cuda_driver_version": "12.8",
            "device_count": 1,
            "devices": [
                {
                    "index": 0,
                    "name": "NVIDIA A100-SXM4-40GB",
                    "memory_total": A100_MEMORY,
                    "memory_used": 40_400 * MIB,
                    "compute_capability": [8, 0],
                    "pcie_gen": 4,
                    "pcie_gen_max": 4,
                    "pcie_width": 16,
                    "pcie_width_max": 16,
                    "processes": [],
                }
            ],
        },
        "env": {"CUDA_VISIBLE_DEVICES": None, "TF_FORCE_GPU_ALLOW_GROWTH": None},
        "platform": {"system": "Linux", "sys_platform": "linux", "machine": "x86_64"},
    }


def training_record(
    steps: int = 400,
    step_s: float = 0.02,
    batch: float = 128.0,
    facts: dict[str, Any] | None = None,
) -> Record:
    """`steps` Keras training steps of `step_s` each, back to back from t = 0.5 s."""
    record = Record()
    columns = {name: np.zeros(steps, dtype=dtype) for name, dtype in STEP_COLUMNS.items()}
    columns["start"] = 0.5 + np.arange(steps) * step_s
    columns["duration"][:] = step_s * 0.95
    columns["data_wait"][:] = np.nan
    columns["phase"][:] = PHASES.index("train")
    columns["kind"][:] = KINDS.index("keras")
    columns["loss"] = np.linspace(2.0, 0.5, steps).astype(np.float32)
    columns["fused"][:] = 1
    columns["loop"][:] = -1
    columns["traced"][0] = True
    columns["batch"][:] = batch
    record.steps = columns
    record.wall_time = 1.0 + steps * step_s
    gpu = facts if facts is not None else gpu_facts()
    record.facts = {
        "gpus": [g["name"] for g in gpu["tensorflow"]["gpus"]],
        "built_with_cuda": gpu["tensorflow"]["built_with_cuda"],
        "mixed_precision_policy": gpu["tensorflow"]["mixed_precision_policy"],
        "functions_run_eagerly": False,
        "gpu": gpu,
    }
    return record


def with_gpu_memory(record: Record, current: np.ndarray, peak: np.ndarray | None = None) -> None:
    """Allocator samples taken at the end of evenly spaced steps (as the recorder samples)."""
    steps = record.steps
    at = np.linspace(0, record.step_count - 1, current.size).astype(int)
    record.memory = {
        "time": steps["start"][at] + steps["duration"][at],
        "step": at + 1,
        "rss": np.full(current.size, 3 * GIB, dtype=np.int64),
        "gpu:GPU:0:current": current.astype(np.int64),
        "gpu:GPU:0:peak": (np.maximum.accumulate(current) if peak is None else peak).astype(
            np.int64
        ),
    }


def with_nvml(record: Record, util: np.ndarray, mem_used: float) -> None:
    times = np.linspace(0.0, record.wall_time, util.size)
    record.nvml = {
        "time": times,
        "nvml0:util": util.astype(np.float64),
        "nvml0:mem_used": np.full(util.size, mem_used, dtype=np.float64),
        "nvml0:mem_total": np.full(util.size, float(A100_MEMORY)),
    }


def found(record: Record) -> dict[str, Any]:
    return {f.code: f for f in diagnose(record)}


# -- device-memory-growth -------------------------------------------------------------------


def test_device_memory_growth_losses_kept_as_tensors_on_the_gpu():
    record = training_record(steps=400)
    current = 1 * GIB + 2 * MIB * np.arange(200) * 2  # 2 MiB kept per step
    with_gpu_memory(record, current)
    f = found(record)["device-memory-growth"]
    assert f.severity == "warning"
    ev = f.evidence
    assert ev["device"] == "GPU:0"
    assert ev["bytes_per_step"] == pytest.approx(2 * MIB, rel=0.05)
    assert ev["growth_bytes"] >= 600 * MIB
    assert ev["r2"] >= 0.99
    assert ev["end_bytes"] > ev["start_bytes"]
    assert "GPU:0" in f.title


def test_no_device_memory_growth_for_warm_up_then_a_plateau():
    record = training_record(steps=400)
    rng = np.random.default_rng(0)
    current = np.full(200, 3 * GIB, dtype=np.float64)
    current[:15] = np.linspace(0.5 * GIB, 3 * GIB, 15)  # the first batches allocate
    current += rng.normal(0, 8 * MIB, 200)  # the allocator moves a few MiB between samples
    with_gpu_memory(record, current)
    assert "device-memory-growth" not in found(record)


def test_no_device_memory_growth_for_memory_freed_each_epoch():
    # Per-epoch buffers that grow and are released at the epoch's end: a saw, not a leak.
    record = training_record(steps=400)
    current = 2 * GIB + (np.arange(200) % 50) * 4 * MIB
    with_gpu_memory(record, current)
    assert "device-memory-growth" not in found(record)


# -- gpu-not-used ---------------------------------------------------------------------------


def cpu_build_facts() -> dict[str, Any]:
    """The driver lists the A100; tensorflow-cpu is installed, so TensorFlow lists no GPU."""
    facts = gpu_facts()
    facts["tensorflow"].update(
        distributions={"tensorflow-cpu": "2.21.0"},
        built_with_cuda=False,
        cuda_version=None,
        cudnn_version=None,
        gpus=[],
        physical_devices={"CPU": 1},
    )
    return facts


def test_gpu_not_used_driver_lists_a_gpu_tensorflow_does_not():
    record = training_record(facts=cpu_build_facts())
    f = found(record)["gpu-not-used"]
    assert f.severity == "warning"
    assert f.evidence["nvml_gpus"] == ["NVIDIA A100-SXM4-40GB"]
    assert f.evidence["tensorflow_gpus"] == []
    assert f.evidence["built_with_cuda"] is False
    assert f.evidence["reason"]
    assert "NVIDIA A100-SXM4-40GB" in f.detail


def test_gpu_not_used_gpu_idle_while_training_ran():
    # TensorFlow lists the GPU, but the ops ran under tf.device('/CPU:0'): 8 s at 0-3 %.
    record = training_record(steps=400)
    with_nvml(record, np.random.default_rng(0).integers(0, 4, 90), 900 * MIB)
    f = found(record)["gpu-not-used"]
    assert f.evidence["tensorflow_gpus"] == ["/physical_device:GPU:0"]
    assert f.evidence["max_utilization_percent"] <= 5
    assert f.evidence["training_seconds"] >= 2
    assert f.evidence["nvml_samples"] >= 20


def test_no_gpu_not_used_when_the_gpu_is_busy():
    record = training_record(steps=400)
    with_nvml(record, np.random.default_rng(0).integers(60, 98, 90), 20 * GIB)
    assert "gpu-not-used" not in found(record)


def test_no_gpu_not_used_for_a_training_too_short_to_judge():
    record = training_record(steps=50)  # one second of training
    with_nvml(record, np.zeros(15), 900 * MIB)
    assert "gpu-not-used" not in found(record)


# -- memory-growth-disabled -----------------------------------------------------------------


def test_memory_growth_disabled_reserves_the_whole_gpu_for_a_small_model():
    record = training_record()
    with_gpu_memory(record, np.full(50, 1.5 * GIB))
    with_nvml(record, np.full(60, 80.0), 0.96 * A100_MEMORY)
    f = found(record)["memory-growth-disabled"]
    assert f.severity == "info"
    ev = f.evidence
    assert ev["nvml_memory_used_bytes"] >= 0.9 * ev["memory_total_bytes"]
    assert ev["tensorflow_peak_bytes"] == int(1.5 * GIB)
    assert ev["memory_growth"] is False
    assert ev["gpu"] == "/physical_device:GPU:0"


@pytest.mark.parametrize(
    "change",
    [
        "growth on",
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "cuda_malloc_async",
        "model fills the GPU",
    ],
)
def test_no_memory_growth_disabled(change):
    facts = gpu_facts(memory_growth=(change == "growth on"))
    if change == "TF_FORCE_GPU_ALLOW_GROWTH":
        facts["env"]["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    if change == "cuda_malloc_async":
        facts["env"]["TF_GPU_ALLOCATOR"] = "cuda_malloc_async"
    record = training_record(facts=facts)
    peak = 30 * GIB if change == "model fills the GPU" else 1.5 * GIB
    with_gpu_memory(record, np.full(50, peak))
    with_nvml(record, np.full(60, 80.0), 0.96 * A100_MEMORY)
    assert "memory-growth-disabled" not in found(record)


# -- mixed-precision-available --------------------------------------------------------------


def with_fit(record: Record, dense_layers: int, layers: int) -> None:
    record.keras_calls.append(
        KerasCall(
            api="fit",
            start=0.4,
            duration=record.wall_time - 0.5,
            steps=record.step_count,
            step_time=float(record.steps["duration"].sum()),
            loop=-1,
            model="resnet_like",
            batch_size=128.0,
            data="dataset",
            dense_layers=dense_layers,
            layers=layers,
        )
    )


def test_mixed_precision_available_on_an_ampere_gpu_training_in_float32():
    record = training_record()
    with_fit(record, dense_layers=18, layers=24)
    f = found(record)["mixed-precision-available"]
    assert f.severity == "info"
    assert f.evidence["compute_capability"] == [8, 0]
    assert f.evidence["policy"] == "float32"
    assert f.evidence["matmul_layer_share"] == pytest.approx(0.75)
    assert f.evidence["gpu"] == "NVIDIA A100-SXM4-40GB"


def test_no_mixed_precision_advice_when_already_mixed():
    facts = gpu_facts()
    facts["tensorflow"]["mixed_precision_policy"] = "mixed_float16"
    record = training_record(facts=facts)
    with_fit(record, dense_layers=18, layers=24)
    assert "mixed-precision-available" not in found(record)


def test_no_mixed_precision_advice_without_tensor_cores():
    facts = gpu_facts(compute_capability=[6, 0], device_name="Tesla P100-PCIE-16GB")
    facts["nvml"]["devices"][0]["compute_capability"] = [6, 0]
    record = training_record(facts=facts)
    with_fit(record, dense_layers=18, layers=24)
    assert "mixed-precision-available" not in found(record)


def test_no_mixed_precision_advice_for_a_model_of_few_matmul_layers():
    record = training_record()
    with_fit(record, dense_layers=2, layers=12)  # mostly normalisation and element-wise layers
    assert "mixed-precision-available" not in found(record)


# -- oom on a GPU ---------------------------------------------------------------------------

FIT_OOM = (
    "Graph execution error:\n\n"
    "Detected at node sequential/conv2d_1/Relu defined at (most recent call last):\n"
    '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main\n\n'
    '  File "/tmp/ipykernel_2811/3453243069.py", line 1, in <module>\n\n'
    "OOM when allocating tensor with shape[256,64,112,112] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
    "\t [[{{node sequential/conv2d_1/Relu}}]]\n"
    "Hint: If you want to see a list of allocated tensors when OOM happens, add "
    "report_tensor_allocations_upon_oom to RunOptions for current allocation info. This isn't "
    "available when running in Eager mode.\n [Op:__inference_train_function_2617]"
)
EAGER_OOM = (
    "{{function_node __wrapped__Conv2D_device_/job:localhost/replica:0/task:0/device:GPU:0}} "
    "OOM when allocating tensor with shape[64,512,56,56] and type half on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:Conv2D] name: "
)


def test_oom_in_fit_on_a_gpu_reads_tensorflow_message():
    record = training_record(steps=12, batch=256.0)
    with_gpu_memory(record, np.linspace(30 * GIB, 38 * GIB, 8))
    record.error = ErrorInfo("ResourceExhaustedError", FIT_OOM, step=12, phase="train")
    f = found(record)["oom"]
    assert f.severity == "error"
    ev = f.evidence
    assert ev["shape"] == [256, 64, 112, 112]
    assert ev["dtype"] == "float"
    assert ev["tensor_bytes"] == 256 * 64 * 112 * 112 * 4
    assert ev["device"] == "/job:localhost/replica:0/task:0/device:GPU:0"
    assert ev["allocator"] == "GPU_0_bfc"
    assert ev["op"] == "sequential/conv2d_1/Relu"
    assert ev["batch_size"] == 256
    assert ev["step"] == 12 and ev["phase"] == "train"
    assert ev["peak_GPU:0_bytes"] == 38 * GIB
    assert f.title.startswith("Out of device memory allocating a float tensor")
    assert "in train step 13 with batch size 256" in f.detail, f.detail


def test_oom_of_an_eager_op_on_a_gpu_names_the_op_not_the_wrapper():
    record = training_record(steps=5)
    record.error = ErrorInfo("ResourceExhaustedError", EAGER_OOM, step=5, phase=None)
    ev = found(record)["oom"].evidence
    assert ev["op"] == "Conv2D"
    assert ev["dtype"] == "half"
    assert ev["tensor_bytes"] == 64 * 512 * 56 * 56 * 2


def test_findings_of_a_healthy_gpu_run_are_at_most_notes():
    """Growth on, the GPU busy, the allocator flat after warm-up: nothing to warn about."""
    facts = gpu_facts(memory_growth=True)
    record = training_record(facts=copy.deepcopy(facts))
    current = np.full(100, 6 * GIB, dtype=np.float64)
    current[:8] = np.linspace(GIB, 6 * GIB, 8)
    with_gpu_memory(record, current)
    with_nvml(record, np.random.default_rng(1).integers(70, 99, 90), 7 * GIB)
    with_fit(record, dense_layers=18, layers=24)
    findings = diagnose(record)
    assert [f.code for f in findings] == ["mixed-precision-available"]
    assert findings[0].severity == "info"


def test_no_mixed_precision_advice_when_the_code_set_the_policy_itself():
    # TensorFlow's mixed-precision guide sets `mixed_float16` in its own code: the run starts
    # under the default, float32, and trains under the policy it set.
    record = training_record()
    with_fit(record, dense_layers=18, layers=24)
    record.facts["mixed_precision_policy_at_start"] = "float32"
    record.facts["mixed_precision_policy"] = "mixed_float16"
    assert "mixed-precision-available" not in found(record)


def test_the_policy_the_code_sets_is_the_one_recorded(ip):
    ip.run_cell("import keras")
    try:
        result, r = profiled(ip, "keras.mixed_precision.set_global_policy('mixed_float16')\n")
    finally:
        ip.run_cell("keras.mixed_precision.set_global_policy('float32')")
    assert result.success
    assert r.record.facts["mixed_precision_policy_at_start"] == "float32"
    assert r.record.facts["mixed_precision_policy"] == "mixed_float16"


def test_a_cell_that_trains_in_mixed_float16_on_the_cpu_is_told_it_is_slower_there(ip):
    """TensorFlow's mixed-precision guide sets `mixed_float16` in its own code; on a machine
    without a GPU it trained 19-47% slower than in float32 (measured)."""
    ip.run_cell("import numpy as np, keras")
    try:
        result, r = profiled(
            ip,
            "keras.mixed_precision.set_global_policy('mixed_float16')\n"
            "model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32),\n"
            "                          keras.layers.Dense(1, dtype='float32')])\n"
            "model.compile(optimizer='adam', loss='mse')\n"
            "model.fit(np.ones((64, 16)), np.ones((64, 1)), epochs=1, verbose=0)\n",
        )
    finally:
        ip.run_cell("keras.mixed_precision.set_global_policy('float32')")
    assert result.success
    (finding,) = [f for f in r.findings if f.code == "mixed-precision-without-tensor-cores"]
    assert finding.severity == "warning" and "runs on the CPU" in finding.detail
