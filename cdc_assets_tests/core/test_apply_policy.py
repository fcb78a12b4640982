"""When a table's pending changes are merged: `apply: {min_changes, max_staleness}`."""
from __future__ import annotations

import pytest

from cdc_assets.core.apply_policy import ApplyPolicy, decide, format_duration, parse_duration
from cdc_assets.core.config import parse_config

from .test_config import CONFIG_PATH, error, raw_config


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), (30, 30),
                                           (" 5 m ", 300)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["15", "15 minutes", "-1m", "1.5h", "", True, -3])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_without_a_policy_every_batch_is_merged():
    assert decide(ApplyPolicy(), True, 1, 0.0).due


def test_the_first_build_never_waits():
    assert decide(ApplyPolicy(min_changes=10**9), False, 1, 0.0).due


def test_min_changes_or_max_staleness_whichever_comes_first():
    policy = ApplyPolicy(min_changes=1000, max_staleness=900)
    assert not decide(policy, True, 999, 899.0).due
    assert decide(policy, True, 1000, 0.0).reason == "1000 changes pending (min_changes 1000)"
    assert decide(policy, True, 1, 900.0).due
    waiting = decide(policy, True, 12, 120.0)
    assert waiting.reason == "merge waits: 12 changes pending; min_changes 1000; oldest waited 2m, max_staleness 15m"


def test_min_changes_alone_waits_for_them_however_long_it_takes():
    assert not decide(ApplyPolicy(min_changes=5), True, 4, 10**7).due


def test_format_duration():
    assert [format_duration(s) for s in (900, 7200, 86400, 61, 0.5)] == ["15m", "2h", "1d", "61s", "0.5s"]


def test_config_reads_the_policy():
    cfg = parse_config(raw_config(apply={"min_changes": 1000, "max_staleness": "15m"}), CONFIG_PATH)
    assert cfg.tables[0].apply == ApplyPolicy(1000, 900.0)
    assert parse_config(raw_config(), CONFIG_PATH).tables[0].apply == ApplyPolicy()


@pytest.mark.parametrize("apply, message", [
    ({"min_changes": 0}, "field 'apply.min_changes' 0 must be a whole number of changes, at least 1"),
    ({"min_changes": "many"}, "field 'apply.min_changes' 'many'"),
    ({"max_staleness": "soon"}, "field 'apply.max_staleness': 'soon' is not a duration such as 90s, 15m, 2h or 1d"),
    ({"every": "15m"}, "field 'apply': unknown setting 'every'"),
    ({}, "field 'apply' must be a mapping"),
    ("15m", "field 'apply' must be a mapping"),
])
def test_a_bad_policy_names_the_table_and_field(apply, message):
    text = error(raw_config(apply=apply))
    assert message in text and "table 'ORDERS'" in text
