"""Dagster's standard metadata on the materializations a run records, so the UI's catalog shows a
row-count chart, the column list with types, the table's name and its location: the row count is
the Delta table's real one, the schema is the Delta schema (names and types, never values), each
batch partition carries the rows it added, and the definitions name their tables before any run."""
from __future__ import annotations

import dagster as dg
import pytest
from deltalake import DeltaTable

from cdc_assets.defs.definitions import build_definitions
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import run_table

pytestmark = pytest.mark.spark


def latest(instance, table: str, asset: str):
    return instance.get_latest_materialization_event(dg.AssetKey([table, asset])).asset_materialization


def test_materializations_carry_row_counts_schema_name_and_uri(spark, workdir):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"amount": "decimal(12,2)"}}])
    land(cfg, "ORDERS", "batch-0001", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "amount": 10.25, "status": "open"}, 1, 1),
        mysql("INSERT", {"id": 2, "amount": 3.5, "status": "open"}, 1, 2),
        mysql("INSERT", {"id": 3, "amount": 7, "status": "open"}, 1, 3)])})
    instance = dg.DagsterInstance.ephemeral()
    assert run_table(cfg, "ORDERS", instance).ok
    land(cfg, "ORDERS", "batch-0002", {"part-1.jsonl": jsonl([
        mysql("DELETE", {"id": 2, "amount": 3.5, "status": "open"}, 1, 4)])})
    assert run_table(cfg, "ORDERS", instance).ok

    target = latest(instance, "ORDERS", "target").metadata
    delta_target = DeltaTable(f"{cfg.table_dir('ORDERS')}/target")
    assert target["dagster/row_count"].value == delta_target.count() == 2
    schema = target["dagster/column_schema"].schema
    assert [c.name for c in schema.columns] == [f.name for f in delta_target.schema().fields]
    types = {c.name: c.type for c in schema.columns}
    assert types["id"] == "long" and types["amount"] == "decimal(12,2)"
    assert {c.name: c.description for c in schema.columns}["id"] == "key column"
    assert target["dagster/table_name"].value == "ORDERS.target"
    assert target["dagster/uri"].value == (workdir / "warehouse" / "ORDERS" / "target").as_uri()

    # each batch partition of changes and staging says how many rows it added
    staging = latest(instance, "ORDERS", "staging")
    assert staging.partition == "b000002" and staging.metadata["dagster/partition_row_count"].value == 1
    assert staging.metadata["dagster/row_count"].value == DeltaTable(f"{cfg.table_dir('ORDERS')}/staging").count()
    changes = latest(instance, "ORDERS", "changes")
    assert changes.metadata["dagster/partition_row_count"].value == 1

    # the catalog names every table before its first materialization
    graph = build_definitions(cfg).get_repository_def().asset_graph
    names = {k.path[-1]: graph.get(k).metadata["dagster/table_name"] for k in graph.get_all_asset_keys()}
    assert names == {
        "changes": "ORDERS.changes", "staging": "ORDERS.staging", "target": "ORDERS.target",
        "quarantine": "ORDERS.quarantine"}
