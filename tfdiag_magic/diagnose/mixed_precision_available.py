"""mixed-precision-available: a GPU with Tensor Cores trains in float32."""

from __future__ import annotations

from ..findings import Finding
from ..record import Record
from ..rewrite import mixed_precision
from .evidence import first_rewrite, training_rows, with_rewrite
from .gpu_facts import cc_text, gpu_capability, gpu_label, tf_gpus, tf_readable, without_run

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
The GPUs and their compute capabilities, the policy in force, the policy advised, and the share
of the model's layers that are matrix-multiply layers (from the models given to `fit`).

## Fix
`keras.mixed_precision.set_global_policy(POLICY)` before building the model, and the last layer
in float32 (`dtype="float32"`) so the softmax and loss stay accurate. The one policy choice,
for the oldest GPU in use (`advised_policy`): `"mixed_bfloat16"` from compute capability 8.0
(Ampere and newer), which has float32's exponent range and so needs no loss scaling;
`"mixed_float16"` on 7.x (Volta, Turing), whose Tensor Cores have no bfloat16 path, with loss
scaling (Keras' `fit` adds it; a custom loop needs `keras.optimizers.LossScaleOptimizer`).
Sources: TensorFlow's mixed-precision guide (tensorflow.org/guide/mixed_precision: float16
Tensor Cores from 7.0, bfloat16 needs no loss scaling) and NVIDIA's Ampere architecture
whitepaper (bfloat16 Tensor Core math from compute capability 8.0).

## Threshold
Compute capability ≥ 7.0, policy `float32` (or Keras not imported: its default). After a
profiled run also at least 20 training steps, and at least half of the model's layers are
matrix-multiply layers when the model is known. An info note, the same in `%tfgpu` and
`%%tfprofile`. Checked on recorded facts.
"""

MIN_STEPS = 20
MIN_CAPABILITY = (7, 0)
BFLOAT16_CAPABILITY = (8, 0)


def advised_policy(capability: tuple[int, int]) -> str | None:
    """The Keras policy for a GPU of this compute capability (see the Fix above)."""
    if capability >= BFLOAT16_CAPABILITY:
        return "mixed_bfloat16"
    return "mixed_float16" if capability >= MIN_CAPABILITY else None


def check(record: Record, source: str | None) -> Finding | None:
    # The policy at the run's end (one the code set) and at its start (one set before).
    policies = [
        record.facts.get("mixed_precision_policy"),
        record.facts.get("mixed_precision_policy_at_start"),
    ]
    if any(p not in (None, "float32") for p in policies) or not tf_readable(record):
        return None
    policy = record.facts.get("mixed_precision_policy")
    ran = not without_run(record)
    if ran and training_rows(record).size < MIN_STEPS:
        return None
    gpus = tf_gpus(record)
    capable = [
        (gpu, capability)
        for index, gpu in enumerate(gpus)
        if (capability := gpu_capability(record, index, gpu)) and capability >= MIN_CAPABILITY
    ]
    if not capable:
        return None
    share = None
    fits = [c for c in record.keras_calls if c.api == "fit" and c.layers]
    if fits:
        layers = sum(c.layers for c in fits)
        share = sum(c.dense_layers for c in fits) / layers if layers else None
        if share is not None and share < 0.5:
            return None
    oldest = min(capability for _, capability in capable)  # advice that holds for every GPU
    advised = advised_policy(oldest)
    if advised == "mixed_bfloat16":
        why = (
            "float32 matrix multiplications already use TensorFloat-32 on these Tensor Cores;"
            " bfloat16 compute halves activation memory and uses the faster 16-bit Tensor Core"
            " paths, without loss scaling."
        )
    else:
        why = (
            "in float32 these GPUs do not use their Tensor Cores at all; float16 compute does"
            " (Keras adds loss scaling for it in fit())."
        )
    gpu, capability = capable[0]
    names = ", ".join(f"{gpu_label(g)} (compute capability {cc_text(c)})" for g, c in capable)
    shown = "the default float32" if policy is None else "float32"
    finding = Finding(
        code=CODE,
        severity="info",
        title=f"{names} trains in float32; mixed precision would use its Tensor Cores",
        detail=f"{names} has Tensor Cores and the Keras dtype policy is {shown}"
        + (f", and {share:.0%} of the model's layers are matrix-multiply layers" if share else "")
        + f": {why}",
        fix=f'`keras.mixed_precision.set_global_policy("{advised}")` before building the model,'
        ' with `dtype="float32"` on the last layer (e.g. `layers.Activation("softmax",'
        ' dtype="float32")`) for numerically stable outputs.',
        evidence={
            "gpu": gpu.get("device_name") or gpu.get("name"),
            "compute_capability": list(capability),
            "compute_capabilities": {g.get("name"): list(c) for g, c in capable},
            "policy": policy or "float32",
            "advised_policy": advised,
            "matmul_layer_share": round(share, 3) if share is not None else None,
        },
    )
    return with_rewrite(
        finding, source, first_rewrite(source, (mixed_precision, {"policy": advised}))
    )
