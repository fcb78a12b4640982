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
from cdc_assets.engine import apply, base
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
    settings_of(monkeypatch, base, local_parse_bytes=local_rows)
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
    rebuilt = apply.rebuild(session, cfg, cfg.table(name), None)
    if partition_by:  # and a backfill of two partitions, one of them the null partition
        partitions = apply.rebuild(session, cfg, cfg.table(name), ["region=eu", "region=__null__"])
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
    assert local_checks == spark_checks == ({"batch_accounted": True, "keys_unique": True} if changes_first
                                            else {"keys_unique": True})
    target = {r["id"]: r for r in local["target"][1]}
    assert set(target) == {1, 3, 5, 6, 7, 8, 9}
    assert target[6]["name"] == "g" and target[9]["extra"] == "new"
    if export_format == "parquet":  # typed by the export's schema (a CSV export's types are inferred)
        assert target[1]["amount"] == Decimal("7.50")
    assert len(local["tombstones"][1]) == 2  # keys 2 and 42
