"""Shared pieces of the diagnosis accuracy tests: set-up cells and finding look-ups.

The cells are small but real: Keras and TensorFlow run them in the test's IPython shell under
``%%tfprofile``; nothing is mocked. Assertions name the findings of the run in their message,
so a failure shows what the diagnosis said instead.
"""

from __future__ import annotations

import math

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
    assert result.success, result.error_in_exec
    assert not problems(r), f"false alarm on healthy code:\n{listing(r)}"


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
