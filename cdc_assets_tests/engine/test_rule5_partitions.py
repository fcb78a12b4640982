"""rules.md#rule-5: with partition_by, each key is in exactly one partition (its latest image's);
a batch rewrites only the partitions it touches, including ones rows left or that became
empty, and never the others."""
from __future__ import annotations

import os
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import target_rows, values

pytestmark = MARKS


def files_by_region(cfg, table) -> dict:
    """Target partition value -> the set of its live data files (read from the Delta log)."""
    dt = DeltaTable(os.path.join(cfg.table_dir(table), "target"))
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    out = defaultdict(set)
    for a in actions:
        out[a["partition.region"]].add(a["path"])
    return dict(out)


def region_rows(cfg, table, region) -> list[dict]:
    dt = DeltaTable(os.path.join(cfg.table_dir(table), "target"))
    return dt.to_pyarrow_table(filters=[("region", "=", region)]).to_pylist()


def test_moving_keys_and_emptied_partitions(spark, workdir):
    cfg = write_config(workdir, [{"name": "PART", "keys": ["id"], "format": "datastream-json",
                                  "partition_by": ["region"]}])
    land(cfg, "PART", "batch-1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "region": "eu", "v": "a"}, 1, 1),
        mysql("INSERT", {"id": 2, "region": "eu", "v": "a"}, 1, 2),
        mysql("INSERT", {"id": 3, "region": "us", "v": "a"}, 1, 3),
        mysql("INSERT", {"id": 4, "region": "apac", "v": "a"}, 1, 4),
        mysql("INSERT", {"id": 5, "region": "sa", "v": "a"}, 1, 5),
        mysql("INSERT", {"id": 6, "region": "af", "v": "a"}, 1, 6),
        # key 7 moves twice within the batch: only its last partition holds it
        mysql("INSERT", {"id": 7, "region": "eu", "v": "a"}, 1, 7),
        mysql("UPDATE", {"id": 7, "region": "us", "v": "b"}, 1, 8),
        mysql("UPDATE", {"id": 7, "region": "sa", "v": "c"}, 1, 9),
    ])})
    take_and_apply(spark, cfg, "PART")
    assert values(target_rows(cfg, "PART"), "id", "region") == {1: "eu", 2: "eu", 3: "us", 4: "apac", 5: "sa",
                                                               6: "af", 7: "sa"}
    files_before = files_by_region(cfg, "PART")

    land(cfg, "PART", "batch-2", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "region": "us", "v": "moved"}, 2, 1),    # eu -> us
        mysql("UPDATE", {"id": 4, "region": "us", "v": "moved"}, 2, 2),    # apac -> us: apac becomes empty
        mysql("DELETE", {"id": 6, "region": "af", "v": None}, 2, 3),       # af becomes empty by a delete
        mysql("UPDATE", {"id": 3, "region": "eu", "v": "moved"}, 1, 99),   # us -> eu, landed late but newer
    ])})
    take_and_apply(spark, cfg, "PART")  # its key check passes: asserted by the steps

    rows = target_rows(cfg, "PART")
    ids = [r["id"] for r in rows]
    assert sorted(ids) == sorted(set(ids)) == [1, 2, 3, 4, 5, 7]   # each key exactly once
    assert values(rows, "id", "region") == {1: "us", 2: "eu", 3: "eu", 4: "us", 5: "sa", 7: "sa"}
    assert region_rows(cfg, "PART", "apac") == []
    assert region_rows(cfg, "PART", "af") == []
    assert sorted(r["id"] for r in region_rows(cfg, "PART", "us")) == [1, 4]

    files_after = files_by_region(cfg, "PART")
    assert "apac" not in files_after and "af" not in files_after   # no live files left there
    assert files_after["sa"] == files_before["sa"]                  # untouched partition: same files
    assert files_after["eu"] != files_before["eu"]                  # touched ones were rewritten


def test_a_delayed_older_move_does_not_move_the_key_back(spark, workdir):
    cfg = write_config(workdir, [{"name": "PART2", "keys": ["id"], "format": "datastream-json",
                                  "partition_by": ["region"]}])
    land(cfg, "PART2", "batch-1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "region": "eu", "v": "a"}, 1, 1),
        mysql("UPDATE", {"id": 1, "region": "us", "v": "b"}, 1, 3),
        mysql("INSERT", {"id": 2, "region": "eu", "v": "a"}, 1, 4),
    ])})
    take_and_apply(spark, cfg, "PART2")
    us_files = files_by_region(cfg, "PART2")["us"]
    land(cfg, "PART2", "batch-2", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "region": "apac", "v": "stale"}, 1, 2),   # delayed, older than the move to us
        mysql("UPDATE", {"id": 2, "region": "eu", "v": "b"}, 1, 5),
    ])})
    take_and_apply(spark, cfg, "PART2")
    assert values(target_rows(cfg, "PART2"), "id", "region") == {1: "us", 2: "eu"}
    files = files_by_region(cfg, "PART2")
    assert "apac" not in files
    assert files["us"] == us_files
    assert pc.sum(pc.equal(DeltaTable(os.path.join(cfg.table_dir("PART2"), "target"))
                           .to_pyarrow_table()["id"], 1)).as_py() == 1
