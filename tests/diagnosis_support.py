"""Shared pieces of the diagnosis accuracy tests: set-up cells and finding look-ups.

The cells are small but real: Keras and TensorFlow run them in the test's IPython shell under
``%%tfprofile``; nothing is mocked. Assertions name the findings of the run in their message,
so a failure shows what the diagnosis said instead.
"""

from __future__ import annotations

import math

from tfdiag_magic.diagnose.machine_load import machine_during_run
from tfdiag_magic.findings import Finding
from tfdiag_magic.record import Kind, Phase, Record
from tfdiag_magic.recorder import Recorder

# A tabular binary task, a small classifier, and a compiled custom training step.
TABULAR = """
import numpy as np, tensorflow as tf, keras
rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 16)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int32")
model = keras.Sequential([
    keras.Input((16,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(2),
])
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
"""


def listing(r) -> str:
    """The run's findings, one a line, for assertion messages."""
    if not r.findings:
        return "no findings"
    return "\n".join(f"{f.severity} {f.code}: {f.title} {f.evidence}" for f in r.findings)


def codes(r) -> list[str]:
    return [f.code for f in r.findings]


def the(r, code: str) -> Finding:
    """The one finding of `code` in the run (fails, listing the findings, if there is none)."""
    found = [f for f in r.findings if f.code == code]
    assert len(found) == 1, f"expected one {code} finding, got:\n{listing(r)}{_series_medians(r)}"
    finding = found[0]
    assert finding.title and finding.detail and finding.fix, finding
    assert finding.evidence, f"{code} shows no numbers: {finding}"
    return finding


def _series_medians(r) -> str:
    """The window medians each series of steps or loop iterations had, as progressive-slowdown
    reads them: what a missed slowdown (one seen only under a loaded suite) rested on."""
    import numpy as np

    from tfdiag_magic.diagnose import progressive_slowdown

    record = r.record
    lines = []
    for rows, label, loop in progressive_slowdown._series(record):
        steady = rows[~record.steps["traced"][rows]][1:]
        windows = np.array_split(record.steps["duration"][steady], progressive_slowdown.WINDOWS)
        medians = ", ".join(f"{np.median(w) * 1e3:.2f}" for w in windows if w.size)
        lines.append(f"\n  {label} (loop {loop}), window medians in ms: {medians}")
    return "".join(lines)


def problems(r) -> list[Finding]:
    """Findings that warn or fail; info notes are allowed on healthy code."""
    return [f for f in r.findings if f.severity in ("warning", "error")]


def assert_healthy(result, r) -> None:
    """The cell ran and nothing warns, but for a busy machine's stalled iterator releases at the
    ends of loops and fits (`stalled_releases_on_a_busy_machine`)."""
    assert result.success, result.error_in_exec
    machine = machine_during_run(r.record)
    busy = bool(machine and machine["busy"])
    found = [
        f
        for f in problems(r)
        if not (
            f.code == "epoch-start-stall" and stalled_releases_on_a_busy_machine(f.evidence, busy)
        )
    ]
    assert not found, f"false alarm on healthy code:\n{listing(r)}"


def stalled_releases_on_a_busy_machine(evidence: dict, busy: bool) -> bool:
    """Whether an `epoch-start-stall` rests on the ends alone (of the code's own loops over a
    dataset, where the iterator is let go, or of fits: one long sleep is enough there), on a
    machine the report calls busy: a true finding there, on code healthy on a quiet machine.
    How often a release sleeps depends on the load (the rule's DOC: a loop of 60 epochs slept
    at 3-4 of its ends quiet, 21-32 beside a CPU hog). Measured plainly, without the tool, on
    the 2-vCPU VM beside a CPU hog and two TensorFlow trainings: the end of
    `tf_quickstart_advanced`'s training loop took 1.05 s, 2.37 s, 0.29 s and 0.12 s in some
    epochs of four runs, with 0.6 ms on a CPU (0.8-86 ms quiet); a GAN's loop of 10 epochs in
    the suite beside a hog slept at 7 of its 10 ends, 0.39 s each, 42% of its run. On a quiet
    machine the finding still fails the test."""
    return (
        busy
        and evidence.get("stalled_loop_releases", 0) + evidence.get("stalled_fit_ends", 0) >= 1
        and not evidence.get("stalled_epoch_starts")
        and not evidence.get("stalled_validation_starts")
    )


def assert_silent(r, code: str) -> None:
    assert code not in codes(r), f"{code} on a cell without that problem:\n{listing(r)}"


def rising_steps(ratio: float, source: str | None = None, first: float = 0.001) -> Record:
    """A recorded run of 200 training steps of the same work whose time rises steadily from
    `first` seconds to `ratio` times that, both halves rising: the shape of CI's false
    alarms (a healthy `fit` read 2.34× beside a neighbour)."""
    rec = Recorder(memory_interval=3600)
    rec.source = source
    t = rec.t0
    for i in range(200):
        duration = first * (1 + (ratio - 1) * i / 199)
        rec.add_step(Phase.of("train"), Kind.MARKER, t, t + duration, math.nan, -1, False)
        t += duration + 0.0002
    return rec.finish()
