"""A double keeps its IEEE value at its edges (rules.md#types: a value keeps its type): NaN, +Infinity,
-Infinity and -0.0 in double and float columns land in the target as the same doubles through
every path a user has (base export, snapshot exports, change files of each format, the fresh
read, the checks); text spellings ("NaN", "Infinity", JSON writers' quoted forms) fill a double
column; a NaN key is one key (every NaN equals every NaN, as PostgreSQL and Spark compare them),
and a number no double holds goes to quarantine naming its column and line."""
from __future__ import annotations

import io
import json
import math
import struct
from decimal import Decimal

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from cdc_assets.cli.main import main
from cdc_assets.core.reconcile import discrepancies
from cdc_assets.engine import checks, fresh
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land, parquet
from cdc_assets_tests.support.records import bq_cdc, mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take, take_and_apply
from cdc_assets_tests.support.warehouse import by_key, delta_rows, target_rows, target_version

pytestmark = MARKS

CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
NAN, INF = float("nan"), float("inf")
EDGES = [NAN, INF, -INF, -0.0, 5e-324, 0.1 + 0.2]  # by id 0..5
FLOAT32_EDGES = [NAN, INF, -INF, -0.0, 1.401298464324817e-45, 0.5]  # what a float column holds at its edges


def bits(x) -> bytes | None:
    return None if x is None else struct.pack(">d", x)


def edge_table(**more) -> pa.Table:
    n = len(EDGES)
    return pa.table({"id": pa.array(range(n), pa.int64()), "d": pa.array(EDGES, pa.float64()),
                     "f": pa.array(FLOAT32_EDGES, pa.float32()), **{k: v(n) for k, v in more.items()}})


def assert_edges(rows: list[dict], columns=("d", "f")) -> None:
    got = by_key(rows, "id")
    assert sorted(k for (k,) in got) == list(range(len(EDGES)))
    for i in range(len(EDGES)):
        if "d" in columns:
            assert bits(got[(i,)]["d"]) == bits(EDGES[i]), (i, got[(i,)]["d"])
        if "f" in columns:
            assert bits(got[(i,)]["f"]) == bits(FLOAT32_EDGES[i]), (i, got[(i,)]["f"])


def test_parquet_and_avro_doubles_land_as_the_same_ieee_values(workdir, spark_when_needed):
    nested = {"tags": lambda n: pa.array([[1.5, NAN]] * n)}  # a nested column: the export is read row by row
    (workdir / "typed.parquet").write_bytes(parquet(edge_table()))
    (workdir / "rows.parquet").write_bytes(parquet(edge_table(**nested)))
    cfg = write_config(workdir, [
        {"name": "BASE_TYPED", "keys": ["id"], "format": "changeset", "options": CHANGESET,
         "base_snapshot": str(workdir / "typed.parquet")},
        {"name": "BASE_ROWS", "keys": ["id"], "format": "changeset", "options": CHANGESET,
         "base_snapshot": str(workdir / "rows.parquet")},
        {"name": "SNAP", "keys": ["id"], "format": "snapshot"},
        {"name": "PQ", "keys": ["id"], "format": "changeset", "options": CHANGESET},
        {"name": "AV", "keys": ["id"], "format": "datastream-avro"},
    ])
    n = len(EDGES)
    land(cfg, "SNAP", "batch-1", {"export.parquet": parquet(edge_table())})
    land(cfg, "PQ", "batch-1", {"c.parquet": parquet(edge_table(op=lambda n: pa.array(["I"] * n),
                                                                seq=lambda n: pa.array([1] * n)))})
    schema = {"type": "record", "name": "event", "fields": [
        {"name": "uuid", "type": "string"}, {"name": "read_method", "type": "string"},
        {"name": "source_timestamp", "type": "long"},
        {"name": "source_metadata", "type": {"type": "record", "name": "meta", "fields": [
            {"name": "change_type", "type": "string"}, {"name": "log_file", "type": "string"},
            {"name": "log_position", "type": "long"}]}},
        {"name": "payload", "type": {"type": "record", "name": "row", "fields": [
            {"name": "id", "type": "long"}, {"name": "d", "type": ["null", "double"]},
            {"name": "f", "type": ["null", "float"]}]}}]}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [{
        "uuid": f"u{i}", "read_method": "mysql-cdc-binlog", "source_timestamp": 1709287200000,
        "source_metadata": {"change_type": "INSERT", "log_file": "mysql-bin.000001", "log_position": i},
        "payload": {"id": i, "d": EDGES[i], "f": FLOAT32_EDGES[i]}} for i in range(n)])
    land(cfg, "AV", "batch-1", {"events.avro": buf.getvalue()})
    for table in ("BASE_TYPED", "BASE_ROWS", "SNAP", "PQ", "AV"):
        take_and_apply(spark_when_needed, cfg, table)
        assert_edges(target_rows(cfg, table))
    (row,) = {r["tags"] for r in target_rows(cfg, "BASE_ROWS")}
    assert json.loads(row) == [1.5, "NaN"]  # nested values stay valid JSON

    # the same export again, and the same changes again: every row unchanged (NaN equals NaN)
    version = target_version(cfg, "SNAP")
    land(cfg, "SNAP", "batch-2", {"export.parquet": parquet(edge_table())})
    take_and_apply(spark_when_needed, cfg, "SNAP")
    assert target_version(cfg, "SNAP") == version
    assert_edges(target_rows(cfg, "SNAP"))
    land(cfg, "PQ", "batch-2", {"again.parquet": parquet(edge_table(op=lambda n: pa.array(["I"] * n),
                                                                    seq=lambda n: pa.array([1] * n)))})
    version = target_version(cfg, "PQ")
    take_and_apply(spark_when_needed, cfg, "PQ")
    assert target_version(cfg, "PQ") == version
    assert_edges(target_rows(cfg, "PQ"))


def test_a_late_change_that_leaves_a_nan_row_as_it_is_rewrites_nothing(workdir, spark_when_needed):
    # partial updates: a change arriving after a newer one is folded into the key's history; the
    # result is the row as it is (NaN equals NaN), so the target gets no new version
    cfg = write_config(workdir, [{"name": "P", "keys": ["id"], "format": "changeset", "options": CHANGESET,
                                  "partial_updates": True}])
    land(cfg, "P", "batch-1", {"c.parquet": parquet(pa.table({
        "op": ["I", "I"], "id": [1, 2], "seq": [2, 2], "d": [NAN, -0.0], "e": ["new", "new"]}))})
    take_and_apply(spark_when_needed, cfg, "P")
    version = target_version(cfg, "P")
    land(cfg, "P", "batch-2", {"c.parquet": parquet(pa.table({
        "op": ["U", "U"], "id": [1, 2], "seq": [1, 1], "d": pa.array([None, None], pa.float64()), "e": ["old", "old"]}))})
    take_and_apply(spark_when_needed, cfg, "P")
    assert target_version(cfg, "P") == version
    rows = by_key(target_rows(cfg, "P"), "id")
    assert math.isnan(rows[(1,)]["d"]) and bits(rows[(2,)]["d"]) == bits(-0.0)
    assert rows[(1,)]["e"] == rows[(2,)]["e"] == "new"


SPELLED = ["NaN", "Infinity", "-Infinity", "-0.0", "4.9E-324", "0.30000000000000004"]  # EDGES, as JSON writers quote them


def debezium(i: int, after: dict) -> dict:
    """A Debezium event as Kafka Connect's JsonConverter writes it (schemas.enable=true): Jackson
    quotes NaN and the infinities of a float64 column."""
    fields = [{"type": "int64", "optional": False, "field": "id"}, {"type": "float64", "optional": True, "field": "d"},
              {"type": "float32", "optional": True, "field": "f"}]
    value = {"type": "struct", "optional": True, "name": "pg.public.t.Value", "fields": fields}
    schema = {"type": "struct", "name": "pg.public.t.Envelope", "fields": [
        {**value, "field": "before"}, {**value, "field": "after"},
        {"type": "struct", "field": "source", "fields": []}, {"type": "string", "field": "op"}]}
    return {"schema": schema, "payload": {"before": None, "after": after, "op": "c", "ts_ms": 1709287200250,
                                          "source": {"connector": "postgresql", "ts_ms": 1709287200000, "lsn": 100 + i}}}


def test_text_formats_fill_double_columns_from_the_spellings_of_their_values(workdir, spark_when_needed):
    declared = {"d": "double", "f": "double"}
    cfg = write_config(workdir, [
        {"name": "DS", "keys": ["id"], "format": "datastream-json", "columns": declared},
        {"name": "DS_BARE", "keys": ["id"], "format": "datastream-json"},
        {"name": "DBZ", "keys": ["id"], "format": "debezium-json"},
        {"name": "BQ", "keys": ["id"], "format": "bigquery-cdc", "columns": declared},
        {"name": "CSV", "keys": ["id"], "format": "changeset", "options": CHANGESET, "columns": declared},
    ])
    n = len(EDGES)
    f_spelled = ["NaN", "Infinity", "-Infinity", "-0.0", "1.401298464324817E-45", "0.5"]
    land(cfg, "DS", "batch-1", {"e.jsonl": jsonl(
        [mysql("INSERT", {"id": i, "d": SPELLED[i], "f": f_spelled[i]}, 1, i) for i in range(n)])})
    # Python's json module writes bare NaN and Infinity tokens: a double without declaring it
    land(cfg, "DS_BARE", "batch-1", {"e.jsonl": jsonl(
        [mysql("INSERT", {"id": i, "d": EDGES[i]}, 1, i) for i in range(n)])})
    land(cfg, "DBZ", "batch-1", {"e.jsonl": jsonl(
        [debezium(i, {"id": i, "d": SPELLED[i], "f": f_spelled[i]}) for i in range(n)])})
    land(cfg, "BQ", "batch-1", {"e.jsonl": jsonl(
        [bq_cdc("UPSERT", {"id": i, "d": SPELLED[i], "f": f_spelled[i]}, f"{i + 1:x}") for i in range(n)])})
    # CSV as Arrow and pandas write doubles (nan, inf, -inf), and as Java and Spark do
    csv = "op,id,seq,d,f\n" + "".join(f"I,{i},1,{d},{f}\n" for i, (d, f) in enumerate(zip(
        ["nan", "inf", "-inf", "-0", "5e-324", "0.30000000000000004"], f_spelled)))
    land(cfg, "CSV", "batch-1", {"c.csv": csv})
    for table in ("DS", "DBZ", "BQ", "CSV"):
        take_and_apply(spark_when_needed, cfg, table)
        assert_edges(target_rows(cfg, table))
    take_and_apply(spark_when_needed, cfg, "DS_BARE")
    assert_edges(target_rows(cfg, "DS_BARE"), columns=("d",))


def test_a_number_no_double_holds_goes_to_quarantine_naming_column_and_line(workdir, spark_when_needed):
    cfg = write_config(workdir, [{"name": "DS", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"d": "double"}}])
    land(cfg, "DS", "batch-1", {"e.jsonl": "".join([
        json.dumps(mysql("INSERT", {"id": 1, "d": 1.5}, 1, 1)) + "\n",
        json.dumps(mysql("INSERT", {"id": 2, "d": 0}, 1, 2)).replace('"d": 0', '"d": 1e400') + "\n",
        json.dumps(mysql("INSERT", {"id": 3, "d": "-1e999"}, 1, 3)) + "\n",
        json.dumps(mysql("INSERT", {"id": 4, "d": "NaN"}, 1, 4)) + "\n",
    ])})
    take_and_apply(spark_when_needed, cfg, "DS")
    rows = by_key(target_rows(cfg, "DS"), "id")
    assert sorted(rows) == [(1,), (4,)] and math.isnan(rows[(4,)]["d"])
    quarantined = sorted((q["_cdc_line"], q["_cdc_reason"]) for q in delta_rows(cfg, "DS", "quarantine"))
    assert [line for line, _ in quarantined] == [2, 3]
    for _, reason in quarantined:
        assert "'d'" in reason and "double" in reason and "1e400" not in reason and "999" not in reason


def test_a_nan_key_is_one_key_and_zero_is_one_key_whatever_the_file_spells(workdir, spark_when_needed):
    # every NaN is the same key (as in PostgreSQL's float8 keys and Spark's grouping), and so are
    # 0.0 and -0.0; a Parquet double and a CSV text of one value are one key
    negative_nan = struct.unpack(">d", bytes.fromhex("fff8000000000001"))[0]
    cfg = write_config(workdir, [{"name": "K", "keys": ["k"], "format": "changeset", "options": CHANGESET,
                                  "columns": {"k": "double"}}])
    land(cfg, "K", "batch-1", {"c.parquet": parquet(pa.table({
        "op": ["I"] * 5, "seq": [1] * 5, "k": [NAN, INF, -INF, 0.0, 5e-324], "v": ["a"] * 5}))})
    take_and_apply(spark_when_needed, cfg, "K")  # its checks pass: asserted by the steps
    land(cfg, "K", "batch-2", {"c.parquet": parquet(pa.table({
        "op": ["U", "U"], "seq": [2, 2], "k": [negative_nan, -0.0], "v": ["b", "b"]})),
        "d.csv": "op,seq,k,v\nU,3,Infinity,c\nU,3,-inf,c\nU,3,4.9e-324,c\n"})
    take_and_apply(spark_when_needed, cfg, "K")  # its checks pass: asserted by the steps
    rows = target_rows(cfg, "K")
    assert len(rows) == 5
    got = {struct.pack(">d", r["k"]) if not math.isnan(r["k"]) else "NaN": r["v"] for r in rows}
    assert got == {"NaN": "b", bits(INF): "c", bits(-INF): "c", bits(-0.0): "b", bits(5e-324): "c"}
    land(cfg, "K", "batch-3", {"d.csv": "op,seq,k,v\nD,4,NaN,\nD,4,0,\n"})
    take_and_apply(spark_when_needed, cfg, "K")
    assert sorted(r["k"] for r in target_rows(cfg, "K")) == [-INF, 5e-324, INF]


def test_the_fresh_read_and_the_reconciliation_see_the_same_doubles(workdir, capsys, spark_when_needed):
    # the export the target must match, as a CSV (Java's spellings) and as Parquet; a merge that
    # waits leaves the second batch staged, which the fresh read lays over the target
    csv_export, pq_export = workdir / "export.csv", workdir / "export.parquet"
    csv_export.write_text("id,d\n" + "".join(f"{i},{SPELLED[i]}\n" for i in range(len(EDGES))), encoding="utf-8")
    pq_export.write_bytes(parquet(edge_table().drop_columns(["f"])))
    tables = [{"name": name, "keys": ["id"], "format": "changeset", "options": CHANGESET, "reconcile_with": str(export),
               "columns": {"d": "double"}} for name, export in (("CSV_EXPORT", csv_export), ("PQ_EXPORT", pq_export))]
    cfg = write_config(workdir, tables)
    first = parquet(edge_table(op=lambda n: pa.array(["I"] * n), seq=lambda n: pa.array([1] * n)).drop_columns(["f"]))
    for name in ("CSV_EXPORT", "PQ_EXPORT"):
        land(cfg, name, "batch-1", {"c.parquet": first})
        take_and_apply(spark_when_needed, cfg, name)
        report = checks.reconciliation(cfg, cfg.table(name))
        assert discrepancies(report) == 0, (name, report)

    # a merge that waits: the fresh read (and `cdc-assets read`) shows the staged doubles
    cfg = write_config(workdir, [{**tables[1], "apply": {"min_changes": 10**9}}])
    land(cfg, "PQ_EXPORT", "batch-2", {"c.csv": "op,id,seq,d\nU,0,2,-Infinity\nU,1,2,NaN\nU,3,2,0\n"})
    version = target_version(cfg, "PQ_EXPORT")
    take(spark_when_needed, cfg, "PQ_EXPORT")  # staged: its merge waits
    assert target_version(cfg, "PQ_EXPORT") == version
    expected = [-INF, NAN, -INF, 0.0, 5e-324, 0.1 + 0.2]
    shown = by_key(fresh.fresh_table(cfg, cfg.table("PQ_EXPORT")).to_pylist(), "id")
    assert [bits(shown[(i,)]["d"]) for i in range(len(EDGES))] == [bits(x) for x in expected]
    out_file = workdir / "read.parquet"
    assert main(["read", "PQ_EXPORT", "--config", cfg.path, "--out", str(out_file)]) == 0
    read = by_key(pq.read_table(out_file).to_pylist(), "id")
    assert [bits(read[(i,)]["d"]) for i in range(len(EDGES))] == [bits(x) for x in expected]
    capsys.readouterr()


def test_the_spark_apply_keeps_the_same_doubles_and_nan_keys(spark, workdir, monkeypatch):
    from cdc_assets.engine import spark_ingest

    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")  # every build and apply on Spark executors
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    settings_of(monkeypatch, spark_ingest, local_parse_bytes=0)
    (workdir / "base.parquet").write_bytes(parquet(edge_table()))
    cfg = write_config(workdir, [
        {"name": "SP", "keys": ["id"], "format": "changeset", "options": CHANGESET, "columns": {"d": "double"},
         "base_snapshot": str(workdir / "base.parquet"), "partition_by": ["d"]},  # rows move between partitions
        {"name": "SK", "keys": ["d"], "format": "changeset", "options": CHANGESET, "columns": {"d": "double"}},
    ])
    take_and_apply(spark, cfg, "SP")
    assert_edges(target_rows(cfg, "SP"))
    land(cfg, "SP", "batch-1", {"c.csv": "op,id,seq,d\nU,0,2,-Infinity\nU,1,2,NaN\nU,3,2,0\nU,4,2,-0.0\n"})
    assert take_and_apply(spark, cfg, "SP").applied_on.startswith("spark")
    got = by_key(target_rows(cfg, "SP"), "id")
    assert [bits(got[(i,)]["d"]) for i in range(len(EDGES))] == \
        [bits(x) for x in [-INF, NAN, -INF, 0.0, -0.0, 0.1 + 0.2]]
    assert len(target_rows(cfg, "SP")) == len(EDGES)

    land(cfg, "SK", "batch-1", {"c.parquet": parquet(pa.table({
        "op": ["I"] * 4, "seq": [1] * 4, "d": [NAN, INF, -INF, 0.0], "v": ["a"] * 4}))})
    take_and_apply(spark, cfg, "SK")
    land(cfg, "SK", "batch-2", {"c.csv": "op,seq,d,v\nU,2,NaN,b\nU,2,-0,b\nD,2,-Infinity,\n"})
    out = take_and_apply(spark, cfg, "SK")  # its checks pass: asserted by the steps
    assert out.applied_on.startswith("spark")
    got = {"NaN" if math.isnan(r["d"]) else bits(r["d"]): r["v"] for r in target_rows(cfg, "SK")}
    assert got == {"NaN": "b", bits(INF): "a", bits(-0.0): "b"}


def test_a_double_partition_column_keeps_nan_and_both_zeros_apart(workdir, spark_when_needed):
    # each row lands once, in the partition of its value: NaN's (spelled as the Delta protocol and
    # Spark spell it), -0.0's and 0.0's apart
    cfg = write_config(workdir, [{"name": "P", "keys": ["id"], "format": "changeset", "options": CHANGESET,
                                  "partition_by": ["d"]}])
    values = [NAN, INF, -INF, -0.0, 0.0, 1.5]
    n = len(values)
    for batch, (seq, v) in enumerate([(1, "a"), (2, "b")], start=1):
        land(cfg, "P", f"batch-{batch}", {"c.parquet": parquet(pa.table({
            "op": ["I"] * n, "id": list(range(n)), "seq": [seq] * n, "d": values, "v": [v] * n}))})
        take_and_apply(spark_when_needed, cfg, "P")  # its checks pass: asserted by the steps
        got = by_key(target_rows(cfg, "P"), "id")
        assert len(target_rows(cfg, "P")) == n and sorted(got) == [(i,) for i in range(n)]
        assert [bits(got[(i,)]["d"]) for i in range(n)] == [bits(x) for x in values]
        assert {r["v"] for r in got.values()} == {v}
    from deltalake import DeltaTable
    spelled = {p["d"] for p in DeltaTable(str(workdir / "warehouse" / "P" / "target")).partitions()}
    assert spelled == {"NaN", "Infinity", "-Infinity", "-0.0", "0.0", "1.5"}


def test_a_number_past_its_decimal_or_long_column_goes_to_quarantine_and_the_rest_applies(workdir, spark_when_needed):
    cfg = write_config(workdir, [{"name": "N", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"a": "decimal(38,0)", "n": "long", "x": "double"}}])
    payloads = ['{"id": 1, "a": 1e37, "n": 9223372036854775807, "x": 1}',
                '{"id": 2, "a": 1e400, "n": 1, "x": 1}',
                '{"id": 3, "a": 1, "n": 9223372036854775808, "x": 1}',
                '{"id": 4, "a": "1_000", "n": 1, "x": 1}',
                '{"id": 5, "a": 1, "n": 1, "x": "\\u0661\\u0662"}',
                '{"id": 6, "a": -99999999999999999999999999999999999999, "n": -9223372036854775808, "x": -0.0}']
    land(cfg, "N", "batch-1", {"e.jsonl": "".join(
        json.dumps(mysql("INSERT", {"PAYLOAD": 0}, 1, i)).replace('{"PAYLOAD": 0}', p) + "\n"
        for i, p in enumerate(payloads, start=1))})
    take_and_apply(spark_when_needed, cfg, "N")
    rows = by_key(target_rows(cfg, "N"), "id")
    assert sorted(rows) == [(1,), (6,)]
    assert rows[(1,)]["n"] == 2**63 - 1 and rows[(6,)]["n"] == -2**63 and bits(rows[(6,)]["x"]) == bits(-0.0)
    assert str(rows[(6,)]["a"]) == "-" + "9" * 38
    quarantined = {q["_cdc_line"]: q["_cdc_reason"] for q in delta_rows(cfg, "N", "quarantine")}
    assert sorted(quarantined) == [2, 3, 4, 5]
    assert "'a'" in quarantined[2] and "'n'" in quarantined[3] and "'a'" in quarantined[4] and "'x'" in quarantined[5]


def test_a_snapshot_that_flips_a_zeros_sign_updates_the_row(workdir, spark_when_needed):
    # -0.0 is another double than 0.0 (1 / -0.0 is -Infinity): a snapshot that changes one into the
    # other changes the row; NaN again, and each zero again, change nothing
    cfg = write_config(workdir, [{"name": "S", "keys": ["id"], "format": "snapshot"}])
    exports = [[0.0, -0.0, NAN], [-0.0, 0.0, NAN], [-0.0, 0.0, NAN]]
    versions = []
    for n, export in enumerate(exports, start=1):
        land(cfg, "S", f"batch-{n}", {"e.parquet": parquet(pa.table({"id": [1, 2, 3], "d": export}))})
        take_and_apply(spark_when_needed, cfg, "S")
        got = by_key(target_rows(cfg, "S"), "id")
        assert [bits(got[(i,)]["d"]) for i in (1, 2, 3)] == [bits(x) for x in export], n
        versions.append(target_version(cfg, "S"))
    assert versions[2] == versions[1] > versions[0]


def test_decimal_keys_that_differ_past_28_digits_are_two_rows(workdir, spark_when_needed):
    # a decimal(38,s) key is its exact value: keys one digit apart at the 38th digit are two keys
    keys = [Decimal("1234567890123456789012345678.1234567891"), Decimal("1234567890123456789012345678.1234567892"),
            Decimal("-9999999999999999999999999999.9999999999"), Decimal("-9999999999999999999999999999.9999999998")]
    cfg = write_config(workdir, [{"name": "W", "keys": ["k"], "format": "changeset", "options": CHANGESET}])
    land(cfg, "W", "batch-1", {"c.parquet": parquet(pa.table({
        "op": ["I"] * 4, "seq": [1] * 4, "k": pa.array(keys, pa.decimal128(38, 10)), "v": ["a", "b", "c", "d"]}))})
    take_and_apply(spark_when_needed, cfg, "W")
    land(cfg, "W", "batch-2", {"c.csv": "op,seq,k,v\nU,2,1234567890123456789012345678.1234567892,B\n"})
    take_and_apply(spark_when_needed, cfg, "W")
    assert {r["k"]: r["v"] for r in target_rows(cfg, "W")} == dict(zip(keys, ["a", "B", "c", "d"]))
