"""The NVML sampler, on whatever this machine has: without a driver it must explain and stay idle.

On a machine without an NVIDIA driver (the usual CI case) NVML cannot initialise: the sampler
records why in `status`, starts no thread, and a profiled run reports that reason and no
samples. On a machine where NVML does initialise those tests are skipped and the GPU branch
checks that samples are taken and the sampling thread is stopped. Nothing is faked: the
failure comes from the real `pynvml` on a machine without the library.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

import tfdiag_magic
from tfdiag_magic.probes.nvml_sampler import FIELDS, NVMLSampler
from tfdiag_magic.recorder import Recorder

THREAD_NAME = "tfdiag-nvml"


def _nvml_state() -> tuple[str, str | None]:
    """("ok", None) when NVML initialises and sees a GPU, ("no-init", why) when nvmlInit fails
    (no driver, no library), ("other", why) for the rarer cases (no pynvml, no GPU listed)."""
    try:
        import pynvml
    except ImportError:
        return "other", "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return "no-init", (str(exc) or type(exc).__name__).strip()
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "other", "NVML found no GPU"
    except Exception as exc:
        return "other", str(exc) or type(exc).__name__
    finally:
        pynvml.nvmlShutdown()
    return "ok", None


NVML_STATE, NVML_FAILURE = _nvml_state()
needs_no_nvml = pytest.mark.skipif(
    NVML_STATE != "no-init",
    reason="NVML initialises on this machine (a GPU and its driver exist)"
    if NVML_STATE == "ok"
    else f"NVML fails here after initialising: {NVML_FAILURE}",
)
needs_nvml = pytest.mark.skipif(
    NVML_STATE != "ok", reason=f"NVML does not work here: {NVML_FAILURE}"
)


def _nvml_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


@tf.function
def _double(x):
    return x * 2.0


def _profiled_run():
    x = tf.constant([1.0, 2.0])
    with tfdiag_magic.profile() as result:
        for _ in range(3):
            _double(x)
    return result


# -- no NVML (no driver) ---------------------------------------------------------------------


@needs_no_nvml
def test_sampler_without_nvml_says_why_in_its_status():
    sampler = NVMLSampler()
    sampler.install(Recorder())
    try:
        assert sampler.status.startswith("NVML not available: ")
        reason = sampler.status.removeprefix("NVML not available: ")
        assert reason == NVML_FAILURE
        assert sampler.devices == []
    finally:
        sampler.remove()


@needs_no_nvml
def test_sampler_without_nvml_starts_no_thread():
    before = set(threading.enumerate())
    sampler = NVMLSampler(interval=0.01)
    sampler.install(Recorder())
    assert set(threading.enumerate()) == before
    assert _nvml_threads() == []
    sampler.remove()
    assert set(threading.enumerate()) == before


@needs_no_nvml
def test_sampler_without_nvml_can_be_removed_twice_and_has_an_empty_table():
    sampler = NVMLSampler()
    sampler.install(Recorder())
    sampler.remove()
    sampler.remove()
    assert sampler.table() == {}


@needs_no_nvml
def test_sampler_that_was_never_installed_removes_cleanly_and_is_not_started():
    sampler = NVMLSampler()
    sampler.remove()
    assert sampler.status == "not started"
    assert sampler.table() == {}


@needs_no_nvml
def test_profiled_run_without_nvml_reports_the_reason_and_no_samples():
    result = _profiled_run()
    record = result.record
    assert record is not None
    assert record.facts["nvml"] == f"NVML not available: {NVML_FAILURE}"
    assert record.nvml == {}
    report = result.report()
    assert report["gpu"]["nvml"] == record.facts["nvml"]
    assert report["gpu"]["nvml_samples"] == 0
    assert report["steps"]["phases"]["function"]["count"] == 3  # the run itself was recorded
    assert _nvml_threads() == []
    assert record.facts["nvml"] in result.summary()


def test_profiled_run_with_nvml_off_says_off_and_starts_no_sampler():
    before = set(threading.enumerate())
    x = tf.constant([1.0])
    with tfdiag_magic.profile(nvml=False) as result:
        _double(x)
    assert result.record is not None
    assert result.record.facts["nvml"] == "off"
    assert result.report()["gpu"]["nvml_samples"] == 0
    assert set(threading.enumerate()) == before


# -- NVML works (a GPU machine) --------------------------------------------------------------


@needs_nvml
def test_sampler_with_nvml_takes_samples_and_stops_its_thread():
    sampler = NVMLSampler(interval=0.01)
    sampler.install(Recorder())
    try:
        assert sampler.status.startswith("sampling ")
        assert len(_nvml_threads()) == 1
    finally:
        sampler.remove()  # joins the thread, which samples once before its first wait
    assert _nvml_threads() == []
    table = sampler.table()
    samples = table["time"].size
    assert samples >= 1
    assert sampler.devices
    for device in sampler.devices:
        for field in FIELDS:
            assert table[f"{device}:{field}"].shape == (samples,)
        total = table[f"{device}:mem_total"]
        assert np.all(total[~np.isnan(total)] > 0)


@needs_nvml
def test_profiled_run_with_nvml_reports_samples_and_leaves_no_thread():
    result = _profiled_run()
    record = result.record
    assert record is not None
    assert record.facts["nvml"].startswith("sampling ")
    assert result.report()["gpu"]["nvml_samples"] >= 1
    assert record.nvml["time"].size == result.report()["gpu"]["nvml_samples"]
    assert _nvml_threads() == []
