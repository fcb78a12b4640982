"""debezium-json: Debezium change events to canonical changes (rules.md#debezium-json), snapshot
reads below streamed changes (rules.md#rule-3), re-deliveries collapsing (rules.md#rule-4), bad events
to quarantine (rules.md#rule-7)."""
from __future__ import annotations

import base64
import datetime as dt
import gzip
import math
from decimal import Decimal

import pytest

from cdc_assets.core.changes import DELETE, TRUNCATE, TRUNCATE_KEY, UPSERT, Change, Rejection, to_record
from cdc_assets.core.config import ConfigError, parse_config
from cdc_assets.core.formats import parse_file
from cdc_assets.core.values import decode_row

from .test_formats import jsonl, record_order, summary

TS = 1_709_287_200_000  # 2024-03-01T10:00:00Z in epoch milliseconds, as Debezium writes source.ts_ms


# ---- helpers -------------------------------------------------------------------

def debezium(op="u", image=None, *, before=None, connector="postgresql", ts_ms=TS, **position) -> dict:
    """A Debezium envelope as the connector writes it, `image` its row; `position` is its source
    position fields."""
    image = {"id": 1, "v": "x"} if image is None else image
    if not position and connector == "postgresql":
        position = {"lsn": 24023128}
    source = {"version": "2.5.0.Final", "connector": connector, "name": "dbserver1", "ts_ms": ts_ms,
              "snapshot": "true" if op == "r" else "false", "db": "shop", "table": "orders", **position}
    if connector is None:
        del source["connector"]
    if op == "d":
        before, after = image, None
    else:
        after = image
    return {"before": before, "after": after, "op": op, "source": source, "ts_ms": ts_ms + 250}


def parse(data: bytes, *, keys=("id",), name="orders.jsonl", columns=None) -> list:
    return list(parse_file("debezium-json", {}, list(keys), name, data, columns))


def change(event, **kw) -> Change:
    out = parse(jsonl(event), **kw)
    assert summary(out) == [("Change", 1)], out
    return out[0]


def rejection(event) -> Rejection:
    out = parse(jsonl(event))
    assert summary(out) == [("Rejection", 1)], out
    return out[0]


def pg(lsn, ts_ms=TS, op="u"):
    return change(debezium(op, ts_ms=ts_ms, lsn=lsn)).order


def mysql(file, pos, row=0, ts_ms=TS):
    return change(debezium(connector="mysql", ts_ms=ts_ms, file=file, pos=pos, row=row)).order


def mssql(commit_lsn, change_lsn, event_serial_no=None, ts_ms=TS):
    serial = {} if event_serial_no is None else {"event_serial_no": event_serial_no}
    return change(debezium(connector="sqlserver", ts_ms=ts_ms, commit_lsn=commit_lsn, change_lsn=change_lsn,
                           **serial)).order


def oracle(scn, ts_ms=TS, **more):
    return change(debezium(connector="oracle", ts_ms=ts_ms, scn=scn, **more)).order


# ---- operations and row images ------------------------------------------------

@pytest.mark.parametrize("op, kind", [("c", UPSERT), ("u", UPSERT), ("r", UPSERT), ("d", DELETE)])
def test_ops_become_upserts_and_deletes(op, kind):
    c = change(debezium(op, {"id": 7, "v": "a"}))
    assert (c.op, c.change_type, c.key) == (kind, op, (7,))


def test_update_takes_the_after_image_not_before():
    c = change(debezium("u", {"id": 1, "v": "new", "n": 2}, before={"id": 1, "v": "old", "n": 1}))
    assert c.row == {"id": 1, "v": "new", "n": 2}  # envelope fields are not source columns


def test_delete_takes_key_and_row_from_before():
    e = debezium("d", {"id": 9, "v": "last"})
    assert e["after"] is None
    c = change(e)
    assert (c.op, c.key, c.row) == (DELETE, (9,), {"id": 9, "v": "last"})


def test_kafka_tombstones_are_skipped_and_neighbours_parse():
    data = jsonl(debezium("c", {"id": 1, "v": "a"}),   # 1
                 "null",                                  # 2 a Kafka tombstone
                 debezium("d", {"id": 2, "v": "b"}),     # 3
                 "",                                      # 4 blank
                 '{"schema": null, "payload": null}',     # 5 a tombstone as JsonConverter wraps it
                 debezium("u", {"id": 3, "v": "c"}))     # 6
    out = parse(gzip.compress(data), name="orders.json.gz")
    assert summary(out) == [("Change", 1), ("Change", 3), ("Change", 6)]
    assert [c.key for c in out] == [(1,), (2,), (3,)]


def test_a_truncate_is_a_change_of_the_whole_table_ordered_as_its_neighbours():
    """Debezium's truncate event has no row image: it becomes a truncate (rules.md#rule-9), ordered by its
    source time and position like any event, and stored under the table's own pseudo-key."""
    truncate = {"op": "t", "before": None, "after": None, "ts_ms": TS + 300,
                "source": {"connector": "postgresql", "ts_ms": TS + 10, "lsn": 500, "db": "shop", "table": "orders"}}
    out = parse(jsonl(debezium(lsn=400, ts_ms=TS + 10), truncate, debezium(lsn=600, ts_ms=TS + 10)))
    assert summary(out) == [("Change", 1), ("Change", 2), ("Change", 3)]
    before, cut, after = out
    assert (cut.op, cut.key, cut.row) == (TRUNCATE, (), {})
    assert before.order < cut.order < after.order
    record = to_record(cut, batch_seq=1, batch_id="b", file_name="f", file_index=0, partition_by=["v"])
    assert (record["_cdc_key"], record["_cdc_op"], record["_cdc_partition"]) == (TRUNCATE_KEY, TRUNCATE, None)
    # a truncate delivered twice counts once (rules.md#rule-4)
    assert parse(jsonl(truncate))[0].event_id == cut.event_id


@pytest.mark.parametrize("mutate, reason", [
    (lambda e: e.update(op="m"), "unknown Debezium op in 'op'"),
    (lambda e: e.pop("op"), "no 'op'"),
    (lambda e: e["source"].pop("lsn"), "'lsn' is missing"),
    (lambda e: e["source"].update(lsn="16/B374D848"), "'lsn' is not an integer"),
    (lambda e: e["source"].pop("ts_ms"), "source.ts_ms"),
    (lambda e: e["source"].update(ts_ms="soon"), "source.ts_ms"),
    (lambda e: e.pop("source"), "'source'"),
    (lambda e: e.update(after=None), "no 'after' row image"),
    (lambda e: e["after"].pop("id"), "'id' is missing"),
    (lambda e: e["source"].update(connector="mongodb"), "connector in 'source.connector'"),
])
def test_bad_events_are_rejected_with_line_and_reason(mutate, reason):
    bad = debezium()
    mutate(bad)
    out = parse(jsonl(debezium(), bad, debezium()))
    assert summary(out) == [("Change", 1), ("Rejection", 2), ("Change", 3)]
    assert reason in out[1].reason


@pytest.mark.parametrize("position, reason", [
    ({"connector": "mysql", "file": "mysql-bin.000003", "row": 0}, "'pos' is missing"),
    ({"connector": "mysql", "file": "mysql-bin.index", "pos": 4, "row": 0}, "file"),
    ({"connector": "sqlserver", "commit_lsn": "0000002A:00000120:0001"}, "'change_lsn' is missing"),
    ({"connector": "sqlserver", "commit_lsn": "0000002A:0120", "change_lsn": "0000002A:00000120:0001"},
     "commit_lsn"),
    ({"connector": "sqlserver", "commit_lsn": "0000002A:XYZ:0001", "change_lsn": "0000002A:00000120:0001"},
     "commit_lsn"),
    ({"connector": "oracle", "scn": "12a"}, "'scn' is not an integer"),
    ({"connector": "oracle"}, "'scn' is missing"),
])
def test_streamed_change_with_a_missing_or_malformed_position_is_rejected(position, reason):
    e = debezium("u")
    e["source"] = {"ts_ms": TS, **position}
    assert reason in rejection(e).reason


# ---- ordering per connector ------------------------------------------------------

def test_postgres_lsn_is_a_number():
    assert pg(99) < pg(100) < pg(1 << 40)
    assert pg("100") == pg(100)  # written as text, the same position


def test_mysql_binlog_file_number_then_pos_then_row():
    assert mysql("mysql-bin.999999", 9000) < mysql("mysql-bin.1000000", 4)  # the binlog rotated
    assert mysql("mysql-bin.000001", 9) < mysql("mysql-bin.000001", 10)
    assert mysql("mysql-bin.000001", 10, row=1) < mysql("mysql-bin.000001", 10, row=2)  # rows of one event
    assert mysql("mysql-bin.000001", 11, row=0) > mysql("mysql-bin.000001", 10, row=9)


def test_sql_server_commit_lsn_then_change_lsn_as_hexadecimal_numbers():
    lsns = ["00000009:FFFFFFFF:FFFF", "0000000A:00000000:0000", "0000002A:00000120:000F", "0000002A:00000120:0010"]
    assert [mssql(c, c) for c in lsns] == sorted(mssql(c, c) for c in lsns)  # 0x10 > 0xF, though "0010" < "000F"
    assert mssql("0000002a:00000120:000f", "0000002a:00000120:000f") == \
        mssql("0000002A:00000120:000F", "0000002A:00000120:000F")
    # one commit: its changes in change_lsn order, then event_serial_no
    commit = "0000002B:00000010:0003"
    assert mssql(commit, "0000002B:00000008:0002") < mssql(commit, "0000002B:00000009:0001")
    assert mssql(commit, "0000002B:00000009:0001", 1) < mssql(commit, "0000002B:00000009:0001", 2)
    # the commit comes first
    assert mssql("0000002B:00000011:0000", "0000002B:00000001:0000") > mssql(commit, "0000002B:00000009:0001")


def test_oracle_scn_is_a_decimal_number():
    assert oracle("9") < oracle("10") < oracle("15869150473224")
    assert oracle(15869150473224) == oracle("15869150473224")
    # commit_scn does not order one key's changes: scn does
    assert oracle("100", commit_scn="300") < oracle("101", commit_scn="200")


def test_source_ts_ms_comes_before_the_position():
    assert pg(1, ts_ms=TS + 1) > pg(1 << 40, ts_ms=TS)
    assert mysql("mysql-bin.000001", 4, ts_ms=TS + 1000) > mysql("mysql-bin.000002", 4, ts_ms=TS)
    assert oracle("5", ts_ms=TS + 1) > oracle("6", ts_ms=TS)


@pytest.mark.parametrize("connector, position", [
    ("postgresql", {"lsn": 24023128}),
    ("mysql", {"file": "mysql-bin.000003", "pos": 154, "row": 0}),
    ("sqlserver", {"commit_lsn": "00000027:00000758:0005", "change_lsn": "00000027:00000758:0003",
                   "event_serial_no": 1}),
    ("oracle", {"scn": "2160356"}),
])
def test_connector_is_inferred_from_the_position_fields(connector, position):
    named = change(debezium(connector=connector, **position))
    inferred = change(debezium(connector=None, **position))
    assert inferred.order == named.order


# ---- snapshot reads ------------------------------------------------------------

def test_snapshot_read_ranks_below_a_streamed_change_with_an_earlier_ts_ms():
    streamed = change(debezium("u", {"id": 1, "v": "streamed"}, ts_ms=TS, lsn=100))
    snapshot = change(debezium("r", {"id": 1, "v": "snapshot"}, ts_ms=TS + 3_600_000, lsn=900))
    assert snapshot.order > streamed.order  # the source's own order alone would let the snapshot win ...
    # ... but the snapshot read is in the base tier, even landing in a later batch
    assert record_order(snapshot, batch=2) < record_order(streamed, batch=1)
    deleted = change(debezium("d", {"id": 1, "v": None}, ts_ms=TS, lsn=100))
    assert record_order(snapshot, batch=2) < record_order(deleted, batch=1)


def test_snapshot_reads_of_one_key_rank_by_ts_ms_then_position_then_arrival():
    early = change(debezium("r", ts_ms=TS, lsn=500))
    late = change(debezium("r", ts_ms=TS + 1, lsn=100))
    assert record_order(early, batch=2) < record_order(late, batch=1)
    same = change(debezium("r", ts_ms=TS, lsn=500))
    assert record_order(early, batch=1) < record_order(same, batch=2)  # a tie: the later arrival wins


def test_snapshot_read_may_lack_its_position():
    e = debezium("r", connector="sqlserver", commit_lsn="00000027:00000758:0005", change_lsn=None)
    c = change(e)
    assert c.op == UPSERT
    e["source"] = {"connector": "postgresql", "ts_ms": TS}
    assert change(e).op == UPSERT
    e["op"] = "c"
    assert "'lsn' is missing" in rejection(e).reason


# ---- event ids -----------------------------------------------------------------

def test_identical_redelivered_event_gets_the_same_event_id():
    e = debezium("u", {"id": 1, "v": "x"}, lsn=100)
    first, again = parse(jsonl(e, e))
    assert first.event_id and first.event_id == again.event_id
    assert change(debezium("u", {"id": 1, "v": "x"}, lsn=101)).event_id != first.event_id  # another position
    assert change(debezium("u", {"id": 1, "v": "y"}, lsn=100)).event_id != first.event_id  # another row
    assert change(debezium("r", {"id": 1, "v": "x"}, lsn=100)).event_id != first.event_id  # a snapshot read


# ---- column types from the JsonConverter schema ---------------------------------

def connect_field(name: str, type_: str, logical: str | None = None, **parameters) -> dict:
    f = {"type": type_, "optional": True, "field": name}
    if logical:
        f["name"] = logical
    if parameters:
        f["parameters"] = parameters
    return f


COLUMNS = [
    connect_field("id", "int32"),
    connect_field("amount", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2",
                  **{"connect.decimal.precision": "22"}),
    connect_field("placed_at", "int64", "io.debezium.time.MicroTimestamp"),
    connect_field("shipped_on", "int32", "io.debezium.time.Date"),
    connect_field("paid_at", "string", "io.debezium.time.ZonedTimestamp"),
    connect_field("note", "string"),
]


def with_schema(envelope: dict, columns=COLUMNS) -> dict:
    """The envelope as Kafka's JsonConverter writes it with schemas.enable=true."""
    value = {"type": "struct", "optional": True, "name": "dbserver1.shop.orders.Value", "fields": columns}
    schema = {"type": "struct", "optional": False, "name": "dbserver1.shop.orders.Envelope", "fields": [
        {**value, "field": "before"}, {**value, "field": "after"},
        {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source",
         "fields": [connect_field("ts_ms", "int64"), connect_field("lsn", "int64")]},
        connect_field("op", "string"), connect_field("ts_ms", "int64")]}
    return {"schema": schema, "payload": envelope}


def unscaled_bytes(d: Decimal, scale: int) -> str:
    n = int(d.scaleb(scale))
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode("ascii")


def test_schema_wrapped_event_keeps_decimals_exact_and_times_typed():
    amount = Decimal("12345678901234567890.12")  # past a double's 15 to 17 digits
    placed = dt.datetime(2024, 3, 1, 10, 0, 0, 123456)
    row = {"id": 1, "amount": unscaled_bytes(amount, 2),
           "placed_at": (placed - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1),
           "shipped_on": (dt.date(2024, 3, 2) - dt.date(1970, 1, 1)).days,
           "paid_at": "2024-03-01T10:00:05.5Z", "note": "gift"}
    c = change(with_schema(debezium("c", row)))
    assert c.row == {"id": 1, "amount": amount, "placed_at": placed, "shipped_on": dt.date(2024, 3, 2),
                     "paid_at": dt.datetime(2024, 3, 1, 10, 0, 5, 500000, tzinfo=dt.UTC), "note": "gift"}
    assert type(c.row["amount"]) is Decimal
    assert c.types == {"amount": "decimal(22,2)", "placed_at": "timestamp_ntz", "shipped_on": "date",
                       "paid_at": "timestamp"}
    rec = to_record(c, batch_seq=1, batch_id="b1", file_name="orders.jsonl", file_index=0, partition_by=[])
    assert decode_row(rec["_cdc_row"]) == c.row  # the exact decimal survives the record


def test_schema_decimal_negative_and_delete_before_image():
    row = {"id": 2, "amount": unscaled_bytes(Decimal("-0.05"), 2), "placed_at": None, "shipped_on": None,
           "paid_at": None, "note": None}
    c = change(with_schema(debezium("d", row)))
    assert c.op == DELETE and c.row["amount"] == Decimal("-0.05")


def test_schema_and_wrapped_event_order_like_the_bare_envelope():
    e = debezium("u", {"id": 1, "note": "x"}, lsn=77)
    assert change(with_schema(e)).order == change(e).order


def test_undecodable_schema_value_is_rejected_naming_the_column():
    row = {"id": 1, "amount": "not base64!", "placed_at": None, "shipped_on": None, "paid_at": None, "note": None}
    assert "'amount'" in rejection(with_schema(debezium("c", row))).reason


def test_without_a_schema_declared_columns_type_the_values():
    e = debezium("c", {"id": 1, "amount": "12.50", "placed_at": "2024-03-01T10:00:00"})
    c = change(e, columns={"amount": "decimal(12,2)", "placed_at": "timestamp_ntz"})
    assert c.row == {"id": 1, "amount": Decimal("12.50"), "placed_at": dt.datetime(2024, 3, 1, 10)}
    # with a schema, the columns it does not type still take the declared types
    c = change(with_schema(e, [connect_field("id", "int32"), connect_field("amount", "string")]),
               columns={"amount": "decimal(12,2)"})
    assert c.row["amount"] == Decimal("12.50")


# ---- configuration ---------------------------------------------------------------

def test_config_accepts_debezium_json_without_options():
    table = {"name": "ORDERS", "keys": ["id"], "format": "debezium-json"}
    raw = {"warehouse": "./warehouse", "landing": "./landing", "tables": [table]}
    assert parse_config(raw, "/etc/cdc/cdc.yaml").table("ORDERS").format == "debezium-json"
    table["options"] = {"op_column": "op"}
    with pytest.raises(ConfigError, match="takes no options"):
        parse_config(raw, "/etc/cdc/cdc.yaml")


def test_float_columns_take_the_text_jackson_writes_for_nan_and_the_infinities():
    columns = [connect_field("id", "int32"), connect_field("d", "float64"), connect_field("f", "float32")]
    c = change(with_schema(debezium("c", {"id": 1, "d": "NaN", "f": "-Infinity"}), columns))
    assert math.isnan(c.row["d"]) and c.row["f"] == float("-inf")
    assert change(with_schema(debezium("c", {"id": 1, "d": 1.5, "f": None}), columns)).row["d"] == 1.5
    bad = parse(jsonl(with_schema(debezium("c", {"id": 1, "d": "lots", "f": None}), columns)))
    assert summary(bad) == [("Rejection", 1)] and "'d'" in bad[0].reason and "lots" not in bad[0].reason
