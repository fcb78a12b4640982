"""cdc.yaml (configuration.md): valid files load, invalid ones fail naming the table and the field."""
from __future__ import annotations

import copy
import json
import os

import pytest

from cdc_assets.core.config import ConfigError, load_config, parse_config

CONFIG_PATH = "/etc/cdc/cdc.yaml"


def raw_config(**table) -> dict:
    t = {"name": "ORDERS", "keys": ["order_id"], "format": "datastream-json"}
    t.update(table)
    return {"warehouse": "./warehouse", "landing": "./landing", "tables": [t]}


CHANGESET = {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["CDC_TIMESTAMP"]}


def error(raw, path=CONFIG_PATH) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(raw, path)
    return str(e.value)


# ---- valid configurations ------------------------------------------------------

def test_spec_example(tmp_path):
    (tmp_path / "cdc.yaml").write_text(
        "warehouse: ./warehouse            # local path now\n"
        "landing: ./landing\n"
        "tables:\n"
        "  - name: ORDERS\n"
        "    keys: [order_id]\n"
        "    format: datastream-json\n"
        "    options: {}\n"
        "    partition_by: [region]\n"
        "    base_snapshot: ./exports/ORDERS.csv\n"
    )
    cfg = load_config(str(tmp_path / "cdc.yaml"))
    assert cfg.warehouse == str(tmp_path / "warehouse")
    assert cfg.landing == str(tmp_path / "landing")
    t = cfg.table("ORDERS")
    assert t.keys == ("order_id",)
    assert t.format == "datastream-json"
    assert t.options == {}
    assert t.partition_by == ("region",)
    assert t.base_snapshot == str(tmp_path / "exports" / "ORDERS.csv")
    assert cfg.table_dir("ORDERS") == str(tmp_path / "warehouse" / "ORDERS")
    assert cfg.landing_dir("ORDERS") == str(tmp_path / "landing" / "ORDERS")


def test_json_is_valid_yaml(tmp_path):
    raw = raw_config(format="changeset", options=CHANGESET, keys=["ID"])
    (tmp_path / "cdc.json").write_text(json.dumps(raw))
    cfg = load_config(str(tmp_path / "cdc.json"))
    assert cfg.table("ORDERS").options["op_column"] == "FLAG"


def test_relative_paths_resolve_against_the_config_folder_not_the_cwd(tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    raw = raw_config(base_snapshot="../exports/ORDERS.csv")
    raw["warehouse"] = "wh"
    (conf_dir / "cdc.yaml").write_text(json.dumps(raw))
    monkeypatch.chdir(elsewhere)
    cfg = load_config(os.path.join("..", "conf", "cdc.yaml"))  # a relative path to the config itself
    assert cfg.warehouse == str(conf_dir / "wh")
    assert cfg.landing == str(conf_dir / "landing")
    assert cfg.table("ORDERS").base_snapshot == str(tmp_path / "exports" / "ORDERS.csv")


def test_absolute_and_object_store_paths_are_kept(tmp_path):
    raw = raw_config()
    raw["warehouse"] = str(tmp_path / "wh")
    raw["landing"] = "gs://bucket/prefix"
    cfg = parse_config(raw, CONFIG_PATH)
    assert (cfg.warehouse, cfg.landing) == (str(tmp_path / "wh"), "gs://bucket/prefix")


def test_a_warehouse_in_cloud_storage_or_s3_is_kept_as_its_url():
    for url in ("gs://bucket/warehouse", "s3://bucket/warehouse"):
        raw = raw_config()
        raw["warehouse"] = url
        cfg = parse_config(raw, CONFIG_PATH)
        assert cfg.warehouse == url and cfg.table_dir("ORDERS") == url + "/ORDERS"


def test_a_bigquery_source_with_a_warehouse_in_an_object_store_is_refused_by_table():
    raw = raw_config(format="bigquery-append", source="bigquery://p.d.t")
    raw["warehouse"] = "s3://bucket/warehouse"
    message = error(raw)
    assert "table 'ORDERS'" in message and "a BigQuery source needs a warehouse on a disk" in message


@pytest.mark.parametrize("field, value, expected", [
    ("warehouse", "abfss://container/prefix", "a warehouse is a folder, gs://bucket/prefix or s3://bucket/prefix"),
    ("landing", "s3://bucket/prefix", "a landing area is a folder or gs://bucket/prefix"),
])
def test_object_stores_the_engine_cannot_use_are_refused_by_name(field, value, expected):
    raw = raw_config()
    raw[field] = value
    message = error(raw)
    assert f"field '{field}' '{value}'" in message and expected in message


def test_maintenance_settings_are_read():
    from cdc_assets.core.maintenance_policy import MaintenancePolicy

    cfg = parse_config(raw_config(maintenance={"retention": "2d", "zorder_by": ["region", "order_id"],
                                               "trim_changes_after": "30d", "trim_staging_after": "90d",
                                               "schedule": "15 2 * * 0"}), CONFIG_PATH)
    assert cfg.tables[0].maintenance == MaintenancePolicy(
        retention=2 * 86400.0, zorder_by=("region", "order_id"), trim_changes_after=30 * 86400.0,
        trim_staging_after=90 * 86400.0, schedule="15 2 * * 0")
    assert parse_config(raw_config(), CONFIG_PATH).tables[0].maintenance == MaintenancePolicy()


def test_every_format_is_accepted():
    for fmt in ["datastream-json", "datastream-avro", "bigquery-append", "bigquery-cdc"]:
        assert parse_config(raw_config(format=fmt), CONFIG_PATH).tables[0].format == fmt
    cfg = parse_config(raw_config(format="changeset", options=CHANGESET), CONFIG_PATH)
    assert cfg.tables[0].options == CHANGESET


def test_a_snapshot_table_takes_no_options_and_cannot_be_insert_only():
    assert parse_config(raw_config(format="snapshot"), CONFIG_PATH).tables[0].format == "snapshot"
    assert "format 'snapshot' takes no options" in error(raw_config(format="snapshot", options={"op_column": "x"}))
    # an export says which rows exist, not which were inserted
    assert "field 'insert_only': format 'snapshot'" in error(raw_config(format="snapshot", insert_only=True))


def test_changeset_option_values_are_text_and_single_values_are_lists():
    opts = {"op_column": "op", "inserts": 1, "updates": [2], "deletes": "3"}
    t = parse_config(raw_config(format="changeset", options=opts), CONFIG_PATH).tables[0]
    assert t.options == {"op_column": "op", "sequence_by": [], "inserts": ["1"], "updates": ["2"], "deletes": ["3"]}


def test_changeset_truncate_values_are_read_and_never_another_operations():
    opts = {**CHANGESET, "truncates": "T"}
    assert parse_config(raw_config(format="changeset", options=opts), CONFIG_PATH).tables[0].options["truncates"] == ["T"]
    message = error(raw_config(format="changeset", options={**CHANGESET, "truncates": ["X", "D"]}))
    assert "table 'ORDERS': field 'options.truncates': op value 'D' is also listed in 'options.deletes'" in message


def test_options_of_a_format_that_takes_none_are_refused_whatever_their_keys():
    # YAML keys may be numbers beside names: the error still names the table and the field
    message = error(raw_config(options={1: "x", "op": "y"}))
    assert "table 'ORDERS': field 'options': format 'datastream-json' takes no options" in message
    assert "'1'" in message and "'op'" in message


def test_keys_one_to_sixteen_columns():
    assert parse_config(raw_config(keys="id"), CONFIG_PATH).tables[0].keys == ("id",)
    sixteen = [f"k{i}" for i in range(16)]
    assert parse_config(raw_config(keys=sixteen), CONFIG_PATH).tables[0].keys == tuple(sixteen)


def test_several_tables():
    raw = raw_config()
    raw["tables"].append({"name": "CUSTOMERS", "keys": ["id", "region"], "format": "bigquery-cdc"})
    cfg = parse_config(raw, CONFIG_PATH)
    assert [t.name for t in cfg.tables] == ["ORDERS", "CUSTOMERS"]
    assert cfg.table("CUSTOMERS").keys == ("id", "region")
    with pytest.raises(KeyError):
        cfg.table("NOPE")


# ---- errors naming the table and the field --------------------------------------------

@pytest.mark.parametrize(
    "table, field",
    [
        ({"keys": None}, "keys"),
        ({"keys": []}, "keys"),
        ({"keys": [""]}, "keys"),
        ({"keys": [1]}, "keys"),
        ({"keys": ["a", "a"]}, "keys"),
        ({"keys": [f"k{i}" for i in range(17)]}, "keys"),
        ({"format": "kafka-json"}, "format"),
        ({"format": None}, "format"),
        ({"colour": "blue"}, "colour"),
        ({"Keys": ["x"]}, "Keys"),  # unknown key, not silently ignored
        ({"options": {"op_column": "FLAG"}}, "options"),  # only changeset takes options
        ({"options": "FLAG"}, "options"),
        ({"partition_by": [3]}, "partition_by"),
        ({"base_snapshot": ""}, "base_snapshot"),
        ({"base_snapshot": 5}, "base_snapshot"),
        ({"format": "changeset", "options": {}}, "op_column"),
        ({"format": "changeset"}, "op_column"),
        ({"format": "changeset", "options": {**CHANGESET, "op_column": ""}}, "op_column"),
        ({"format": "changeset", "options": {**CHANGESET, "order_by": ["x"]}}, "order_by"),
        ({"format": "changeset", "options": {**CHANGESET, "deletes": []}}, "deletes"),
        ({"format": "changeset", "options": {**CHANGESET, "inserts": [], "updates": []}}, "inserts"),
        ({"format": "changeset", "options": {**CHANGESET, "deletes": {"D": 1}}}, "deletes"),
        ({"format": "changeset", "options": {**CHANGESET, "sequence_by": [1]}}, "sequence_by"),
        ({"format": "changeset", "options": {**CHANGESET, "truncates": {"T": 1}}}, "truncates"),
        ({"change_feed": "yes"}, "change_feed"),
        ({"maintenance": {"retention": "30m"}}, "maintenance.retention"),  # below what a reader may hold
        ({"maintenance": {"vacuum": "7d"}}, "vacuum"),
        ({"maintenance": {"schedule": "daily"}}, "maintenance.schedule"),
        ({"maintenance": {"zorder_by": "x", "trim_changes_after": "a month"}}, "maintenance.trim_changes_after"),
        ({"maintenance": {"trim_staging_after": -1}}, "maintenance.trim_staging_after"),
    ],
)
def test_table_errors_name_table_and_field(table, field):
    raw = raw_config(**table)
    if table.get("keys", "?") is None:
        del raw["tables"][0]["keys"]
    msg = error(raw)
    assert "ORDERS" in msg
    assert field in msg
    assert "cdc.yaml" in msg  # and the file


def test_a_table_without_keys_is_an_error():
    raw = raw_config()
    del raw["tables"][0]["keys"]
    msg = error(raw)
    assert "ORDERS" in msg and "keys" in msg


@pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", "", "1ORDERS", "OR DERS", ".hidden", "_x", "x" * 129, None, 5])
def test_bad_table_names(name):
    raw = raw_config(name=name)
    if name is None:
        del raw["tables"][0]["name"]
    msg = error(raw)
    assert "name" in msg
    if name:
        assert repr(name) in msg  # names the offending table name
    assert "tables[0]" in msg


def test_second_table_error_points_at_that_table():
    raw = raw_config()
    raw["tables"].append({"name": "CUSTOMERS", "format": "bigquery-cdc"})
    msg = error(raw)
    assert "CUSTOMERS" in msg and "keys" in msg and "ORDERS" not in msg


def test_table_names_must_be_unique_ignoring_case():
    raw = raw_config()
    raw["tables"].append({"name": "orders", "keys": ["id"], "format": "bigquery-cdc"})
    assert "orders" in error(raw)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r.update(colour="blue"), "colour"),
        (lambda r: r.pop("warehouse"), "warehouse"),
        (lambda r: r.pop("landing"), "landing"),
        (lambda r: r.pop("tables"), "tables"),
        (lambda r: r.update(tables=[]), "tables"),
        (lambda r: r.update(tables={"ORDERS": {}}), "tables"),
        (lambda r: r.update(warehouse=""), "warehouse"),
        (lambda r: r.update(landing=None), "landing"),
        (lambda r: r.update(tables=["ORDERS"]), "tables[0]"),
        (lambda r: r.update(spark="local"), "spark"),
    ],
)
def test_top_level_errors_name_the_field(mutate, field):
    raw = copy.deepcopy(raw_config())
    mutate(raw)
    msg = error(raw)
    assert field in msg and "cdc.yaml" in msg


@pytest.mark.parametrize("raw", [None, [], "warehouse: x", 5])
def test_not_a_mapping(raw):
    assert "cdc.yaml" in error(raw)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "nope.yaml"))


def test_invalid_yaml(tmp_path):
    p = tmp_path / "cdc.yaml"
    p.write_text("tables: [\n  - name: ORDERS\n")
    with pytest.raises(ConfigError, match="YAML"):
        load_config(str(p))


def test_yaml_error_in_a_table_is_reported_from_the_file(tmp_path):
    p = tmp_path / "cdc.yaml"
    p.write_text("warehouse: w\nlanding: l\ntables:\n  - name: ORDERS\n    format: datastream-json\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert "ORDERS" in str(e.value) and "keys" in str(e.value) and "cdc.yaml" in str(e.value)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("warehouse, landing", [
    ("./data", "./data"), ("./data", "./data/landing"), ("./data/warehouse", "./data"), ("./x/../data", "./data/in"),
])
def test_warehouse_and_landing_must_not_contain_each_other(warehouse, landing):
    raw = raw_config()
    raw.update(warehouse=warehouse, landing=landing)
    msg = error(raw)
    assert "'warehouse'" in msg and "'landing'" in msg and "contain" in msg


def test_side_by_side_warehouse_and_landing_are_fine():
    raw = raw_config()
    raw.update(warehouse="./data/warehouse", landing="./data/landing")
    parse_config(raw, CONFIG_PATH)


# ---- columns: (rules.md#types) ----------------------------------------------------

def test_declared_column_types_are_read_in_canonical_spelling():
    cfg = parse_config(raw_config(columns={"amount": "Decimal(12, 2)", "at": "timestamp", "d": "date"}), CONFIG_PATH)
    assert cfg.tables[0].columns == {"amount": "decimal(12,2)", "at": "timestamp", "d": "date"}
    assert parse_config(raw_config(), CONFIG_PATH).tables[0].columns == {}


@pytest.mark.parametrize("columns, words", [
    ({"amount": "money"}, ["'ORDERS'", "columns.amount", "money", "decimal(p,s)"]),
    ({"amount": "decimal(40,2)"}, ["columns.amount", "decimal(40,2)"]),
    (["amount"], ["'ORDERS'", "'columns'"]),
])
def test_bad_column_types_name_table_column_and_type(columns, words):
    message = error(raw_config(columns=columns))
    for w in words:
        assert w in message, message


def test_a_bigquery_source_reads_its_table_and_keeps_extracts_in_the_warehouse():
    cfg = parse_config(raw_config(name="TABLE1", keys=["COL1"], format="bigquery-append",
                                  source="bigquery://my-project.datastream.TABLE1"), CONFIG_PATH)
    table = cfg.table("TABLE1")
    assert (table.source, table.source_position) == ("bigquery://my-project.datastream.TABLE1", None)
    assert cfg.landing_dir("TABLE1") == os.path.join(cfg.table_dir("TABLE1"), "extracts")
    cdc = parse_config(raw_config(name="T", keys=["id"], format="bigquery-cdc", source="bigquery://p.d.t",
                                  source_position="meta.ingested_at"), CONFIG_PATH)
    assert cdc.table("T").source_position == "meta.ingested_at"


@pytest.mark.parametrize("table, expected", [
    ({"source": "bq://p.d.t"}, "field 'source' 'bq://p.d.t' must be bigquery://project.dataset.table"),
    ({"source": "bigquery://p.d"}, "must be bigquery://project.dataset.table"),
    ({"source": "bigquery://p.d.t", "format": "datastream-json"}, "format 'datastream-json' is read from files"),
    ({"source": "bigquery://p.d.t", "format": "bigquery-cdc"}, "field 'source_position' is required"),
    ({"source_position": "x"}, "field 'source_position' needs a 'source'"),
    ({"source": "bigquery://p.d.t", "source_position": "a b"}, "field 'source_position' 'a b' must be a column"),
])
def test_bigquery_source_errors_name_table_and_field(table, expected):
    raw = raw_config(**{"name": "T", "keys": ["id"], "format": "bigquery-append", **table})
    message = error(raw)
    assert "table 'T'" in message and expected in message


def test_a_table_can_publish_its_target_to_a_bigquery_table():
    table = parse_config(raw_config(publish={"bigquery": "my-project.analytics.orders"}), CONFIG_PATH).table("ORDERS")
    assert table.publish == {"bigquery": "my-project.analytics.orders"}
    assert parse_config(raw_config(), CONFIG_PATH).table("ORDERS").publish == {}


@pytest.mark.parametrize("publish, expected", [
    ("my-project.analytics.orders", "field 'publish' must be a mapping"),
    ({}, "field 'publish' must be a mapping"),
    ({"snowflake": "a.b.c"}, "field 'publish': unknown destination 'snowflake'"),
    ({"bigquery": "analytics.orders"}, "field 'publish.bigquery' 'analytics.orders' must be project.dataset.table"),
    ({"bigquery": "p.d.t;drop"}, "must be project.dataset.table"),
    ({"bigquery": None}, "field 'publish.bigquery' None must be project.dataset.table"),
])
def test_publish_errors_name_table_and_field(publish, expected):
    message = error(raw_config(publish=publish))
    assert "table 'ORDERS'" in message and expected in message, message


def test_a_table_cannot_publish_to_its_own_bigquery_source():
    message = error(raw_config(format="bigquery-append", source="bigquery://p.d.t", publish={"bigquery": "p.d.t"}))
    assert "table 'ORDERS'" in message and "field 'publish.bigquery' names the table's own source" in message


@pytest.mark.parametrize("text, line, key", [
    ("warehouse: w\nlanding: l\nwarehouse: x\ntables:\n  - {name: T, keys: [id], format: changeset}\n", 3, "warehouse"),
    ("warehouse: w\nlanding: l\ntables:\n  - name: T\n    keys: [id]\n    format: datastream-json\n"
     "    keys: [other]\n", 7, "keys"),
    ("warehouse: w\nlanding: l\ntables:\n  - {name: T, keys: [id], format: datastream-json, "
     "columns: {a: int, a: string}}\n", 4, "a"),
])
def test_a_key_given_twice_is_an_error_naming_it_and_its_line(tmp_path, text, line, key):
    """YAML itself would keep the last value silently: the user meant one of the two."""
    p = tmp_path / "cdc.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert f"cdc.yaml line {line}: '{key}' is given twice" in str(e.value)


# ---- column names (rules.md#names) -------------------------------------------------

@pytest.mark.parametrize("key", ['my"id', "user.id", "a`b", "it's", "select", "1st", "$k#", "été", "MixedCase"])
def test_names_delta_allows_are_keys(key):
    cfg = parse_config(raw_config(keys=[key], partition_by=[key + "_p"], columns={key: "string"}), CONFIG_PATH)
    assert cfg.tables[0].keys == (key,) and cfg.tables[0].partition_by == (key + "_p",)


@pytest.mark.parametrize("field", ["keys", "partition_by"])
@pytest.mark.parametrize("name,why", [("a b", "forbids ' '"), ("a,b", "forbids ','"), ("f(x)", "forbids '(', ')'"),
                                      ("a=b", "forbids '='"), ("a\tb", "forbids '\\t'"), ("_cdc_key", "'_cdc_'"),
                                      ("_CDC_order", "'_cdc_'")])
def test_a_name_no_target_can_hold_is_refused_with_the_way_out(field, name, why):
    msg = error(raw_config(**{field: [name]}) if field == "keys" else raw_config(partition_by=[name]))
    assert f"table 'ORDERS': field '{field}'" in msg and repr(name) in msg and why in msg, msg
    assert "rename:" in msg


def test_names_equal_but_for_case_are_one_column():
    msg = error(raw_config(keys=["v", "V"]))
    assert "field 'keys' names 'v' and 'V'" in msg, msg


def test_rename_gives_a_source_column_a_storable_name_and_keys_name_the_target():
    cfg = parse_config(raw_config(keys=["order_id"], rename={"order id": "order_id", "_cdc_key": "cdc_key"},
                                  columns={"cdc_key": "string"}), CONFIG_PATH)
    assert cfg.tables[0].rename == {"order id": "order_id", "_cdc_key": "cdc_key"}
    assert "renamed to 'order_id' by 'rename': name the target column" in \
        error(raw_config(keys=["order id"], rename={"order id": "order_id"}))


@pytest.mark.parametrize("rename,expected", [
    ({"a": "b c"}, "field 'rename.a': the target name cannot be stored: column 'b c': Delta Lake forbids ' '"),
    ({"a": "_cdc_x"}, "field 'rename.a': the target name cannot be stored"),
    ({"a": "x", "b": "X"}, "two columns are renamed to"),
    ({"a": "x", "b": "x"}, "two columns are renamed to 'x'"),
    ({"a": 5}, "field 'rename.a': 5 is not a column name"),
    (["a", "b"], "field 'rename' must map source column names to target names"),
])
def test_rename_is_validated_like_the_other_keys(rename, expected):
    assert expected in error(raw_config(rename=rename))


@pytest.mark.parametrize("fmt,options,column", [
    ("changeset", CHANGESET, "FLAG"),
    ("bigquery-cdc", {}, "_CHANGE_TYPE"),
    ("bigquery-cdc", {}, "_CHANGE_SEQUENCE_NUMBER"),
    ("bigquery-append", {}, "datastream_metadata"),
])
def test_rename_of_a_column_that_is_no_source_column_is_refused(fmt, options, column):
    msg = error(raw_config(format=fmt, options=options, rename={column: "x"}))
    assert f"field 'rename.{column}'" in msg and "not a source column" in msg, msg


def test_a_rename_onto_a_key_names_the_key_by_its_target_name():
    """A source that renamed its key column keeps its key: `keys` names the target column."""
    cfg = parse_config(raw_config(keys=["order_id"], rename={"orderId": "order_id"}), CONFIG_PATH)
    assert cfg.tables[0].keys == ("order_id",)
    assert "column 'orderId' is renamed to 'order_id' by 'rename': name the target column" in \
        error(raw_config(keys=["orderId"], rename={"orderId": "order_id"}))


def test_zorder_by_a_dotted_column_is_refused_before_maintenance_would_fail_on_it():
    msg = error(raw_config(keys=["user.id"], maintenance={"zorder_by": ["user.id"]}))
    assert "field 'maintenance.zorder_by': column 'user.id': delta-rs cannot Z-order" in msg, msg
    cfg = parse_config(raw_config(keys=["user.id"], maintenance={"zorder_by": ['my"id', "été"]}), CONFIG_PATH)
    assert cfg.tables[0].maintenance.zorder_by == ('my"id', "été")
