"""`history: true`: every version of each key (SCD type 2) by the source's ordering: deletes and
re-inserts, late arrivals placed where they belong, re-deliveries counted once, typed columns; its
current rows are the target's, and a rebuild from `changes` gives the same rows as the updates."""
from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_assets.core.config import ConfigError, parse_config
from cdc_assets.defs.run_loop import summary_line
from cdc_assets.engine import history
from cdc_assets.engine.table_layout import HISTORY, path
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import bq_cdc, mysql
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.steps import run_steps
from cdc_assets_tests.support.warehouse import target_rows

pytestmark = MARKS

ACCOUNTS = {"name": "ACCOUNTS", "keys": ["id"], "format": "datastream-json", "history": True,
            "columns": {"balance": "decimal(12,2)"}}

META = ("_cdc_valid_from", "_cdc_valid_to", "_cdc_is_current", "_cdc_operation", "_cdc_version")


def history_rows(cfg, table: str) -> list[dict]:
    rows = DeltaTable(path(cfg.table_dir(table), HISTORY)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["_cdc_key"], r["_cdc_version"]))


def versions_of(rows: list[dict], key_value, *columns) -> list[tuple]:
    return [(r["_cdc_operation"], r["_cdc_is_current"]) + tuple(r[c] for c in columns)
            for r in rows if r["id"] == key_value]


def source_part(rows):
    return sorted(({k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows), key=lambda r: r["id"])


def assert_linked(rows: list[dict]) -> None:
    """Each version is valid until the next one of its key begins; the last is open."""
    by_key: dict = {}
    for r in rows:
        by_key.setdefault(r["_cdc_key"], []).append(r)
    for versions in by_key.values():
        assert [v["_cdc_version"] for v in versions] == list(range(1, len(versions) + 1))
        assert [v["_cdc_valid_to"] for v in versions] == [v["_cdc_valid_from"] for v in versions[1:]] + [None]
        assert all(a["_cdc_valid_from"] < b["_cdc_valid_from"] for a, b in zip(versions, versions[1:]))


def test_history_keeps_every_version_by_source_order_and_its_current_rows_are_the_target(spark, workdir):
    cfg = write_config(workdir, [ACCOUNTS])
    land(cfg, "ACCOUNTS", "batch-1", {"a.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "balance": "10.00"}, 1, 10),
        mysql("UPDATE-INSERT", {"id": 1, "balance": "20.00"}, 1, 20),
        mysql("INSERT", {"id": 2, "balance": "5.00"}, 1, 15),
        mysql("DELETE", {"id": 2, "balance": "5.00"}, 1, 30),
    ])})
    out = run_ok(cfg, "ACCOUNTS")
    assert out.figures["history"]["rows"] == 4
    assert "; history 4 versions (build);" in summary_line(out)
    rows = history_rows(cfg, "ACCOUNTS")
    assert versions_of(rows, 1, "balance") == [("insert", False, Decimal("10.00")), ("update", True, Decimal("20.00"))]
    assert versions_of(rows, 2, "balance") == [("insert", False, Decimal("5.00")), ("delete", False, None)]
    history_table = DeltaTable(path(cfg.table_dir("ACCOUNTS"), HISTORY))
    assert pa.schema(history_table.schema()).field("balance").type == pa.decimal128(12, 2)  # exact, as in target

    # batch 2: a late update of 1 (between its two versions), a late update of 2 (before its delete),
    # 2 inserted again after its delete, and 3 new
    land(cfg, "ACCOUNTS", "batch-2", {"a.jsonl": jsonl([
        mysql("UPDATE-INSERT", {"id": 1, "balance": "17.00"}, 1, 17),
        mysql("UPDATE-INSERT", {"id": 2, "balance": "7.00"}, 1, 25),
        mysql("INSERT", {"id": 2, "balance": "1.00"}, 1, 40),
        mysql("INSERT", {"id": 3, "balance": "3.00"}, 1, 41),
    ])})
    out = run_ok(cfg, "ACCOUNTS")
    assert out.figures["history"]["keys_touched"] == 3
    assert f"; history {out.history.rows} versions (+{out.history.versions_added});" in summary_line(out)
    rows = history_rows(cfg, "ACCOUNTS")
    assert versions_of(rows, 1, "balance") == [("insert", False, Decimal("10.00")), ("update", False, Decimal("17.00")),
                                               ("update", True, Decimal("20.00"))]
    assert versions_of(rows, 2, "balance") == [("insert", False, Decimal("5.00")), ("update", False, Decimal("7.00")),
                                               ("delete", False, None), ("insert", True, Decimal("1.00"))]
    assert versions_of(rows, 3, "balance") == [("insert", True, Decimal("3.00"))]
    assert_linked(rows)
    assert source_part(r for r in rows if r["_cdc_is_current"]) == source_part(target_rows(cfg, "ACCOUNTS"))

    # a rerun changes nothing; a rebuild from changes gives the same rows as the updates did
    version = DeltaTable(path(cfg.table_dir("ACCOUNTS"), HISTORY)).version()
    assert run_ok(cfg, "ACCOUNTS").figures.get("history") is None
    assert DeltaTable(path(cfg.table_dir("ACCOUNTS"), HISTORY)).version() == version
    rebuilt = history.rebuild(spark, cfg, cfg.table("ACCOUNTS"))
    assert rebuilt.built == "rebuild" and rebuilt.rows == len(rows)
    assert history_rows(cfg, "ACCOUNTS") == rows


def test_a_redelivered_change_counts_once_and_a_tie_keeps_both_in_arrival_order(spark, workdir):
    cfg = write_config(workdir, [{"name": "PAY", "keys": ["id"], "format": "bigquery-cdc", "history": True}])
    first = bq_cdc("UPSERT", {"id": 1, "amount": 1}, "0/1")
    land(cfg, "PAY", "batch-1", {"a.jsonl": jsonl([first])})
    run_steps(spark, cfg, "PAY")
    # BigQuery CDC rows have no event id: the same row again is recognised by its content
    land(cfg, "PAY", "batch-2", {"a.jsonl": jsonl([first, bq_cdc("UPSERT", {"id": 1, "amount": 2}, "0/2")])})
    run_steps(spark, cfg, "PAY")
    rows = history_rows(cfg, "PAY")
    assert versions_of(rows, 1, "amount") == [("insert", False, 1), ("update", True, 2)]
    # the same sequence number with other values is a tie: both kept, the later arrival last (rules.md#changes)
    land(cfg, "PAY", "batch-3", {"a.jsonl": jsonl([bq_cdc("UPSERT", {"id": 1, "amount": 3}, "0/2")])})
    run_steps(spark, cfg, "PAY")
    rows = history_rows(cfg, "PAY")
    assert versions_of(rows, 1, "amount") == [("insert", False, 1), ("update", False, 2), ("update", True, 3)]
    assert_linked(rows)
    assert [r["amount"] for r in target_rows(cfg, "PAY")] == [3]
    before = history_rows(cfg, "PAY")
    history.rebuild(spark, cfg, cfg.table("PAY"))
    assert history_rows(cfg, "PAY") == before


def test_history_takes_a_batch_whose_merge_waits_over_an_empty_base(spark, workdir):
    """An empty base snapshot builds an empty target, so the next batch's merge waits (`apply:
    min_changes`); the history takes the batch anyway: its current versions are the fresh read,
    the target as the waiting merge will leave it, not the empty target."""
    from cdc_assets.engine.fresh import fresh_table

    export = workdir / "export.csv"
    export.write_text("id,balance\n", encoding="utf-8")
    cfg = write_config(workdir, [{**ACCOUNTS, "base_snapshot": str(export), "apply": {"min_changes": 1000}}])
    run_ok(cfg, "ACCOUNTS")
    assert target_rows(cfg, "ACCOUNTS") == []
    land(cfg, "ACCOUNTS", "batch-1", {"a.jsonl": jsonl([mysql("INSERT", {"id": 1, "balance": "10.00"}, 1, 10)])})
    out = run_ok(cfg, "ACCOUNTS")
    assert out.waiting and out.waiting.startswith("merge waits")
    assert target_rows(cfg, "ACCOUNTS") == []
    rows = history_rows(cfg, "ACCOUNTS")
    # an empty export's header types no column: the key is typed by its first value, as without the export
    assert versions_of(rows, 1, "balance") == [("insert", True, Decimal("10.00"))]
    fresh = fresh_table(cfg, cfg.table("ACCOUNTS")).to_pylist()
    assert source_part(r for r in rows if r["_cdc_is_current"]) == source_part(fresh)


def test_history_needs_every_change_kept():
    raw = {"warehouse": "./w", "landing": "./l", "tables": [{
        "name": "E", "keys": ["id"], "format": "datastream-json", "history": True,
        "maintenance": {"trim_changes_after": "30d"}}]}
    with pytest.raises(ConfigError, match="table 'E'.*field 'history' needs every change kept"):
        parse_config(raw, "/etc/cdc/cdc.yaml")
    raw["tables"][0].update(history="yes", maintenance={})
    with pytest.raises(ConfigError, match="field 'history' must be true, false or a mapping"):
        parse_config(raw, "/etc/cdc/cdc.yaml")
