"""A PostgreSQL source in cdc.yaml: the URL, the capture method, the implied format, keys from the
primary key `capture enable` recorded, and the catalog's types as target types."""
from __future__ import annotations

import os

import pytest

from cdc_assets.core import postgres
from cdc_assets.core.config import ConfigError, parse_config
from cdc_assets.core.postgres import CaptureRecord, PgColumn, column_type

URL = "postgresql://app@db.example:5432/shop/public.orders"


def raw(tmp_path, **table) -> dict:
    t = {"name": "ORDERS", "source": URL}
    t.update(table)
    return {"warehouse": str(tmp_path / "warehouse"), "landing": str(tmp_path / "landing"), "tables": [t]}


def error(raw_config, tmp_path) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(raw_config, str(tmp_path / "cdc.yaml"))
    return str(e.value)


def test_a_postgresql_source_implies_its_format_the_changelog_method_and_the_base_capture_enable_takes(tmp_path):
    table = parse_config(raw(tmp_path, keys=["id"]), str(tmp_path / "cdc.yaml")).tables[0]
    assert (table.format, table.capture, table.keys) == ("postgresql", "changelog", ("id",))
    assert table.base_snapshot == str(tmp_path / "warehouse" / "ORDERS" / "capture" / "base.parquet")
    source = postgres.parse_source(table.source)
    assert (source.user, source.host, source.port, source.database, source.qualified) == \
        ("app", "db.example", 5432, "shop", "public.orders")


def test_capture_logical_is_a_method_of_a_postgresql_source_whose_slot_warns_above_a_gib_of_wal(tmp_path):
    table = parse_config(raw(tmp_path, keys=["id"], capture="logical"), str(tmp_path / "cdc.yaml")).tables[0]
    assert (table.format, table.capture, table.max_retained_wal_mb) == ("postgresql", "logical", 1024)
    table = parse_config(raw(tmp_path, keys=["id"], capture="logical", max_retained_wal_mb=50),
                         str(tmp_path / "cdc.yaml")).tables[0]
    assert table.max_retained_wal_mb == 50
    assert parse_config(raw(tmp_path, keys=["id"]), str(tmp_path / "cdc.yaml")).tables[0].max_retained_wal_mb is None


def test_keys_default_to_the_primary_key_capture_enable_recorded(tmp_path):
    assert parse_config(raw(tmp_path), str(tmp_path / "cdc.yaml")).tables[0].keys == ()
    folder = postgres.capture_dir(str(tmp_path / "warehouse" / "ORDERS"))
    os.makedirs(folder)
    with open(postgres.record_path(str(tmp_path / "warehouse" / "ORDERS")), "w") as fh:
        fh.write(postgres.record_json(CaptureRecord(URL, "changelog", ("region", "id"))))
    assert parse_config(raw(tmp_path), str(tmp_path / "cdc.yaml")).tables[0].keys == ("region", "id")
    # keys given in cdc.yaml win
    assert parse_config(raw(tmp_path, keys=["id"]), str(tmp_path / "cdc.yaml")).tables[0].keys == ("id",)


@pytest.mark.parametrize("table, says", [
    ({"source": "postgresql://app:secret@db:5432/shop/public.orders"}, "no password"),
    ({"source": "postgresql://app@db/shop/public.orders"}, "USER@HOST:PORT/DATABASE/SCHEMA.TABLE"),
    ({"source": "postgresql://app@db:5432/shop/orders"}, "SCHEMA.TABLE"),
    ({"capture": "trigger"}, "field 'capture' 'trigger' must be one of changelog, logical"),
    ({"max_retained_wal_mb": 100}, "field 'max_retained_wal_mb' needs 'capture: logical'"),
    ({"capture": "logical", "max_retained_wal_mb": 0}, "field 'max_retained_wal_mb' 0 must be a whole number of MiB"),
    ({"capture": "logical", "max_retained_wal_mb": True}, "must be a whole number of MiB"),
    ({"format": "bigquery-cdc"}, "leave 'format' out"),
    ({"source_position": "seq"}, "leave 'source_position' out"),
    ({"base_snapshot": "./orders.csv"}, "leave 'base_snapshot' out"),
])
def test_a_wrong_postgresql_setting_is_an_error_naming_the_table_and_the_field(tmp_path, table, says):
    message = error(raw(tmp_path, keys=["id"], **table), tmp_path)
    assert "table 'ORDERS'" in message and says in message
    assert "secret" not in message


def test_capture_and_the_postgresql_format_need_a_postgresql_source(tmp_path):
    files = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}
    assert "field 'capture' needs a 'source: postgresql://...'" in error(
        {"warehouse": "w", "landing": "l", "tables": [{**files, "capture": "changelog"}]}, tmp_path)
    assert "give the table a 'source: postgresql://...'" in error(
        {"warehouse": "w", "landing": "l", "tables": [{**files, "format": "postgresql"}]}, tmp_path)


def test_a_postgresql_source_needs_a_warehouse_on_a_disk(tmp_path):
    config = raw(tmp_path, keys=["id"])
    config["warehouse"] = "s3://bucket/wh"
    assert "a PostgreSQL source needs a warehouse on a disk" in error(config, tmp_path)


@pytest.mark.parametrize("formatted, category, base, expected", [
    ("numeric(12,2)", "N", "numeric", "decimal(12,2)"),
    ("numeric", "N", "numeric", "string"),
    ("numeric(60,2)", "N", "numeric", "string"),
    ("timestamp with time zone", "D", "timestamptz", "timestamp"),
    ("timestamp without time zone", "D", "timestamp", "timestamp_ntz"),
    ("date", "D", "date", "date"),
    ("boolean", "B", "bool", "boolean"),
    ("smallint", "N", "int2", "int"),
    ("integer", "N", "int4", "int"),
    ("bigint", "N", "int8", "long"),
    ("real", "N", "float4", "double"),
    ("double precision", "N", "float8", "double"),
    ("character varying(20)", "S", "varchar", "string"),
    ("text", "S", "text", "string"),
    ("bytea", "U", "bytea", "binary"),
    ("jsonb", "U", "jsonb", "string"),
    ("integer[]", "A", "_int4", "string"),
    ("uuid", "U", "uuid", "string"),
])
def test_catalog_types_map_to_target_types(formatted, category, base, expected):
    assert column_type(PgColumn("c", formatted, category, base)) == expected


def test_taken_sequence_numbers_never_bridge_a_gap():
    # 4 is missing: its transaction may still be open when the rows were read
    assert postgres.ranges([7, 1, 2, 3, 5, 6, 9]) == ((1, 3), (5, 7), (9, 9))
    assert postgres.decode_ranges(postgres.encode_ranges(((1, 3), (9, 9)))) == ((1, 3), (9, 9))
