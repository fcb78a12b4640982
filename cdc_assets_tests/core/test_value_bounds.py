"""The edges of what a column type holds, tried on both sides of each edge, in every reader that
types values: the largest value a type holds is stored exactly, the next one goes to quarantine
naming its column (or takes the next type the docs promise), never a value rounded or wrapped.

The edges: 38 digits for a decimal (10**38 - 1 is the largest integer any number type holds), the
signed 32- and 64-bit ranges of int and long, years 1 to 9999 of a timestamp, and Unicode text (a
lone surrogate is none)."""
from __future__ import annotations

import base64
import datetime as dt
import io
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_assets.core import ordering
from cdc_assets.core.changes import Change, Rejection
from cdc_assets.core.formats import parse_file
from cdc_assets.core.ordering import OrderingError
from cdc_assets.core.postgres import PgColumn, column_type
from cdc_assets.core.target import arrow_type
from cdc_assets.core.typed_changes import read_typed_change_file
from cdc_assets.core.typed_export import declared_column
from cdc_assets.core.values import Misfit, convert, parse_type, value_type, widen
from cdc_assets.engine import delta
from cdc_assets.engine.ingest import PARSED_FIELDS

OPTIONS = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
LARGEST = 10 ** 38 - 1  # 38 nines: the largest integer of decimal(38,0)
PAST = 10 ** 38  # 39 digits: no number type holds it


def read_json(*rows: dict, fmt: str = "changeset", columns=None) -> list[Change | Rejection]:
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    return list(parse_file(fmt, OPTIONS, ["id"], "f.jsonl", data, columns))


def datastream(line: int, **payload) -> dict:
    return {"uuid": f"u{line}", "read_method": "mysql-cdc-binlog", "source_timestamp": 1700000000000 + line,
            "source_metadata": {"change_type": "INSERT", "log_file": "mysql-bin.000001", "log_position": line},
            "payload": payload}


def debezium(line: int, **after) -> dict:
    return {"op": "c", "before": None, "after": after,
            "source": {"connector": "postgresql", "ts_ms": 1700000000000 + line, "lsn": line}}


RECORDS = {
    "changeset": lambda line, **row: {"op": "I", "seq": line, **row},
    "datastream-json": datastream,
    "debezium-json": debezium,
}


def only_changes(results) -> list[Change]:
    assert all(isinstance(r, Change) for r in results), [r.reason for r in results if isinstance(r, Rejection)]
    return results


# ---- 38 digits, row by row ------------------------------------------------------------

@pytest.mark.parametrize("fmt", sorted(RECORDS))
def test_an_integer_of_38_digits_is_kept_exactly_and_one_of_39_goes_to_quarantine(fmt):
    make = RECORDS[fmt]
    results = read_json(make(1, id=1, v=LARGEST), make(2, id=2, v=-LARGEST), make(3, id=3, v=PAST),
                        make(4, id=4, v=-PAST), make(5, id=PAST, v=1), fmt=fmt)
    kept, refused = results[:2], results[2:]
    assert [c.row["v"] for c in only_changes(kept)] == [LARGEST, -LARGEST]
    assert [value_type(c.row["v"]) for c in kept] == ["decimal(38,0)"] * 2
    assert [type(r) for r in refused] == [Rejection] * 3, refused
    assert [r.line for r in refused] == [3, 4, 5]
    for r, column in zip(refused, ["v", "v", "id"]):
        assert r.reason == (f"column {column!r} holds an integer of 39 digits, more than any number type "
                            f"holds (38 digits)")
        assert str(PAST) not in r.reason  # the reason names the column, never the value


def test_a_declared_decimal_38_column_takes_38_digits_and_quarantines_39_row_by_row():
    rows = [{"op": "I", "seq": i, "id": i, "v": v} for i, v in
            enumerate([str(LARGEST), str(-LARGEST), str(PAST), str(-PAST), "9" * 36 + ".99", "1" + "0" * 35 + ".5"],
                      start=1)]
    results = read_json(*rows, columns={"v": "decimal(38,0)"}) + read_json(*rows[4:], columns={"v": "decimal(38,2)"})
    assert [type(r).__name__ for r in results] == ["Change", "Change", "Rejection", "Rejection", "Rejection",
                                                   "Rejection", "Change", "Change"]
    assert [results[i].row["v"] for i in (0, 1, 6, 7)] == [Decimal(LARGEST), Decimal(-LARGEST),
                                                          Decimal("9" * 36 + ".99"), Decimal("1" + "0" * 35 + ".50")]
    assert all("'v'" in r.reason for r in results if isinstance(r, Rejection))


# ---- 38 digits, column by column ------------------------------------------------------

def test_a_declared_decimal_38_text_column_takes_38_digits_and_quarantines_39_column_by_column():
    texts = [str(LARGEST), str(-LARGEST), str(PAST), str(-PAST), "1", None]
    reasons: dict[int, str] = {}
    got = declared_column(pa.array(texts, pa.string()), "v", "decimal(38,0)", arrow_type, reasons)
    assert got.to_pylist() == [Decimal(LARGEST), Decimal(-LARGEST), None, None, Decimal(1), None]
    assert sorted(reasons) == [2, 3]
    assert all(r == "column 'v' is decimal(38,0) at the source; this row's value does not fit it" for r in reasons.values())
    reasons = {}
    got = declared_column(pa.array(["9" * 36 + ".99", "1" + "0" * 36, "0.01"], pa.string()), "v", "decimal(38,2)",
                          arrow_type, reasons)
    assert got.to_pylist()[0::2] == [Decimal("9" * 36 + ".99"), Decimal("0.01")] and sorted(reasons) == [1]


def parquet_change_set(values: list[int], precision: int) -> bytes:
    n = len(values)
    table = pa.table({"id": pa.array(range(n), pa.int64()), "seq": pa.array(range(n), pa.int64()),
                      "v": pa.array([Decimal(v) for v in values], pa.decimal256(precision, 0)), "op": ["I"] * n})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def by_column(data: bytes):
    return read_typed_change_file("changeset", OPTIONS, ["id"], "f.parquet", data, None, [],
                                  schema=delta.arrow_schema(PARSED_FIELDS), batch_seq=1, batch_id="b", file_index=0)


def test_a_parquet_decimal_of_38_digits_is_read_column_by_column_and_one_of_39_is_text():
    kept = by_column(parquet_change_set([LARGEST, -LARGEST], 38))
    assert kept is not None
    assert [r["v"] for r in kept.values.to_pylist()] == [Decimal(LARGEST), Decimal(-LARGEST)]
    assert json.loads(kept.records.column("_cdc_types")[0].as_py())["v"] == "decimal(38,0)"
    wide = parquet_change_set([LARGEST, PAST, -PAST], 39)
    assert by_column(wide) is None  # no column type holds decimal(39,0): the record reader reads it
    changes = only_changes(list(parse_file("changeset", OPTIONS, ["id"], "f.parquet", wide)))
    assert [c.types["v"] for c in changes] == ["string"] * 3  # the docs: a decimal over 38 digits is text
    assert [Decimal(c.row["v"]) for c in changes] == [Decimal(LARGEST), Decimal(PAST), Decimal(-PAST)]


def avro_events(values: list[int], precision: int) -> bytes:
    import fastavro

    schema = {"type": "record", "name": "event", "fields": [
        {"name": "uuid", "type": "string"}, {"name": "read_method", "type": "string"},
        {"name": "source_timestamp", "type": "long"},
        {"name": "source_metadata", "type": {"type": "record", "name": "meta", "fields": [
            {"name": "change_type", "type": "string"}, {"name": "log_file", "type": "string"},
            {"name": "log_position", "type": "long"}]}},
        {"name": "payload", "type": {"type": "record", "name": "row", "fields": [
            {"name": "id", "type": "long"},
            {"name": "v", "type": {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": 0}}]}}]}
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), [datastream(i, id=i, v=Decimal(v)) for i, v in enumerate(values, 1)])
    return out.getvalue()


def test_an_avro_decimal_of_38_digits_keeps_its_type_and_one_of_39_is_text():
    read = [only_changes(list(parse_file("datastream-avro", {}, ["id"], "f.avro", avro_events(values, p))))
            for values, p in (([LARGEST, -LARGEST], 38), ([LARGEST, PAST, -PAST], 39))]
    assert [[c.types["v"] for c in changes] for changes in read] == [["decimal(38,0)"] * 2, ["string"] * 3]
    assert [[Decimal(c.row["v"]) for c in changes] for changes in read] == [[LARGEST, -LARGEST], [LARGEST, PAST, -PAST]]


# ---- 38 digits: the types a user names --------------------------------------------------

def test_decimal_types_are_known_up_to_38_digits():
    assert parse_type("decimal(38,0)") == "decimal(38,0)" and parse_type("decimal(1,0)") == "decimal(1,0)"
    assert parse_type("decimal(38,38)") == "decimal(38,38)"
    for past in ("decimal(39,0)", "decimal(0,0)", "decimal(38,39)"):
        with pytest.raises(ValueError, match="1 <= p <= 38 and s <= p"):
            parse_type(past)


def test_a_postgresql_numeric_of_38_digits_is_a_decimal_and_of_39_text():
    assert column_type(PgColumn("c", "numeric(38,2)", "N", "numeric")) == "decimal(38,2)"
    assert column_type(PgColumn("c", "numeric(39,2)", "N", "numeric")) == "string"


def test_a_decimal_widens_up_to_38_digits_and_no_further():
    assert widen("decimal(38,2)", "decimal(10,2)") == "decimal(38,2)"
    assert widen("decimal(20,0)", "decimal(20,18)") == "decimal(38,18)"
    assert widen("decimal(20,0)", "decimal(20,19)") is None  # 20 + 19 digits
    assert widen("long", "decimal(21,2)") == "decimal(21,2)" and widen("long", "decimal(21,20)") is None


# ---- int and long ranges ---------------------------------------------------------------------

@pytest.mark.parametrize("n, inferred", [(2 ** 63 - 1, "long"), (-2 ** 63, "long"), (2 ** 63, "decimal(19,0)"),
                                         (-2 ** 63 - 1, "decimal(19,0)")])
def test_an_inferred_integer_is_a_long_inside_64_bits_and_a_decimal_past_them(n, inferred):
    [c] = only_changes(read_json({"op": "I", "seq": 1, "id": 1, "v": n}))
    assert c.row["v"] == n and value_type(c.row["v"]) == inferred


@pytest.mark.parametrize("type_, bits", [("int", 31), ("long", 63)])
def test_a_declared_integer_column_takes_its_range_and_quarantines_past_it(type_, bits):
    edges = [2 ** bits - 1, -2 ** bits, 2 ** bits, -2 ** bits - 1]
    results = read_json(*({"op": "I", "seq": i, "id": i, "v": v} for i, v in enumerate(edges, start=1)),
                        columns={"v": type_})
    assert [type(r).__name__ for r in results] == ["Change", "Change", "Rejection", "Rejection"]
    assert [c.row["v"] for c in results[:2]] == edges[:2]
    for texts in ([str(v) for v in edges], [str(v) for v in edges[:2]]):
        reasons: dict[int, str] = {}
        got = declared_column(pa.array(texts, pa.string()), "v", type_, arrow_type, reasons)
        assert got.to_pylist() == edges[:2] + [None] * (len(texts) - 2) and sorted(reasons) == list(range(2, len(texts)))


# ---- years 1 to 9999 --------------------------------------------------------------------------

@pytest.mark.parametrize("text, fits", [
    ("0001-01-01T00:00:00Z", True), ("9999-12-31T23:59:59.999999Z", True),
    ("0001-01-01T00:30:00+01:00", False), ("9999-12-31T23:30:00-01:00", False),  # outside in UTC
])
def test_a_timestamp_holds_years_1_to_9999_in_utc(text, fits):
    if fits:
        assert convert(text, "timestamp").year in (1, 9999)
        assert ordering.parse_timestamp(text) in (ordering.parse_timestamp("0001-01-01T00:00:00"),
                                                  ordering.parse_timestamp("9999-12-31T23:59:59.999999"))
    else:
        with pytest.raises(Misfit):
            convert(text, "timestamp")
        with pytest.raises(OrderingError, match="outside years 1 to 9999 in UTC"):
            ordering.parse_timestamp(text)


def test_source_timestamps_at_years_1_and_9999_order_changes_and_one_outside_goes_to_quarantine():
    events = [datastream(i, id=1, v=i) for i in (1, 2, 3)]
    for e, ts in zip(events, ["9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z", "9999-12-31T23:30:00-01:00"]):
        e["source_timestamp"] = ts
    results = read_json(*events, fmt="datastream-json")
    assert [type(r).__name__ for r in results] == ["Change", "Change", "Rejection"]
    assert results[1].order < results[0].order and "outside years 1 to 9999" in results[2].reason
    wall = [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]
    assert [convert(t.isoformat(), "timestamp_ntz") for t in wall] == wall


# ---- ordering numbers' exponent range ----------------------------------------------------------

def test_a_sequence_number_orders_up_to_its_exponent_range_and_is_refused_past_it():
    edges = [Decimal("1e-5000"), Decimal("9e4999"), Decimal("-9e4999"), Decimal("-1e-5000")]
    keys = [ordering.typed_value(d) for d in edges]
    assert sorted(keys) == [keys[2], keys[3], keys[0], keys[1]]
    for past in (Decimal("1e5000"), Decimal("1e-5001"), Decimal("-1e5000"), Decimal("-1e-5001")):
        with pytest.raises(OrderingError, match="exponent is beyond"):
            ordering.typed_value(past)


# ---- Unicode text --------------------------------------------------------------------------------

@pytest.mark.parametrize("char, valid", [("\ud7ff", True), ("\ud800", False), ("\udfff", False), ("\ue000", True)])
def test_text_next_to_the_surrogates_is_kept_and_a_lone_surrogate_goes_to_quarantine(char, valid):
    data = b'{"op": "I", "seq": 1, "id": 1, "v": "a' + json.dumps(char).encode()[1:-1] + b'"}\n'
    [r] = parse_file("changeset", OPTIONS, ["id"], "f.jsonl", data)
    if valid:
        assert isinstance(r, Change) and r.row["v"] == "a" + char
    else:
        assert isinstance(r, Rejection) and r.reason == "column 'v' holds text that is not valid Unicode (a lone surrogate)"


# ---- a Kafka Connect decimal without a precision of 38 or less ------------------------------

def connect_decimal_event(line: int, value: int, precision: int | None) -> dict:
    params = {"scale": "0", **({"connect.decimal.precision": str(precision)} if precision else {})}
    raw = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
    return {"schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
                {"field": "id", "type": "int64"},
                {"field": "v", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": params}]}]},
            "payload": debezium(line, id=line, v=base64.b64encode(raw).decode())}


@pytest.mark.parametrize("precision", [None, 40])
def test_a_connect_decimal_typed_by_its_value_takes_38_digits_and_quarantines_39(precision):
    results = read_json(*(connect_decimal_event(i, v, precision) for i, v in
                          enumerate([LARGEST, -LARGEST, PAST, -PAST, 10 ** 39], start=1)), fmt="debezium-json")
    assert [type(r).__name__ for r in results] == ["Change", "Change", "Rejection", "Rejection", "Rejection"]
    assert [c.row["v"] for c in results[:2]] == [LARGEST, -LARGEST]
    assert [value_type(c.row["v"]) for c in results[:2]] == ["decimal(38,0)"] * 2
    for r, digits in zip(results[2:], (39, 39, 40)):
        assert r.reason.startswith("column 'v': ") and str(PAST) not in r.reason
        assert r.reason.endswith(f"(a number of {digits} digits, more than any number type holds (38 digits))")
