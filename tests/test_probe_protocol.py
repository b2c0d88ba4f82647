"""The recorder's public face and the probe protocol (issue 13, item 2).

- A step of phase ``train`` is a training step: `Recorder.add_step` marks it (the anchor of the
  next eager update, the loops' item counting), whatever probe appended it.
- `StepRows.column` reads the rows that `rows_since` hands out by field name.
- Every probe of a session writes its own part of the record in `finish(record)`; one whose
  `finish` fails is a line of the problems and the others' parts are kept.
- The model probe tells a Sequential model's functional twin apart without reading frames.
"""

from __future__ import annotations

import inspect
from time import perf_counter

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdiag_magic.probes.gc_pauses import GCProbe
from tfdiag_magic.probes.keras_models import KerasModelProbe
from tfdiag_magic.record import Kind, Phase
from tfdiag_magic.recorder import ROW_FIELDS, Recorder
from tfdiag_magic.session import Session, SessionOptions

# -- one way to mark a training step ---------------------------------------------------------


def test_a_train_step_moves_the_anchor_and_any_other_step_does_not():
    rec = Recorder()
    start = perf_counter()
    rec.add_step(Phase.EVAL, Kind.KERAS, start, start + 0.1, np.nan, -1, False)
    rec.graph_calls = 2
    assert rec.anchor == rec.t0 and rec.graph_calls == 2
    rec.add_step(Phase.TRAIN, Kind.MARKER, start + 0.1, start + 0.2, np.nan, -1, False)
    assert rec.anchor == start + 0.2
    assert rec.graph_calls == 0
    rec.add_step(Phase.FUNCTION, Kind.TF_FUNCTION, start + 0.2, start + 0.3, np.nan, -1, False)
    assert rec.anchor == start + 0.2


def test_after_a_train_step_the_next_loop_item_starts_the_next_eager_step():
    rec = Recorder()
    start = perf_counter()
    loop = rec.begin_loop(0)
    rec.next_item(loop, start, start)  # the first item: the next eager step's work begins here
    assert rec.anchor == start
    rec.next_item(loop, start + 1.0, start + 1.0)  # accumulation: no step yet, the anchor stays
    assert rec.anchor == start
    rec.add_step(Phase.TRAIN, Kind.EAGER_UPDATE, start, start + 2.0, np.nan, -1, True)
    rec.next_item(loop, start + 3.0, start + 3.0)
    assert rec.anchor == start + 3.0


def test_no_probe_marks_a_training_step_but_through_add_step():
    """`training_step_done` is gone: the probes, the marker and the recorder agree on one way."""
    assert not hasattr(Recorder, "training_step_done")


# -- rows by field name ----------------------------------------------------------------------


def test_rows_since_reads_by_field_name():
    rec = Recorder()
    t0 = rec.t0
    for i in range(3):
        rec.add_step(Phase.TRAIN, Kind.MARKER, t0 + i, t0 + i + 0.5, np.nan, -1, False, loss=1.0)
    rec.add_step(Phase.LOOP, Kind.LOOP, t0 + 3, t0 + 4, np.nan, -1, False)
    new = rec.rows_since(0)
    assert new.position == 4
    np.testing.assert_allclose(new.column("start"), [0, 1, 2, 3])
    np.testing.assert_allclose(new.column("duration"), [0.5, 0.5, 0.5, 1.0])
    assert new.column("phase").tolist() == [Phase.TRAIN] * 3 + [Phase.LOOP]
    assert new.column("loss")[:3].tolist() == [1.0] * 3
    for name in ROW_FIELDS:
        assert new.column(name).shape == (4,)
    with pytest.raises(ValueError):
        new.column("no such field")


# -- the probe protocol ----------------------------------------------------------------------


def _run_a_step() -> None:
    variable = tf.Variable(1.0)
    optimizer = keras.optimizers.SGD(0.1)

    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(x) * variable
        optimizer.apply_gradients([(tape.gradient(loss, variable), variable)])
        return loss

    for _ in range(3):
        train_step(tf.ones(4))


def test_every_probe_of_a_session_writes_its_part_in_finish():
    with Session(SessionOptions(nvml=False)) as result:
        _run_a_step()
    record = result.record
    assert result.problems == []
    assert record.phase_counts().get("train") == 3
    assert any(f.name.endswith("train_step") and f.calls == 3 for f in record.functions)
    assert "time" in record.gc  # the GC probe's table
    assert record.facts["nvml"] == "off"  # the NVML probe, switched off
    assert record.traces  # the recorder's own part


def test_every_probe_class_the_session_uses_follows_the_protocol():
    import tfdiag_magic.session as session_module

    classes = [
        value
        for name, value in vars(session_module).items()
        if inspect.isclass(value) and name.endswith("Probe") and name != "Probe"
    ]
    assert len(classes) >= 11
    for cls in classes:
        for method in ("install", "remove", "finish"):
            assert callable(getattr(cls, method, None)), (cls.__name__, method)
        assert isinstance(cls.name, str), cls.__name__


def test_a_probe_whose_finish_fails_is_a_problem_and_the_rest_is_kept(monkeypatch):
    def failing(self, record):
        raise RuntimeError("injected")

    monkeypatch.setattr(GCProbe, "finish", failing)
    with Session(SessionOptions(nvml=False)) as result:
        _run_a_step()
    assert result.problems == ["record (gc probe) failed: RuntimeError: injected"]
    record = result.record
    assert record.gc == {}
    assert record.phase_counts().get("train") == 3
    assert any(f.name.endswith("train_step") for f in record.functions)
    assert not record.steps["gc_time"].any()


# -- the Sequential model's twin -------------------------------------------------------------


@pytest.fixture
def model_probe():
    from keras.src.models import sequential
    from keras.src.models.functional import Functional

    rec = Recorder()
    probe = KerasModelProbe()
    probe.install(rec)
    try:
        yield rec
    finally:
        probe.remove()
    assert sequential.Functional is Functional  # put back as it was


def test_a_sequential_model_counts_once_not_its_functional_twin(model_probe):
    rec = model_probe
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])  # built at once
    lazy = keras.Sequential([keras.layers.Dense(2)])
    lazy.build((None, 3))  # builds its twin now
    assert model._functional is not None and lazy._functional is not None
    assert [m.cls for m in rec.models] == ["Sequential", "Sequential"]


def test_a_sequential_model_made_before_the_run_and_built_in_it_adds_no_model():
    from keras.src.models.functional import Functional

    early = keras.Sequential([keras.layers.Dense(2)])
    rec = Recorder()
    probe = KerasModelProbe()
    probe.install(rec)
    try:
        early(np.ones((1, 3), dtype="float32"))  # the first call builds it, and its twin
        inputs = keras.Input((3,))
        users = keras.Model(inputs, keras.layers.Dense(1)(inputs))  # the cell's own model
        # Read as a class, the name in Keras' sequential module still answers as Functional.
        from keras.src.models import sequential

        assert isinstance(users, sequential.Functional)
        assert issubclass(Functional, sequential.Functional)
        assert sequential.Functional.__name__ == "Functional"
    finally:
        probe.remove()
    assert isinstance(early._functional, Functional)
    assert [m.cls for m in rec.models] == ["Functional"]


def test_the_model_probe_reads_no_frames():
    from tfdiag_magic.probes import keras_models

    assert "_getframe" not in inspect.getsource(keras_models)


def test_the_record_names_the_package_version():
    import tfdiag_magic
    from tfdiag_magic.record import TOOL_VERSION

    assert tfdiag_magic.__version__ == TOOL_VERSION
