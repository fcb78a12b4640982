"""Column types end to end (rules.md#types): the target keeps the source's types. Types come from the
file (Parquet, Avro), else from `columns:`, else inference; decimals stay exact; a value
that fits neither its column nor a safe widening goes to quarantine with the column named."""
from __future__ import annotations

import datetime as dt
import io
import json
import os
from decimal import Decimal

import fastavro
import pyarrow as pa
from deltalake import DeltaTable

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land, parquet
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import by_key, delta_rows, target_rows

pytestmark = MARKS

UTC = dt.UTC
CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}


def schema_of(cfg, table) -> dict[str, pa.DataType]:
    schema = pa.schema(DeltaTable(os.path.join(cfg.table_dir(table), "target")).schema())
    return {f.name: f.type for f in schema}


def test_declared_columns_type_json_and_csv_exactly(spark, workdir):
    big = "12345678901234567890.1234567891"  # 30 digits: a float keeps 17
    cfg = write_config(workdir, [{
        "name": "DECL", "keys": ["id"], "format": "changeset", "options": CHANGESET,
        "columns": {"amount": "decimal(30,10)", "created": "timestamp", "day": "date", "local": "timestamp_ntz",
                    "code": "string", "small": "int"}}])
    land(cfg, "DECL", "batch-1", {
        "a.jsonl": "".join([
            '{"op": "I", "id": 1, "seq": 1, "amount": ' + big + ', "created": "2024-03-01T10:00:00+02:00",'
            ' "day": "2024-02-29", "local": "2024-03-01 10:00:00", "code": 7, "small": 5}\n',
            '{"op": "I", "id": 2, "seq": 1, "amount": 0.10, "created": "2024-03-01T08:00:00Z", "day": null,'
            ' "local": null, "code": "x", "small": 6}\n',
            '{"op": "I", "id": 3, "seq": 1, "amount": "n/a", "created": null, "day": null, "local": null,'
            ' "code": "y", "small": 7}\n',
        ]),
        "b.csv": "op,id,seq,amount,created,day,local,code,small\nI,4,1,0.30,2024-03-01 08:00:00,2024-01-01,,007,8\n",
    })
    take_and_apply(spark, cfg, "DECL")
    types = schema_of(cfg, "DECL")
    assert types["amount"] == pa.decimal128(30, 10)
    assert types["created"] == pa.timestamp("us", tz="UTC")
    assert types["local"] == pa.timestamp("us")
    assert types["day"] == pa.date32() and types["small"] == pa.int32() and pa.types.is_string(types["code"])
    rows = by_key(target_rows(cfg, "DECL"), "id")
    assert set(rows) == {(1,), (2,), (4,)}
    assert rows[(1,)]["amount"] == Decimal(big)
    assert rows[(2,)]["amount"] + rows[(4,)]["amount"] == Decimal("0.4")  # exact: no float on the way
    assert rows[(1,)]["created"] == dt.datetime(2024, 3, 1, 8, 0, tzinfo=UTC)  # the same instant, in UTC
    assert rows[(4,)]["created"] == dt.datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
    assert rows[(1,)]["local"] == dt.datetime(2024, 3, 1, 10, 0)
    assert rows[(1,)]["day"] == dt.date(2024, 2, 29)
    assert (rows[(1,)]["code"], rows[(4,)]["code"]) == ("7", "007")
    (q,) = delta_rows(cfg, "DECL", "quarantine")
    assert (q["_cdc_file"], q["_cdc_line"]) == ("batch-1/a.jsonl", 3)
    assert "'amount'" in q["_cdc_reason"] and "decimal(30,10)" in q["_cdc_reason"] and "n/a" not in q["_cdc_reason"]
    assert '"n/a"' in q["_cdc_raw"]


def test_parquet_and_avro_files_keep_their_schema_types(spark, workdir):
    cfg = write_config(workdir, [
        {"name": "PQ", "keys": ["id"], "format": "changeset", "options": CHANGESET},
        {"name": "AV", "keys": ["id"], "format": "datastream-avro"},
    ])
    land(cfg, "PQ", "batch-1", {"part.parquet": parquet(pa.table({
        "op": ["I", "I"], "id": pa.array([1, 2], pa.int64()), "seq": [1, 1],
        "amount": pa.array([Decimal("12.50"), Decimal("-0.01")], pa.decimal128(12, 2)),
        "at": pa.array([dt.datetime(2024, 1, 1, 9, tzinfo=UTC), None], pa.timestamp("us", tz="UTC")),
        "wall": pa.array([dt.datetime(2024, 1, 1, 9), None], pa.timestamp("ms")),
        "day": pa.array([dt.date(2024, 1, 1), None], pa.date32()),
        "blob": pa.array([b"\x00\xff", None], pa.binary()),
        "n": pa.array([1, 2], pa.int32()), "ok": [True, False], "ratio": [0.5, 1.5],
    }))})
    schema = {"type": "record", "name": "event", "fields": [
        {"name": "uuid", "type": "string"}, {"name": "read_method", "type": "string"},
        {"name": "source_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "source_metadata", "type": {"type": "record", "name": "meta", "fields": [
            {"name": "change_type", "type": "string"}, {"name": "log_file", "type": "string"},
            {"name": "log_position", "type": "long"}]}},
        {"name": "payload", "type": {"type": "record", "name": "row", "fields": [
            {"name": "id", "type": "long"},
            {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}]},
            {"name": "updated", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
            {"name": "born", "type": ["null", {"type": "int", "logicalType": "date"}]}]}}]}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [{
        "uuid": "u1", "read_method": "mysql-cdc-binlog", "source_timestamp": dt.datetime(2024, 1, 1, tzinfo=UTC),
        "source_metadata": {"change_type": "INSERT", "log_file": "mysql-bin.000001", "log_position": 4},
        "payload": {"id": 1, "price": Decimal("1.005"), "updated": dt.datetime(2024, 1, 1, 9, 30, 0, 123456, tzinfo=UTC),
                    "born": dt.date(1990, 5, 17)}}])
    land(cfg, "AV", "batch-1", {"part.avro": buf.getvalue()})
    take_and_apply(spark, cfg, "PQ")
    take_and_apply(spark, cfg, "AV")
    pq_types = schema_of(cfg, "PQ")
    assert pq_types["amount"] == pa.decimal128(12, 2) and pq_types["at"] == pa.timestamp("us", tz="UTC")
    assert pq_types["wall"] == pa.timestamp("us") and pq_types["day"] == pa.date32()
    assert pq_types["blob"] == pa.binary() and pq_types["n"] == pa.int32()
    assert pq_types["ok"] == pa.bool_() and pq_types["ratio"] == pa.float64()
    rows = by_key(target_rows(cfg, "PQ"), "id")
    assert rows[(1,)]["amount"] == Decimal("12.50") and rows[(2,)]["amount"] == Decimal("-0.01")
    assert rows[(1,)]["blob"] == b"\x00\xff" and rows[(1,)]["wall"] == dt.datetime(2024, 1, 1, 9)
    av_types = schema_of(cfg, "AV")
    assert av_types["price"] == pa.decimal128(10, 3) and av_types["updated"] == pa.timestamp("us", tz="UTC")
    assert av_types["born"] == pa.date32()
    (row,) = target_rows(cfg, "AV")
    assert row["price"] == Decimal("1.005") and row["updated"].microsecond == 123456


def test_types_widen_safely_and_a_decimal_never_becomes_a_double(spark, workdir):
    cfg = write_config(workdir, [{"name": "WIDE", "keys": ["id"], "format": "changeset", "options": CHANGESET}])
    first = pa.table({"op": ["I"], "id": [1], "seq": [1], "amount": pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
                      "n": pa.array([1], pa.int32())})
    land(cfg, "WIDE", "batch-1", {"part.parquet": parquet(first)})
    take_and_apply(spark, cfg, "WIDE")
    land(cfg, "WIDE", "batch-2", {
        "part.parquet": parquet(pa.table({
            "op": ["I"], "id": [2], "seq": [1], "amount": pa.array([Decimal("123456.1234")], pa.decimal128(10, 4)),
            "n": pa.array([1 << 40], pa.int64())})),
        "z.jsonl": jsonl([{"op": "I", "id": 3, "seq": 1, "amount": "lots", "n": 3}]),
    })
    take_and_apply(spark, cfg, "WIDE")
    types = schema_of(cfg, "WIDE")
    assert types["amount"] == pa.decimal128(10, 4) and types["n"] == pa.int64()
    rows = by_key(target_rows(cfg, "WIDE"), "id")
    assert rows[(1,)]["amount"] == Decimal("1.5") and rows[(2,)]["amount"] == Decimal("123456.1234")
    assert rows[(2,)]["n"] == 1 << 40 and (3,) not in rows
    (q,) = delta_rows(cfg, "WIDE", "quarantine")
    assert q["_cdc_file"] == "batch-2/z.jsonl" and "'amount'" in q["_cdc_reason"]


def test_a_typed_change_sets_the_type_of_a_column_a_csv_export_guessed(spark, workdir):
    export = workdir / "export.csv"
    export.write_text("id,amount,at\n1,2.50,2024-01-01 10:00:00\n2,3,\n")
    cfg = write_config(workdir, [{"name": "BASED", "keys": ["id"], "format": "changeset", "options": CHANGESET,
                                  "base_snapshot": str(export)}])
    land(cfg, "BASED", "batch-1", {"part.parquet": parquet(pa.table({
        "op": ["U"], "id": [2], "seq": [1], "amount": pa.array([Decimal("4.25")], pa.decimal128(12, 2)),
        "at": pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))}))})
    take_and_apply(spark, cfg, "BASED")
    types = schema_of(cfg, "BASED")
    assert types["amount"] == pa.decimal128(12, 2) and types["at"] == pa.timestamp("us", tz="UTC")
    rows = by_key(target_rows(cfg, "BASED"), "id")
    assert rows[(1,)]["amount"] == Decimal("2.50") and rows[(1,)]["at"] == dt.datetime(2024, 1, 1, 10, tzinfo=UTC)
    assert rows[(2,)]["amount"] == Decimal("4.25")


def test_datastream_json_payload_with_declared_types(spark, workdir):
    cfg = write_config(workdir, [{"name": "DSJ", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"total": "decimal(12,2)", "placed": "timestamp"}}])
    land(cfg, "DSJ", "batch-1", {"part.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "total": 19.99, "placed": "2024-03-01T10:00:00.000Z"}, 1, 1),
        mysql("UPDATE", {"id": 1, "total": 20.01, "placed": "2024-03-01T10:05:00.000Z"}, 1, 2),
    ])})
    take_and_apply(spark, cfg, "DSJ")
    (row,) = target_rows(cfg, "DSJ")
    assert row["total"] == Decimal("20.01") and row["placed"] == dt.datetime(2024, 3, 1, 10, 5, tzinfo=UTC)


def test_changes_and_staging_hold_typed_source_columns_any_reader_can_filter(spark, workdir):
    """A Parquet file's columns are typed columns of `changes` and `staging` too, so a Delta
    reader filters them by value; a JSON change with inferred types keeps its row image; a
    value too wide for a column's stored type keeps its image and still reaches the target."""
    cfg = write_config(workdir, [{"name": "STORED", "keys": ["id"], "format": "changeset", "options": CHANGESET}])
    land(cfg, "STORED", "batch-1", {"part.parquet": parquet(pa.table({
        "op": ["I", "I"], "id": pa.array([1, 2], pa.int64()), "seq": [1, 1],
        "amount": pa.array([Decimal("12.50"), Decimal("-0.01")], pa.decimal128(12, 2)),
        "at": pa.array([dt.datetime(2024, 1, 1, 9, tzinfo=UTC), None], pa.timestamp("us", tz="UTC")),
        "n": pa.array([1, 2], pa.int32())}))})
    take_and_apply(spark, cfg, "STORED")
    for table in ("changes", "staging"):
        data = DeltaTable(os.path.join(cfg.table_dir("STORED"), table)).to_pyarrow_table(
            filters=[("amount", "<", Decimal("0"))])
        assert data["id"].to_pylist() == [2], table
        assert data.schema.field("amount").type == pa.decimal128(12, 2)
        assert data.schema.field("at").type == pa.timestamp("us", tz="UTC")
        assert data["_cdc_row"].to_pylist() == [None]
    land(cfg, "STORED", "batch-2", {
        "part.parquet": parquet(pa.table({"op": ["U"], "id": pa.array([1], pa.int64()), "seq": [2],
                                          "amount": pa.array([Decimal("12.50")], pa.decimal128(12, 2)),
                                          "n": pa.array([1 << 40], pa.int64())})),
        "z.jsonl": jsonl([{"op": "I", "id": 3, "seq": 1, "amount": 4.5, "note": "hi"},
                          {"op": "I", "id": 4, "seq": 1, "amount": 0.25}]),
    })
    take_and_apply(spark, cfg, "STORED")
    second = {r["_cdc_key"]: r for r in DeltaTable(os.path.join(cfg.table_dir("STORED"), "changes")).to_pyarrow_table(
        filters=[("_cdc_batch_seq", "=", 2)]).to_pylist()}
    second = {int(json.loads(k)[0]): r for k, r in second.items()}
    assert second[1]["_cdc_row"] is not None and second[1]["n"] is None  # 2**40 does not fit the stored int
    assert second[3]["_cdc_row"] is not None and second[3]["amount"] is None  # an inferred value ("note")
    assert second[4]["_cdc_row"] is None and second[4]["amount"] == Decimal("0.25")  # every column typed
    rows = by_key(target_rows(cfg, "STORED"), "id")
    assert rows[(1,)]["n"] == 1 << 40 and rows[(1,)]["amount"] == Decimal("12.50")
    assert rows[(3,)]["amount"] == Decimal("4.50") and rows[(3,)]["note"] == "hi"
    assert rows[(4,)]["amount"] == Decimal("0.25") and rows[(2,)]["at"] is None
    assert schema_of(cfg, "STORED")["n"] == pa.int64()


def test_a_parquet_value_that_misfits_its_column_is_quarantined_by_line_and_a_redelivered_file_counts_once(
        spark, workdir):
    """A Parquet change set is read column by column; where a column's file type cannot widen
    the column's own (text into a timestamp column), each value is admitted on its own: the one
    that does not convert goes to quarantine with its file, line and column, the others apply.
    The same file landed again adds nothing but the same misfit."""
    cfg = write_config(workdir, [{"name": "MIS", "keys": ["id"], "format": "changeset", "options": CHANGESET,
                                  "columns": {"at": "timestamp"}}])
    land(cfg, "MIS", "batch-1", {"part.jsonl": jsonl([{"op": "I", "id": 1, "seq": 1, "at": "2024-01-01T10:00:00Z"}])})
    take_and_apply(spark, cfg, "MIS")
    changes = parquet(pa.table({"op": ["I", "I", "U"], "id": pa.array([2, 3, 4], pa.int64()), "seq": [1, 1, 1],
                                "at": ["2024-01-02T10:00:00Z", "soon", None]}))
    land(cfg, "MIS", "batch-2", {"part.parquet": changes})
    take_and_apply(spark, cfg, "MIS")
    rows = by_key(target_rows(cfg, "MIS"), "id")
    assert sorted(rows) == [(1,), (2,), (4,)]
    assert rows[(2,)]["at"] == dt.datetime(2024, 1, 2, 10, tzinfo=UTC) and rows[(4,)]["at"] is None
    assert schema_of(cfg, "MIS")["at"] == pa.timestamp("us", tz="UTC")
    (q,) = delta_rows(cfg, "MIS", "quarantine")
    assert (q["_cdc_file"], q["_cdc_line"]) == ("batch-2/part.parquet", 2)
    assert "'at'" in q["_cdc_reason"] and '"soon"' in q["_cdc_raw"]

    land(cfg, "MIS", "batch-3", {"part.parquet": changes})
    take_and_apply(spark, cfg, "MIS")
    assert [r for r in delta_rows(cfg, "MIS", "changes") if r["_cdc_batch_seq"] == 3] == []
    assert sorted((q["_cdc_file"], q["_cdc_line"]) for q in delta_rows(cfg, "MIS", "quarantine")) == [
        ("batch-2/part.parquet", 2), ("batch-3/part.parquet", 2)]
    assert by_key(target_rows(cfg, "MIS"), "id") == rows
