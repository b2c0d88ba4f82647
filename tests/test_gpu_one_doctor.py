"""One GPU doctor: ``%tfgpu`` and ``%%tfprofile`` advise from the same rule modules, and NVML is
opened through one reference-counted session."""

from __future__ import annotations

import pynvml

from tests.test_diagnose_gpu_records import found, gpu_facts, training_record, with_fit
from tfdiag_magic import nvml
from tfdiag_magic.diagnose.gpu_rules import problems


def test_both_tools_advise_the_same_policy_on_the_same_gpu():
    for capability, policy in (([8, 0], "mixed_bfloat16"), ([7, 5], "mixed_float16")):
        facts = gpu_facts(compute_capability=capability)
        record = training_record(facts=facts)
        with_fit(record, dense_layers=18, layers=24)
        run = found(record)["mixed-precision-available"]
        doctor = next(p for p in problems(facts) if p["code"] == "mixed-precision-available")
        assert run.evidence["advised_policy"] == doctor["evidence"]["advised_policy"] == policy
        assert run.fix == doctor["fix"] and f'set_global_policy("{policy}")' in run.fix


def test_the_nvml_session_starts_once_and_shuts_down_with_its_last_holder(monkeypatch):
    calls = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("init"))
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    assert nvml.nvml_holders() == 0
    with nvml.nvml_session(), nvml.nvml_session() as module:
        assert module is pynvml and nvml.nvml_holders() == 2
        assert calls == ["init"]
    assert calls == ["init", "shutdown"] and nvml.nvml_holders() == 0
    nvml.nvml_close()  # one close too many does nothing
    assert calls == ["init", "shutdown"]


def test_nvml_query_answers_the_default_where_nvml_cannot():
    why: dict[str, str] = {}
    assert nvml.nvml_query(pynvml.nvmlDeviceGetCount, default=-1, why=why, field="n") == -1
    assert why == {"n": "Uninitialized"}
    assert nvml.nvml_query("nvmlNoSuchFunction", default="NA", why=why, field="x") == "NA"
    assert why["x"] == nvml.NO_SUCH_QUERY
