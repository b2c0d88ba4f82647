"""repeated-adapt-passes: preprocessing layers adapted one by one over one tf.data pipeline.

Real Keras 3 and TensorFlow, the code of TensorFlow's "Classify structured data using Keras
preprocessing layers" tutorial (its helpers `df_to_dataset`, `get_normalization_layer` and
`get_category_encoding_layer` as written there), on synthetic columns: each `adapt()` runs the
shuffled pipeline of every column from its source again. The same layers adapted on the
columns' arrays, and over a cache of the pipeline, are the fixes; both are silent. The
thresholds are tested on records.
"""

from __future__ import annotations

import dataclasses
import traceback

import pytest

from tests.diagnosis_support import assert_silent, the
from tests.helpers import profiled
from tfdiag_magic.diagnose import repeated_adapt_passes
from tfdiag_magic.record import AdaptCall, DatasetStage, Record

CODE = "repeated-adapt-passes"

# 40,000 rows of 12 columns: one pass of the tutorial's pipeline (a shuffle of every row,
# batches of 256, then the one column) takes 0.3-0.4 s on a 2-vCPU AMD EPYC VM, quiet.
DATA = """
import numpy as np, pandas as pd, tensorflow as tf, keras
from keras import layers
rng = np.random.default_rng(0)
n = 40000
words = lambda k: rng.choice([f"w{i}" for i in range(k)], n)
dataframe = pd.DataFrame({
    "Age": rng.integers(0, 100, n), "Fee": rng.integers(0, 300, n),
    "PhotoAmt": rng.integers(0, 30, n).astype("float64"), "Type": words(2),
    "Breed1": words(150), "Gender": words(2), "Color1": words(7), "Color2": words(7),
    "MaturitySize": words(3), "FurLength": words(3), "Vaccinated": words(3),
    "Health": words(2), "target": rng.integers(0, 2, n)})

def df_to_dataset(dataframe, shuffle=True, batch_size=32):
    df = dataframe.copy()
    labels = df.pop("target")
    df = {key: value.to_numpy()[:, tf.newaxis] for key, value in dataframe.items()}
    ds = tf.data.Dataset.from_tensor_slices((dict(df), labels))
    if shuffle:
        ds = ds.shuffle(buffer_size=len(dataframe))
    ds = ds.batch(batch_size)
    ds = ds.prefetch(batch_size)
    return ds

def get_normalization_layer(name, dataset):
    normalizer = layers.Normalization(axis=None)
    feature_ds = dataset.map(lambda x, y: x[name])
    normalizer.adapt(feature_ds)
    return normalizer

def get_category_encoding_layer(name, dataset, dtype, max_tokens=None):
    if dtype == "string":
        index = layers.StringLookup(max_tokens=max_tokens)
    else:
        index = layers.IntegerLookup(max_tokens=max_tokens)
    feature_ds = dataset.map(lambda x, y: x[name])
    index.adapt(feature_ds)
    return index

train_ds = df_to_dataset(dataframe, batch_size=256)
NUMERIC = ["PhotoAmt", "Fee"]
STRINGS = ["Type", "Color1", "Color2", "Gender", "MaturitySize", "FurLength", "Vaccinated",
           "Health", "Breed1"]
"""

# The tutorial's calls: a Normalization per number, an IntegerLookup for the age, a
# StringLookup per string column, each over the training pipeline.
TUTORIAL = """\
adapted = {}
for header in NUMERIC:
    adapted[header] = get_normalization_layer(header, train_ds)
adapted["Age"] = get_category_encoding_layer("Age", train_ds, dtype="int64", max_tokens=5)
for header in STRINGS:
    adapted[header] = get_category_encoding_layer(header, train_ds, dtype="string", max_tokens=5)
"""

# The fix where the data is in memory: each layer adapted on its column's array.
ON_ARRAYS = """\
adapted = {}
for header in NUMERIC:
    adapted[header] = layers.Normalization(axis=None)
    adapted[header].adapt(dataframe[header].to_numpy())
adapted["Age"] = layers.IntegerLookup(max_tokens=5)
adapted["Age"].adapt(dataframe["Age"].to_numpy())
for header in STRINGS:
    adapted[header] = layers.StringLookup(max_tokens=5)
    adapted[header].adapt(dataframe[header].to_numpy())
"""


def _vocabularies(ip) -> dict:
    adapted = ip.user_ns["adapted"]
    return {
        name: layer.get_vocabulary() if hasattr(layer, "get_vocabulary") else None
        for name, layer in adapted.items()
    }


def test_the_structured_data_tutorials_adapt_calls_are_found(ip):
    ip.run_cell(DATA)
    result, r = profiled(ip, TUTORIAL)
    assert result.success
    calls = r.record.adapt_calls
    # One call each, outermost: StringLookup's adapt runs IndexLookup's inside it.
    assert [call.layer for call in calls] == ["Normalization"] * 2 + ["IntegerLookup"] + [
        "StringLookup"
    ] * 9
    assert {call.data for call in calls} == {"dataset"}
    assert {call.shared for call in calls} == {0}  # every pipeline is train_ds under a map
    passes = sum(call.wall for call in calls)
    print(f"{len(calls)} adapt calls, {passes:.2f} s of a {r.record.wall_time:.2f} s run")
    f = the(r, CODE)
    ev = f.evidence
    assert ev["calls"] == 12 and ev["layers"] == {
        "StringLookup": 9,
        "Normalization": 2,
        "IntegerLookup": 1,
    }, ev
    assert ev["seconds"] == pytest.approx(passes, rel=1e-3)
    work = sum(min(call.wall, call.cpu) for call in calls)
    assert ev["repeated_s"] == pytest.approx(work * 11 / 12, rel=1e-3)
    assert ev["cpu_s"] == pytest.approx(sum(call.cpu for call in calls), rel=1e-3)
    assert ev["pipeline"][0] == "MapDataset" and ev["pipeline"][-1] == "TensorSliceDataset", ev
    assert "ShuffleDataset" in ev["pipeline"] and ev["source_in_memory"] is True
    # The helpers are another cell's: the lines are the profiled cell's calls of them (its
    # line 1 is %%tfprofile's).
    assert ev["lines"] == [4, 5, 7] and ev["called_from"] == [], ev
    assert "`layer.adapt(train_df[name].to_numpy())`" in f.fix and ".cache()" in f.fix
    assert f.title.startswith("12 adapt() calls each read the same pipeline whole")

    # The tool changes nothing the layers learn: the same vocabularies as a plain run's.
    profiled_vocabularies = _vocabularies(ip)
    ip.run_cell(TUTORIAL)
    assert _vocabularies(ip) == profiled_vocabularies


def test_adapting_on_the_columns_arrays_is_silent(ip):
    ip.run_cell(DATA)
    result, r = profiled(ip, ON_ARRAYS)
    assert result.success
    calls = r.record.adapt_calls
    assert [call.data for call in calls] == ["array"] * 12
    print(f"12 adapt calls on arrays, {sum(call.wall for call in calls):.2f} s")
    assert_silent(r, CODE)


def test_adapting_over_a_cache_of_the_pipeline_is_silent(ip):
    ip.run_cell(DATA)
    result, r = profiled(
        ip, "adapt_ds = train_ds.cache()\n" + TUTORIAL.replace("train_ds", "adapt_ds")
    )
    assert result.success
    calls = r.record.adapt_calls
    assert len(calls) == 12 and {call.shared for call in calls} == {0}
    first, later = calls[0].wall, sum(call.wall for call in calls[1:])
    print(f"the first pass {first:.2f} s, the 11 later ones {later:.2f} s in all")
    # The later calls read the cache (0.67 s for the 11 here, quiet): what they share is no
    # longer run again, whatever a pass over the cache costs on a slower machine.
    assert "CacheDataset" in [stage.kind for stage in calls[0].stages]
    assert_silent(r, CODE)


# keras-io's "Structured data classification with FeatureSpace", its heart-disease columns made
# synthetic, 40,000 rows: `FeatureSpace.adapt` adapts each feature's layer over a `map` of the
# dataset it is given, in a pass of its own.
FEATURE_SPACE = """
import numpy as np, pandas as pd, tensorflow as tf, keras
from keras.utils import FeatureSpace
rng = np.random.default_rng(0)
n = 40000
df = pd.DataFrame({"age": rng.integers(20, 80, n), "trestbps": rng.integers(90, 200, n),
    "chol": rng.integers(100, 500, n), "oldpeak": rng.normal(size=n), "sex": rng.integers(0, 2, n),
    "cp": rng.integers(0, 4, n), "thal": rng.choice(["fixed", "normal", "reversible"], n),
    "target": rng.integers(0, 2, n)})
labels = df.pop("target")
train_ds = (tf.data.Dataset.from_tensor_slices((dict(df), labels))
            .shuffle(buffer_size=len(df)).batch(32))
feature_space = FeatureSpace(
    features={
        "sex": FeatureSpace.integer_categorical(num_oov_indices=0),
        "cp": FeatureSpace.integer_categorical(num_oov_indices=0),
        "thal": FeatureSpace.string_categorical(num_oov_indices=0),
        "age": FeatureSpace.float_discretized(num_bins=30),
        "trestbps": FeatureSpace.float_normalized(),
        "chol": FeatureSpace.float_normalized(),
        "oldpeak": FeatureSpace.float_normalized(),
    },
    output_mode="concat",
)
train_ds_with_no_labels = train_ds.map(lambda x, _: x)
"""


def test_a_feature_spaces_adapt_is_read_as_a_pass_per_feature(ip):
    ip.run_cell(FEATURE_SPACE)
    result, r = profiled(ip, "feature_space.adapt(train_ds_with_no_labels)\n")
    assert result.success
    calls = r.record.adapt_calls
    assert len(calls) == 7 and all(call.by_feature_space for call in calls), calls
    assert {call.shared for call in calls} == {0} and {call.line for call in calls} == {2}
    passes = sum(call.wall for call in calls)
    print(f"7 passes, {passes:.2f} s of a {r.record.wall_time:.2f} s run")
    f = the(r, CODE)
    assert f.evidence["calls"] == 7 and f.evidence["by_feature_space"] is True, f.evidence
    assert "by `FeatureSpace.adapt`" in f.detail
    fix = "feature_space.adapt(train_ds_with_no_labels.unbatch().batch(1024).cache())"
    assert f"`{fix}`" in f.fix

    # The fix: the same adapt over a cache of the dataset, in larger batches.
    result, fixed = profiled(ip, fix + "\n")
    assert result.success
    assert len(fixed.record.adapt_calls) == 7
    cached = sum(call.wall for call in fixed.record.adapt_calls)
    print(f"over a cache: {cached:.2f} s")
    assert_silent(fixed, CODE)


FAILING_ADAPT = """
import tensorflow as tf, keras
def checked(x):
    tf.debugging.assert_less(x, tf.constant(50, tf.int64), message="a value out of range")
    return tf.strings.as_string(x)
words = tf.data.Dataset.range(100).map(checked).batch(8)
lookup = keras.layers.StringLookup()
lookup.adapt(words)
"""


def test_an_adapt_that_raises_is_recorded_unfinished_and_raises_as_without_the_tool(ip):
    plain = ip.run_cell(FAILING_ADAPT)
    result, r = profiled(ip, FAILING_ADAPT)
    expected, got = plain.error_in_exec, result.error_in_exec
    assert type(got) is type(expected) and "a value out of range" in str(expected)
    assert str(got).splitlines()[0] == str(expected).splitlines()[0]
    lines = [(f.lineno, f.name) for f in traceback.extract_tb(got.__traceback__)]
    assert (9, "<module>") in lines  # the cell's own `lookup.adapt(words)` line
    (call,) = r.record.adapt_calls
    assert call.finished is False and call.data == "dataset"


def _calls(
    walls: list[float], shared: list[int], data: str, cached: bool, cpu_share: float = 1.0
) -> Record:
    record = Record()
    record.wall_time = 10.0
    stages = (
        DatasetStage("MapDataset"),
        DatasetStage("CacheDataset" if cached else "BatchDataset", depth=1),
        DatasetStage("TensorSliceDataset", depth=2),
    )
    record.adapt_calls = [
        AdaptCall(float(i), wall, wall * cpu_share, "StringLookup", data, group, stages, line=5)
        for i, (wall, group) in enumerate(zip(walls, shared, strict=True))
    ]
    return record


@pytest.mark.parametrize(
    ("walls", "shared", "data", "found"),
    [
        ([0.5] * 4, [0] * 4, "dataset", True),  # 1.5 s past the first pass, 20% of the run
        ([0.5] * 2, [0] * 2, "dataset", False),  # two calls: too few to call a habit
        ([0.5] * 4, [0, 1, 2, 3], "dataset", False),  # four pipelines, one pass each
        ([0.3] * 4, [0] * 4, "dataset", False),  # 0.9 s past the first pass
        ([0.5] * 4, [0] * 4, "array", False),  # arrays: no pipeline run again
        ([0.1] * 12, [0] * 12, "dataset", False),  # 1.1 s past the first, 12% of the run
        ([0.5] * 4, [0] * 4, "cached", False),  # the later passes read a cache
        ([0.5] * 4, [0] * 4, "busy", False),  # 1.5 s of wall, 0.5 s of CPU: a busy machine
        ([0.5] * 4, [0] * 4, "raised", False),  # two of the four raised: two passes known
    ],
    ids=["found", "two", "separate", "short", "arrays", "small-share", "cached", "busy", "raised"],
)
def test_only_enough_passes_over_one_pipeline_count(walls, shared, data, found):
    cpu_share = 1 / 3 if data == "busy" else 1.0
    kind = "dataset" if data in ("cached", "busy", "raised") else data
    record = _calls(walls, shared, kind, data == "cached", cpu_share)
    if data == "raised":
        calls = record.adapt_calls
        calls[1:3] = [dataclasses.replace(call, finished=False) for call in calls[1:3]]
    assert (repeated_adapt_passes.check(record, None) is not None) is found
