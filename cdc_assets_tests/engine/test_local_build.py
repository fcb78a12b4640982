"""A small table is imported and built in the run's own process (Arrow and delta-rs), a large one
on Spark (CDC_ASSETS_LOCAL_BUILD_ROWS; a CSV export by its bytes, CDC_ASSETS_LOCAL_PARSE_BYTES): both paths give the same base, target and tombstones, row for
row and value for value, ordering keys included, and the same figures."""
from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cdc_assets.defs import table_assets
from cdc_assets.engine import base_import, target_build
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok

pytestmark = MARKS


def export_table() -> pa.Table:
    ids = [1, 2, 3, None, 5, 6, 6, 7, 8]  # a null key (rejected), and key 6 twice in the export
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "amount": pa.array([Decimal("12.30"), Decimal("-0.01"), None, Decimal("1.00"), Decimal("99999.99"),
                            Decimal("5.50"), Decimal("6.60"), Decimal("7.70"), None], pa.decimal128(12, 2)),
        "small": pa.array(range(n), pa.int16()),
        "at": pa.array([dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)] * n,
                       pa.timestamp("us", tz="UTC")),
        "name": pa.array(["a", "b", "ü", "d", "e", "f", "g", "h", None]),
        "region": pa.array(["eu", "us", "eu", "us", None, "us", "eu", "us", "eu"]),
    })


def changes() -> str:
    return jsonl([
        mysql("UPDATE", {"id": 1, "amount": "7.25", "region": "eu", "small": 9}, 1, 10, uuid="u1"),
        mysql("UPDATE", {"id": 1, "amount": "7.5", "region": "us", "small": 10}, 1, 11, uuid="u2"),  # key 1 twice
        mysql("DELETE", {"id": 2, "region": "us"}, 1, 12, uuid="u3"),
        mysql("DELETE", {"id": 42, "region": "eu"}, 1, 13, uuid="u4"),  # a key the base never had
        mysql("INSERT", {"id": 9, "amount": "1.5", "region": None, "small": 1, "extra": "new"}, 1, 14, uuid="u5"),
        mysql("DELETE", {"id": 7, "region": "us"}, 1, 15, uuid="u6"),
        mysql("INSERT", {"id": 7, "amount": "70", "region": "us"}, 1, 16, uuid="u7"),  # deleted, then back
    ])


def rows_of(table_path: str) -> tuple[pa.Schema, list[dict]]:
    data = DeltaTable(table_path).to_pyarrow_table()
    return data.schema, sorted(data.to_pylist(), key=lambda r: (r["_cdc_key"], r.get("_cdc_order") or ""))


def build(workdir, name: str, partition_by: list[str], local_rows: int, monkeypatch, changes_first: bool,
          export_format: str):
    """Import, a first build (with or without a staged batch) and a whole rebuild; what each wrote,
    and how often a step asked for a Spark session."""
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", str(local_rows))
    settings_of(monkeypatch, base_import, local_parse_bytes=local_rows)
    asked = []
    # every step of a table, checks included, gets its session through table_assets
    monkeypatch.setattr(table_assets, "spark_session",
                        lambda resource, s=table_assets.spark_session: asked.append(1) or s(resource))
    (workdir / "landing").mkdir(parents=True)
    export = workdir / f"export.{export_format}"
    if export_format == "csv":  # read row by row
        pa_csv.write_csv(export_table(), export)
    else:
        pq.write_table(export_table(), export, row_group_size=4)  # several slices
    table = {"name": name, "keys": ["id"], "format": "datastream-json", "base_snapshot": str(export)}
    if partition_by:
        table["partition_by"] = partition_by
    cfg = write_config(workdir, [table])
    if changes_first:
        land(cfg, name, "batch-1", {"part-1.jsonl": changes()})
    first = run_ok(cfg, name)
    if not changes_first:
        land(cfg, name, "batch-1", {"part-1.jsonl": changes()})
        run_ok(cfg, name)
    from pyspark.sql import SparkSession

    session = lambda: asked.append(1) or SparkSession.getActiveSession()  # noqa: E731
    rebuilt = target_build.rebuild(session, cfg, cfg.table(name), None)
    if partition_by:  # and a backfill of two partitions, one of them the null partition
        partitions = target_build.rebuild(session, cfg, cfg.table(name), ["region=eu", "region=__null__"])
        assert partitions.partitions_rewritten == ("region=__null__", "region=eu")
    out = {step: rows_of(os.path.join(cfg.table_dir(name), step)) for step in ("base", "target", "tombstones")}
    # the files' bytes differ: Spark's Parquet writer and Arrow's encode the same rows differently
    figures = {k: v for k, v in first.figures["target"].items() if k not in ("seconds", "delta_version", "target_bytes")}
    rebuilt = {k: v for k, v in rebuilt.to_metadata().items()
               if k not in ("seconds", "delta_version", "previous_version")}
    return out, figures, first.checks, rebuilt, len(asked)


@pytest.mark.parametrize("partition_by, changes_first, export_format", [
    ([], True, "parquet"), (["region"], True, "parquet"), ([], False, "parquet"), (["region"], False, "parquet"),
    ([], True, "csv"), (["region"], False, "csv")])
def test_a_small_table_built_in_process_equals_the_one_spark_builds(spark, tmp_path, monkeypatch, partition_by,
                                                                    changes_first, export_format):
    local, local_figures, local_checks, local_rebuilt, local_asked = build(
        tmp_path / "local", "LOCAL", partition_by, 10**6, monkeypatch, changes_first, export_format)
    on_spark, spark_figures, spark_checks, spark_rebuilt, spark_asked = build(
        tmp_path / "spark", "SPARK", partition_by, 0, monkeypatch, changes_first, export_format)
    assert local_asked == 0 and spark_asked > 0
    for step in ("base", "target", "tombstones"):
        assert local[step] == on_spark[step], step  # same columns and types, same rows and values
    assert local_figures == spark_figures
    assert local_rebuilt == spark_rebuilt
    assert local_checks == spark_checks == ({"batch_accounted": True, "quarantine_within_limit": True, "keys_unique": True} if changes_first
                                            else {"keys_unique": True})
    target = {r["id"]: r for r in local["target"][1]}
    assert set(target) == {1, 3, 5, 6, 7, 8, 9}
    assert target[6]["name"] == "g" and target[9]["extra"] == "new"
    if export_format == "parquet":  # typed by the export's schema (a CSV export's types are inferred)
        assert target[1]["amount"] == Decimal("7.50")
    assert len(local["tombstones"][1]) == 2  # keys 2 and 42


def import_and_build(workdir, name: str, export: pa.Table, monkeypatch, local_rows: int = 10**6,
                     by_files: bool = True) -> tuple[list[dict], int, dict]:
    """A table imported from `export` (a row group per 3 rows: a base file each) and built: its
    target's rows, how many of its base files became target files one to one, and its checks."""
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", str(local_rows))
    made = []
    build = target_build._BaseFiles.build
    monkeypatch.setattr(target_build._BaseFiles, "build",
                        lambda self, *a: (lambda adds: made.append(len(adds or [])) or adds)(build(self, *a)))
    if not by_files:
        monkeypatch.setattr(target_build._BaseFiles, "of", classmethod(lambda cls, *a: None))
    (workdir / "landing").mkdir(parents=True)
    pq.write_table(export, workdir / "export.parquet", row_group_size=3)
    cfg = write_config(workdir, [{"name": name, "keys": ["id", "part"], "format": "datastream-json",
                                  "base_snapshot": str(workdir / "export.parquet")}])
    first = run_ok(cfg, name)
    target = DeltaTable(os.path.join(cfg.table_dir(name), "target")).to_pyarrow_table()
    return sorted(target.to_pylist(), key=lambda r: r["_cdc_order"]), sum(made), first.checks


def in_key_order(ids: list[int]) -> pa.Table:
    n = len(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array(["p"] * n),
                     "amount": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(9, 2)),
                     "name": pa.array([f"n{i}" for i in range(n)])})


@pytest.mark.parametrize("local_rows", [10**6, 0])
def test_an_export_in_key_order_becomes_the_target_file_by_file_as_the_counting_build_makes_it(
        spark, tmp_path, monkeypatch, local_rows):
    export = in_key_order([1, 2, 3, 5, 8, 13, 21, 34])  # three files: ascending, spans apart
    by_files, files, checks = import_and_build(tmp_path / "files", "FILES", export, monkeypatch, local_rows)
    counted, _, counted_checks = import_and_build(tmp_path / "counted", "COUNTED", export, monkeypatch,
                                                  local_rows, by_files=False)
    assert files == 3
    assert by_files == counted and len(by_files) == 8
    assert checks == counted_checks == {"keys_unique": True}


@pytest.mark.parametrize("local_rows", [10**6, 0])
def test_a_key_repeated_in_a_later_file_of_an_export_is_not_taken_for_proven(spark, tmp_path, monkeypatch,
                                                                             local_rows):
    """Each file in key order, but key 3 in the first and the second: the later line wins, once."""
    export = in_key_order([1, 2, 3, 3, 4, 5])
    rows, files, checks = import_and_build(tmp_path / "w", "REPEAT", export, monkeypatch, local_rows)
    assert files == 0  # built the counting way
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5]
    assert next(r for r in rows if r["id"] == 3)["name"] == "n3"
    assert checks == {"keys_unique": True}


@pytest.mark.parametrize("local_rows", [10**6, 0])
def test_an_export_of_many_row_groups_read_a_row_group_a_task_gives_the_same_base_and_target(
        spark, tmp_path, monkeypatch, local_rows):
    """Whole row groups per task, each written as several base files, or a slice of a row group
    per task: the same base records (lines and ordering keys included) and the same target."""
    export = in_key_order([1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144])  # 4 row groups of 3 rows (the last 2)
    monkeypatch.setattr(base_import, "FILE_ROWS", 2)
    built = {}
    for whole in (True, False):
        monkeypatch.setattr(base_import, "WHOLE_ROW_GROUPS", 2 if whole else 10**6)
        work = tmp_path / f"whole-{whole}"
        rows, _, checks = import_and_build(work, "GROUPS", export, monkeypatch, local_rows)
        base_path = os.path.join(work, "warehouse", "GROUPS", "base")
        built[whole] = (rows_of(base_path)[1], rows, checks, len(DeltaTable(base_path).file_uris()))
    assert built[True][:3] == built[False][:3]
    assert built[True][3] == built[False][3] == 7  # files of at most 2 rows either way: 2+1, 2+1, 2+1, 2
    assert [r["id"] for r in built[True][1]] == [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144]
