"""`change_feed: true`: the target records Delta's change data feed, so a downstream reader gets
the row-level changes between two versions (what each apply inserted, updated with its before
and after image, and deleted) instead of diffing whole tables."""
from __future__ import annotations

import pytest

from cdc_assets.engine import target_versions
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import target_version

pytestmark = MARKS

TABLE = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["region"]}
FIRST = [mysql("INSERT", {"id": i, "region": "eu", "v": "a"}, 1, 10 + i) for i in (1, 2, 3)]
SECOND = [mysql("UPDATE", {"id": 1, "region": "eu", "v": "b"}, 1, 20),
          mysql("DELETE", {"id": 2, "region": "eu", "v": "a"}, 1, 21),
          mysql("INSERT", {"id": 4, "region": "us", "v": "a"}, 1, 22),
          mysql("UPDATE", {"id": 3, "region": "eu", "v": "stale"}, 1, 5)]  # older than id 3's insert: no change


def feed(cfg, start: int, end: int | None = None) -> list[tuple]:
    rows = target_versions.changes("ORDERS", cfg.table_dir("ORDERS"), start, end).to_pylist()
    return sorted((r["_commit_version"], r["_change_type"], r["id"], r["v"]) for r in rows)


def test_the_change_feed_holds_each_applys_row_changes(spark, workdir):
    cfg = write_config(workdir, [{**TABLE, "change_feed": True}])
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl(FIRST)})
    take_and_apply(spark, cfg, "ORDERS")
    assert feed(cfg, 0) == [(0, "insert", 1, "a"), (0, "insert", 2, "a"), (0, "insert", 3, "a")]

    land(cfg, "ORDERS", "batch-2", {"p.jsonl": jsonl(SECOND)})
    take_and_apply(spark, cfg, "ORDERS")
    assert feed(cfg, 1, 1) == [(1, "delete", 2, "a"), (1, "insert", 4, "a"),
                               (1, "update_postimage", 1, "b"), (1, "update_preimage", 1, "a")]

    # a rebuild of a partition records the rows of the files it replaced as deleted and inserted again
    rebuild(spark, cfg, cfg.table("ORDERS"), ["region=eu"])
    v = target_version(cfg, "ORDERS")
    assert feed(cfg, v) == [(v, "delete", 1, "b"), (v, "delete", 3, "a"), (v, "insert", 1, "b"), (v, "insert", 3, "a")]


def test_switching_the_change_feed_on_records_from_the_next_apply(spark, workdir):
    cfg = write_config(workdir, [TABLE])
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl(FIRST)})
    take_and_apply(spark, cfg, "ORDERS")
    with pytest.raises(target_versions.TargetVersionError, match="records no change feed .set change_feed: true"):
        target_versions.changes("ORDERS", cfg.table_dir("ORDERS"), 0)

    cfg = write_config(workdir, [{**TABLE, "change_feed": True}])
    land(cfg, "ORDERS", "batch-2", {"p.jsonl": jsonl(SECOND)})
    take_and_apply(spark, cfg, "ORDERS")
    kinds = [(v.kind, v.batch) for v in target_versions.versions(cfg.table_dir("ORDERS"))]
    assert kinds == [("first build", 1), ("properties", 1), ("apply", 2)]
    assert feed(cfg, 2) == [(2, "delete", 2, "a"), (2, "insert", 4, "a"),
                            (2, "update_postimage", 1, "b"), (2, "update_preimage", 1, "a")]

    # and off again: the next apply writes no change rows
    cfg = write_config(workdir, [TABLE])
    land(cfg, "ORDERS", "batch-3", {"p.jsonl": jsonl([mysql("UPDATE", {"id": 4, "region": "us", "v": "c"}, 1, 30)])})
    take_and_apply(spark, cfg, "ORDERS")
    with pytest.raises(target_versions.TargetVersionError, match="records no change feed"):
        target_versions.changes("ORDERS", cfg.table_dir("ORDERS"), 2)
