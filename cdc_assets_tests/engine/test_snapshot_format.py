"""`format: snapshot` (rules.md#rule-11): each batch, all its files together, is a complete export of the
source table. The target becomes the latest export: absent keys deleted, changed rows updated,
new rows inserted, unchanged rows untouched; the changes this implies are staged like a change
feed's, so the change data feed and the history see only real changes."""
from __future__ import annotations

import io
import json
import math
import os

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cdc_assets.core.generator import generate_history, snapshot_exports
from cdc_assets.core.values import decode_row
from cdc_assets.defs.definitions import build_definitions
from cdc_assets.engine import delta, snapshot, status, target_versions
from cdc_assets.engine.landing import register_new_batch
from cdc_assets.engine.stage import stage_batch
from cdc_assets.engine.table_layout import HISTORY, path
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.reference_model import DELETE, UPSERT, ReferenceTable, SourceChange
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS, run_ok, run_table
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, delta_version, target_rows, target_version, values

pytestmark = MARKS


def derived(cfg, table: str, seq: int, key: str = "id") -> list[tuple]:
    """The changes batch `seq` derived: (change type, key value), sorted."""
    rows = DeltaTable(os.path.join(cfg.table_dir(table), "changes")).to_pyarrow_table().to_pylist()
    return sorted((r["_cdc_change_type"], decode_row(r["_cdc_row"])[key]) for r in rows if r["_cdc_batch_seq"] == seq)


def test_a_sequence_of_snapshots_inserts_updates_deletes_and_leaves_unchanged_rows_alone(spark, workdir):
    cfg = write_config(workdir, [{"name": "ITEMS", "keys": ["id"], "format": "snapshot", "change_feed": True,
                                  "history": True}])
    table_dir = cfg.table_dir("ITEMS")
    land(cfg, "ITEMS", "b1", {"export.csv": "id,v\n1,a\n2,b\n3,c\n"})
    run_ok(cfg, "ITEMS")
    assert values(target_rows(cfg, "ITEMS"), "id", "v") == {1: "a", 2: "b", 3: "c"}
    assert derived(cfg, "ITEMS", 1) == [("INSERT", 1), ("INSERT", 2), ("INSERT", 3)]
    order_of_1 = values(target_rows(cfg, "ITEMS", source_only=False), "id", "_cdc_order")[1]

    # the next export, split over two files in no particular order: 2 changed, 3 gone, 4 new, 1 the same
    land(cfg, "ITEMS", "b2", {"part-1.csv": "id,v\n4,d\n2,B\n", "part-2.csv": "id,v\n1,a\n"})
    run_ok(cfg, "ITEMS")
    assert values(target_rows(cfg, "ITEMS"), "id", "v") == {1: "a", 2: "B", 4: "d"}
    assert derived(cfg, "ITEMS", 2) == [("DELETE", 3), ("INSERT", 4), ("UPDATE", 2)]
    # the last change applied is a delete no line of any file holds: status says where it came from
    assert status.table_status(cfg, cfg.table("ITEMS")).last_change_at == "b000002: a key absent from its export"
    # the unchanged row is not rewritten: it keeps the version it had, and the feed never names it
    assert values(target_rows(cfg, "ITEMS", source_only=False), "id", "_cdc_order")[1] == order_of_1
    v2 = target_version(cfg, "ITEMS")
    feed = target_versions.changes("ITEMS", table_dir, v2, v2).to_pylist()
    assert sorted((r["_change_type"], r["id"]) for r in feed) == [
        ("delete", 3), ("insert", 4), ("update_postimage", 2), ("update_preimage", 2)]

    # 3 comes back
    land(cfg, "ITEMS", "b3", {"export.csv": "id,v\n1,a\n2,B\n3,c2\n4,d\n"})
    run_ok(cfg, "ITEMS")
    assert values(target_rows(cfg, "ITEMS"), "id", "v") == {1: "a", 2: "B", 3: "c2", 4: "d"}
    assert derived(cfg, "ITEMS", 3) == [("INSERT", 3)]

    # the same export again: no change, no new target version
    v3 = target_version(cfg, "ITEMS")
    land(cfg, "ITEMS", "b4", {"export.csv": "id,v\n4,d\n3,c2\n2,B\n1,a\n"})
    run_ok(cfg, "ITEMS")
    assert derived(cfg, "ITEMS", 4) == []
    assert target_version(cfg, "ITEMS") == v3

    # the history holds only real changes: one version of 1, two of 2, three of 3 (insert, delete, insert)
    history = DeltaTable(path(table_dir, HISTORY)).to_pyarrow_table().to_pylist()
    count = {k: sum(1 for r in history if r["id"] == k) for k in (1, 2, 3, 4)}
    assert count == {1: 1, 2: 2, 3: 3, 4: 1}

    # a rebuild from staging gives the target the snapshots built
    before = sorted(target_rows(cfg, "ITEMS", source_only=False), key=lambda r: r["id"])
    rebuild(spark, cfg, cfg.table("ITEMS"), None)
    after = sorted(target_rows(cfg, "ITEMS", source_only=False), key=lambda r: r["id"])
    assert [(r["id"], r["v"], r["_cdc_order"]) for r in after] == [(r["id"], r["v"], r["_cdc_order"]) for r in before]


def test_a_batch_registered_later_wins_and_is_compared_with_the_batches_not_yet_applied(spark, workdir):
    cfg = write_config(workdir, [{"name": "RANKED", "keys": ["id"], "format": "snapshot"}])
    table, table_dir, landing = cfg.table("RANKED"), cfg.table_dir("RANKED"), cfg.landing_dir("RANKED")
    # the export taken later lands first, and is taken but not applied before the next one lands
    land(cfg, "RANKED", "b1", {"taken-2024-02.jsonl": jsonl([{"id": 1, "v": "february"}, {"id": 2, "v": "february"}])})
    b1 = register_new_batch(landing, table_dir)
    snapshot.ingest_batch(spark, cfg, table, b1)
    stage_batch(cfg, table, b1)
    land(cfg, "RANKED", "b2", {"taken-2024-01.jsonl": jsonl([{"id": 1, "v": "january"}, {"id": 3, "v": "january"}])})
    take_and_apply(spark, cfg, "RANKED")
    # the batch registered later is the table's state, whatever its content says about time
    assert values(target_rows(cfg, "RANKED"), "id", "v") == {1: "january", 3: "january"}
    # its changes are relative to batch 1's export, not to the (still empty) target
    assert derived(cfg, "RANKED", 2) == [("DELETE", 2), ("INSERT", 3), ("UPDATE", 1)]


def test_a_quarantined_row_keeps_its_key_and_a_row_without_a_key_withholds_deletes(spark, workdir):
    cfg = write_config(workdir, [{"name": "BAD", "keys": ["id"], "format": "snapshot",
                                  "columns": {"amount": "decimal(12,2)"}}])
    land(cfg, "BAD", "b1", {"export.jsonl": jsonl([{"id": i, "amount": f"{i}.50"} for i in (1, 2, 3, 4)])})
    run_ok(cfg, "BAD")
    assert set(values(target_rows(cfg, "BAD"), "id", "amount")) == {1, 2, 3, 4}

    # 2's amount cannot be a decimal: quarantined, and 2 is neither updated nor deleted; 3 is gone
    land(cfg, "BAD", "b2", {"export.jsonl": jsonl([{"id": 1, "amount": "1.75"}, {"id": 2, "amount": "lots"},
                                                   {"id": 4, "amount": "4.50"}])})
    run_ok(cfg, "BAD")
    rows = values(target_rows(cfg, "BAD"), "id", "amount")
    assert {k: str(v) for k, v in rows.items()} == {1: "1.75", 2: "2.50", 4: "4.50"}
    [bad] = delta_rows(cfg, "BAD", "quarantine")
    assert (bad["table"], bad["_cdc_line"], bad["_cdc_file"]) == ("BAD", 2, "b2/export.jsonl")
    assert "amount" in bad["_cdc_reason"]

    # a line whose key cannot be read: which key it was cannot be told, so this export deletes nothing
    land(cfg, "BAD", "b3", {"export.jsonl": '{"id": 1, "amount": "1.75"}\n{"amount": "9.00"}\nnot json\n'
                                            '{"id": 5, "amount": "5.00"}\n'})
    out = run_ok(cfg, "BAD")
    rows = values(target_rows(cfg, "BAD"), "id", "amount")
    assert {k: str(v) for k, v in rows.items()} == {1: "1.75", 2: "2.50", 4: "4.50", 5: "5.00"}
    assert len(delta_rows(cfg, "BAD", "quarantine")) == 3
    assert out.ok

    # an export with a header and no rows is an empty table
    land(cfg, "BAD", "b4", {"export.csv": "id,amount\n"})
    run_ok(cfg, "BAD")
    assert target_rows(cfg, "BAD") == []


def _parquet(rows: list[dict], schema: pa.Schema) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out)
    return out.getvalue()


TYPED = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.decimal128(12, 2)),
                   ("score", pa.float64()), ("at", pa.timestamp("us", tz="UTC")), ("blob", pa.binary())])


def _typed_exports():
    import datetime as dt
    from decimal import Decimal

    def row(i, region="eu", amount="1.00", score=1.0, blob=b"x"):
        return {"id": i, "region": region, "amount": Decimal(amount), "score": score,
                "at": dt.datetime(2024, 1, i % 28 + 1, tzinfo=dt.UTC), "blob": blob}
    first = [row(i, score=i / 3) for i in range(1, 9)]
    second = [r for r in first if r["id"] not in (2, 5)]
    second[0] = row(1, region="us", amount="9.99")  # moves partition
    second[1] = {**second[1], "blob": None}  # id 3: a value becomes null
    second.append(row(20, region="apac"))
    return [
        {"a.parquet": _parquet(first[:4], TYPED), "b.parquet": _parquet(first[4:], TYPED)},
        {"a.parquet": _parquet(second, TYPED),
         "c.jsonl": jsonl([{"id": 30, "region": "eu", "amount": "3.30"}])},
        # a row without its key withholds deletes; a misfit keeps its key
        {"a.parquet": _parquet(second[:3], TYPED),
         "c.jsonl": jsonl([{"id": 30, "region": "eu", "amount": "x"}]) + '{"region": "eu"}\n'},
        {"a.parquet": _parquet(second, TYPED)},
    ]


def test_the_in_process_and_the_spark_comparison_give_the_same_changes_and_target(spark, workdir, monkeypatch):
    cfg = write_config(workdir, [{"name": t, "keys": ["id"], "format": "snapshot", "partition_by": ["region"],
                                  "columns": {"amount": "decimal(12,2)"}} for t in ("HERE", "SPARKY")])
    for n, files in enumerate(_typed_exports(), start=1):
        for t in ("HERE", "SPARKY"):
            land(cfg, t, f"b{n}", files)
        take_and_apply(spark, cfg, "HERE")
        with monkeypatch.context() as m:
            # every batch read and compared by Spark, a typed export's too
            settings_of(m, snapshot, local_parse_bytes=-1, local_build_rows=-1)
            take_and_apply(spark, cfg, "SPARKY")
        assert delta.step_commit(os.path.join(cfg.table_dir("SPARKY"), "changes"), "changes", n)["applied_on"] == "spark"
        assert "applied_on" not in delta.step_commit(os.path.join(cfg.table_dir("HERE"), "changes"), "changes", n)
        for name in ("changes", "target", "quarantine"):
            here, there = (_comparable(delta_rows(cfg, t, name) if delta_version(cfg, t, name) >= 0 else [])
                           for t in ("HERE", "SPARKY"))
            assert here == there, (n, name)
    # batch 3 changed nothing (its rows equal; the keys it lacks kept, since a line
    # without a key withheld its deletes); batch 4 deleted only the key it lacks
    assert derived(cfg, "HERE", 3) == [] and derived(cfg, "HERE", 4) == [("DELETE", 30)]
    state = {r["id"]: r for r in target_rows(cfg, "HERE")}
    assert sorted(state) == [1, 3, 4, 6, 7, 8, 20]
    assert str(state[1]["amount"]) == "9.99" and state[1]["region"] == "us"
    assert state[3]["blob"] is None and state[3]["score"] == 1.0


def _comparable(rows: list[dict]) -> list[str]:
    """Rows as sortable text, without what differs between the two tables (their names, times)."""
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k not in ("quarantined_at", "table")}
        if r.get("_cdc_row"):
            r["_cdc_row"] = decode_row(r["_cdc_row"])
        out.append(json.dumps(r, sort_keys=True, default=repr))
    return sorted(out)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_random_snapshot_feeds_match_the_reference_and_a_backfill_rebuilds_them(spark, workdir, fmt):
    history = generate_history(changes=240, seed={"csv": 1, "jsonl": 2, "parquet": 3}[fmt], inserts=45, updates=35,
                               deletes=20)
    exports = snapshot_exports(history, batches=4, files_per_batch=3, seed=7)
    cfg = write_config(workdir, [{"name": "RANDOM", "keys": ["id"], "format": "snapshot",
                                  "partition_by": ["region"]}])
    reference = ReferenceTable()
    instance = dg.DagsterInstance.ephemeral()
    n_ops = len(history.operations)
    for b, files in enumerate(exports, start=1):
        land(cfg, "RANDOM", f"b{b}", {f"part-{i}.{fmt}": _export_file(rows, fmt) for i, rows in enumerate(files)})
        outcome = run_table(cfg, "RANDOM", instance)
        assert outcome.ok, outcome
        for o in history.operations[(b - 1) * n_ops // len(exports): b * n_ops // len(exports)]:
            reference.deliver(SourceChange((o.key,), o.seq, DELETE if o.op == "DELETE" else UPSERT, o.row))
        expected = {k[0]: _plain(r) for k, r in reference.state().items()}
        got = {r["id"]: _plain(r) for r in target_rows(cfg, "RANDOM")}
        assert got == expected, b

    # a backfill of every target partition through the apply job rebuilds, from staging, what the batches built
    built = sorted(target_rows(cfg, "RANDOM", source_only=False), key=lambda r: r["id"])
    version = target_version(cfg, "RANDOM")
    keys = instance.get_dynamic_partitions("RANDOM__target_partitions")
    tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    result = build_definitions(cfg).resolve_job_def("RANDOM_apply_job").execute_in_process(
        instance=instance, tags=tags, raise_on_error=True)
    assert result.success and target_version(cfg, "RANDOM") == version + 1  # rewritten
    assert sorted(target_rows(cfg, "RANDOM", source_only=False), key=lambda r: r["id"]) == built


def _export_file(rows: list[dict], fmt: str) -> str | bytes:
    columns = ["id", "customer", "amount", "status", "region"]
    if fmt == "jsonl":
        return jsonl(rows)
    if fmt == "parquet":
        return _parquet(rows, pa.schema([("id", pa.int64()), ("customer", pa.string()), ("amount", pa.float64()),
                                         ("status", pa.string()), ("region", pa.string())]))
    import csv

    out = io.StringIO()
    writer = csv.DictWriter(out, columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _plain(row: dict) -> tuple:
    return (row["customer"], round(float(row["amount"]), 2), row["status"] or None, row["region"])


EVERY_TYPE = pa.schema([("code", pa.string()), ("f", pa.float64()), ("d", pa.decimal128(12, 2)),
                        ("ts", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")), ("day", pa.date32()),
                        ("blob", pa.binary()), ("flag", pa.bool_()), ("n", pa.int32()), ("big", pa.int64()),
                        ("note", pa.string())])


def _every_type_exports() -> list[list[dict]]:
    import datetime as dt
    from decimal import Decimal

    at = dt.datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
    first = [
        # keys that are strings of digits: "007", "7" and "0070" are three keys
        {"code": "007", "f": float("nan"), "d": Decimal("1.10"), "ts": at, "local": at.replace(tzinfo=None),
         "day": dt.date(2024, 2, 29), "blob": b"\x00", "flag": False, "n": -2**31, "big": 2**63 - 1, "note": ""},
        {"code": "7", "f": -0.0, "d": Decimal("-0.01"), "ts": at, "local": None, "day": None, "blob": b"",
         "flag": True, "n": 0, "big": -2**63, "note": "x"},
        {"code": "0070", "f": 0.0, "d": None, "ts": None, "local": None, "day": None, "blob": None, "flag": None,
         "n": None, "big": None, "note": None},
        {"code": "1", "f": float("inf"), "d": Decimal("9999999999.99"), "ts": at, "local": at.replace(tzinfo=None),
         "day": dt.date(1970, 1, 1), "blob": b"\xff" * 3, "flag": False, "n": 7, "big": 7, "note": "same"},
    ]
    second = [dict(r) for r in reversed(first)]  # the same rows in another order: nothing changes
    third = [dict(r) for r in first]
    third[0].update(f=1.0, ts=at + dt.timedelta(microseconds=1), blob=b"\x00\x00")  # NaN -> 1.0, a µs, a byte
    third[1].update(f=0.0, local=at.replace(tzinfo=None), note=None)  # -0.0 -> 0.0; null -> a value; text -> null
    third[2].update(f=-0.0, note="")  # 0.0 -> -0.0; null -> empty text
    third[3].update(d=Decimal("9999999999.98"))  # one cent
    return [first, second, third]


def test_a_value_of_every_type_is_compared_exactly_and_both_readings_derive_the_same_changes(
        spark, workdir, monkeypatch):
    """An export whose Parquet columns all have column types is compared column by column; an
    unchanged row (NaN, an infinity, -0.0, nulls, empty text and bytes) derives nothing, and each
    changed value (NaN to 1.0, -0.0 to 0.0, a microsecond, a byte, a cent, null to empty text)
    derives an update. Read column by column by Spark's tasks, or row by row, the same batches give
    the same records byte for byte, ordering keys and row images included."""
    tables = ("COLS", "SPARKY", "ROWS")
    cfg = write_config(workdir, [{"name": t, "keys": ["code"], "format": "snapshot"} for t in tables])
    for n, rows in enumerate(_every_type_exports(), start=1):
        for t in tables:
            land(cfg, t, f"b{n}", {"part-0.parquet": _parquet(rows[:2], EVERY_TYPE),
                                   "part-1.parquet": _parquet(rows[2:], EVERY_TYPE)})
        take_and_apply(spark, cfg, "COLS")
        with monkeypatch.context() as m:
            settings_of(m, snapshot, local_build_rows=-1)  # read column by column by Spark's tasks
            take_and_apply(spark, cfg, "SPARKY")
        with monkeypatch.context() as m:
            m.setattr(snapshot, "typed_export", lambda *a, **k: None)  # every batch read row by row
            take_and_apply(spark, cfg, "ROWS")
        commits = {t: delta.step_commit(os.path.join(cfg.table_dir(t), "changes"), "changes", n) for t in tables}
        assert commits["COLS"]["typed_columns"] == commits["SPARKY"]["typed_columns"] == "11"
        assert commits["SPARKY"]["applied_on"] == "spark" and "typed_columns" not in commits["ROWS"]
    assert derived(cfg, "COLS", 1, "code") == [("INSERT", c) for c in ("007", "0070", "1", "7")]
    assert derived(cfg, "COLS", 2, "code") == []
    assert derived(cfg, "COLS", 3, "code") == [("UPDATE", c) for c in ("007", "0070", "1", "7")]
    for name in ("changes", "target"):
        for t in ("SPARKY", "ROWS"):
            assert _comparable(delta_rows(cfg, "COLS", name)) == _comparable(delta_rows(cfg, t, name)), (t, name)
    got = {r["code"]: r for r in target_rows(cfg, "COLS")}
    assert math.copysign(1, got["0070"]["f"]) == -1 and math.copysign(1, got["7"]["f"]) == 1
    assert got["0070"]["note"] == "" and got["7"]["note"] is None and got["007"]["blob"] == b"\x00\x00"
