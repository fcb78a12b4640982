"""The continuous many-table benchmark (continuous.py) computes what it claims.

End to end at a tiny size through a real `cdc-assets ui` (sensors: about a minute here; the group
schedule waits for cron minutes, so it runs with --long); the harness's own parts in seconds. No
timing is asserted: the lags are only checked to be measured, for every landed file.
"""
from __future__ import annotations

import os

import pytest

from cdc_assets.core.changes import Rejection
from cdc_assets.core.config import load_config
from cdc_assets.core.formats import parse_file
from cdc_assets_tests.figures import Figures

from . import bench, continuous


def _outcome(lags: list[float], minutes: int = 4, tables: int = 2) -> continuous.Outcome:
    o = continuous.Outcome("sensors", tables, 1000, 10, minutes)
    k = 0
    for m in range(minutes):
        for t in range(tables):
            landed = 1000.0 + m * 60 + t * 30
            lag = lags[k % len(lags)] if lags else None
            o.files.append(continuous.Landed(f"C{t:03d}", m, f"f{m}-{t}", landed,
                                             None if lag is None else landed + lag))
            k += 1
    return o


def test_flat_lag_keeps_up_and_growing_lag_does_not():
    flat = _outcome([5.0, 6.0, 5.5])
    assert flat.keeps_up() and abs(flat.growth_s()) < 2
    growing = continuous.Outcome("sensors", 1, 1000, 10, 6)
    for m in range(6):  # each minute's file waits 20 s longer: a backlog
        growing.files.append(continuous.Landed("C000", m, f"f{m}", 60.0 * m, 60.0 * m + 5 + 20 * m))
    assert not growing.keeps_up() and growing.growth_s() == 100.0
    per = growing.per_minute()
    assert [p["max_s"] for p in per] == [5, 25, 45, 65, 85, 105] and all(p["files"] == 1 for p in per)


def test_a_file_never_visible_fails_the_run():
    o = _outcome([5.0])
    o.files[-1].visible_at = None
    assert not o.keeps_up()
    assert o.per_minute()[-1]["not_visible"] == 1 and o.summary()["visible"] == len(o.files) - 1


def test_the_landed_files_are_datastream_events_in_stream_order(tmp_path):
    """What lands parses as the product's datastream-json, every change valid, and a later file of
    a table orders after an earlier one."""
    cfg_path = continuous.write_config(str(tmp_path), "base.parquet", ["C000"], "sensors", 2)
    table = load_config(cfg_path).tables[0]
    orders = []
    for minute in range(2):
        data = continuous.datastream_lines(bench.changes(5000, 50, "W2", minute), 1 + minute * 50)
        rel = continuous.land(str(tmp_path / "landing"), "C000", minute, data, 1_800_000_000.0 + 60 * minute)
        assert rel.startswith("2027/01/15/08/") and not os.path.basename(rel).startswith(".")
        with open(tmp_path / "landing" / "C000" / rel, "rb") as fh:
            parsed = list(parse_file(table.format, table.options, table.keys, rel, fh.read()))
        assert len(parsed) == 50 and not [p for p in parsed if isinstance(p, Rejection)]
        orders.append(sorted(p.order for p in parsed))
    assert max(orders[0]) < min(orders[1])
    assert sorted(os.listdir(tmp_path / "landing" / "C000" / "2027/01/15/08/00")) == ["c000_0000.jsonl"]


def test_a_clone_shares_the_data_files_and_owns_its_log(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    src = tmp_path / "C000"
    write_deltalake(str(src / "target"), pa.table({"id": [1, 2]}))
    continuous.clone_table(str(src), str(tmp_path / "C001"))
    data = [f for f in os.listdir(src / "target") if f.endswith(".parquet")]
    assert data and all(os.path.samefile(src / "target" / f, tmp_path / "C001" / "target" / f) for f in data)
    log = os.listdir(src / "target" / "_delta_log")
    assert not any(os.path.samefile(src / "target" / "_delta_log" / f, tmp_path / "C001" / "target" / "_delta_log" / f)
                   for f in log)
    write_deltalake(str(tmp_path / "C001" / "target"), pa.table({"id": [3]}), mode="append")
    assert bench.delta_version(str(src / "target")) == 0 and bench.delta_version(str(tmp_path / "C001" / "target")) == 1


def _tiny(tmp_path, mode: str) -> list:
    args = continuous.parse_args(["--tables", "2", "--rows", "2000", "--changes", "20", "--minutes", "2",
                                  "--interval", "60" if mode == "group" else "10", "--modes", mode, "--no-spark",
                                  "--drain", "180", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")])
    outcomes = continuous.run(args, echo=lambda *a, **k: print(*a, flush=True))
    paths = continuous.write_outputs(outcomes, Figures(args.out), "test")
    assert sorted(os.path.basename(p) for p in paths) == ["continuous.csv", "continuous.json", "continuous.png"]
    [o] = outcomes
    assert not o.error, o.error
    assert len(o.files) == 4 and all(f.lag_s is not None and f.lag_s > 0 for f in o.files)
    return outcomes


@pytest.mark.long
@pytest.mark.spark
def test_the_benchmark_runs_end_to_end_through_the_ui_with_sensors(tmp_path, long_run):
    # the same harness as the one-sensor run below; each table's own sensor bringing a landed file
    # into the target through the UI is tested by cli/test_ui_runs.py
    if not long_run:
        pytest.skip("the benchmark's harness end to end through the UI: run with --long")
    _tiny(tmp_path, "sensors")


@pytest.mark.long
@pytest.mark.spark
def test_the_benchmark_runs_end_to_end_through_the_ui_with_one_sensor_for_all_tables(tmp_path, long_run):
    # a landed file reaching the target through the UI's sensors and runs is tested by
    # cli/test_ui_runs.py in every run; this is the benchmark's own harness (about a minute)
    if not long_run:
        pytest.skip("the benchmark's harness end to end through the UI: run with --long")
    _tiny(tmp_path, "one-sensor")


@pytest.mark.long
@pytest.mark.spark
def test_the_benchmark_runs_end_to_end_through_the_ui_with_a_group_schedule(tmp_path, long_run):
    if not long_run:
        pytest.skip("waits for cron minutes: run with --long")
    _tiny(tmp_path, "group")


def test_a_recorded_run_is_summarized_again_from_its_per_file_lags(tmp_path):
    import csv
    import json

    lags = {0: [4.0, 1.0, 3.0, 2.0], 1: [9.0, 5.0]}  # minute -> lags, an even count each
    with open(tmp_path / "continuous.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["mode", "tables", "table", "minute", "file", "landed_at", "visible_at", "lag_s"])
        w.writerows(["one-sensor", 4, f"T{i}", m, i, 0, 0, v] for m, vs in lags.items() for i, v in enumerate(vs))
        w.writerow(["one-sensor", 4, "T9", 1, 9, 0, "", ""])  # never visible: no lag
    recorded = {"commit": "abc", "runs": [{"mode": "one-sensor", "tables": 4, "lag_p50_s": 3.0, "lag_p95_s": 9.0,
                                           "per_minute": [{"minute": 0, "p50_s": 2.0}, {"minute": 1, "p50_s": 5.0}]}]}
    (tmp_path / "continuous.json").write_text(json.dumps(recorded))
    assert continuous.main(["--resummarize", str(tmp_path)]) == 0
    got = json.loads((tmp_path / "continuous.json").read_text())
    [run] = got["runs"]
    assert (run["lag_p50_s"], [m["p50_s"] for m in run["per_minute"]]) == (3.5, [2.5, 7.0])
    assert 5.0 < run["lag_p95_s"] < 9.0 and got["commit"] == "abc" and "recomputed" in got["summary_note"]
