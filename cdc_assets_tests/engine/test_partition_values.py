"""A partition value is data, never a folder name: a value of any length and character (over 255
bytes, '/', '=', '%', non-ASCII, dots, Hive's null name) is stored under a folder name that is
safe, or none, and read back exactly, through the first build, incremental applies that rewrite
its partition, moves between partitions, deletes and an insert_only table's appends, in this
process and on Spark."""
from __future__ import annotations

import datetime as dt
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_assets.core.target import partition_key
from cdc_assets.engine import rewrite, target_versions
from cdc_assets.engine.maintenance import maintain
from cdc_assets.engine.partitions import staged_partition_keys
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import bq_cdc, mysql
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.warehouse import target_rows, target_version

pytestmark = MARKS

VALUES = ["plain", "a" * 254, "a" * 255, "a" * 256, "a" * 300, "b" * 4000, "é" * 200, "日本語" * 100,
          "a/b", "/", "a=b", "=", "100%", "%2F", "x y", "a\tb\nc", "..", ".", "__HIVE_DEFAULT_PARTITION__",
          "__null__", "Z" * 120 + "/" + "Z" * 200, "😀" * 70]


def _state(cfg, table):
    return {r["id"]: (r["P"], r["v"]) for r in target_rows(cfg, table)}


def _folders(cfg, table):
    """Every folder of the target's data files, relative to the target."""
    root = os.path.join(cfg.table_dir(table), "target")
    return {os.path.relpath(d, root) for d, _, files in os.walk(root) if "_delta_log" not in d and files}


def _apply_batches(cfg, table, deletes: bool = True):
    n = len(VALUES)
    land(cfg, table, "b1", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": i, "P": v, "v": 1}, "1")
                                              for i, v in enumerate(VALUES)])})
    run_ok(cfg, table)
    expected = {i: (v, 1) for i, v in enumerate(VALUES)}
    assert _state(cfg, table) == expected
    # every partition rewritten; keys moved between partitions; new keys in the long ones
    changes = [bq_cdc("UPSERT", {"id": i, "P": v, "v": 2}, "2") for i, v in enumerate(VALUES)]
    changes += [bq_cdc("UPSERT", {"id": n + i, "P": v, "v": 3}, "2") for i, v in enumerate(VALUES)]
    changes += [bq_cdc("UPSERT", {"id": 0, "P": VALUES[4], "v": 4}, "3")]  # "plain" -> 300 bytes
    land(cfg, table, "b2", {"c.jsonl": jsonl(changes)})
    run_ok(cfg, table)
    expected = {i: (v, 2) for i, v in enumerate(VALUES)} | {n + i: (v, 3) for i, v in enumerate(VALUES)}
    expected[0] = (VALUES[4], 4)
    assert _state(cfg, table) == expected
    if not deletes:
        return
    land(cfg, table, "b3", {"c.jsonl": jsonl([bq_cdc("DELETE", {"id": i, "P": v}, "4")
                                              for i, v in enumerate(VALUES) if i % 2])})
    run_ok(cfg, table)
    assert _state(cfg, table) == {k: v for k, v in expected.items() if k >= n or k % 2 == 0}
    for folder in _folders(cfg, table):
        assert all(len(part.encode()) <= 255 for part in folder.split(os.sep)), folder[:300]


def test_partition_values_of_any_length_and_character_in_process(workdir):
    cfg = write_config(workdir, [{"name": "PV", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"]}])
    _apply_batches(cfg, "PV")


def test_partition_values_of_any_length_and_character_on_spark(spark, workdir, monkeypatch):
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
    cfg = write_config(workdir, [{"name": "PV", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"]}])
    _apply_batches(cfg, "PV", deletes=False)  # a first build and an apply on Spark; deletes as in process


@pytest.mark.parametrize("change_feed", [False, True], ids=["plain", "change-feed"])
def test_a_table_keeps_taking_and_compacting_partition_values_of_any_length(workdir, change_feed):
    """delta-rs' MERGE (a table recording its change data feed) and its compaction name a file's
    folder by its partition value: a value a folder name cannot hold lays the target out once in
    the derived layout, whose folder names are short, and the table keeps taking batches."""
    cfg = write_config(workdir, [{"name": "PV", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"],
                                  "change_feed": change_feed}])
    _apply_batches(cfg, "PV")
    expected = _state(cfg, "PV")
    if change_feed:  # the last apply's feed: the deletes, each with its exact value
        feed = target_versions.changes("PV", cfg.table_dir("PV"), target_version(cfg, "PV")).to_pylist()
        assert sorted((r["_change_type"], r["id"], r["P"]) for r in feed) == sorted(
            ("delete", i, v) for i, v in enumerate(VALUES) if i % 2)
        whole = target_versions.changes("PV", cfg.table_dir("PV"), 0)  # the first build's inserts, exact
        assert sorted((r["id"], r["P"]) for r in whole.to_pylist() if r["_commit_version"] == 0) == sorted(
            enumerate(VALUES))
    for n, b in enumerate(range(4, 8)):  # small files for the compaction to take together
        land(cfg, "PV", f"b{b}", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": 1000 + n, "P": VALUES[5], "v": b}, str(b))])})
        run_ok(cfg, "PV")
        expected[1000 + n] = (VALUES[5], b)
    report = maintain(cfg, cfg.table("PV"), now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2), retention=0)
    assert report.compacted.get("numFilesRemoved", 0) > 0
    assert _state(cfg, "PV") == expected
    assert all(len(part.encode()) <= 255 for folder in _folders(cfg, "PV") for part in folder.split(os.sep))
    keys = staged_partition_keys(cfg, cfg.table("PV"))  # Dagster's partition list: the exact values
    assert keys == sorted({partition_key(["P"], [v]) for v, _ in expected.values()})
    rebuild(None, cfg, cfg.table("PV"), [partition_key(["P"], [VALUES[5]])])
    assert _state(cfg, "PV") == expected


def test_an_insert_only_table_appends_partition_values_of_any_length_and_character(workdir):
    cfg = write_config(workdir, [{"name": "AP", "keys": ["id"], "format": "datastream-json", "partition_by": ["P"],
                                  "insert_only": True}])
    for b in range(3):
        land(cfg, "AP", f"b{b}", {"c.jsonl": jsonl([mysql("INSERT", {"id": b * 100 + i, "P": v, "v": b}, b, i)
                                                    for i, v in enumerate(VALUES)])})
        run_ok(cfg, "AP")
    assert _state(cfg, "AP") == {b * 100 + i: (v, b) for b in range(3) for i, v in enumerate(VALUES)}


@given(st.dictionaries(st.one_of(st.sampled_from(["P", "region", "a.b", "x-y_z"]),
                                 st.text(st.characters(blacklist_characters="=\0/"), min_size=1, max_size=30)),
                       st.one_of(st.none(), st.text(max_size=300),
                                 st.text("aZ09_.-", min_size=1, max_size=20),
                                 st.text("aZ09_.-", min_size=200, max_size=400)), min_size=1, max_size=3))
def test_a_partition_folder_is_one_safe_name_per_column_or_none(partition):
    folder = rewrite._partition_folder("/t", partition)
    rel = os.path.relpath(folder, "/t")
    if rel == ".":
        return  # the table's own folder: the log alone says the file's partition
    parts = rel.split("/")
    assert len(parts) == len(partition)
    for part, (col, value) in zip(parts, partition.items()):
        assert len(part.encode()) <= 255 and part not in (".", "..")
        assert part == f"{col}={'__HIVE_DEFAULT_PARTITION__' if value is None else value}"


