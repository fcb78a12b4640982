"""rules.md#rule-12: `deletes: soft` keeps a deleted key's row in the target, `_cdc_deleted` true, with the
delete's ordering key; a later upsert makes it live again, an older one arriving later does not.
The fresh read, a rebuild, `keys_unique`, the reconciliation with a source export and `status`
understand it (live rows exclude flagged ones); a table without the setting deletes rows."""
from __future__ import annotations

import pytest

from cdc_assets.core.reconcile import discrepancies
from cdc_assets.engine import checks, fresh
from cdc_assets.engine.apply import apply_pending
from cdc_assets.engine.status import table_status
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import apply_batches, take, take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, target_rows

from .test_debezium_feed import lines
from .test_rule9_truncate import pg

pytestmark = MARKS


def _state(rows: list[dict]) -> dict:
    return {r["id"]: (r["v"], r["_cdc_deleted"]) for r in rows}


BATCHES = [
    ([pg("c", 100, 1, "a"), pg("c", 110, 2, "a"), pg("c", 120, 3, "a"), pg("c", 130, 4, "a")],
     {1: ("a", False), 2: ("a", False), 3: ("a", False), 4: ("a", False)}),
    ([pg("u", 200, 1, "b"), pg("d", 210, 1, "b"),  # updated then deleted: its last row stays, flagged
      pg("d", 220, 2, "a"),
      pg("d", 230, 9, "gone")],  # a key the target never had: the delete's row image
     {1: ("b", True), 2: ("a", True), 3: ("a", False), 4: ("a", False), 9: ("gone", True)}),
    ([pg("u", 205, 1, "older"),  # older than its delete: stays deleted as it was
      pg("c", 300, 2, "again"),  # newer: live again
      pg("u", 310, 3, "b")],
     {1: ("b", True), 2: ("again", False), 3: ("b", False), 4: ("a", False), 9: ("gone", True)}),
    ([pg("t", 305),  # a truncate flags every row ranking at or below it; 3 (at 310) stays live
      pg("c", 400, 5, "a")],
     {1: ("b", True), 2: ("again", True), 3: ("b", False), 4: ("a", True), 5: ("a", False), 9: ("gone", True)}),
]


def test_a_soft_delete_table_keeps_deleted_rows_flagged(spark, workdir):
    export = workdir / "export.csv"
    export.write_text("id,v,region\n3,b,us\n5,a,us\n", encoding="utf-8")  # the source's live rows at the end
    cfg = write_config(workdir, [{"name": "SD", "keys": ["id"], "format": "debezium-json", "deletes": "soft",
                                  "reconcile_with": str(export)}])
    table = cfg.table("SD")
    for n, (events, expected) in enumerate(BATCHES, start=1):
        land(cfg, "SD", f"batch-{n}", {"orders.jsonl": lines(*events)})
        applied = take_and_apply(spark, cfg, "SD")  # its checks pass: keys_unique among them
        assert _state(target_rows(cfg, "SD", source_only=False)) == expected, n
    final = BATCHES[-1][1]
    rows = {r["id"]: r for r in target_rows(cfg, "SD", source_only=False)}
    staged = {(r["_cdc_key"], r["_cdc_op"]): r["_cdc_order"] for r in delta_rows(cfg, "SD", "staging")}
    assert rows[1]["_cdc_order"] == staged[(rows[1]["_cdc_key"], "D")]  # the delete's ordering key
    assert discrepancies(checks.reconciliation(cfg, table)) == 0  # the live rows are the export's
    assert checks.reconciliation(cfg, table).missing_rows == 0
    assert checks.reconciliation(cfg, table).extra_rows == 0
    status = table_status(cfg, table)
    assert (status.rows, status.soft_deleted_rows) == (2, 4)
    assert applied.deletes == 2  # 2 and 4 flagged by the last batch's truncate
    # the fresh read shows the flag; a rebuild gives the same rows
    assert _state(fresh.fresh_table(cfg, table).to_pylist()) == final
    rebuild(spark, cfg, table, None)
    assert _state(target_rows(cfg, "SD", source_only=False)) == final


def test_a_fresh_read_of_a_soft_delete_table_equals_the_next_apply(spark, workdir):
    cfg = write_config(workdir, [{"name": "SD", "keys": ["id"], "format": "debezium-json", "deletes": "soft",
                                  "apply": {"min_changes": 10**9}}])
    table = cfg.table("SD")
    for n, (events, expected) in enumerate(BATCHES, start=1):
        land(cfg, "SD", f"batch-{n}", {"orders.jsonl": lines(*events)})
        (take_and_apply if n == 1 else take)(spark, cfg, "SD")  # the first build never waits: readers need a target
        assert _state(fresh.fresh_table(cfg, table).to_pylist()) == expected, n
    shown = sorted(map(repr, fresh.fresh_table(cfg, table, with_metadata=True).to_pylist()))
    apply_pending(spark, cfg, table)
    assert sorted(map(repr, target_rows(cfg, "SD", source_only=False))) == shown


def cs(flag: str, seq: int, key: int, **values) -> dict:
    """A change set row; a delete's columns but the key are null, as a source without the deleted
    row's image (PostgreSQL without REPLICA IDENTITY FULL, GoldenGate) sends it."""
    return {"FLAG": flag, "SEQ": seq, "k": key, **({c: None for c in ("v", "w", "region")} if flag == "D" else values)}


# Each batch's change set rows and the rows after it: a key-only delete keeps the key's last live
# row (its values, its partition), flagged, at the delete's ordering key.
KEY_ONLY = [
    ([cs("I", 1, 1, v="a", w="p", region="eu"), cs("I", 1, 2, v="a", w="q", region="us"),
      cs("U", 2, 1, v="b", w="p", region="eu"), cs("D", 3, 1)],  # the same batch
     {1: ("b", "p", "eu", True), 2: ("a", "q", "us", False)}),
    ([cs("D", 5, 2),  # its row is in the target
      cs("D", 4, 3)],  # a key never seen: nothing to keep but the key
     {1: ("b", "p", "eu", True), 2: ("a", "q", "us", True), 3: (None, None, None, True)}),
    ([cs("U", 4, 2, v="late", w="late", region="eu"),  # older than the delete, arriving later: the last live row
      cs("I", 3, 3, v="c", w="r", region="us")],
     {1: ("b", "p", "eu", True), 2: ("late", "late", "eu", True), 3: ("c", "r", "us", True)}),
    ([cs("D", 6, 1),  # deleted again: keeps the row it kept
      cs("I", 7, 3, v="again", w="s", region="eu")],  # live again
     {1: ("b", "p", "eu", True), 2: ("late", "late", "eu", True), 3: ("again", "s", "eu", False)}),
]


def _kept(rows: list[dict]) -> dict:
    return {r["k"]: (r["v"], r["w"], r["region"], r["_cdc_deleted"]) for r in rows}


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_a_delete_carrying_only_the_key_keeps_the_last_live_row(spark, workdir, monkeypatch, on_spark):
    if on_spark:  # every apply and build on Spark executors
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
        monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    table = {"name": "SK", "keys": ["k"], "format": "changeset", "deletes": "soft", "partition_by": ["region"],
             "columns": {"v": "string", "w": "string", "region": "string"},
             "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                         "sequence_by": ["SEQ"]}}
    cfg = apply_batches(spark, workdir, table, KEY_ONLY, _kept)  # the last batch waits: the fresh read shows it
    final = KEY_ONLY[-1][1]
    rows = target_rows(cfg, "SK", source_only=False)
    flagged = next(r for r in rows if r["k"] == 1)
    deletes = [r["_cdc_order"] for r in delta_rows(cfg, "SK", "staging")
               if (r["_cdc_key"], r["_cdc_op"]) == (flagged["_cdc_key"], "D")]
    assert len(deletes) == 2 and flagged["_cdc_order"] == max(deletes)  # the latest delete's ordering key
    rebuild(spark, cfg, cfg.table("SK"), None)
    assert _kept(target_rows(cfg, "SK", source_only=False)) == final
    rebuild(spark, cfg, cfg.table("SK"), ["region=eu"])  # a backfill of one partition
    assert _kept(target_rows(cfg, "SK", source_only=False)) == final


def test_a_table_switched_back_to_hard_deletes_drops_its_flagged_rows(spark, workdir):
    soft = {"name": "SH", "keys": ["k"], "format": "changeset", "deletes": "soft", "columns": {"v": "string"},
            "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                        "sequence_by": ["SEQ"]}}
    cfg = write_config(workdir, [soft])
    land(cfg, "SH", "b0", {"c.jsonl": jsonl([cs("I", 1, 1, v="a"), cs("I", 1, 2, v="a"), cs("D", 2, 1)])})
    take_and_apply(spark, cfg, "SH")
    assert _state([{**r, "id": r["k"]} for r in target_rows(cfg, "SH", source_only=False)]) == \
        {1: ("a", True), 2: ("a", False)}
    hard = {**soft, "deletes": "hard"}
    cfg = write_config(workdir, [{**hard, "apply": {"min_changes": 10**9}}])
    land(cfg, "SH", "b1", {"c.jsonl": jsonl([cs("I", 3, 3, v="a"), cs("U", 1, 1, v="late")])})  # 1's is stale
    take(spark, cfg, "SH")  # staged: its merge waits
    # the deleted key is no row of a hard-delete table: not in the fresh read, gone at the next apply
    assert sorted(r["k"] for r in fresh.fresh_table(cfg, cfg.table("SH")).to_pylist()) == [2, 3]
    cfg = write_config(workdir, [hard])
    take_and_apply(spark, cfg, "SH")
    rows = target_rows(cfg, "SH", source_only=False)
    assert sorted((r["k"], r["v"]) for r in rows) == [(2, "a"), (3, "a")]
    assert all("_cdc_deleted" not in r for r in rows)  # the flag column goes with the flagged rows
    assert table_status(cfg, cfg.table("SH")).rows == 2
    rebuild(spark, cfg, cfg.table("SH"), None)
    assert sorted((r["k"], r["v"]) for r in target_rows(cfg, "SH", source_only=False)) == [(2, "a"), (3, "a")]


# A partial-update, soft-delete table whose truncates arrive out of order: the greater one first
# (each applied by a batch of its own). Key 1's changes then all arrive below it (stale: the key stays flagged), and its last live row is
# what its upserts carried since the smaller truncate, which ended the value `v` had before it.
TRUNCATES_OUT_OF_ORDER = [
    ([pg("c", 50, 2, "x"), pg("t", 900)], {2: ("x", True)}),
    ([pg("t", 300), pg("c", 950, 3, "y")], {2: ("x", True), 3: ("y", False)}),
    ([pg("u", 100, 1, "before the truncate"), pg("c", 400, 1, None), pg("u", 500, 1, None)],
     {1: (None, True), 2: ("x", True), 3: ("y", False)}),
]


def test_an_earlier_truncate_applied_after_a_later_one_still_ends_what_a_partial_update_keeps(spark, workdir):
    table = {"name": "ST", "keys": ["id"], "format": "debezium-json", "deletes": "soft", "partial_updates": True}
    # the last batch waits: the fresh read shows it, then the incremental apply in this process
    cfg = apply_batches(spark, workdir, table, TRUNCATES_OUT_OF_ORDER, _state)
    rebuild(spark, cfg, cfg.table("ST"), None)
    assert _state(target_rows(cfg, "ST", source_only=False)) == TRUNCATES_OUT_OF_ORDER[-1][1]
