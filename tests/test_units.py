"""Evidence shown with the units its keys name; the JSON report keeps the raw numbers."""

from __future__ import annotations

import math

import pytest

from tfdiag_magic.units import evidence_value
from tfdiag_magic.views.text import _evidence_text


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("growth_bytes", 1.566e8, "149.3 MiB"),
        ("bytes_per_step", 2.169e6, "2.1 MiB"),
        ("wait_share", 0.634, "63.4 %"),
        ("median_step_s", 0.0021, "2.10 ms"),
        ("slope_s_per_1000_steps", 0.012, "12.00 ms"),
        ("s_per_batch", 0.0352, "35.20 ms"),
        ("training_steps_per_s", 123.4, "123.4/s"),
        ("max_utilization_percent", 97.0, "97 %"),
        ("r2", 0.99871, "0.999"),
        ("steps", 12345, "12,345"),
        ("steps", math.nan, "–"),
        ("enabled", True, "True"),
        ("function", "train_step", "train_step"),
    ],
)
def test_each_value_in_the_unit_its_key_names(key, value, shown):
    assert evidence_value(key, value) == shown


def test_the_text_report_shows_units_not_raw_floats():
    text = _evidence_text({"growth_bytes": 1.566e8, "r2": 0.998, "median_step_s": 0.25})
    assert text == "growth_bytes 149.3 MiB; r2 0.998; median_step_s 250.00 ms"
    assert "e+" not in text


def test_a_list_of_records_shows_each_records_measures_in_their_units():
    # A pipeline's stages (input-bound), the models that did not learn (no-learning): each
    # record's own keys, empty ones left out, never a Python dict's repr.
    text = _evidence_text(
        {
            "stage_work": [
                {"stage": "MapAndBatch", "made_as": "", "s_per_batch": 0.0352, "parallelism": 1.0},
                {"stage": "Range", "made_as": "", "s_per_batch": 3.3e-05, "parallelism": 0.0},
            ]
        }
    )
    assert text == (
        "stage_work (stage MapAndBatch, s_per_batch 35.20 ms, parallelism 1),"
        " (stage Range, s_per_batch 33 µs, parallelism 0)"
    )
