"""Change files to canonical changes (rules.md#formats) and bad input to rejections (rules.md#rule-7)."""
from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from decimal import Decimal

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_assets.core import ordering
from cdc_assets.core.changes import DELETE, UPSERT, Change, Rejection, to_record, to_reject
from cdc_assets.core.formats import parse_file
from cdc_assets.core.values import decode_row

# ---- helpers -------------------------------------------------------------------

def parse(fmt, data: bytes, *, keys=("id",), name="part-0001.jsonl", options=None) -> list:
    return list(parse_file(fmt, options or {}, list(keys), name, data))


def jsonl(*records) -> bytes:
    lines = []
    for r in records:
        if isinstance(r, bytes):
            lines.append(r)
        elif isinstance(r, str):
            lines.append(r.encode())
        else:
            lines.append(json.dumps(r).encode())
    return b"\n".join(lines) + b"\n"


def only(results) -> Change | Rejection:
    assert len(results) == 1, results
    return results[0]


def change(fmt, record, **kw) -> Change:
    r = only(parse(fmt, jsonl(record), **kw))
    assert isinstance(r, Change), r
    return r


def rejection(fmt, record, **kw) -> Rejection:
    r = only(parse(fmt, jsonl(record), **kw))
    assert isinstance(r, Rejection), r
    return r


def summary(results) -> list[tuple]:
    return [(type(r).__name__, r.line) for r in results]


_n = iter(range(10**9))


def event(change_type="INSERT", ts="2024-01-01T00:00:00", *, read_method="postgres-cdc-wal", payload=None,
          uuid=None, **meta) -> dict:
    if not meta and "backfill" not in read_method:
        meta = {"lsn": "16/B374D848"}
    return {
        "stream_name": "projects/p/locations/l/streams/s",
        "read_method": read_method,
        "object": "PUBLIC.ORDERS",
        "uuid": uuid or f"uuid-{next(_n)}",
        "read_timestamp": "2024-01-01T00:00:05.000Z",
        "source_timestamp": ts,
        "source_metadata": {"change_type": change_type, "is_deleted": change_type.endswith("DELETE"), **meta},
        "payload": {"id": 1, "v": "x"} if payload is None else payload,
    }


def ds_order(**kw) -> str:
    return change("datastream-json", event(**kw)).order


def pg(lsn, ts="2024-01-01T00:00:00", change_type="UPDATE"):
    return ds_order(ts=ts, change_type=change_type, read_method="postgres-cdc-wal", lsn=lsn)


def mysql(log_file, pos, ts="2024-01-01T00:00:00", change_type="UPDATE"):
    return ds_order(ts=ts, change_type=change_type, read_method="mysql-cdc-binlog", log_file=log_file, log_position=pos)


def oracle(scn, rs_id, ssn, ts="2024-01-01T00:00:00", change_type="UPDATE"):
    return ds_order(ts=ts, change_type=change_type, read_method="oracle-cdc-logminer", scn=scn, rs_id=rs_id, ssn=ssn,
                    log_file="", row_id="AAAPwRAALAAMzMBABD")


def mssql(lsn, ts="2024-01-01T00:00:00", change_type="UPDATE"):
    return ds_order(ts=ts, change_type=change_type, read_method="sqlserver-cdc", lsn=lsn)


def record_order(c: Change, *, batch=1, file_index=0, tier=ordering.CHANGE_TIER) -> str:
    return to_record(c, batch_seq=batch, batch_id=f"b{batch}", file_name="f", file_index=file_index,
                     partition_by=[], tier=tier)["_cdc_order"]


# ---- datastream-json: operations ---------------------------------------------------

@pytest.mark.parametrize(
    "change_type, op",
    [("INSERT", UPSERT), ("UPDATE", UPSERT), ("UPDATE-INSERT", UPSERT), ("DELETE", DELETE), ("UPDATE-DELETE", DELETE)],
)
def test_datastream_change_types(change_type, op):
    c = change("datastream-json", event(change_type))
    assert c.op == op
    assert c.change_type == change_type


def test_datastream_change_is_key_full_row_and_uuid():
    c = change("datastream-json", event(payload={"id": 7, "name": "a", "tags": ["x"], "price": 1.5, "note": None},
                                        uuid="d7989206-380f-0e81-8056-240501101100"))
    assert c.key == (7,)
    assert c.row == {"id": 7, "name": "a", "tags": '["x"]', "price": 1.5, "note": None}  # payload = the row
    assert c.event_id == "d7989206-380f-0e81-8056-240501101100"
    assert c.line == 1
    # metadata is not a source column
    assert not {"source_metadata", "uuid", "source_timestamp", "read_method"} & set(c.row)


def test_datastream_composite_key_order_follows_config():
    c = change("datastream-json", event(payload={"b": "x", "a": 2, "v": 0}), keys=("a", "b"))
    assert c.key == (2, "x")


def test_datastream_without_uuid_gets_a_stable_content_id():
    e = event()
    del e["uuid"]
    a = change("datastream-json", e)
    b = change("datastream-json", e)
    assert a.event_id and a.event_id == b.event_id  # a re-delivered copy collapses
    e2 = dict(e, payload={"id": 1, "v": "other"})
    assert change("datastream-json", e2).event_id != a.event_id


def test_seed_003_oracle_example_latest_is_the_delete():
    base = {"stream_name": "projects/myProj/locations/myLoc/streams/Oracle-to-Source",
            "read_method": "oracle-cdc-logminer", "object": "SAMPLE.TBL"}
    ins = dict(base, uuid="d7989206-380f-0e81-8056-240501101100", source_timestamp="2019-11-07T02:15:39",
               source_metadata={"log_file": "", "scn": 15869116216871, "row_id": "AAAPwRAALAAMzMBABD",
                                "is_deleted": False, "database": "DB1", "schema": "ROOT", "table": "SAMPLE",
                                "change_type": "INSERT", "tx_id": "", "rs_id": "0x0073c9.000a4e4c.01d0", "ssn": 67},
               payload={"THIS_IS_MY_PK": "1231535353", "FIELD1": "foo", "FIELD2": "TLV"})
    upd = dict(base, uuid="e6067366-1efc-0a10-a084-0d8701101101", source_timestamp="2019-11-07T02:17:39",
               source_metadata={"log_file": "", "scn": 15869150473224, "row_id": "AAAGYPAATAAPIC5AAB",
                                "is_deleted": False, "schema": "ROOT", "table": "SAMPLE", "change_type": "UPDATE",
                                "rs_id": "0x006cf4.00056b26.0010", "ssn": 0},
               payload={"THIS_IS_MY_PK": "1231535353", "FIELD1": None, "FIELD2": "TLV"})
    dele = dict(base, uuid="c504f4bc-0ffc-4a1a-84df-6aba382fa651", source_timestamp="2019-11-07T02:19:39",
                source_metadata={"log_file": "", "scn": 158691504732555, "row_id": "AAAGYPAATAAPIC5AAC",
                                 "is_deleted": True, "schema": "ROOT", "table": "SAMPLE", "change_type": "DELETE",
                                 "rs_id": "0x006cf4.00056b26.0011", "ssn": 0},
                payload={"THIS_IS_MY_PK": "1231535353", "FIELD1": None, "FIELD2": "TLV"})
    # delivered out of order
    out = parse("datastream-json", jsonl(dele, ins, upd), keys=("THIS_IS_MY_PK",))
    assert all(isinstance(c, Change) for c in out)
    assert len({c.key for c in out}) == 1
    latest = max(out, key=lambda c: c.order)
    assert latest.op == DELETE and latest.event_id == "c504f4bc-0ffc-4a1a-84df-6aba382fa651"
    assert sorted(out, key=lambda c: c.order) == [out[1], out[2], out[0]]


# ---- datastream-json: ordering ------------------------------------------------------

def test_postgres_lsn_is_two_hex_numbers():
    assert pg("16/B374D848") < pg("16/B374D849")
    assert pg("9/FFFFFFFF") < pg("10/0")  # as text '9/...' > '10/0'
    assert pg("0/A") < pg("0/10")  # 10 < 16
    assert pg("16/b374d848") == pg("16/B374D848")
    assert pg("1/FFFFFFFF") < pg("2/0")


def test_mysql_binlog_file_number_is_an_integer():
    assert mysql("mysql-bin.999999", 4) < mysql("mysql-bin.1000000", 4)
    assert mysql("mysql-bin.000009", 4) < mysql("mysql-bin.000010", 4)
    assert mysql("mysql-bin.000001", 999999) < mysql("mysql-bin.000002", 4)  # the file number comes first


def test_mysql_log_position_is_numeric_not_textual():
    assert mysql("mysql-bin.000001", 9) < mysql("mysql-bin.000001", 10)
    assert mysql("mysql-bin.000001", 99) < mysql("mysql-bin.000001", 100)


def test_sql_server_lsn_is_three_hex_numbers():
    order = [mssql("0000002A:00000120:0001"), mssql("0000002A:00000120:0002"), mssql("0000002A:00000121:0000"),
             mssql("0000002B:00000000:0000")]
    assert order == sorted(order) and len(set(order)) == 4
    assert mssql("0000002a:000001ff:000a") == mssql("0000002A:000001FF:000A")
    assert mssql("0000000A:00000000:0000") > mssql("00000009:FFFFFFFF:FFFF")


def test_oracle_scn_then_rs_id_then_ssn():
    assert oracle(100, "0x000001.00000001.0001", 0) < oracle(101, "0x000000.00000000.0000", 0)  # scn first
    assert oracle(100, "0x000001.00000001.0001", 9) < oracle(100, "0x000001.00000001.0002", 0)  # then rs_id
    assert oracle(100, "0x000001.00000001.0010", 0) > oracle(100, "0x000001.00000001.000f", 0)  # rs_id is hex
    assert oracle(100, "0x000001.00000002.0000", 0) > oracle(100, "0x000001.00000001.ffff", 0)
    assert oracle(100, "0x000002.00000000.0000", 0) > oracle(100, "0x000001.ffffffff.ffff", 0)
    assert oracle(100, "0x000001.00000001.0001", 9) < oracle(100, "0x000001.00000001.0001", 10)  # ssn numeric
    assert oracle(9, "0x000001.00000001.0001", 0) < oracle(10, "0x000001.00000001.0001", 0)  # scn numeric


def test_source_timestamp_comes_first_and_ties_are_broken_by_position():
    # 1-second granularity (rules.md#bigquery-append): equal timestamps, the position decides ...
    assert pg("16/B374D849", ts="2024-01-01T00:00:01") > pg("16/B374D848", ts="2024-01-01T00:00:01")
    # ... but a later timestamp wins over a greater position
    assert pg("1/0", ts="2024-01-01T00:00:02") > pg("FF/0", ts="2024-01-01T00:00:01")
    # the same instant spelled differently is a tie
    assert pg("1/0", ts="2024-01-01T00:00:01Z") == pg("1/0", ts="2024-01-01T00:00:01.000+00:00")
    assert pg("1/0", ts="2024-01-01T02:00:01+02:00") == pg("1/0", ts="2024-01-01T00:00:01")
    assert pg("1/0", ts=1704067201000) == pg("1/0", ts="2024-01-01T00:00:01")  # epoch milliseconds


@pytest.mark.parametrize("method", ["oracle-backfill", "mysql-backfill-fulldump", "mysql-backfill-incremental",
                                    "postgresql-backfill", "sqlserver-backfill"])
def test_backfill_ranks_lowest_at_its_timestamp(method):
    bf = ds_order(read_method=method, ts="2024-01-01T00:00:01")
    assert bf < pg("0/0", ts="2024-01-01T00:00:01")  # below any CDC position at that second
    assert bf < mysql("mysql-bin.000001", 0, ts="2024-01-01T00:00:01")
    assert bf > pg("FFFFFFFF/FFFFFFFF", ts="2024-01-01T00:00:00")  # but above anything earlier
    assert bf < ds_order(read_method=method, ts="2024-01-01T00:00:02")


def test_backfill_needs_no_position():
    e = event(read_method="mysql-backfill-fulldump")
    e["source_metadata"] = {"change_type": "INSERT"}
    c = change("datastream-json", e)
    assert c.op == UPSERT


def test_update_delete_ranks_before_other_types_at_an_equal_position():
    # An update of a key column arrives as UPDATE-DELETE + UPDATE-INSERT at one position.
    for other in ["INSERT", "UPDATE", "UPDATE-INSERT", "DELETE"]:
        assert pg("1/A", change_type="UPDATE-DELETE") < pg("1/A", change_type=other)
    # ... but only at an equal position
    assert pg("1/B", change_type="UPDATE-DELETE") > pg("1/A", change_type="UPDATE-INSERT")
    assert mysql("mysql-bin.000001", 5, change_type="UPDATE-DELETE") < mysql("mysql-bin.000001", 5, change_type="UPDATE-INSERT")
    assert oracle(1, "0x1.1.1", 1, change_type="UPDATE-DELETE") < oracle(1, "0x1.1.1", 1, change_type="INSERT")


def test_source_order_beats_arrival_order():
    old = change("datastream-json", event("UPDATE", lsn="1/A"))
    new = change("datastream-json", event("DELETE", lsn="1/B"))
    assert record_order(new, batch=1) > record_order(old, batch=2)  # an older change landing later still loses


# ---- datastream-json: records that become rejections ---------------------------

@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda e: e.pop("payload"), "payload"),
        (lambda e: e.update(payload=None), "payload"),
        (lambda e: e.update(payload=[1, 2]), "payload"),
        (lambda e: e.pop("source_metadata"), "source_metadata"),
        (lambda e: e["source_metadata"].update(change_type="MERGE"), "unknown change type in 'source_metadata.change_type'"),
        (lambda e: e["source_metadata"].pop("change_type"), "change type"),
        (lambda e: e.pop("source_timestamp"), "source_timestamp"),
        (lambda e: e.update(source_timestamp="not a time"), "source_timestamp: timestamp does not parse"),
        (lambda e: e.update(source_timestamp=None), "source_timestamp: timestamp is null"),
        (lambda e: e["payload"].pop("id"), "'id' is missing"),
        (lambda e: e["payload"].update(id=None), "'id' is null"),
        (lambda e: e["source_metadata"].update(lsn="16/XYZ"), "lsn"),
        (lambda e: e["source_metadata"].update(lsn="1/11111111111111111"), "lsn"),
        (lambda e: e["source_metadata"].pop("lsn"), "position"),
    ],
)
def test_datastream_bad_events_are_rejected_with_a_reason(mutate, reason):
    e = event()
    mutate(e)
    r = rejection("datastream-json", e)
    assert reason in r.reason
    assert r.line == 1
    assert json.loads(r.raw) == e  # the raw record is kept for the quarantine


def test_unknown_change_type_names_the_field_never_the_value():
    r = rejection("datastream-json", event("TRUNCATE"))
    assert "'source_metadata.change_type'" in r.reason and "TRUNCATE" not in r.reason


@pytest.mark.parametrize(
    "meta, reason",
    [
        ({"log_file": "mysql-bin.index", "log_position": 4}, "log_file"),
        ({"log_file": "mysql-bin.000001", "log_position": "ten"}, "log_position"),
        ({"log_file": "mysql-bin.000001"}, "log_position"),
        ({"rs_id": "0x1.2.3", "ssn": 0}, "scn"),
        ({"scn": 5, "rs_id": "0xZZ.2.3", "ssn": 0}, "rs_id"),
    ],
)
def test_datastream_bad_positions_are_rejected(meta, reason):
    method = "mysql-cdc-binlog" if "log_file" in meta else "oracle-cdc-logminer"
    r = rejection("datastream-json", event(read_method=method, **meta))
    assert reason in r.reason


# ---- line-level robustness -----------------------------------------------------

def test_bad_lines_are_rejected_with_their_line_and_good_lines_still_parse():
    data = jsonl(
        event(uuid="a"),                      # 1
        "this is not json",                   # 2
        '{"uuid": "b", "payload": {"id": 1',  # 3 truncated JSON
        "[1, 2, 3]",                          # 4 array instead of object
        b"\xff\xfe\x00garbage",               # 5 invalid UTF-8
        event(uuid="c"),                      # 6
        '"just a string"',                    # 7
        "42",                                 # 8
        "null",                               # 9
        event("DELETE", uuid="d"),            # 10
    )
    out = parse("datastream-json", data)
    assert summary(out) == [("Change", 1), ("Rejection", 2), ("Rejection", 3), ("Rejection", 4), ("Rejection", 5),
                            ("Change", 6), ("Rejection", 7), ("Rejection", 8), ("Rejection", 9), ("Change", 10)]
    assert [c.event_id for c in out if isinstance(c, Change)] == ["a", "c", "d"]
    reasons = {r.line: r.reason for r in out if isinstance(r, Rejection)}
    assert "JSON" in reasons[2] and "JSON" in reasons[3]
    assert "object" in reasons[4] and "list" in reasons[4]
    assert "UTF-8" in reasons[5]
    assert out[1].raw == "this is not json"


def test_blank_lines_are_skipped_but_counted():
    data = b"\n\n" + json.dumps(event(uuid="a")).encode() + b"\n   \n\n" + json.dumps(event(uuid="b")).encode()
    assert summary(parse("datastream-json", data)) == [("Change", 3), ("Change", 6)]


def test_crlf_line_endings():
    data = json.dumps(event()).encode() + b"\r\n" + json.dumps(event()).encode() + b"\r\n"
    assert summary(parse("datastream-json", data)) == [("Change", 1), ("Change", 2)]


def test_byte_order_mark_at_file_start_is_accepted():
    data = b"\xef\xbb\xbf" + jsonl(event(uuid="a"), event(uuid="b"))
    out = parse("datastream-json", data)
    assert summary(out) == [("Change", 1), ("Change", 2)]


@pytest.mark.parametrize("data", [b"", b"\n\n", b"   \r\n"])
def test_empty_file_is_one_rejection(data):
    r = only(parse("datastream-json", data))
    assert isinstance(r, Rejection)
    assert "empty" in r.reason


def test_gzip_file_is_read():
    data = gzip.compress(jsonl(event(uuid="a"), "oops", event(uuid="b")))
    out = parse("datastream-json", data, name="part.jsonl.gz")
    assert summary(out) == [("Change", 1), ("Rejection", 2), ("Change", 3)]


def test_broken_gzip_file_is_one_rejection():
    r = only(parse("datastream-json", b"\x1f\x8b\x08\x00broken", name="part.jsonl.gz"))
    assert isinstance(r, Rejection) and "gzip" in r.reason


def test_rejections_become_quarantine_records():
    r = only(parse("datastream-json", b"{not json}\n"))
    rec = to_reject(r, batch_seq=3, batch_id="b3", file_name="ORDERS/part.jsonl")
    assert rec["_cdc_line"] == 1 and rec["_cdc_file"] == "ORDERS/part.jsonl" and rec["_cdc_batch_seq"] == 3
    assert rec["_cdc_raw"] == "{not json}" and "JSON" in rec["_cdc_reason"]


# ---- datastream-avro ---------------------------------------------------------------

AVRO_SCHEMA = {
    "type": "record", "name": "event", "fields": [
        {"name": "uuid", "type": "string"},
        {"name": "read_method", "type": "string"},
        {"name": "source_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "source_metadata", "type": {"type": "record", "name": "meta", "fields": [
            {"name": "change_type", "type": "string"},
            {"name": "log_file", "type": "string"},
            {"name": "log_position", "type": "long"},
        ]}},
        {"name": "payload", "type": {"type": "record", "name": "row", "fields": [
            {"name": "id", "type": "long"},
            {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]},
            {"name": "updated", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        ]}},
    ],
}


def avro_file(*events) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(AVRO_SCHEMA), list(events))
    return buf.getvalue()


def avro_event(uuid, change_type, pos, ts=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), amount=Decimal("12.50")):
    return {"uuid": uuid, "read_method": "mysql-cdc-binlog", "source_timestamp": ts,
            "source_metadata": {"change_type": change_type, "log_file": "mysql-bin.000001", "log_position": pos},
            "payload": {"id": 1, "amount": amount, "updated": dt.datetime(2024, 1, 1, 9, 30, tzinfo=dt.UTC)}}


def test_datastream_avro_events():
    out = parse("datastream-avro", avro_file(avro_event("a", "INSERT", 10), avro_event("b", "DELETE", 9)),
                name="part.avro")
    assert summary(out) == [("Change", 1), ("Change", 2)]
    ins, dele = out
    assert ins.op == UPSERT and dele.op == DELETE and ins.event_id == "a"
    assert ins.order > dele.order  # log_position 10 > 9
    # Avro timestamps order like the JSON spelling of the same event
    assert ins.order == mysql("mysql-bin.000001", 10, ts="2024-01-01T00:00:00", change_type="INSERT")


def test_datastream_avro_logical_types_keep_their_types():
    c = only(parse("datastream-avro", avro_file(avro_event("a", "INSERT", 10)), name="part.avro"))
    updated = dt.datetime(2024, 1, 1, 9, 30, tzinfo=dt.UTC)
    assert c.row == {"id": 1, "amount": Decimal("12.50"), "updated": updated}
    assert type(c.row["amount"]) is Decimal  # exact, not a float
    assert c.types == {"id": "long", "amount": "decimal(10,2)", "updated": "timestamp"}
    rec = to_record(c, batch_seq=1, batch_id="b1", file_name="part.avro", file_index=0, partition_by=[])
    assert decode_row(rec["_cdc_row"]) == c.row


def test_unreadable_avro_file_is_a_rejection():
    out = parse("datastream-avro", b"Obj\x01 this is not avro", name="part.avro")
    assert out and all(isinstance(r, Rejection) for r in out)
    assert "Avro" in out[0].reason


@pytest.mark.parametrize("fmt", ["datastream-avro", "bigquery-append", "changeset"])
def test_avro_rows_that_are_no_records_are_rejections_naming_their_line(fmt):
    # an Avro file whose schema is not a record (a plain string or an array per row) holds no
    # columns: each row is quarantined with its line, as a JSON line that is no object is
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema({"type": "array", "items": "long"}), [[1, 2], [3]])
    options = {"op_column": "op", "deletes": ["D"], "inserts": ["I"]} if fmt == "changeset" else None
    out = parse(fmt, buf.getvalue(), name="part.avro", options=options)
    assert summary(out) == [("Rejection", 1), ("Rejection", 2)]
    assert all("Avro array where a record was expected" in r.reason for r in out)


# ---- bigquery-append ---------------------------------------------------------------

def append_row(csn, change_type="INSERT", uuid="u1", **cols):
    row = {"COL1": "ABC", "COL2": "XYZ", **cols}
    row["datastream_metadata"] = {"uuid": uuid, "source_timestamp": 1704067200000, "change_sequence_number": csn,
                                  "change_type": change_type, "is_deleted": change_type.endswith("DELETE")}
    return row


def test_bigquery_append_orders_by_change_sequence_number():
    keys = ("COL1",)
    a = change("bigquery-append", append_row(9, COL2="XYZ"), keys=keys)
    b = change("bigquery-append", append_row(10, COL2="PQR", uuid="u2"), keys=keys)
    assert b.order > a.order
    assert b.row == {"COL1": "ABC", "COL2": "PQR"}  # datastream_metadata is not a source column
    assert b.event_id == "u2" and b.key == ("ABC",)
    s1 = change("bigquery-append", append_row("FFF/B"), keys=keys)
    s2 = change("bigquery-append", append_row("FFF/ABC"), keys=keys)
    assert s2.order > s1.order
    assert change("bigquery-append", append_row("ff"), keys=keys).order == change("bigquery-append", append_row(255), keys=keys).order


def test_bigquery_append_update_delete_rank():
    keys = ("COL1",)
    ud = change("bigquery-append", append_row(5, "UPDATE-DELETE"), keys=keys)
    ui = change("bigquery-append", append_row(5, "UPDATE-INSERT"), keys=keys)
    assert ud.op == DELETE and ui.op == UPSERT and ud.order < ui.order
    assert change("bigquery-append", append_row(6, "UPDATE-DELETE"), keys=keys).order > ui.order


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"COL1": "ABC"}, "datastream_metadata"),
        (append_row(None), "change_sequence_number"),
        (append_row("XYZ"), "datastream_metadata.change_sequence_number: change sequence number: section 1"),
        (append_row("1/2/3/4/5"), "section"),
        (append_row(5, "UPSERT"), "unknown change type in 'datastream_metadata.change_type'"),
        (append_row(5, COL1=None), "null"),
    ],
)
def test_bigquery_append_bad_rows(row, reason):
    r = rejection("bigquery-append", row, keys=("COL1",))
    assert reason in r.reason


def test_bigquery_append_parquet():
    table = pa.Table.from_pylist([append_row(1, COL2="a"), append_row(2, "DELETE", uuid="u2", COL2="b")])
    buf = io.BytesIO()
    pq.write_table(table, buf)
    out = parse("bigquery-append", buf.getvalue(), keys=("COL1",), name="part.parquet")
    assert summary(out) == [("Change", 1), ("Change", 2)]
    assert out[1].op == DELETE and out[1].order > out[0].order


# ---- bigquery-cdc --------------------------------------------------------------------

def cdc(change_type="UPSERT", csn=None, **cols):
    r = {"id": 1, "v": "x", **cols, "_CHANGE_TYPE": change_type}
    if csn is not None:
        r["_CHANGE_SEQUENCE_NUMBER"] = csn
    return r


@pytest.mark.parametrize("older, newer", [("77", "7B"), ("FFF/B", "FFF/ABC"), ("BA/FFFFFFFF", "ABC"), ("ABC", "FFF/ABC")])
def test_bigquery_cdc_seed_004_examples_json(older, newer):
    out = parse("bigquery-cdc", jsonl(cdc(csn=newer, v="new"), cdc(csn=older, v="old")))
    assert max(out, key=lambda c: c.order).row["v"] == "new"


@pytest.mark.parametrize("older, newer", [("77", "7B"), ("FFF/B", "FFF/ABC"), ("BA/FFFFFFFF", "ABC"), ("ABC", "FFF/ABC")])
def test_bigquery_cdc_seed_004_examples_csv(older, newer):
    # CSV inference reads '77' as a number; it must still be the hexadecimal 0x77.
    data = f"id,v,_CHANGE_TYPE,_CHANGE_SEQUENCE_NUMBER\n1,new,UPSERT,{newer}\n1,old,UPSERT,{older}\n".encode()
    out = parse("bigquery-cdc", data, name="part.csv")
    assert summary(out) == [("Change", 2), ("Change", 3)]
    assert max(out, key=lambda c: c.order).row["v"] == "new"


def test_bigquery_cdc_csv_sequence_number_is_hex_even_when_it_looks_decimal():
    data = b"id,v,_CHANGE_TYPE,_CHANGE_SEQUENCE_NUMBER\n1,a,UPSERT,10\n1,b,UPSERT,F\n1,c,UPSERT,0a\n"
    a, b, c = parse("bigquery-cdc", data, name="part.csv")
    assert a.order > b.order  # 0x10 = 16 > 0xF = 15 (as text 'F' > '10')
    assert c.order < b.order  # 0x0A = 10


def test_bigquery_cdc_operations_and_pseudo_columns():
    up = change("bigquery-cdc", cdc("UPSERT", "1"))
    de = change("bigquery-cdc", cdc("DELETE", "2"))
    assert up.op == UPSERT and de.op == DELETE
    assert up.row == {"id": 1, "v": "x"}  # _CHANGE_TYPE / _CHANGE_SEQUENCE_NUMBER are not source columns
    assert de.order > up.order
    assert change("bigquery-cdc", cdc("upsert", "1")).op == UPSERT


def test_bigquery_cdc_sequence_number_case_insensitive():
    assert change("bigquery-cdc", cdc(csn="fff/abc")).order == change("bigquery-cdc", cdc(csn="FFF/ABC")).order


def test_bigquery_cdc_without_sequence_number_orders_by_arrival():
    a = change("bigquery-cdc", cdc(v="a"))
    b = change("bigquery-cdc", cdc(v="b"))
    assert a.order == b.order
    assert record_order(b, batch=2) > record_order(a, batch=1)
    assert record_order(b, batch=1, file_index=1) > record_order(a, batch=1, file_index=0)
    out = parse("bigquery-cdc", jsonl(cdc(v="first"), cdc(v="second")))
    assert max(out, key=record_order).row["v"] == "second"  # the later line wins


@pytest.mark.parametrize("csn", ["XYZ", "1/2/3/4/5", "11111111111111111", "", "7B/", "-1"])
def test_bigquery_cdc_malformed_sequence_number_is_rejected(csn):
    r = rejection("bigquery-cdc", cdc(csn=csn))
    assert "sequence number" in r.reason


def test_bigquery_cdc_malformed_sequence_number_in_csv_keeps_neighbours():
    data = b"id,v,_CHANGE_TYPE,_CHANGE_SEQUENCE_NUMBER\n1,a,UPSERT,7B\n2,b,UPSERT,NOPE\n3,c,DELETE,7C\n"
    out = parse("bigquery-cdc", data, name="part.csv")
    assert summary(out) == [("Change", 2), ("Rejection", 3), ("Change", 4)]
    assert "_CHANGE_SEQUENCE_NUMBER" in out[1].reason and "NOPE" not in out[1].reason


@pytest.mark.parametrize("change_type", ["INSERT", "UPDATE", "", None, 1])
def test_bigquery_cdc_unknown_change_type(change_type):
    r = rejection("bigquery-cdc", cdc(change_type, "1"))
    assert "change type" in r.reason and "'_CHANGE_TYPE'" in r.reason
    assert change_type in (None, "") or str(change_type) not in r.reason


def test_bigquery_cdc_missing_change_type():
    row = cdc(csn="1")
    del row["_CHANGE_TYPE"]
    assert "change type" in rejection("bigquery-cdc", row).reason


# ---- changeset ---------------------------------------------------------------------

SEED_002 = {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["CDC_TIMESTAMP"]}


def changeset_csv(text: str, options=SEED_002, keys=("ID",)) -> list:
    return parse("changeset", text.encode(), keys=keys, name="changes.csv", options=options)


def test_changeset_seed_002_flags():
    out = changeset_csv(
        "FLAG,ID,VALUE,CDC_TIMESTAMP\n"
        "I,1,a,2018-01-01 16:02:00\n"
        "U,1,b,2018-01-01 16:02:01\n"
        "D,2,,2018-01-01 16:02:02\n"
    )
    assert [(c.op, c.change_type, c.key) for c in out] == [(UPSERT, "I", (1,)), (UPSERT, "U", (1,)), (DELETE, "D", (2,))]
    assert out[0].row == {"ID": 1, "VALUE": "a", "CDC_TIMESTAMP": "2018-01-01 16:02:00"}  # FLAG is not a source column
    assert out[2].row["VALUE"] is None
    assert out[1].order > out[0].order
    assert [c.line for c in out] == [2, 3, 4]


def test_changeset_sequence_integers_compare_as_numbers():
    opts = dict(SEED_002, sequence_by=["SEQ"])
    out = changeset_csv("FLAG,ID,SEQ\nU,1,10\nU,1,9\nU,1,100\n", options=opts)
    assert [c.line for c in sorted(out, key=lambda c: c.order)] == [3, 2, 4]  # 9 < 10 < 100


def test_changeset_sequence_integers_in_json_strings_compare_as_numbers():
    opts = dict(SEED_002, sequence_by=["SEQ"])
    out = parse("changeset", jsonl({"FLAG": "U", "ID": 1, "SEQ": "10"}, {"FLAG": "U", "ID": 1, "SEQ": "9"}),
                keys=("ID",), options=opts)
    assert out[0].order > out[1].order


def test_changeset_sequence_timestamps_compare_as_time():
    out = changeset_csv(
        "FLAG,ID,CDC_TIMESTAMP\n"
        "U,1,2024-01-01T10:00:00+02:00\n"   # 08:00 UTC
        "U,1,2024-01-01T09:00:00Z\n"        # 09:00 UTC: later, although smaller as text
        "U,1,2024-01-01 08:30:00\n"
    )
    assert [c.line for c in sorted(out, key=lambda c: c.order)] == [2, 4, 3]


def test_changeset_several_sequence_columns():
    opts = dict(SEED_002, sequence_by=["EPOCH", "SEQ"])
    out = changeset_csv("FLAG,ID,EPOCH,SEQ\nU,1,2,1\nU,1,1,99\nU,1,2,10\n", options=opts)
    assert [c.line for c in sorted(out, key=lambda c: c.order)] == [3, 2, 4]


def test_changeset_without_sequence_orders_by_arrival():
    opts = {k: v for k, v in SEED_002.items() if k != "sequence_by"}
    out = changeset_csv("FLAG,ID\nU,1\nD,1\n", options=opts)
    assert out[0].order == out[1].order
    assert max(out, key=record_order).op == DELETE


def test_changeset_unknown_flag_is_rejected_naming_the_column_never_the_value():
    out = changeset_csv("FLAG,ID,CDC_TIMESTAMP\nI,1,2024-01-01\nXQ,2,2024-01-01\n,3,2024-01-01\nD,4,2024-01-01\n")
    assert summary(out) == [("Change", 2), ("Rejection", 3), ("Rejection", 4), ("Change", 5)]
    assert "unknown change type in op column 'FLAG'" in out[1].reason and "XQ" not in out[1].reason
    assert "op column 'FLAG' is null" in out[2].reason


def test_changeset_flag_values_may_be_numbers():
    opts = {"op_column": "op", "inserts": ["1"], "updates": ["2"], "deletes": ["3"], "sequence_by": []}
    out = changeset_csv("op,ID\n1,5\n2,5\n3,5\n4,5\n", options=opts)
    assert [getattr(c, "op", None) for c in out] == [UPSERT, UPSERT, DELETE, None]


def test_changeset_missing_columns_are_rejected():
    # without the op column the first line is no usable header: it is quarantined with the rest
    out = changeset_csv("ID,CDC_TIMESTAMP\n1,2024-01-01\n")
    assert summary(out) == [("Rejection", 1), ("Rejection", 2)]
    assert all("no header row" in r.reason and "'FLAG'" in r.reason for r in out)
    out = changeset_csv("FLAG,ID\nI,1\n")
    assert "CDC_TIMESTAMP" in only(out).reason


def test_changeset_csv_without_a_header_row_loses_no_record():
    out = changeset_csv("I,1,a,2024-01-01\nU,1,b,2024-01-02\nD,2,,2024-01-03\n")
    assert summary(out) == [("Rejection", 1), ("Rejection", 2), ("Rejection", 3)]
    assert [r.raw for r in out] == ["I,1,a,2024-01-01", "U,1,b,2024-01-02", "D,2,,2024-01-03"]
    reason = out[0].reason
    assert "no header row" in reason and "'FLAG'" in reason and "'ID'" in reason
    assert "I,1" not in reason and "2024" not in reason  # a reason never quotes a row's values


def test_csv_without_a_header_row_keeps_a_quoted_first_record_whole():
    out = changeset_csv('I,1,"two\nlines",2024-01-01\nU,1,b,2024-01-02\n')
    assert summary(out) == [("Rejection", 1), ("Rejection", 3)]
    assert out[0].raw == 'I,1,"two\nlines",2024-01-01'


def test_bigquery_cdc_csv_without_a_header_row_loses_no_record():
    out = parse("bigquery-cdc", b"5,ok,UPSERT,a\n6,ok,UPSERT,b\n", name="part.csv")
    assert summary(out) == [("Rejection", 1), ("Rejection", 2)]
    assert out[0].raw == "5,ok,UPSERT,a"
    assert all("no header row" in r.reason and "'_CHANGE_TYPE'" in r.reason and "'id'" in r.reason for r in out)


def test_changeset_json_lines():
    out = parse("changeset", jsonl({"FLAG": "I", "ID": 1, "VALUE": "a", "CDC_TIMESTAMP": "2024-01-01T00:00:01Z"},
                                   {"FLAG": "D", "ID": 1, "VALUE": "a", "CDC_TIMESTAMP": "2024-01-01T00:00:02Z"}),
                keys=("ID",), options=SEED_002, name="changes.json")
    assert [c.op for c in out] == [UPSERT, DELETE] and out[1].order > out[0].order


def test_changeset_parquet_timestamps_compare_as_time():
    table = pa.table({
        "FLAG": ["I", "U", "D"],
        "ID": [1, 1, 2],
        "VALUE": [Decimal("1.50"), Decimal("2.25"), None],
        "CDC_TIMESTAMP": [dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 1, 9), dt.datetime(2024, 1, 1, 11)],
    })
    buf = io.BytesIO()
    pq.write_table(table, buf)
    out = parse("changeset", buf.getvalue(), keys=("ID",), options=SEED_002, name="changes.parquet")
    assert summary(out) == [("Change", 1), ("Change", 2), ("Change", 3)]
    assert out[0].order > out[1].order  # 10:00 beats 09:00 whatever the line order
    assert out[0].row == {"ID": 1, "VALUE": 1.5, "CDC_TIMESTAMP": dt.datetime(2024, 1, 1, 10, 0)}
    for c in out:  # the row image is JSON
        to_record(c, batch_seq=1, batch_id="b1", file_name="changes.parquet", file_index=0, partition_by=["VALUE"])


def test_unreadable_parquet_is_a_rejection():
    r = only(parse("changeset", b"PAR1 nope PAR1", keys=("ID",), options=SEED_002, name="x.parquet"))
    assert isinstance(r, Rejection) and "Parquet" in r.reason


# ---- CSV specifics -----------------------------------------------------------------

OPTS = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}


def csv_parse(data: bytes, keys=("id",)):
    return parse("changeset", data, keys=keys, name="part.csv", options=OPTS)


def test_csv_duplicated_header_columns_reject_every_row():
    out = csv_parse(b"op,id,seq,id\nI,1,1,2\nU,2,2,3\n")
    assert summary(out) == [("Rejection", 2), ("Rejection", 3)]
    assert all("duplicated" in r.reason and "id" in r.reason for r in out)


def test_csv_empty_header_column_rejects_every_row():
    out = csv_parse(b"op,id,,seq\nI,1,x,1\n")
    assert summary(out) == [("Rejection", 2)] and "empty column name" in out[0].reason


def test_csv_row_with_wrong_field_count():
    out = csv_parse(b"op,id,seq\nI,1,1\nI,2\nI,3,3,extra\nU,4,4\n")
    assert summary(out) == [("Change", 2), ("Rejection", 3), ("Rejection", 4), ("Change", 5)]
    assert "2 fields" in out[1].reason and "3" in out[1].reason
    assert out[2].raw == "I,3,3,extra"


def test_csv_invalid_utf8_rejects_the_row_and_keeps_the_rest():
    out = csv_parse(b"op,id,seq\nI,1,1\nI,2,\xff\xfe\nU,3,3\n")
    assert summary(out) == [("Change", 2), ("Rejection", 3), ("Change", 4)]
    assert "UTF-8" in out[1].reason
    assert out[1].raw.startswith("I,2,")


def test_csv_invalid_utf8_header_rejects_rows():
    out = csv_parse(b"op,id,s\xffeq\nI,1,1\n")
    assert summary(out) == [("Rejection", 2)] and "UTF-8" in out[0].reason


def test_csv_multi_line_quoted_field_keeps_line_numbers():
    out = csv_parse(b'op,id,seq,note\nI,1,1,"two\nlines"\nU,2,2,x\n')
    assert summary(out) == [("Change", 2), ("Change", 4)]
    assert out[0].row["note"] == "two\nlines"


def test_csv_unreadable_row_keeps_following_line_numbers():
    huge = b"x" * 200_000  # past the csv module's field limit
    out = csv_parse(b"op,id,seq,note\nI,1,1,a\nI,2,2," + huge + b"\nU,3,3,c\n")
    assert summary(out) == [("Change", 2), ("Rejection", 3), ("Change", 4)]


def test_csv_bom_crlf_and_blank_lines():
    out = csv_parse(b"\xef\xbb\xbfop,id,seq\r\nI,1,1\r\n\r\nU,2,2\r\n")
    assert summary(out) == [("Change", 2), ("Change", 4)]
    assert out[0].key == (1,)  # the BOM is not part of the first column's name


def test_csv_header_only_file_has_no_records():
    assert csv_parse(b"op,id,seq\n") == []


def test_csv_missing_or_empty_key():
    out = csv_parse(b"op,id,seq\nI,,1\nI,7,2\n")
    assert summary(out) == [("Rejection", 2), ("Change", 3)]
    assert "'id'" in out[0].reason and "null" in out[0].reason
    out = csv_parse(b"op,ident,seq\nI,1,1\n")
    assert summary(out) == [("Rejection", 1), ("Rejection", 2)]
    assert all("'id'" in r.reason and "no header row" in r.reason for r in out)


def test_csv_values_are_inferred_and_codes_keep_their_spelling():
    c = only(csv_parse(b"op,id,seq,code,qty,price,name,empty\nI,007,1,007,12,1.5,Ann,\n"))
    assert c.key == ("007",)
    assert c.row == {"id": "007", "seq": 1, "code": "007", "qty": 12, "price": 1.5, "name": "Ann", "empty": None}


def test_csv_and_json_spellings_of_a_key_are_one_key():
    csv_c = only(csv_parse(b"op,id,seq\nI,5,1\n"))
    json_c = only(parse("changeset", jsonl({"op": "I", "id": "5", "seq": 1}), options=OPTS))
    int_c = only(parse("changeset", jsonl({"op": "I", "id": 5.0, "seq": 1}), options=OPTS))
    recs = [to_record(c, batch_seq=1, batch_id="b", file_name="f", file_index=0, partition_by=[])
            for c in (csv_c, json_c, int_c)]
    assert len({r["_cdc_key"] for r in recs}) == 1


def test_to_record_partition_and_arrival():
    c = only(csv_parse(b"op,id,seq,region\nI,1,1,EU\n"))
    rec = to_record(c, batch_seq=4, batch_id="b4", file_name="part.csv", file_index=2, partition_by=["region"])
    assert rec["_cdc_partition"] == '["EU"]'
    assert rec["_cdc_line"] == 2 and rec["_cdc_batch_seq"] == 4 and rec["_cdc_file"] == "part.csv"
    assert rec["_cdc_order"].startswith(ordering.CHANGE_TIER + c.order + "|")
    assert decode_row(rec["_cdc_row"]) == c.row


# ---- no record is ever lost (rules.md#rule-7) ------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

GOOD = object()
garbage = st.binary(max_size=24).filter(lambda b: not set(b) & set(b'\n\r"'))
lines_strategy = st.lists(st.one_of(st.just(GOOD), garbage), min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(lines_strategy)
def test_json_lines_every_line_is_a_change_or_a_rejection(lines):
    raw = [json.dumps(event(uuid=f"u{i}")).encode() if x is GOOD else x for i, x in enumerate(lines)]
    out = parse("datastream-json", b"\n".join(raw))
    content = [raw[0].removeprefix(b"\xef\xbb\xbf"), *raw[1:]]  # a leading byte-order mark is not content
    expected = [i + 1 for i, b in enumerate(content) if b.strip()]
    if not expected:
        assert len(out) <= 1 and all(isinstance(r, Rejection) for r in out)  # an empty file
        return
    assert [r.line for r in out] == expected
    for r in out:
        assert isinstance(r, Change) == (lines[r.line - 1] is GOOD)


@settings(max_examples=120, deadline=None)
@given(lines_strategy)
def test_csv_every_row_is_a_change_or_a_rejection(lines):
    raw = [f"I,{i},{i}".encode() if x is GOOD else x for i, x in enumerate(lines)]
    out = csv_parse(b"op,id,seq\n" + b"\n".join(raw) + b"\n")
    expected = [i + 2 for i, b in enumerate(raw) if b]
    assert [r.line for r in out] == expected
    for r in out:
        if lines[r.line - 2] is GOOD:
            assert isinstance(r, Change) and r.key == (r.line - 2,)


# ---- base snapshots (rules.md#rule-3) --------------------------------------------

def test_base_snapshot_rows_are_upserts_ranked_below_every_change():
    from cdc_assets.core.formats import parse_snapshot

    out = list(parse_snapshot(["id"], "ORDERS.csv", b"id,v\n1,a\n,b\n2,c\n"))
    assert summary(out) == [("Change", 2), ("Rejection", 3), ("Change", 4)]
    assert "null" in out[1].reason
    base = out[2]
    assert base.op == UPSERT and base.row == {"id": 2, "v": "c"}
    earliest_change = change("bigquery-cdc", cdc(csn="0"))  # even the lowest sequence number, first batch
    assert record_order(base, batch=99, tier=ordering.BASE_TIER) < record_order(earliest_change, batch=1)


def test_base_snapshot_csv_without_a_header_row_loses_no_row():
    from cdc_assets.core.formats import parse_snapshot

    out = list(parse_snapshot(["id"], "ORDERS.csv", b"1,a\n2,b\n"))
    assert summary(out) == [("Rejection", 1), ("Rejection", 2)]
    assert out[0].raw == "1,a" and "no header row" in out[0].reason and "'id'" in out[0].reason


# ---- column names (rules.md#names) ------------------------------------------------------

def _cdc_lines(*rows: dict) -> bytes:
    return "".join(json.dumps({**r, "_CHANGE_TYPE": "UPSERT"}) + "\n" for r in rows).encode()


@pytest.mark.parametrize("row,reason", [
    ({"id": 1, "a b": 1}, "column 'a b': Delta Lake forbids ' ' in a column name; give it a storable name in the "
                          "table's `rename:` map in cdc.yaml, e.g. rename: {'a b': new_name}"),
    ({"id": 1, "_cdc_order": "9"}, "column '_cdc_order': names starting with '_cdc_' are the target's bookkeeping"),
    ({"id": 1, "v": 1, "V": 2}, "columns 'v' and 'V' are one column to Spark and Delta (case is not told apart)"),
    ({"id": 1, "\udc00": 1}, "a column name that is not valid Unicode (a lone surrogate); the writer must send"),
])
def test_a_record_with_a_name_no_target_can_hold_is_rejected_naming_the_column(row, reason):
    [item] = parse_file("bigquery-cdc", {}, ["id"], "a.jsonl", _cdc_lines(row))
    assert isinstance(item, Rejection) and item.line == 1 and item.reason.startswith(reason), item


def test_rename_gives_columns_their_target_names_before_keys_and_declared_types():
    rename = {"user id": "user_id", "unit price": "unit_price", "_cdc_key": "cdc_key"}
    [c] = parse_file("bigquery-cdc", {}, ["user_id"], "a.jsonl",
                     _cdc_lines({"user id": "007", "unit price": 1.5, "_cdc_key": "k"}),
                     columns={"unit_price": "decimal(4,2)", "user_id": "string"}, rename=rename)
    assert c.row == {"user_id": "007", "unit_price": Decimal("1.50"), "cdc_key": "k"} and c.key == ("007",)
    [r] = parse_file("bigquery-cdc", {}, ["user_id"], "a.jsonl", _cdc_lines({"user id": 1, "user_id": 2}),
                     rename=rename)
    assert r.reason == "columns 'user id' and 'user_id' are both named 'user_id' by the table's `rename:` map"


def test_rename_of_a_csv_header_and_of_a_parquet_file_typed_column():
    options = {"op_column": "op", "inserts": ["I"], "updates": [], "deletes": ["D"], "sequence_by": []}
    [c] = parse_file("changeset", options, ["user_id"], "a.csv", b"op,user id,v\nI,007,x\n", rename={"user id": "user_id"},
                     columns={"user_id": "string"})
    assert c.row == {"user_id": "007", "v": "x"}
    buf = io.BytesIO()
    pq.write_table(pa.table({"op": ["I"], "user id": pa.array([5], pa.int32()), "a(b)": ["y"]}), buf)
    [c] = parse_file("changeset", options, ["user_id"], "a.parquet", buf.getvalue(),
                     rename={"user id": "user_id", "a(b)": "a_b"})
    assert c.row == {"user_id": 5, "a_b": "y"}
    assert (c.types["user_id"], c.types["a_b"]) == ("int", "string") and "user id" not in c.types


def test_an_export_row_that_cannot_be_taken_keeps_its_key_when_its_key_can_be_read():
    from cdc_assets.core.formats import parse_snapshot

    data = b'{"id": "7", "amount": "1.50"}\n{"id": 8, "amount": "lots"}\n{"amount": "2.00"}\n'
    items = list(parse_snapshot(["id"], "export.jsonl", data, {"id": "long", "amount": "decimal(12,2)"}))
    assert [type(i).__name__ for i in items] == ["Change", "Rejection", "Rejection"]
    assert items[0].key == (7,)
    assert (items[1].line, items[1].key) == (2, (8,))  # its key, typed as a good row's is
    assert (items[2].line, items[2].key) == (3, None)  # no key to keep


# ---- inferred sequence columns: numbers and ISO 8601 times, nothing else ----------------------

def test_changeset_times_in_every_iso_spelling_compare_as_time():
    out = changeset_csv(
        "FLAG,ID,CDC_TIMESTAMP\n"
        "U,1,2018-01-02 10:00:00\n"
        "U,1,2018-01-01T09:00:00Z\n"
        "U,1,2018-01-02T09:00:00-02:00\n"     # 11:00 UTC: the newest
        "U,1,2018-01-02\n"                    # midnight
        "U,1,2018-01-02T10:00:00.000001\n"
    )
    assert [c.line for c in sorted(out, key=lambda c: c.order)] == [3, 5, 2, 6, 4]


@pytest.mark.parametrize("spelling", ["01/01/2018 09:00", "2018-1-1 9:00:00", "Jan 1 2018", "yesterday", "",
                                      "2018-01-01 25:00:00", "NaN"])
def test_changeset_a_sequence_value_that_is_no_number_and_no_time_is_quarantined_naming_its_column(spelling):
    """Text that is neither a number nor an ISO 8601 time never outranks the times around it: it
    is quarantined, the column named, its value kept only in the record's raw text."""
    data = jsonl({"FLAG": "I", "ID": 1, "V": "a", "CDC_TIMESTAMP": spelling},
                 {"FLAG": "U", "ID": 1, "V": "b", "CDC_TIMESTAMP": "2018-01-02 10:00:00"})
    out = parse("changeset", data, keys=("ID",), options=SEED_002)
    assert summary(out) == [("Rejection", 1), ("Change", 2)]
    reason = out[0].reason
    assert "CDC_TIMESTAMP" in reason and "columns:" in reason, reason
    assert spelling == "" or spelling not in reason
    assert spelling in out[0].raw


def test_changeset_a_sequence_column_declared_string_compares_as_text():
    """The way out the reason names: a column declared `string` orders by its text (UTF-8 bytes)."""
    opts = dict(SEED_002, sequence_by=["SEQ"])
    out = list(parse_file("changeset", opts, ["ID"], "c.csv", b"FLAG,ID,SEQ\nU,1,b\nU,1,10\nU,1,9\nU,1,a\n",
                          columns={"SEQ": "string"}))
    assert summary(out) == [("Change", 2), ("Change", 3), ("Change", 4), ("Change", 5)]
    assert [c.line for c in sorted(out, key=lambda c: c.order)] == [3, 4, 5, 2]  # "10" < "9" < "a" < "b"


def test_changeset_a_sequence_column_declared_timestamp_quarantines_what_does_not_fit():
    opts = dict(SEED_002, sequence_by=["SEQ"])
    out = list(parse_file("changeset", opts, ["ID"], "c.csv",
                          b"FLAG,ID,SEQ\nU,1,2018-01-02 10:00:00\nU,1,01/01/2018 09:00\nU,1,2018-01-01T09:00:00Z\n",
                          columns={"SEQ": "timestamp"}))
    assert summary(out) == [("Change", 2), ("Rejection", 3), ("Change", 4)]
    assert "SEQ" in out[1].reason and "01/01/2018" not in out[1].reason
    assert out[0].order > out[2].order
