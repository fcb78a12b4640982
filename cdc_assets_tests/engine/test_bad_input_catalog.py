"""Bad input, catalogued (rules.md#rule-7): every kind users hit, end to end through one real run.

Each kind is landed in its own folder of one batch, between valid records of the same
file (or beside a valid file when the whole file is unreadable). One `cdc-assets run`
takes them all (one table per format, so the run stays cheap), then per kind:

- the bad records are in the table's `quarantine` with file, line, reason and raw text;
- the valid records around them are in `target`;
- the run's log names the table, the file and the line;
- the table's `batch_accounted` check and `cdc-assets status` count them;
- the CLEAN table beside them is untouched.

Some inputs look odd but are valid (a byte-order mark, CRLF, blank lines): TOLERATED
lists them, and nothing of theirs may be quarantined.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import sys
from dataclasses import dataclass, field

import pytest

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.run_loop import run_config
from cdc_assets.engine.status import table_status
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import land
from cdc_assets_tests.support.records import bq_append, bq_cdc, ds_event, mysql, oracle, postgres
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.warehouse import delta_rows, target_rows

pytestmark = MARKS

CHANGESET = {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["SEQ"]}
TABLES = [
    {"name": "DS", "keys": ["id"], "format": "datastream-json"},
    {"name": "BQCDC", "keys": ["id"], "format": "bigquery-cdc"},
    {"name": "BQAPPEND", "keys": ["id"], "format": "bigquery-append"},
    {"name": "CHANGES", "keys": ["id"], "format": "changeset", "options": CHANGESET},
    {"name": "DSTYPED", "keys": ["id"], "format": "datastream-json", "columns": {"ts": "timestamp"}},
    {"name": "CLEAN", "keys": ["id"], "format": "bigquery-cdc"},
]
BIG = 50 * 1024 * 1024


@dataclass
class Kind:
    name: str
    table: str
    files: dict  # file name -> bytes, or ("link", target)
    bad: list  # [(file, line, reason substring)] or [(file, line, reason substring, exact raw text)]
    good: set = field(default_factory=set)  # ids that must reach the target
    raw: str | None = None  # a piece of the bad record's raw text kept in quarantine


# ---- valid records, one per id, in each table's format ----------------------------

def ds(i, **payload):
    return json.dumps(mysql("INSERT", {"id": i, "v": "ok", **payload}, 1, i))


def cdc(i):
    return json.dumps(bq_cdc("UPSERT", {"id": i, "v": "ok"}, f"{i:x}"))


def append(i):
    return json.dumps(bq_append("INSERT", {"id": i, "v": "ok"}, i))


CDC_CSV_HEADER = "id,v,_CHANGE_TYPE,_CHANGE_SEQUENCE_NUMBER"
CHANGESET_HEADER = "FLAG,id,v,SEQ"


def cdc_csv(i):
    return f"{i},ok,UPSERT,{i:x}"


def changeset_csv(i):
    return f"I,{i},ok,{i}"


def lines(*items) -> bytes:
    return b"".join((x if isinstance(x, bytes) else x.encode("utf-8")) + b"\n" for x in items)


def event(i, mutate):
    e = mysql("INSERT", {"id": i, "v": "bad"}, 1, i)
    mutate(e)
    return json.dumps(e)


def _without(d, k):
    d.pop(k)


GARBAGE = bytes(b for b in random.Random(7).randbytes(4096) if b != 0x0A)


def catalog() -> list[Kind]:
    kinds: list[Kind] = []

    def between(name, table, good_line, bad, reason, raw=None, ext="jsonl", header=None):
        """good, bad, good in one file: the bad record is line 2 (3 with a CSV header)."""
        i = 1000 * (len(kinds) + 1)
        head = [header] if header else []
        data = lines(*head, good_line(i + 1), bad(i + 3) if callable(bad) else bad, good_line(i + 2))
        kinds.append(Kind(name, table, {f"part.{ext}": data}, [(f"part.{ext}", len(head) + 2, reason)],
                          {i + 1, i + 2}, raw))

    def whole_file(name, table, good_line, file_name, data, bad, ext="jsonl", header=None):
        """An unreadable file beside a valid one in the same batch."""
        i = 1000 * (len(kinds) + 1)
        head = [header] if header else []
        kinds.append(Kind(name, table, {f"good.{ext}": lines(*head, good_line(i + 1), good_line(i + 2)),
                                        file_name: data}, bad, {i + 1, i + 2}))

    # Datastream JSON: lines that are not events
    between("truncated JSON", "DS", ds, '{"uuid": "u-1", "payload": {"id": 5', "not valid JSON", '{"uuid": "u-1"')
    between("a line that is not JSON", "DS", ds, "ORA-01555: snapshot too old", "not valid JSON", "ORA-01555")
    between("a JSON array, not an object", "DS", ds, "[1, 2, 3]", "where an object was expected", "[1, 2, 3]")
    between("invalid UTF-8", "DS", ds, b'{"uuid": "u-2", "payload": {"id": 9, "v": "\xff\xfe"}}',
            "not valid UTF-8", "\\xff")
    between("binary garbage", "DS", ds, GARBAGE, "not valid UTF-8")
    between("a line of 50 MB", "DS", ds, b'{"payload": {"id": 1, "v": "' + b"x" * BIG + b'"}}',
            "longer than the limit", '{"payload": {"id": 1, "v": "xxx')
    # Datastream JSON: events missing what a change needs
    between("a missing payload", "DS", ds, lambda i: event(i, lambda e: _without(e, "payload")), "no 'payload'")
    between("a payload that is not an object", "DS", ds,
            lambda i: event(i, lambda e: e.update(payload="x")), "no 'payload'")
    between("a null key column", "DS", ds, lambda i: event(i, lambda e: e["payload"].update(id=None)),
            "key column 'id' is null")
    between("a missing key column", "DS", ds, lambda i: event(i, lambda e: e["payload"].pop("id")),
            "key column 'id' is missing")
    between("an unknown change type", "DS", ds,
            lambda i: event(i, lambda e: e["source_metadata"].update(change_type="MERGE")),
            "unknown change type in 'source_metadata.change_type'")
    between("a missing change type", "DS", ds, lambda i: event(i, lambda e: e["source_metadata"].pop("change_type")),
            "change type 'source_metadata.change_type' is missing")
    between("missing source_metadata", "DS", ds, lambda i: event(i, lambda e: _without(e, "source_metadata")),
            "no 'source_metadata'")
    between("a timestamp that does not parse", "DS", ds,
            lambda i: event(i, lambda e: e.update(source_timestamp="yesterday")), "does not parse")
    between("a NaN timestamp", "DS", ds, lambda i: event(i, lambda e: e.update(source_timestamp=float("nan"))),
            "timestamp")
    between("a missing source_timestamp", "DS", ds, lambda i: event(i, lambda e: _without(e, "source_timestamp")),
            "no 'source_timestamp'")
    between("a missing binlog position", "DS", ds,
            lambda i: event(i, lambda e: e["source_metadata"].pop("log_position")), "'log_position' is missing")
    between("a binlog position that is not an integer", "DS", ds,
            lambda i: event(i, lambda e: e["source_metadata"].update(log_position="12a")), "is not an integer")
    between("a malformed PostgreSQL LSN", "DS", ds, json.dumps(postgres("INSERT", {"id": 1}, "zz/1")),
            "source position 'lsn': not a hexadecimal number")
    between("a malformed Oracle rs_id", "DS", ds, json.dumps(oracle("INSERT", {"id": 1}, 5, rs_id="nothex")),
            "'rs_id'")
    between("an event without a source position", "DS", ds,
            json.dumps(ds_event("INSERT", {"id": 1}, read_method="db2-cdc")),
            "no source position in source_metadata")
    # Datastream JSON: a column's type changes in a way that cannot widen
    between("text in a number column", "DS", lambda i: ds(i, amount=5), ds(1, amount="n/a"),
            "column 'amount' holds integer values; this change has text there", '"amount": "n/a"')
    between("a number in a boolean column", "DS", lambda i: ds(i, paid=True), ds(2, paid=1),
            "column 'paid' holds boolean values; this change has integer there")
    between("a nested object in a decimal column", "DS", lambda i: ds(i, price=2.5), ds(3, price={"units": 2}),
            "column 'price' holds decimal values; this change has text there")
    # Datastream JSON: values no column can store
    between("a lone surrogate in a JSON string", "DS", ds, json.dumps(mysql("INSERT", {"id": 4, "v": "\ud800"}, 1, 4)),
            "column 'v' holds text that is not valid Unicode", "\\ud800")
    between("a lone surrogate in a column name", "DS", ds, json.dumps(mysql("INSERT", {"id": 4, "\udc00": 1}, 1, 4)),
            "a column name that is not valid Unicode")
    between("an integer too large for any number type", "DS", ds, ds(6, huge=10 ** 40),
            "column 'huge' holds an integer of 41 digits")
    between("a source_timestamp before year 1 in UTC", "DS", ds,
            lambda i: event(i, lambda e: e.update(source_timestamp="0001-01-01T00:00:00+05:00")),
            "outside years 1 to 9999 in UTC")
    between("a source_timestamp past year 9999 in UTC", "DS", ds,
            lambda i: event(i, lambda e: e.update(source_timestamp="9999-12-31T23:30:00-05:00")),
            "outside years 1 to 9999 in UTC")
    between("a timestamp past year 9999 in UTC", "DSTYPED", lambda i: ds(i, ts="2024-01-01T00:00:00Z"),
            ds(7, ts="9999-12-31T23:30:00-05:00"), "column 'ts' is declared timestamp")
    between("a timestamp before year 1 in UTC", "DSTYPED", lambda i: ds(i, ts="2024-01-01T00:00:00Z"),
            ds(8, ts="0001-01-01T00:00:00+05:00"), "column 'ts' is declared timestamp")
    # Datastream JSON: column names no target can hold (rules.md#names)
    between("a source column named _cdc_key", "DS", ds, lambda i: event(i, lambda e: e["payload"].update(_cdc_key="k")),
            "column '_cdc_key': names starting with '_cdc_' are the target's bookkeeping columns")
    between("a source column named _CDC_ORDER", "DS", ds,
            lambda i: event(i, lambda e: e["payload"].update(_CDC_ORDER="9")), "column '_CDC_ORDER': names starting")
    between("columns v and V in one record", "DS", ds, lambda i: event(i, lambda e: e["payload"].update(V="x")),
            "columns 'v' and 'V' are one column to Spark and Delta")
    between("a column V beside the table's column v", "DS", ds,
            lambda i: event(i, lambda e: e["payload"].update(V=e["payload"].pop("v"))),
            "column 'V' and the table's column 'v' are one column to Spark and Delta")
    between("a column name with a space", "DS", ds, lambda i: event(i, lambda e: e["payload"].update({"unit price": 1})),
            "column 'unit price': Delta Lake forbids ' ' in a column name; give it a storable name in the table's "
            "`rename:` map")
    between("a column name with '=' and a tab", "DS", ds, lambda i: event(i, lambda e: e["payload"].update({"a=\tb": 1})),
            "Delta Lake forbids '\\t', '='")
    i = 1000 * (len(kinds) + 1)
    kinds.append(Kind("a CSV header with a name Delta forbids", "CHANGES",
                      {"good.csv": lines(CHANGESET_HEADER, changeset_csv(i + 1), changeset_csv(i + 2)),
                       "named.csv": lines(CHANGESET_HEADER + ",unit(price)", "I,7,x,1,2", "I,8,x,1,3")},
                      [("named.csv", n, "column 'unit(price)': Delta Lake forbids '(', ')'") for n in (2, 3)],
                      {i + 1, i + 2}))
    # Datastream JSON: whole files
    whole_file("a corrupt gzip file", "DS", ds, "bad.jsonl.gz", b"\x1f\x8b\x08 not gzip data",
               [("bad.jsonl.gz", 0, "not a readable gzip file")])
    whole_file("an empty file", "DS", ds, "empty.jsonl", b"", [("empty.jsonl", 0, "empty file")])
    whole_file("a file of blank lines", "DS", ds, "blank.jsonl", b"\n  \n\r\n", [("blank.jsonl", 0, "empty file")])
    whole_file("an unreadable Avro file", "DS", ds, "bad.avro", b"Obj\x01 broken", [("bad.avro", 0, "Avro")])
    whole_file("a link out of the landing area", "DS", ds, "outside.jsonl", ("link", "/etc/hostname"),
               [("outside.jsonl", 0, "links outside the landing area")])
    whole_file("a link to a file that is gone", "DS", ds, "gone.jsonl", ("link", "gone-away.jsonl"),
               [("gone.jsonl", 0, "cannot read the file")])
    whole_file("a link to a folder", "DS", ds, "linked-folder", ("link", "/etc"),
               [("linked-folder", 0, "a link to a folder")])
    # BigQuery CDC, JSON lines
    between("a malformed _CHANGE_SEQUENCE_NUMBER", "BQCDC", cdc, json.dumps(bq_cdc("UPSERT", {"id": 1}, "XYZ")),
            "_CHANGE_SEQUENCE_NUMBER: change sequence number: section 1 is not")
    between("an overlong _CHANGE_SEQUENCE_NUMBER section", "BQCDC", cdc,
            json.dumps(bq_cdc("UPSERT", {"id": 1}, "1" * 17)), "1 to 16 hexadecimal digits")
    between("a _CHANGE_SEQUENCE_NUMBER of five sections", "BQCDC", cdc,
            json.dumps(bq_cdc("UPSERT", {"id": 1}, "1/2/3/4/5")), "1 to 4 '/'-separated sections")
    between("an unknown _CHANGE_TYPE", "BQCDC", cdc, json.dumps(bq_cdc("INSERT", {"id": 1}, "1")),
            "unknown change type in '_CHANGE_TYPE'")
    between("a missing _CHANGE_TYPE", "BQCDC", cdc, json.dumps({"id": 1, "v": "x"}), "change type '_CHANGE_TYPE' is missing")
    # BigQuery CDC, CSV
    between("a CSV row with too many fields", "BQCDC", cdc_csv, "1,x,UPSERT,1,surplus",
            "5 fields where the header has 4", "surplus", ext="csv", header=CDC_CSV_HEADER)
    between("a CSV row that is not UTF-8", "BQCDC", cdc_csv, b"1,\xe9t\xe9,UPSERT,1", "not valid UTF-8", "\\xe9",
            ext="csv", header=CDC_CSV_HEADER)
    between("an empty key in CSV", "BQCDC", cdc_csv, ",x,UPSERT,1", "key column 'id' is null",
            ext="csv", header=CDC_CSV_HEADER)
    between("a CSV field over the field limit", "BQCDC", cdc_csv, "1," + "x" * 200_000 + ",UPSERT,1",
            "field larger than field limit", ext="csv", header=CDC_CSV_HEADER)
    i = 1000 * (len(kinds) + 1)
    kinds.append(Kind("a CSV with a duplicated header", "BQCDC",
                      {"good.csv": lines(CDC_CSV_HEADER, cdc_csv(i + 1), cdc_csv(i + 2)),
                       "dup.csv": lines("id,v,v,_CHANGE_TYPE", "1,a,b,UPSERT", "2,a,b,UPSERT")},
                      [("dup.csv", 2, "duplicated columns ['v']"), ("dup.csv", 3, "duplicated columns ['v']")],
                      {i + 1, i + 2}, ",a,b,UPSERT"))
    i = 1000 * (len(kinds) + 1)
    # no record is lost: the first line is a record, not a header, and is quarantined with the rest
    kinds.append(Kind("a CSV without its header", "BQCDC",
                      {"good.csv": lines(CDC_CSV_HEADER, cdc_csv(i + 1), cdc_csv(i + 2)),
                       "nohead.csv": lines("5,ok,UPSERT,a", "6,ok,UPSERT,b", "7,ok,UPSERT,c")},
                      [("nohead.csv", n, "no header row: the first line lacks columns '_CHANGE_TYPE', 'id'", raw)
                       for n, raw in ((1, "5,ok,UPSERT,a"), (2, "6,ok,UPSERT,b"), (3, "7,ok,UPSERT,c"))],
                      {i + 1, i + 2}))
    i = 1000 * (len(kinds) + 1)
    kinds.append(Kind("an unterminated CSV quote", "BQCDC",
                      {"quote.csv": lines(CDC_CSV_HEADER, cdc_csv(i + 1), cdc_csv(i + 2), '7,"open,UPSERT,1', "8,x,UPSERT,1")},
                      [("quote.csv", 4, "2 fields where the header has 4")], {i + 1, i + 2},
                      '7,"open,UPSERT,1\n8,x,UPSERT,1'))  # the swallowed next line is kept in the raw text
    # BigQuery append-mode rows
    between("a row without datastream_metadata", "BQAPPEND", append, json.dumps({"id": 1, "v": "x"}),
            "no 'datastream_metadata'")
    between("a change_sequence_number that is not a number", "BQAPPEND", append,
            json.dumps(bq_append("INSERT", {"id": 1}, "not-a-number")),
            "datastream_metadata.change_sequence_number: change sequence number")
    whole_file("an unreadable Parquet file", "BQAPPEND", append, "bad.parquet", b"PAR1 this is not parquet PAR1",
               [("bad.parquet", 0, "not a readable Parquet file")])
    # Change sets (CSV)
    between("an unknown flag", "CHANGES", changeset_csv, "X,1,x,1", "unknown change type in op column 'FLAG'", "X,1,x,1",
            ext="csv", header=CHANGESET_HEADER)
    i = 1000 * (len(kinds) + 1)
    kinds.append(Kind("a change set without its op column", "CHANGES",
                      {"good.csv": lines(CHANGESET_HEADER, changeset_csv(i + 1), changeset_csv(i + 2)),
                       "noflag.csv": lines("id,v,SEQ", "1,x,1")},
                      [("noflag.csv", 1, "the first line lacks column 'FLAG'", "id,v,SEQ"),
                       ("noflag.csv", 2, "the first line lacks column 'FLAG'", "1,x,1")], {i + 1, i + 2}))
    i = 1000 * (len(kinds) + 1)
    kinds.append(Kind("a change set without its header row", "CHANGES",
                      {"good.csv": lines(CHANGESET_HEADER, changeset_csv(i + 1), changeset_csv(i + 2)),
                       "nohead.csv": lines("I,5,x,1", "U,5,y,2", "D,6,,3")},
                      [("nohead.csv", n, "no header row: the first line lacks columns 'FLAG', 'id'", raw)
                       for n, raw in ((1, "I,5,x,1"), (2, "U,5,y,2"), (3, "D,6,,3"))],
                      {i + 1, i + 2}))
    i = 1000 * (len(kinds) + 1)
    kinds.append(Kind("a change set without its sequence column", "CHANGES",
                      {"good.csv": lines(CHANGESET_HEADER, changeset_csv(i + 1), changeset_csv(i + 2)),
                       "noseq.csv": lines("FLAG,id,v", "I,1,x")},
                      [("noseq.csv", 2, "sequence column 'SEQ' is missing")], {i + 1, i + 2}))
    return kinds


def tolerated() -> list[Kind]:
    """Odd but valid: applied, nothing quarantined."""
    out = []
    for n, (name, table, data) in enumerate([
        ("a byte-order mark", "DS", b"\xef\xbb\xbf" + lines(ds(90001), ds(90002))),
        ("CRLF line ends", "DS", lines(ds(90011) + "\r", ds(90012) + "\r")),
        ("blank lines between records", "DS", lines("", ds(90021), "   ", "", ds(90022))),
        ("a gzip file", "DS", gzip.compress(lines(ds(90031), ds(90032)))),
        ("a CSV with a byte-order mark and CRLF", "CHANGES",
         b"\xef\xbb\xbf" + lines(CHANGESET_HEADER + "\r", changeset_csv(90041) + "\r", changeset_csv(90042) + "\r")),
        ("column names Delta allows: dots, quotes, a backtick, $, #, a leading digit, non-ASCII", "DS",
         lines(ds(90061, **{"a.b": 1, 'q"d': 2, "q'd": 3, "b`t": 4, "$c": 5, "#t": 6, "1st": 7, "é-x": 8}),
               ds(90062, **{"a.b": 9, "select": "x"}))),
        ("an integer past the long range, within decimal(38,0)", "DS",
         lines(ds(90051, wide=123456789012345678901234567890), ds(90052, wide=-(10 ** 38 - 1)))),
    ]):
        ext = "csv" if table == "CHANGES" else "jsonl.gz" if data[:2] == b"\x1f\x8b" else "jsonl"
        out.append(Kind(name, table, {f"part.{ext}": data}, [], {90001 + 10 * n, 90002 + 10 * n}))
    return out


KINDS, TOLERATED = catalog(), tolerated()


def folder(kind: Kind) -> str:
    return "batch-1/" + "".join(c if c.isalnum() else "-" for c in kind.name)


@contextlib.contextmanager
def captured_output(path):
    """Everything the run writes to stdout/stderr (Dagster's log lines included), into a file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved, streams = (os.dup(1), os.dup(2)), (sys.stdout, sys.stderr)
    with open(path, "w", encoding="utf-8", buffering=1) as fh:
        os.dup2(fh.fileno(), 1)  # Spark's and other native writers
        os.dup2(fh.fileno(), 2)
        sys.stdout = sys.stderr = fh  # Python's, pytest's capture notwithstanding
        try:
            yield
        finally:
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)


@pytest.fixture(scope="module")
def landed_run(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    os.environ.pop("DAGSTER_HOME", None)  # the configuration's own instance, beside its cdc.yaml
    cfg = write_config(root, TABLES)
    for kind in KINDS + TOLERATED:
        dest = os.path.join(cfg.landing_dir(kind.table), folder(kind))
        os.makedirs(dest, exist_ok=True)
        for name, data in kind.files.items():
            if isinstance(data, tuple):
                os.symlink(data[1], os.path.join(dest, name))
            else:
                land(cfg, kind.table, folder(kind), {name: data})
    land(cfg, "CLEAN", "batch-1", {"a.jsonl": lines(cdc(1), cdc(2))})
    summary = []
    log_file = root / "run.log"
    with captured_output(log_file):
        outcomes = {o.table: o for o in run_config(cfg, build_definitions, echo=summary.append)}
    quarantine = {t["name"]: delta_rows(cfg, t["name"], "quarantine") for t in TABLES if t["name"] != "CLEAN"}
    targets = {t["name"]: {r["id"] for r in target_rows(cfg, t["name"])} for t in TABLES}
    return {"cfg": cfg, "outcomes": outcomes, "summary": summary, "quarantine": quarantine, "targets": targets,
            "log": log_file.read_text("utf-8", "replace").splitlines()}


def _quarantined(landed_run, kind: Kind) -> list[tuple]:
    where = folder(kind) + "/"
    return sorted((r["_cdc_file"], r["_cdc_line"], r["_cdc_reason"], r["_cdc_raw"], r["table"])
                  for r in landed_run["quarantine"][kind.table] if r["_cdc_file"].startswith(where))


FIGURES_COMMAND = "./bootstrap.sh test cdc_assets_tests/engine/test_bad_input_catalog.py --figures docs/figures"


def test_the_run_quarantines_every_catalogued_kind_and_applies_every_tolerated_one(landed_run, figures):
    """What the README's bad-input figures count, read back from the run's warehouse: a kind
    counts as quarantined when exactly its catalogued records are in quarantine and its valid
    records are in target; a tolerated kind counts when it is applied with nothing quarantined."""
    quarantined = [k.name for k in KINDS
                   if [(f, n) for f, n, *_ in _quarantined(landed_run, k)]
                   == sorted((folder(k) + "/" + f, n) for f, n, *_ in k.bad)
                   and k.good <= landed_run["targets"][k.table]]
    applied = [k.name for k in TOLERATED
               if not _quarantined(landed_run, k) and k.good <= landed_run["targets"][k.table]]
    assert quarantined == [k.name for k in KINDS]
    assert applied == [k.name for k in TOLERATED]
    if figures:
        figures.write_json("bad_input.json", {
            "kinds_quarantined": len(quarantined),
            "tolerated_kinds_applied": len(applied),
            "quarantined_records": {t: len(rows) for t, rows in landed_run["quarantine"].items()},
            "kinds": quarantined, "tolerated_kinds": applied,
        }, command=FIGURES_COMMAND)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_bad_input_is_quarantined_named_and_the_rest_applied(landed_run, kind):
    where = folder(kind) + "/"
    got = _quarantined(landed_run, kind)
    assert [(f, n) for f, n, *_ in got] == sorted((where + f, n) for f, n, *_ in kind.bad), got
    for (f, n, reason, raw, table), (_, _, expected, *exact_raw) in zip(got, sorted(kind.bad)):
        assert table == kind.table
        assert expected in reason, (reason, expected)
        if kind.raw is not None:
            assert kind.raw in raw
        if exact_raw:
            assert raw == exact_raw[0], (raw, exact_raw[0])
        # the message names the table, the file and the line
        assert any(f"table {kind.table}: file {f} line {n}: {reason}" in ln for ln in landed_run["log"]), reason
    assert kind.good <= landed_run["targets"][kind.table]


@pytest.mark.parametrize("kind", TOLERATED, ids=[k.name for k in TOLERATED])
def test_odd_but_valid_input_is_applied(landed_run, kind):
    where = folder(kind) + "/"
    assert not [r for r in landed_run["quarantine"][kind.table] if r["_cdc_file"].startswith(where)]
    assert kind.good <= landed_run["targets"][kind.table]


def test_counts_show_in_the_checks_the_status_and_the_summary(landed_run):
    cfg, outcomes = landed_run["cfg"], landed_run["outcomes"]
    for table in ("DS", "BQCDC", "BQAPPEND", "CHANGES", "DSTYPED"):
        expected = sum(len(k.bad) for k in KINDS if k.table == table)
        assert outcomes[table].ok, outcomes[table]
        assert outcomes[table].checks["batch_accounted"]  # read = new + duplicates + quarantined
        assert len(landed_run["quarantine"][table]) == expected
        assert table_status(cfg, cfg.table(table)).quarantined == expected
        line = next(s for s in landed_run["summary"] if s.startswith(table + ":"))
        assert f"{expected} quarantined" in line, line
    # the table beside them is unaffected
    assert outcomes["CLEAN"].ok and landed_run["targets"]["CLEAN"] == {1, 2}
    assert table_status(cfg, cfg.table("CLEAN")).quarantined == 0


def test_no_bad_record_leaks_into_the_target(landed_run):
    """Each target holds exactly the valid records landed for it: any id of a bad record (they
    share the valid ones' ranges) showing up there is a leak."""
    expected = {t["name"]: set() for t in TABLES}
    for kind in KINDS + TOLERATED:
        expected[kind.table] |= kind.good
    expected["CLEAN"] = {1, 2}
    for table, ids in landed_run["targets"].items():
        assert ids == expected[table], (table, "leaked", sorted(ids - expected[table]),
                                        "lost", sorted(expected[table] - ids))
