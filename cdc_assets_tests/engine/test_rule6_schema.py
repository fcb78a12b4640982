"""rules.md#rule-6: a new source column is added to the target, null in older rows; a column that
widens (integer -> decimal) keeps every value."""
from __future__ import annotations

import os

import pyarrow as pa
from deltalake import DeltaTable

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import bq_append, mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import by_key, target_rows

pytestmark = MARKS


def target_schema(cfg, table) -> pa.Schema:
    return pa.schema(DeltaTable(os.path.join(cfg.table_dir(table), "target")).schema())


def test_new_column_and_integer_to_decimal(spark, workdir):
    cfg = write_config(workdir, [{"name": "EVOLVE", "keys": ["id"], "format": "bigquery-append"}])
    land(cfg, "EVOLVE", "batch-1", {"part-1.jsonl": jsonl([
        bq_append("INSERT", {"id": 1, "name": "a", "amount": 5}, 1),
        bq_append("INSERT", {"id": 2, "name": "b", "amount": 7}, 2),
        bq_append("INSERT", {"id": 3, "name": "c", "amount": 2**53}, 3),  # a double holds it (2**53 + 1 it does not)
    ])})
    take_and_apply(spark, cfg, "EVOLVE")
    assert pa.types.is_integer(target_schema(cfg, "EVOLVE").field("amount").type)

    land(cfg, "EVOLVE", "batch-2", {"part-1.jsonl": jsonl([
        # the source gained a column and amount became a decimal
        bq_append("UPDATE-INSERT", {"id": 2, "name": "b", "amount": 7.25, "coupon": "SPRING"}, 4),
        bq_append("INSERT", {"id": 4, "name": "d", "amount": 1.5, "coupon": None}, 5),
    ])})
    take_and_apply(spark, cfg, "EVOLVE")
    rows = by_key(target_rows(cfg, "EVOLVE"), "id")
    assert set(rows) == {(1,), (2,), (3,), (4,)}
    assert {k: r["coupon"] for k, r in rows.items()} == {(1,): None, (2,): "SPRING", (3,): None, (4,): None}
    # every integer the column held is a double exactly (one that is not keeps the column an integer
    # one: test_types_by_value.py)
    assert {k: r["amount"] for k, r in rows.items()} == {(1,): 5, (2,): 7.25, (3,): 2**53, (4,): 1.5}
    assert {k: r["name"] for k, r in rows.items()} == {(1,): "a", (2,): "b", (3,): "c", (4,): "d"}
    schema = target_schema(cfg, "EVOLVE")
    assert not pa.types.is_integer(schema.field("amount").type)
    assert pa.types.is_string(schema.field("coupon").type) or pa.types.is_large_string(schema.field("coupon").type)


def test_new_column_in_a_partitioned_target(spark, workdir):
    """The new column reaches a partitioned target too, and partitions the batch did not touch
    keep their files (they read the new column as null)."""
    cfg = write_config(workdir, [{"name": "EVOLVEP", "keys": ["id"], "format": "datastream-json",
                                  "partition_by": ["region"]}])
    land(cfg, "EVOLVEP", "batch-1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "region": "eu", "v": "a"}, 1, 1),
        mysql("INSERT", {"id": 2, "region": "us", "v": "a"}, 1, 2),
    ])})
    take_and_apply(spark, cfg, "EVOLVEP")
    us_files = files_of(cfg, "EVOLVEP", "us")
    land(cfg, "EVOLVEP", "batch-2", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "region": "eu", "v": "b", "coupon": "SPRING"}, 1, 3),
    ])})
    take_and_apply(spark, cfg, "EVOLVEP")
    rows = by_key(target_rows(cfg, "EVOLVEP"), "id")
    assert {k: (r["v"], r["coupon"]) for k, r in rows.items()} == {(1,): ("b", "SPRING"), (2,): ("a", None)}
    assert files_of(cfg, "EVOLVEP", "us") == us_files


def files_of(cfg, table, region) -> set:
    dt = DeltaTable(os.path.join(cfg.table_dir(table), "target"))
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    return {a["path"] for a in actions if a["partition.region"] == region}
