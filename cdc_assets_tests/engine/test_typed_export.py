"""A Parquet export keeps its columns typed in `base` and ends in the same target as when it is
read row by row: same rows, same values, same column types, same rejections."""
from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cdc_assets.engine import base_import
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import run_steps

pytestmark = MARKS

UTC = dt.UTC


def export_table() -> pa.Table:
    n = 7
    ids = pa.array([1, 2, 3, None, 5, 6, 6], pa.int64())  # a null key (rejected), and key 6 twice (the later line wins)
    return pa.table({
        "id": ids,
        "small": pa.array([1, -2, 3, 4, 5, 6, 7], pa.int16()),
        "count": pa.array([10, 20, 30, 40, 50, 60, 70], pa.uint32()),
        "big": pa.array([0, 1, 2, 3, 2**64 - 1, 4, 5], pa.uint64()),
        "amount": pa.array([Decimal("12.30"), Decimal("-0.01"), None, Decimal("1.00"), Decimal("99999.99"),
                            Decimal("5.50"), Decimal("6.60")], pa.decimal128(12, 2)),
        "ratio": pa.array([0.5, 1e300, -2.25, None, 3.0, 4.0, 5.0], pa.float64()),
        "half": pa.array([0.5, 1.5, -2.25, None, 3.0, 4.0, 5.0], pa.float32()),
        "flag": pa.array([True, False, None, True, False, True, False]),
        "day": pa.array([dt.date(2024, 2, 29), dt.date(1970, 1, 1), None, dt.date(2000, 1, 1), dt.date(2001, 1, 1),
                         dt.date(2002, 1, 1), dt.date(2003, 1, 1)], pa.date32()),
        "at": pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)] * n, pa.timestamp("ns", tz="UTC")),
        "local": pa.array([dt.datetime(2024, 1, 1, 8, 30)] * n, pa.timestamp("ms")),
        "name": pa.array(["a", "b", "ü", "d", "e", "f", "g"]).dictionary_encode(),
        "blob": pa.array([b"\x00\x01", b"", None, b"x", b"y", b"z", b"w"], pa.binary()),
        "region": pa.array(["eu", "us", "eu", "us", "eu", "us", "eu"], pa.large_string()),
        "nothing": pa.nulls(n),
    })


def import_and_apply(spark, workdir, name: str, partition_by: list[str]):
    export = workdir / f"{name}.parquet"
    pq.write_table(export_table(), export, row_group_size=3)  # several row groups: several tasks
    table = {"name": name, "keys": ["id"], "format": "datastream-json", "base_snapshot": str(export)}
    if partition_by:
        table["partition_by"] = partition_by
    cfg = write_config(workdir, [table])
    first = run_steps(spark, cfg, name)
    land(cfg, name, "batch-1", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "amount": "7.25", "region": "eu", "small": 9}, 1, 10),
        mysql("DELETE", {"id": 2, "region": "us"}, 1, 11),
        mysql("INSERT", {"id": 9, "amount": "1.5", "region": "us", "small": 1}, 1, 12),
    ])})
    second = run_steps(spark, cfg, name)
    target = DeltaTable(os.path.join(cfg.table_dir(name), "target")).to_pyarrow_table()
    source = [f.name for f in target.schema if not f.name.startswith("_cdc_")]
    rows = sorted(target.select(source).to_pylist(), key=lambda r: r["id"])
    types = {f.name: f.type for f in target.schema if f.name in source}
    quarantine = DeltaTable(os.path.join(cfg.table_dir(name), "quarantine")).to_pyarrow_table().to_pylist()
    return first, second, rows, types, [(q["_cdc_line"], q["_cdc_reason"]) for q in quarantine], cfg


@pytest.mark.parametrize("partition_by", [[], ["region"]])
def test_a_parquet_export_ends_in_the_same_target_typed_or_row_by_row(spark, tmp_path, monkeypatch, partition_by):
    (tmp_path / "typed" / "landing").mkdir(parents=True)
    (tmp_path / "rows" / "landing").mkdir(parents=True)
    first, _, typed_rows, typed_types, typed_rejects, cfg = import_and_apply(spark, tmp_path / "typed", "TYPED",
                                                                             partition_by)
    assert first.base.typed_columns == 14  # every column but the null-typed one
    base_schema = DeltaTable(os.path.join(cfg.table_dir("TYPED"), "base")).schema().to_arrow()
    assert pa.schema(base_schema).field("amount").type == pa.decimal128(12, 2)

    monkeypatch.setattr(base_import, "typed_export_columns", lambda table: None)  # the row-by-row reader
    first_rows, _, rows, types, rejects, _ = import_and_apply(spark, tmp_path / "rows", "ROWS", partition_by)
    assert first_rows.base.typed_columns is None

    assert typed_rows == rows
    assert typed_types == types
    assert typed_rejects == rejects == [(4, "key column 'id' is null")]
    by_id = {r["id"]: r for r in typed_rows}
    assert set(by_id) == {1, 3, 5, 6, 9}
    assert by_id[1]["amount"] == Decimal("7.25") and by_id[1]["small"] == 9
    assert by_id[6]["name"] == "g"  # the later line of a key wins within the export
    assert by_id[1]["big"] is None  # an update's row image replaces the whole row
    assert by_id[5]["big"] == Decimal(2**64 - 1)
    assert by_id[3]["at"] == dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert by_id[3]["local"] == dt.datetime(2024, 1, 1, 8, 30)
    assert typed_types["amount"] == pa.decimal128(12, 2) and typed_types["day"] == pa.date32()


def test_a_typed_export_widens_with_its_changes_and_keeps_every_value(spark, workdir):
    """A change that needs a wider type rewrites target from the typed export: Spark casts the
    export's int and decimal columns to long and to the wider decimal, value for value."""
    export = workdir / "export.parquet"
    pq.write_table(pa.table({
        "id": pa.array([1, 2, 3], pa.int32()),
        "n": pa.array([2**31 - 1, -(2**31), 7], pa.int32()),
        "amount": pa.array([Decimal("9999999999.99"), Decimal("-0.01"), None], pa.decimal128(12, 2)),
    }), export)
    cfg = write_config(workdir, [{"name": "WIDE", "keys": ["id"], "format": "datastream-json",
                                  "base_snapshot": str(export)}])
    assert run_steps(spark, cfg, "WIDE").base.typed_columns == 3
    land(cfg, "WIDE", "batch-1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 4, "n": 3_000_000_000, "amount": 123456789012.345}, 1, 10)])})
    run_steps(spark, cfg, "WIDE")  # its checks pass: asserted by the steps
    target = DeltaTable(os.path.join(cfg.table_dir("WIDE"), "target")).to_pyarrow_table()
    assert target.schema.field("n").type == pa.int64()
    assert target.schema.field("amount").type == pa.decimal128(15, 3)
    rows = {r["id"]: (r["n"], r["amount"]) for r in target.select(["id", "n", "amount"]).to_pylist()}
    assert rows == {1: (2**31 - 1, Decimal("9999999999.990")), 2: (-(2**31), Decimal("-0.010")), 3: (7, None),
                    4: (3_000_000_000, Decimal("123456789012.345"))}
