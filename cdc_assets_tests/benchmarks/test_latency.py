"""latency.py's summary says what its lags are: p50 is their median, p95 lies between the two
values nearest the 95th percentile, and a recorded latency.json can be summarized again."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from .latency import lag_summary, percentile, resummarize

# the six lags of docs/figures/latency.json, in landing order
RECORDED = [5.43, 5.35, 5.15, 2.59, 2.19, 1.98]


def test_p50_of_an_even_count_is_the_mean_of_the_two_middle_lags():
    # sorted: 1.98 2.19 2.59 | 5.15 5.35 5.43: the 3rd alone (2.59) is not the median
    assert lag_summary(RECORDED)["lag_p50_s"] == round((2.59 + 5.15) / 2, 2)
    assert lag_summary([4.0, 1.0, 3.0, 2.0])["lag_p50_s"] == 2.5


def test_p50_of_an_odd_count_is_the_middle_lag():
    assert lag_summary([9.0, 1.0, 2.0])["lag_p50_s"] == 2.0


def test_p95_of_six_lags_lies_between_the_two_largest():
    s = lag_summary(RECORDED)
    assert 5.35 < s["lag_p95_s"] < 5.43 and s["lag_max_s"] == 5.43
    assert s["lag_mean_s"] == round(sum(RECORDED) / 6, 2)


def test_one_lag_is_every_figure():
    assert set(lag_summary([2.5]).values()) == {2.5}


@given(st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), min_size=1, max_size=40))
def test_p50_splits_the_lags_in_half_and_p95_is_within_them(lags):
    s = lag_summary(lags)
    below = sum(v <= s["lag_p50_s"] + 0.006 for v in lags)  # figures are rounded to 0.01
    above = sum(v >= s["lag_p50_s"] - 0.006 for v in lags)
    assert below >= len(lags) / 2 and above >= len(lags) / 2
    assert min(lags) - 0.006 <= s["lag_p50_s"] <= s["lag_p95_s"] <= s["lag_max_s"] + 0.006


@given(st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), min_size=1, max_size=40),
       st.sampled_from([0.0, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0]))
def test_a_percentile_is_numpys_linear_one(lags, q):
    assert abs(percentile(lags, q) - float(np.percentile(lags, q * 100))) <= 0.0051


def test_a_recorded_file_is_summarized_again_from_its_per_file_lags(tmp_path):
    path = tmp_path / "latency.json"
    recorded = {"command": "x", "commit": "d6e87a0", "measured": "2026-11-26T15:28:58+00:00", "lag_p50_s": 2.59,
                "per_file": [{"file": i + 1, "lag_s": v} for i, v in enumerate(RECORDED)]}
    path.write_text(json.dumps(recorded))
    resummarize(str(path))
    got = json.loads(path.read_text())
    assert got["lag_p50_s"] == 3.87 and got["commit"] == "d6e87a0" and got["measured"] == recorded["measured"]
    assert got["per_file"] == recorded["per_file"] and "recomputed" in got["summary_note"]
