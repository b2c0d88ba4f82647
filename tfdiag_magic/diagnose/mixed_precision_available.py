"""mixed-precision-available: a GPU with Tensor Cores trains in float32."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record
from ..rewrite import mixed_precision
from .evidence import first_rewrite, training_rows, with_rewrite
from .gpu_facts import nvml_devices, tf_gpus

CODE = "mixed-precision-available"
TITLE = "Mixed precision would use the GPU's Tensor Cores"
DOC = """\
## What it detects
Training on an NVIDIA GPU of compute capability 7.0 or newer (Volta, Turing, Ampere, Ada,
Hopper: GPUs with Tensor Cores) with the global Keras policy `float32`, on a model made mostly
of matrix-multiply layers (Dense, convolutions, attention, recurrent layers).

## Why it hurts
Tensor Cores run float16/bfloat16 matrix multiplies several times faster than float32, and
half-size activations halve their memory. TensorFlow's mixed-precision guide reports speed-ups
of up to 3× on such GPUs for models dominated by these layers; element-wise-heavy models gain
less.

## Evidence we show
The GPU and its compute capability, the policy in force, and the share of the model's layers
that are matrix-multiply layers (from the models given to `fit`).

## Fix
`keras.mixed_precision.set_global_policy("mixed_float16")` before building the model
(`"mixed_bfloat16"` on Ampere and newer avoids loss scaling), and keep the last layer in
float32 (`dtype="float32"`) so the softmax and loss stay accurate. Keras' `fit` scales the loss
automatically; a custom loop needs `keras.optimizers.LossScaleOptimizer`.

## Threshold
Compute capability ≥ 7.0, policy `float32`, at least 20 training steps, and at least half of
the model's layers are matrix-multiply layers when the model is known. An info note.
Checked on recorded facts.
"""

MIN_STEPS = 20
MIN_CAPABILITY = (7, 0)


def check(record: Record, source: str | None) -> Finding | None:
    policy = record.facts.get("mixed_precision_policy")
    if policy not in (None, "float32"):
        return None
    if training_rows(record).size < MIN_STEPS:
        return None
    gpus = tf_gpus(record)
    devices = nvml_devices(record)
    capable = None
    for index, gpu in enumerate(gpus):
        capability = gpu.get("compute_capability")
        if capability is None and index < len(devices):
            capability = devices[index].get("compute_capability")
        if capability and tuple(capability) >= MIN_CAPABILITY:
            capable = (gpu, tuple(capability))
            break
    if capable is None:
        return None
    fits = [c for c in record.keras_calls if c.api == "fit" and c.layers]
    share = None
    if fits:
        dense = sum(c.dense_layers for c in fits)
        layers = sum(c.layers for c in fits)
        share = dense / layers if layers else None
        if share is not None and share < 0.5:
            return None
    gpu, capability = capable
    name = gpu.get("device_name") or gpu.get("name")
    finding = Finding(
        code=CODE,
        severity="info",
        title=(
            f"{name} (compute capability {capability[0]}.{capability[1]}) trains in float32;"
            " mixed precision would use its Tensor Cores"
        ),
        detail=(
            f"The Keras policy is `{policy or 'float32'}`"
            + (
                f" and {share:.0%} of the model's layers are matrix-multiply layers"
                if share
                else ""
            )
            + ": float16/bfloat16 compute would run these on Tensor Cores."
        ),
        fix='`keras.mixed_precision.set_global_policy("mixed_float16")` before building the model,'
        ' with `dtype="float32"` on the last layer.',
        evidence={
            "gpu": name,
            "compute_capability": list(capability),
            "policy": policy or "float32",
            "matmul_layer_share": round(share, 3) if share is not None else None,
        },
    )
    return with_rewrite(finding, source, first_rewrite(source, (mixed_precision, {})))
