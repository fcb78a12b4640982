"""Bad records whose offending value carries a marker: what a column-shifted or corrupted row puts
in a field. A quarantine reason names columns and kinds, never values, so the marker must never
appear in a reason, a log line or a Dagster event; only the quarantine's raw text holds it."""
from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass

from .records import bq_append, bq_cdc, mysql, oracle, postgres

MARKER = "CARD4111111111111111"
DIGITS = "4111" * 8  # a card number where epoch milliseconds belong
BASE64 = base64.b64encode(MARKER.encode()).decode()[:-1]  # a marker in bytes, its padding cut

CHANGESET = {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["SEQ"]}
TABLES = {
    "DS": {"keys": ["id"], "format": "datastream-json"},
    "DSTYPED": {"keys": ["id"], "format": "datastream-json", "columns": {"amount": "long", "ts": "timestamp"}},
    "BQCDC": {"keys": ["id"], "format": "bigquery-cdc"},
    "BQAPPEND": {"keys": ["id"], "format": "bigquery-append"},
    "CHANGES": {"keys": ["id"], "format": "changeset", "options": CHANGESET},
    "DBZ": {"keys": ["id"], "format": "debezium-json"},
}


@dataclass
class Marked:
    name: str
    table: str
    file: str
    lines: list[str]  # the bad records, each line carrying the marker
    value: str = MARKER  # the text of the offending value, kept in the raw text, never in a reason


def _ds(mutate: Callable[[dict], None], base: Callable[[], dict] | None = None) -> str:
    e = base() if base else mysql("INSERT", {"id": 9, "v": "x"}, 1, 9)
    mutate(e)
    return json.dumps(e)


def _set(path: str, value: object) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        *head, last = path.split(".")
        for p in head:
            d = d[p]
        d[last] = value
    return mutate


def _dbz(**source) -> str:
    e = {"before": None, "after": {"id": 9, "v": "x"}, "op": "c",
         "source": {"connector": "postgresql", "ts_ms": 1709287200000, "lsn": 24023128, **source},
         "ts_ms": 1709287200250}
    return json.dumps(e)


def catalogue() -> list[Marked]:
    m = MARKER
    ds = [
        ("a Datastream change type", _ds(_set("source_metadata.change_type", m))),
        ("a Datastream source_timestamp", _ds(_set("source_timestamp", m))),
        ("a Datastream source_timestamp of digits", _ds(_set("source_timestamp", DIGITS))),
        ("a MySQL log_file", _ds(_set("source_metadata.log_file", m))),
        ("a MySQL log_position", _ds(_set("source_metadata.log_position", m))),
        ("a PostgreSQL lsn", _ds(lambda e: None, lambda: postgres("INSERT", {"id": 9}, m))),
        ("an Oracle rs_id", _ds(lambda e: None, lambda: oracle("INSERT", {"id": 9}, 5, rs_id=m))),
        ("a read_method without a position",
         _ds(lambda e: (e["source_metadata"].pop("log_file"), e["source_metadata"].pop("log_position"),
                        e.update(read_method=m)))),
        ("a value that cannot widen its column", _ds(_set("payload.amount", {"nested": m}))),
    ]
    typed = [
        ("a value that does not fit a declared number", _ds(_set("payload.amount", m))),
        ("a value that does not fit a declared timestamp", _ds(_set("payload.ts", m))),
    ]
    bq_cdc_rows = [
        ("a _CHANGE_TYPE", json.dumps(bq_cdc(m, {"id": 9}, "1"))),
        ("a _CHANGE_SEQUENCE_NUMBER", json.dumps(bq_cdc("UPSERT", {"id": 9}, m))),
        ("a _CHANGE_SEQUENCE_NUMBER of many sections", json.dumps(bq_cdc("UPSERT", {"id": 9}, "/".join([m] * 5)))),
    ]
    bq_append_rows = [
        ("an append row's change type", json.dumps(bq_append(m, {"id": 9}, 1))),
        ("an append row's change_sequence_number", json.dumps(bq_append("INSERT", {"id": 9}, m))),
    ]
    dbz = [
        ("a Debezium op", json.dumps({**json.loads(_dbz()), "op": m})),
        ("a Debezium connector", _dbz(connector=m)),
        ("a Debezium ts_ms", _dbz(ts_ms=m)),
        ("a Debezium lsn", _dbz(lsn=m)),
        ("a MySQL binlog file", _dbz(connector="mysql", file=m, pos=4, row=0)),
        ("a SQL Server commit_lsn", _dbz(connector="sqlserver", commit_lsn=m, change_lsn="0:0:0")),
    ]
    decimal_schema = {"type": "struct", "fields": [
        {"field": "after", "type": "struct", "fields": [
            {"field": "id", "type": "int64"},
            {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2", "connect.decimal.precision": "10"}}]}]}
    dbz.append(("a Kafka Connect decimal that is not base64", json.dumps(
        {"schema": decimal_schema, "payload": {**json.loads(_dbz()), "after": {"id": 9, "price": m + "!"}}})))
    dbz.append(("a Kafka Connect decimal of bad base64 padding", json.dumps(
        {"schema": decimal_schema, "payload": {**json.loads(_dbz()), "after": {"id": 9, "price": BASE64}}})))
    out = [Marked(n, "DS", "bad.jsonl", [line], DIGITS if DIGITS in line else MARKER) for n, line in ds]
    out += [Marked(n, "DSTYPED", "bad.jsonl", [line]) for n, line in typed]
    out += [Marked(n, "BQCDC", "bad.jsonl", [line]) for n, line in bq_cdc_rows]
    out += [Marked(n, "BQAPPEND", "bad.jsonl", [line]) for n, line in bq_append_rows]
    out += [Marked(n, "DBZ", "bad.jsonl", [line], BASE64 if BASE64 in line else MARKER) for n, line in dbz]
    out += [
        Marked("a column-shifted change set row (the flag column holds a card number)", "CHANGES", "bad.csv",
               ["FLAG,id,v,SEQ", f"{m},I,9,1"]),
        Marked("a change set sequence value", "CHANGES", "bad.csv", ["FLAG,id,v,SEQ", f"I,9,x,{m}"]),
        Marked("a change set sequence value in JSON", "CHANGES", "bad.jsonl",
               [json.dumps({"FLAG": "I", "id": 9, "v": "x", "SEQ": m})]),
    ]
    return copy.deepcopy(out)
