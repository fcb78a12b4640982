"""A warehouse in an object store (an S3-compatible server, moto) gives exactly the tables a
local warehouse gives: the same feed applied to both, through the Dagster jobs, the first build
(Spark's Python workers writing into the bucket), MERGEs, and a rebuild of one partition and of
the whole target (Spark's Python workers reading staging from the bucket)."""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from cdc_assets.engine import delta, storage
from cdc_assets.engine.checks import _all_keys_unique
from cdc_assets.engine.partitions import staged_partition_keys
from cdc_assets.engine.table_layout import TARGET, path
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply

pytestmark = MARKS

TABLE = {"name": "SALES", "keys": ["id"], "format": "datastream-json", "partition_by": ["day"],
         "columns": {"day": "date", "amount": "decimal(12,2)", "at": "timestamp"}}

BATCHES = [
    [mysql("INSERT", {"id": i, "day": f"2026-11-{1 + i % 3:02d}", "amount": f"{i}.25",
                      "at": f"2026-11-01T10:00:0{i % 10}Z"}, 1, i) for i in range(1, 13)],
    [mysql("UPDATE", {"id": 1, "day": "2026-11-03", "amount": "99.99", "at": "2026-11-02T00:00:00Z"}, 1, 20),
     mysql("DELETE", {"id": 2, "day": "2026-11-03", "amount": None, "at": None}, 1, 21),
     mysql("INSERT", {"id": 40, "day": None, "amount": "0.01", "at": "2026-11-02T00:00:00.5Z"}, 1, 22),
     mysql("UPDATE", {"id": 3, "day": "2026-11-01", "amount": "3.50", "at": "2026-11-02T00:00:01Z"}, 1, 2)],
]


def rows_of(table_path: str) -> list[dict]:
    rows = delta.load(table_path).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def partitions_of(table_path: str) -> set:
    actions = pa.table(delta.load(table_path).get_add_actions(flatten=False)).to_pylist()
    return {(a["partition"] or {}).get("day") for a in actions}


def test_an_object_store_warehouse_holds_what_a_local_one_holds(spark, tmp_path, s3_warehouse):
    (tmp_path / "local" / "landing").mkdir(parents=True)
    (tmp_path / "remote" / "landing").mkdir(parents=True)
    local = write_config(tmp_path / "local", [TABLE])
    remote = write_config(tmp_path / "remote", [TABLE], warehouse=s3_warehouse)
    for n, batch in enumerate(BATCHES, 1):
        for cfg in (local, remote):
            land(cfg, "SALES", f"batch-{n}", {"p.jsonl": jsonl(batch)})
            take_and_apply(spark, cfg, "SALES")
    targets = {name: path(cfg.table_dir("SALES"), TARGET) for name, cfg in (("local", local), ("remote", remote))}
    assert targets["remote"].startswith(s3_warehouse + "/")
    assert rows_of(targets["remote"]) == rows_of(targets["local"])
    assert {r["id"] for r in rows_of(targets["remote"])} == set(range(1, 13)) - {2} | {40}
    assert partitions_of(targets["remote"]) == partitions_of(targets["local"])
    assert staged_partition_keys(remote, remote.table("SALES")) == staged_partition_keys(local, local.table("SALES"))

    # a partition rebuilt, then the whole target: same rows, the partition's files replaced in the bucket
    for cfg in (local, remote):
        before = delta.load(targets["remote" if cfg is remote else "local"]).version()
        figures = rebuild(spark, cfg, cfg.table("SALES"), ["day=2026-11-03"])
        assert figures.partitions_rewritten == ("day=2026-11-03",) and figures.delta_version == before + 1
        rebuild(spark, cfg, cfg.table("SALES"), None)
    assert rows_of(targets["remote"]) == rows_of(targets["local"])
    remote_target = delta.load(targets["remote"])
    assert all(u.startswith(targets["remote"] + "/") for u in remote_target.file_uris())
    # the whole-table key check, as Spark runs it for a large target, reads the bucket through the workers
    assert _all_keys_unique(spark, remote_target).duplicate_keys == 0
    assert _all_keys_unique(spark, remote_target).rows == len(rows_of(targets["local"]))
    # any Delta reader with the store's settings reads it
    assert DeltaTable(targets["remote"], storage_options=storage.delta_options(targets["remote"])).version() \
        == remote_target.version()
