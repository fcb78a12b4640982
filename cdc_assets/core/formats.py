"""Change files to canonical changes.

`parse_file` takes a file's bytes and yields, per record, a `Change` or a
`Rejection` naming the line and the reason; one bad record never hides the
good ones around it.
"""
from __future__ import annotations

import base64
import csv
import datetime as dt
import functools
import io
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

from . import names, ordering, postgres
from .changes import DELETE, TRUNCATE, UPSERT, Change, Rejection, content_id
from .errors import TerminalError
from .ordering import OrderingError
from .values import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    LONG,
    MAX_PRECISION,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    Misfit,
    NumberText,
    Row,
    Value,
    convert,
    decimal_size,
    decimal_type,
    infer_text,
    parse_type,
    source_value,
)

if TYPE_CHECKING:  # pyarrow is imported where a Parquet file is read: most files are not
    import pyarrow as pa

# A table whose every batch is a complete export of its source (rules.md#rule-11): read as exports are,
# its changes derived by comparing each export with the state before it (engine/snapshot.py).
SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class FormatSpec:
    """What the engine and the Dagster wiring know of a format, so that neither compares its name.
    `parse`: one record to a change (None for whole exports, read as exports are);
    `truncates`: its records may truncate the table (rules.md#rule-9), whatever the options say;
    `leaves_columns_out`: an image may leave a column out that the key still has (TOAST);
    `whole_exports`: every batch is a complete export of the source (rules.md#rule-11);
    `bigquery_table`: a BigQuery table's rows may hold its records (`source: bigquery://`);
    `source_position`: the column of such a table that grows as rows are appended, unless the
    table names one (None: the table must)."""
    name: str
    parse: Callable[[Record, Sequence[str], ChangesetOptions, int, Typing | None], Change | None] | None
    # the change types that insert a row (None: the format does not say; an upsert may insert or update)
    inserts: Callable[[ChangesetOptions], set[str] | None] = lambda options: None
    # the columns a CSV header names before the keys (None: the keys are inside a payload CSV cannot hold)
    header: Callable[[ChangesetOptions], tuple[str, ...]] | None = None
    # the columns of its files that say what each change is, not what its row holds (rules.md#names)
    pseudo_columns: Callable[[ChangesetOptions], tuple[str, ...]] = lambda options: ()
    truncates: bool = False
    leaves_columns_out: bool = False
    whole_exports: bool = False
    bigquery_table: bool = False
    source_position: str | None = None

DATASTREAM_TYPES = {"INSERT": UPSERT, "UPDATE": UPSERT, "UPDATE-INSERT": UPSERT, "DELETE": DELETE, "UPDATE-DELETE": DELETE}
CDC_TYPES = {"UPSERT": UPSERT, "DELETE": DELETE}
# One record is at most this big: a bigger one is almost always a broken writer (a file
# without newlines), and holding it would cost the worker its memory.
MAX_LINE = 16 * 1024 * 1024
# A compressed file holds at most this much once decompressed.
MAX_DECOMPRESSED = 2**30


@dataclass(frozen=True)
class Limits:
    """How much of one file a reader holds (the engine's settings give them): a line (a record of
    a text file) of at most `line_bytes`, a compressed file of at most `decompressed_bytes` once
    decompressed. Decompression stops at either, so memory stays within them whatever the ratio."""
    line_bytes: int = MAX_LINE
    decompressed_bytes: int = MAX_DECOMPRESSED


LIMITS = Limits()


class ChangesetOptions(TypedDict, total=False):
    """A table's `options:`, which only format `changeset` takes (every other format's are empty):
    the op column, the values in it that insert, update and delete, and the columns that order changes."""
    op_column: str
    sequence_by: list[str]
    inserts: list[str]
    updates: list[str]
    deletes: list[str]
    truncates: list[str]


class RecordError(TerminalError, ValueError):
    """One record cannot become a change; the message is the quarantine reason."""


# A record as its reader gives it: a JSON object, a CSV row, a Parquet or Avro row (any JSON value).
Record: TypeAlias = dict[str, Any]
# A record's text for quarantine, or how to make it (only a rejected record's is made).
Raw: TypeAlias = "str | Callable[[], str]"
# What a file reader yields per record: its line, the record or why it cannot be read, its text.
RecordItem: TypeAlias = "tuple[int, Record | RecordError, Raw]"


class Typing:
    """The column types one file's values have: its own schema's (Avro, Parquet), else the
    table's `columns:` map, whose values are converted here so a misfit names its line.
    `text_columns`: columns earlier batches made text; a number there is its text, so that
    a key reads the same whichever way a file spells it. `rename`: the table's `rename:` map,
    source name -> target name; every other name here is a target name but `file_types`'."""

    def __init__(self, declared: Mapping[str, str] | None, text_columns: Iterable[str] = (),
                 rename: Mapping[str, str] | None = None):
        self.declared = dict(declared or {})
        self.text_columns = [c for c in text_columns if c not in self.declared]
        self.rename = tuple(sorted((rename or {}).items()))
        self.file_types: dict[str, str] = {}  # the file's own names; filled by the reader before the first record
        self._types: dict[str, str] | None = None
        self._by_file: dict[str, str] | None = None

    def source_name(self, target: str) -> str:
        """The name a file gives the target column `target`."""
        return next((s for s, t in self.rename if t == target), target)

    @property
    def types(self) -> dict[str, str]:
        if self._types is None:
            self._types = {**self.declared, **self.by_file()}
        return self._types

    def by_file(self) -> dict[str, str]:
        """The file's column types under their target names (the reader has filled `file_types`
        before the first record)."""
        if not self.rename:
            return self.file_types
        if self._by_file is None:
            own = dict(self.rename)
            self._by_file = {own.get(c, c): t for c, t in self.file_types.items()}
        return self._by_file

    def apply(self, row: Row) -> Row:
        typed_by_file = self.by_file() if self.file_types else {}
        for col, type_ in self.declared.items():
            if row.get(col) is not None and col not in typed_by_file:
                try:
                    row[col] = convert(row[col], type_)
                except Misfit:
                    raise RecordError(f"column {col!r} is declared {type_}; this change's value does not fit it") \
                        from None
        for col in self.text_columns:
            value = row.get(col)
            if value is not None and not isinstance(value, str) and col not in typed_by_file:
                row[col] = convert(value, STRING)
        return row


def inserts(fmt: str, options: ChangesetOptions) -> set[str] | None:
    """The change types that insert a row, in `fmt`; None when the format does not say (an
    UPSERT may insert or update)."""
    return SPECS[fmt].inserts(options)


def parse_file(fmt: str, options: ChangesetOptions, keys: Sequence[str], name: str, data: bytes,
               columns: Mapping[str, str] | None = None, insert_only: bool = False,
               text_columns: Iterable[str] = (), rename: Mapping[str, str] | None = None,
               row_group: int | None = None, limits: Limits = LIMITS) -> Iterator[Change | Rejection]:
    """`insert_only`: a change that is not an insert is a rejection (the table appends, never merges).
    `text_columns`: the columns earlier batches made text, whose CSV values keep their spelling.
    `rename`: the table's `rename:` map (keys, columns and text_columns name target columns).
    `row_group`: of a Parquet file, only that row group (lines still count from the file's first row)."""
    if fmt == SNAPSHOT:  # an export: every row an upsert (its batch's changes are derived from them)
        yield from parse_snapshot(keys, name, data, columns, rename, text_columns, limits)
        return
    parse_record = SPECS[fmt].parse
    assert parse_record is not None, f"format {fmt!r} is read as exports are"
    allowed = inserts(fmt, options) if insert_only else None
    typing = Typing(columns, text_columns, rename)
    for line, record, raw in _records(name, data, fmt, typing.file_types, _header_needs(fmt, options, keys, typing),
                                      [typing.source_name(c) for c in [*typing.declared, *typing.text_columns]],
                                      row_group, limits):
        if isinstance(record, RecordError):
            yield Rejection(line, str(record), _text_of(raw))
            continue
        try:
            change = parse_record(record, keys, options, line, typing)
        except (RecordError, OrderingError) as e:
            yield Rejection(line, str(e), _text_of(raw))
            continue
        if change is None:
            continue  # a record that is no change (a Kafka tombstone)
        if allowed is not None and change.change_type not in allowed:
            yield Rejection(line, f"change type {change.change_type!r} in an insert_only table: only inserts "
                                  f"({', '.join(sorted(allowed))}) are applied", _text_of(raw))
            continue
        if change.types is None:  # a format whose records carry their own schema has set them
            change.types = typing.types
        yield change


def appendable(fmt: str, name: str) -> bool:
    """Whether lines written at the end of a file of `fmt` named `name` are new records on their
    own (a text file of lines, uncompressed, not an export), so that a batch may take only them;
    any other file that grows is a new file as a whole."""
    return fmt not in (SNAPSHOT, "datastream-avro") and not name.lower().endswith((".gz", ".parquet", ".avro"))


def has_header(name: str) -> bool:
    """Whether the file's first line names its columns (a part taken after it is read under it)."""
    return name.lower().endswith(".csv")


# ---- files to records -------------------------------------------------------

def _header_needs(fmt: str, options: ChangesetOptions, keys: Sequence[str], typing: Typing) -> list[str]:
    """The columns a CSV header must name for its rows to become changes: the format's own leading
    columns and the key columns (as the file names them); none for a format that keeps its keys
    inside a payload, which CSV cannot hold."""
    leading = SPECS[fmt].header
    return [] if leading is None else [*leading(options), *(typing.source_name(k) for k in keys)]


def _records(name: str, data: bytes, fmt: str, file_types: dict[str, str] | None = None,
             header_needs: Sequence[str] = (), text_columns: Iterable[str] = (),
             row_group: int | None = None, limits: Limits = LIMITS) -> Iterator[RecordItem]:
    lower = name.lower()
    stopped: tuple[int, RecordError] | None = None
    if lower.endswith(".gz"):
        lower = lower[:-3]
        binary = lower.endswith((".parquet", ".avro")) or fmt == "datastream-avro"
        try:
            data, stopped = gunzip(data, limits, lines=not binary)
        # A gzip header over corrupt deflate data raises zlib.error: the file goes to quarantine,
        # it does not fail the table.
        except (OSError, EOFError, zlib.error) as e:
            yield 0, RecordError(f"not a readable gzip file: {e}"), preview(data)
            return
        if stopped is not None and (binary or not data.strip()):
            yield stopped[0], stopped[1], ""
            return
    if not data.strip():
        yield 0, RecordError("empty file: no change records"), ""
        return
    if lower.endswith(".parquet"):
        yield from _parquet_records(data, file_types if file_types is not None else {}, row_group)
    elif lower.endswith(".avro") or fmt == "datastream-avro":
        yield from _avro_records(data, file_types if file_types is not None else {})
    elif lower.endswith(".csv"):
        yield from _typed_csv_records(_csv_records(data, header_needs), text_columns)
    else:
        yield from _json_lines(data, kafka_tombstones=fmt == "debezium-json", max_line=limits.line_bytes)
    if stopped is not None:
        yield stopped[0], stopped[1], ""


def gunzip(data: bytes, limits: Limits = LIMITS, lines: bool = True) -> tuple[bytes, tuple[int, RecordError] | None]:
    """A gzip file's bytes decompressed a block at a time, holding at most `limits`: all of them,
    or, where a limit stops it, the whole lines before that point (`lines`; else nothing) and the
    rejection of the line it stopped in (line 0 for a file that is not lines). Raises what a
    corrupt file raises (OSError, EOFError, zlib.error)."""
    out = bytearray()
    block = 1 << 20
    newlines = 0  # in `out`
    line_start = 0  # where the line being decompressed starts in `out`
    pending = data
    while pending:
        member = zlib.decompressobj(wbits=31)  # a gzip member; a file may hold several, one after another
        while True:
            room = limits.decompressed_bytes + 1 - len(out)
            piece = member.decompress(pending, max(1, min(block, room)))
            pending = member.unconsumed_tail
            if piece:
                last = piece.rfind(b"\n")
                if last >= 0:
                    newlines += piece.count(b"\n")
                    line_start = len(out) + last + 1
                out += piece
            if len(out) > limits.decompressed_bytes:
                return _cut(out, line_start, lines), (newlines + 1 if lines else 0, RecordError(
                    f"the file is more than {limits.decompressed_bytes} bytes once decompressed (the limit of "
                    "CDC_ASSETS_MAX_DECOMPRESSED_BYTES): it is not read from this line on"))
            if lines and len(out) - line_start > limits.line_bytes:
                return _cut(out, line_start, lines), (newlines + 1, RecordError(
                    f"line longer than {limits.line_bytes} bytes once decompressed (the limit of "
                    "CDC_ASSETS_MAX_LINE_BYTES): the file is not read from this line on"))
            if member.eof:
                pending = member.unused_data
                break
            if not piece and not pending:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
        if not pending.strip(b"\x00"):
            break  # (a writer's zero padding after the last member)
    return bytes(out), None


def _cut(out: bytearray, line_start: int, lines: bool) -> bytes:
    return bytes(out[:line_start]) if lines else b""


def _json_lines(data: bytes, kafka_tombstones: bool = False, max_line: int = MAX_LINE) -> Iterator[RecordItem]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a byte-order mark is an editor's habit, not data
    for n, raw in enumerate(data.split(b"\n"), start=1):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield n, RecordError(f"not valid UTF-8 at byte {e.start}"), raw.decode("utf-8", "backslashreplace")
            continue
        if len(raw) > max_line:
            yield n, RecordError(f"line of {len(raw)} bytes is longer than the limit of {max_line} "
                                    f"(its first {RAW_PREVIEW} bytes are kept)"), text[:RAW_PREVIEW]
            continue
        try:
            record = json.loads(text, parse_float=NumberText)  # exact: a decimal column takes it as written
        except json.JSONDecodeError as e:
            yield n, RecordError(f"not valid JSON: {e.msg} at column {e.colno}"), text
            continue
        if record is None and kafka_tombstones:
            continue  # a Kafka tombstone (a null value) only lets Kafka compact the key away: no change
        if not isinstance(record, dict):
            yield n, RecordError(f"a JSON {type(record).__name__} where an object was expected"), text
            continue
        yield n, record, text


RAW_PREVIEW = 4096


def _preview_of(record: Record) -> Callable[[], str]:
    """A typed record's text for quarantine, made only if the record is rejected: most are not."""
    return lambda: json.dumps(record, default=str)[:RAW_PREVIEW]


def _text_of(raw: Raw) -> str:
    return raw() if callable(raw) else raw


def preview(data: bytes) -> str:
    """The start of an unreadable file as text, undecodable bytes as \\x escapes."""
    return data[:RAW_PREVIEW].decode("utf-8", "backslashreplace")


def raw_line(name: str, data: bytes, line: int, limits: Limits = LIMITS) -> str | None:
    """The text of line `line` of a text change file (None for Parquet and Avro files)."""
    lower = name.lower()
    if lower.endswith(".gz"):
        data, lower = gunzip(data, limits)[0], lower[:-3]
    if lower.endswith((".parquet", ".avro")) or line < 1:
        return None
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    return lines[line - 1].rstrip(b"\r").decode("utf-8", "backslashreplace") if line <= len(lines) else None


def _text(raw: str) -> str:
    """CSV text kept bad bytes as surrogates; quarantine stores them as \\x escapes."""
    return raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


_SURROGATE = re.compile("[\udc80-\udcff]")


def _csv_records(data: bytes, header_needs: Sequence[str] = ()) -> Iterator[RecordItem]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Bytes that are not UTF-8 are kept as surrogates, so only the rows holding them are
    # rejected and the rows around them still parse (bad input never loses a record).
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")

    def raw_of(first: int, last: int) -> str:  # the record's own lines, as written
        return "\n".join(ln.rstrip("\r") for ln in lines[first - 1:max(first, last)])

    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        yield 1, RecordError("CSV file has no header row"), ""
        return
    dupes = sorted({h for h in header if header.count(h) > 1})
    bad_header = None
    lacking = [c for c in dict.fromkeys(header_needs) if c not in header]
    if lacking:
        # A first line without the columns the table needs is a record, not a header (the
        # writer left the header out): it is quarantined with every other line, never dropped.
        bad_header = (f"no header row: the first line lacks column{'s' if len(lacking) > 1 else ''} "
                      + ", ".join(repr(c) for c in lacking) + "; every line of this file is quarantined")
        if header:
            yield 1, RecordError(bad_header), _text(raw_of(1, reader.line_num))
    elif any(_SURROGATE.search(h) for h in header):
        bad_header = "CSV header is not valid UTF-8"
    elif dupes or any(h == "" for h in header):
        bad_header = "CSV header has " + (f"duplicated columns {dupes}" if dupes else "an empty column name")
    # Every row, the header's problems included, goes through the one loop below, so a csv.Error
    # never escapes parse_file, a multi-line row keeps its first line and blank lines are skipped.
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield reader.line_num, RecordError(f"CSV: {e}"), _text(raw_of(start, reader.line_num))
            start = reader.line_num + 1  # the next row starts after the failed one
            continue
        line = start
        start = reader.line_num + 1
        if not row:
            continue
        raw = raw_of(line, reader.line_num)
        if _SURROGATE.search(raw):
            yield line, RecordError("not valid UTF-8"), _text(raw)
            continue
        if bad_header:
            yield line, RecordError(bad_header), raw
            continue
        if len(row) != len(header):
            yield line, RecordError(f"{len(row)} fields where the header has {len(header)}"), raw
            continue
        yield line, dict(zip(header, row)), raw


def _typed_csv_records(records: Iterable[RecordItem], text_columns: Iterable[str]) -> Iterator[RecordItem]:
    """CSV rows with their values typed by their columns: `text_columns` (declared ones, whose
    text `Typing` converts, and those already text) and a column holding any text in this file
    keep every value's spelling ('1.10', '+5' and '1.1' stay three texts); a column of numbers
    holds numbers. '' is null either way."""
    items = list(records)
    text = set(text_columns)
    for _, row, _ in items:
        if isinstance(row, dict):
            text.update(c for c, v in row.items() if c not in text and isinstance(infer_text(v), str))
    for line, row, raw in items:
        if isinstance(row, dict):
            row = {c: (v if v != "" else None) if c in text else infer_text(v) for c, v in row.items()}
        yield line, row, raw


def _decimal_or_text(precision: int, scale: int) -> str:
    return decimal_type(precision, scale) if precision <= MAX_PRECISION else STRING


def arrow_column_type(t: pa.DataType) -> str | None:
    """The column type of a Parquet (Arrow) column; nested values are JSON text."""
    import pyarrow.types as pt

    if pt.is_dictionary(t):
        return arrow_column_type(t.value_type)
    if pt.is_null(t):
        return None
    return scalar_column_type(t) or STRING


def scalar_column_type(t: pa.DataType) -> str | None:
    """The column type an Arrow column's values keep as they are; None for the null type and for
    values that become JSON text (nested values, time of day, decimals over 38 digits, ...)."""
    import pyarrow.types as pt

    if pt.is_dictionary(t):
        return scalar_column_type(t.value_type)
    checks: list[tuple[Callable[[pa.DataType], bool], str | None]] = [(pt.is_null, None), (pt.is_boolean, BOOLEAN), (pt.is_int64, LONG), (pt.is_uint32, LONG),
              (pt.is_uint64, "decimal(20,0)"), (pt.is_integer, INT), (pt.is_floating, DOUBLE),
              (pt.is_date, DATE), (pt.is_binary, BINARY), (pt.is_large_binary, BINARY),
              (pt.is_fixed_size_binary, BINARY), (pt.is_string, STRING), (pt.is_large_string, STRING),
              (pt.is_string_view, STRING)]
    for check, type_ in checks:
        if check(t):
            return type_
    if pt.is_decimal(t):
        return decimal_type(t.precision, t.scale) if t.precision <= MAX_PRECISION else None
    if pt.is_timestamp(t):
        return TIMESTAMP if t.tz else TIMESTAMP_NTZ
    return None


# Parquet field metadata: the column type of a text column whose values are that type's text, as
# the writer's source holds values of that type that no target type can (a PostgreSQL extract's
# numeric NaN, dates at infinity): each value is converted here, and a change whose value does not fit
# goes to quarantine naming its column.
DECLARED_TYPE = b"cdc_assets.type"


def declared_types(schema: pa.Schema) -> dict[str, str]:
    """The columns of an Arrow schema that carry their type as field metadata (DECLARED_TYPE)."""
    return {f.name: f.metadata[DECLARED_TYPE].decode() for f in schema
            if f.metadata and DECLARED_TYPE in f.metadata}


def _parquet_records(data: bytes, file_types: dict[str, str], row_group: int | None = None) -> Iterator[RecordItem]:
    import pyarrow.parquet as pq

    first = 0
    try:
        if row_group is None:
            table = pq.read_table(io.BytesIO(data))
        else:
            pf = pq.ParquetFile(io.BytesIO(data))
            first = sum(pf.metadata.row_group(g).num_rows for g in range(row_group))
            table = pf.read_row_group(row_group)
    except Exception as e:  # noqa: BLE001 - any reader failure quarantines the file
        yield 0, RecordError(f"not a readable Parquet file: {e}"), preview(data)
        return
    declared = declared_types(table.schema)
    for f in table.schema:
        type_ = declared.get(f.name) or arrow_column_type(f.type)
        if type_:
            file_types[f.name] = type_
    for n, record in enumerate(table.to_pylist(), start=first + 1):
        shown = _preview_of(record)
        try:
            for col, type_ in declared.items():
                if record.get(col) is not None:
                    try:
                        record[col] = convert(record[col], type_)
                    except Misfit:
                        raise RecordError(f"column {col!r} is {type_} at the source; this change's value does not "
                                          "fit it") from None
        except RecordError as e:
            yield n, e, shown
            continue
        yield n, record, shown


_AVRO_PRIMITIVES = {"boolean": BOOLEAN, "int": INT, "long": LONG, "float": DOUBLE, "double": DOUBLE,
                    "string": STRING, "bytes": BINARY}
_AVRO_LOGICAL = {"date": DATE, "timestamp-millis": TIMESTAMP, "timestamp-micros": TIMESTAMP,
                 "timestamp-nanos": TIMESTAMP, "local-timestamp-millis": TIMESTAMP_NTZ,
                 "local-timestamp-micros": TIMESTAMP_NTZ, "local-timestamp-nanos": TIMESTAMP_NTZ}


def avro_column_type(t: object) -> str | None:
    """The column type of an Avro field's schema (logical types included); a union with null
    is its other branch; records, maps, arrays and other unions are JSON text."""
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        return avro_column_type(branches[0]) if len(branches) == 1 else (None if not branches else STRING)
    if isinstance(t, str):
        return None if t == "null" else _AVRO_PRIMITIVES.get(t, STRING)
    if not isinstance(t, dict):
        return STRING
    logical = t.get("logicalType")
    if logical == "decimal":
        return _decimal_or_text(int(t.get("precision", MAX_PRECISION + 1)), int(t.get("scale", 0)))
    if logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical]
    if logical is not None or t.get("type") in ("record", "map", "array", "enum"):
        return STRING
    return BINARY if t.get("type") == "fixed" else avro_column_type(t.get("type"))


def _avro_fields(schema: object) -> dict[str, str]:
    """Column types of an Avro file's rows: a Datastream event's payload fields, else the top-level fields."""
    fields = schema.get("fields", []) if isinstance(schema, dict) else []
    for f in fields:
        branches = f.get("type") if isinstance(f.get("type"), list) else [f.get("type")]
        record = [b for b in branches if isinstance(b, dict) and b.get("type") == "record"]
        if f.get("name") == "payload" and record:
            return _avro_fields(record[0])
    types = {f["name"]: avro_column_type(f.get("type")) for f in fields}
    return {name: t for name, t in types.items() if t}


_AVRO_KINDS = {list: "array", str: "string", bytes: "bytes", bool: "boolean", int: "long", float: "double",
               type(None): "null"}


def _avro_records(data: bytes, file_types: dict[str, str]) -> Iterator[RecordItem]:
    import fastavro

    try:
        reader = fastavro.reader(io.BytesIO(data))
        file_types.update(_avro_fields(reader.writer_schema))
        for n, record in enumerate(reader, start=1):
            if isinstance(record, dict):
                yield n, record, _preview_of(record)
            else:  # a file whose schema is no record (an array, a string, ...) holds no columns
                kind = _AVRO_KINDS.get(type(record), type(record).__name__)
                yield n, RecordError(f"an Avro {kind} where a record was expected"), \
                    json.dumps(record, default=str)[:RAW_PREVIEW]
    except Exception as e:  # noqa: BLE001 - a corrupt block quarantines the rest of the file
        yield 0, RecordError(f"not a readable Avro file: {e}"), preview(data)


# ---- records to changes -----------------------------------------------------

def _key(row: Row, keys: Sequence[str]) -> tuple[Value, ...]:
    values: list[Value] = []
    for k in keys:
        if k not in row:
            raise RecordError(f"key column {k!r} is missing")
        if row[k] is None:
            raise RecordError(f"key column {k!r} is null")
        values.append(row[k])
    return tuple(values)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _row(values: Mapping[str, object], typing: Typing | None = None) -> Row:
    target = _target_names(tuple(values), typing.rename if typing else ())
    if isinstance(target, str):
        raise RecordError(target)
    row = {name: source_value(v) for name, v in zip(target, values.values())}
    for name, value in row.items():
        _storable(name, value)
    return typing.apply(row) if typing else row


@functools.lru_cache(maxsize=1024)
def _target_names(source: tuple[str, ...], rename: tuple[tuple[str, str], ...]) -> tuple[str, ...] | str:
    """The target names of a record's columns (after the table's `rename:`), or why they cannot
    be the columns of a target: a name Delta forbids, a `_cdc_` name, two names one but
    for case. Records of a file share their names, so each set of names is checked once."""
    renamed = dict(rename)
    out: dict[str, tuple[str, str]] = {}  # lower-case target name -> (source name, target name)
    for name in source:
        name = str(name)
        new = renamed.get(name, name)
        why = names.unstorable(new)
        if why:
            return why if name in renamed else f"{why}; {names.way_out(name)}"
        if new.lower() in out:
            other, other_new = out[new.lower()]
            if other_new == new:  # `rename:` gave a column the name of another one
                return f"columns {other!r} and {name!r} are both named {new!r} by the table's `rename:` map"
            return (f"columns {other_new!r} and {new!r} are one column to Spark and Delta (case is not told "
                    f"apart); {names.way_out(name)}")
        out[new.lower()] = (name, new)
    return tuple(new for _, new in out.values())


def _storable(name: str, value: Value) -> None:
    """A value no Delta table can hold is the record's fault, named by its column: a lone
    surrogate (JSON's "\\ud800" escape) is no Unicode text, and an integer of more than 38
    digits fits no number type."""
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value):
            raise RecordError(f"column {name!r} holds text that is not valid Unicode (a lone surrogate)")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** MAX_PRECISION:
        raise RecordError(f"column {name!r} holds an integer of {len(str(abs(value)))} digits, more than "
                          f"any number type holds ({MAX_PRECISION} digits)")


def _datastream(record: Record, keys: Sequence[str], options: ChangesetOptions, line: int,
                typing: Typing | None = None) -> Change:
    payload = record.get("payload")
    meta = record.get("source_metadata")
    if not isinstance(payload, dict):
        raise RecordError("event has no 'payload' object")
    if not isinstance(meta, dict):
        raise RecordError("event has no 'source_metadata' object")
    change_type = _change_type(meta.get("change_type"), "source_metadata.change_type", DATASTREAM_TYPES)
    if "source_timestamp" not in record:
        raise RecordError("event has no 'source_timestamp'")
    read_method = str(record.get("read_method") or "")
    position = "0" if "backfill" in read_method else "1" + _source_position(meta, read_method)
    rank = "0" if change_type == "UPDATE-DELETE" else "1"
    order = _ordered("source_timestamp", ordering.timestamp, record["source_timestamp"]) + position + rank
    row = _row(payload, typing)
    key = _key(row, keys)
    op = DATASTREAM_TYPES[change_type]
    return _change(line, key, op, row, order, record.get("uuid"), change_type)


def _change_type(value: object, field: str, known: Mapping[str, str]) -> str:
    """A record's change type, upper case; the reason for one that is missing or unknown names the
    field and the types it may hold, never the value (a column-shifted row puts any value there)."""
    if value is None:
        raise RecordError(f"change type {field!r} is missing")
    change_type = str(value).upper()
    if change_type not in known:
        raise RecordError(f"unknown change type in {field!r} (expected {', '.join(known)})")
    return change_type


def _ordered(field: str, encode: Callable[..., str], *args: object) -> str:
    """An ordering component of a record's field; the reason for a value that orders nothing
    names the field, never the value."""
    try:
        return encode(*args)
    except OrderingError as e:
        raise RecordError(f"{field}: {e}") from None


def _sections(numbers: Iterable[int]) -> str:
    return "".join("1" + ordering.u64(n) for n in numbers) + "0"


def _int(meta: Mapping[str, object], name: str) -> int:
    v = meta.get(name)
    if isinstance(v, bool) or v is None:
        raise RecordError(f"source position {name!r} is missing")
    if isinstance(v, str) and v.strip().isascii() and v.strip().isdigit():  # int() refuses other digits
        v = int(v)
    if not isinstance(v, int):
        raise RecordError(f"source position {name!r} is not an integer")
    if not 0 <= v <= ordering.U64_MAX:
        raise RecordError(f"source position {name!r} is outside the unsigned 64-bit range")
    return v


def _hex_parts(value: object, name: str, seps: str) -> list[int]:
    if not isinstance(value, str) or not value.strip():
        raise RecordError(f"source position {name!r} is missing")
    text = value.strip()
    for s in seps:
        text = text.replace(s, " ")
    try:
        return [ordering.hex_number(p) for p in text.split()]
    except OrderingError as e:
        raise RecordError(f"source position {name!r}: {e}") from None


def _source_position(meta: Mapping[str, object], read_method: str) -> str:
    """The source's log position, per source kind."""
    if "scn" in meta or read_method.startswith("oracle"):
        rs = meta.get("rs_id")
        rs_parts = _hex_parts(rs, "rs_id", ".") if isinstance(rs, str) and rs.strip() else [0, 0, 0]
        return _sections([_int(meta, "scn"), *rs_parts, _int(meta, "ssn") if meta.get("ssn") is not None else 0])
    if "log_file" in meta and "log_position" in meta or read_method.startswith("mysql"):
        return _sections([_binlog_number(meta, "log_file"), _int(meta, "log_position")])
    if "lsn" in meta:
        lsn = meta.get("lsn")
        if isinstance(lsn, int) and not isinstance(lsn, bool):
            return _sections([lsn])
        return _sections(_hex_parts(lsn, "lsn", "/:."))
    raise RecordError("no source position in source_metadata (expected scn, log_file and log_position, or lsn) and "
                      "'read_method' names no source kind that lacks one")


def _binlog_number(meta: Mapping[str, object], name: str) -> int:
    """A MySQL binlog file's number, which orders the files: `mysql-bin.1000000` follows `mysql-bin.999999`."""
    log_file = str(meta.get(name) or "")
    digits = log_file.rsplit(".", 1)[-1]
    if not (digits.isascii() and digits.isdigit()):
        raise RecordError(f"MySQL {name!r} has no file number")
    if int(digits) > ordering.U64_MAX:
        raise RecordError(f"MySQL {name!r} has a file number outside the unsigned 64-bit range")
    return int(digits)


DEBEZIUM_OPS = {"c": UPSERT, "u": UPSERT, "r": UPSERT, "d": DELETE}
SNAPSHOT_READ = "r"
DEBEZIUM_TRUNCATE = "t"
# The position fields that say which connector wrote an event without `source.connector`.
_CONNECTOR_FIELDS = (("commit_lsn", "sqlserver"), ("change_lsn", "sqlserver"), ("scn", "oracle"),
                     ("file", "mysql"), ("lsn", "postgresql"))


def _debezium(record: Record, keys: Sequence[str], options: ChangesetOptions, line: int,
              typing: Typing | None = None) -> Change | None:
    """A Debezium change event: the bare envelope, or the envelope as the `payload` of Kafka's
    JsonConverter with schemas.enable=true, whose `schema` then types the row image's columns."""
    schema = None
    if "payload" in record and "op" not in record:
        schema, record = record.get("schema"), record["payload"]
        if record is None:
            return None  # a Kafka tombstone written with its (null) schema
        if not isinstance(record, dict):
            raise RecordError("event's 'payload' is not an object")
    op = record.get("op")
    if op not in DEBEZIUM_OPS and op != DEBEZIUM_TRUNCATE:
        if "op" not in record:
            raise RecordError("event has no 'op': not a Debezium change event envelope")
        raise RecordError("unknown Debezium op in 'op' (expected c, u, r, d or t)")
    source = record.get("source")
    if not isinstance(source, dict):
        raise RecordError("event has no 'source' object")
    if source.get("ts_ms") is None:
        raise RecordError("event has no 'source.ts_ms'")
    order = _ordered("source.ts_ms", ordering.timestamp, source["ts_ms"])
    order += _debezium_position(source, snapshot_read=op == SNAPSHOT_READ)
    if op == DEBEZIUM_TRUNCATE:  # rules.md#rule-9: the whole table, no row image
        return _change(line, (), TRUNCATE, {}, order, None, op)
    image_name = "before" if op == "d" else "after"  # a delete's `after` is null
    image = record.get(image_name)
    if not isinstance(image, dict):
        raise RecordError(f"op {op!r} event has no {image_name!r} row image")
    # a placeholder is no value in a delete's image either: a soft delete keeps the stored one (rules.md#rule-12)
    unset = frozenset(c for c, v in image.items() if _unavailable(v))
    if unset:  # a TOAST placeholder: the column is not carried (rules.md#rule-10)
        image = {c: v for c, v in image.items() if c not in unset}
        rename = dict(typing.rename) if typing else {}
        unset = frozenset(rename.get(c, c) for c in unset)
    row, types = _debezium_row(image, _connect_columns(schema, image_name), typing)
    # rules.md#rule-3: a snapshot read is the connector's base snapshot, below every streamed change of its key.
    # In the base tier it ranks above a `base_snapshot` export's row, whose order is its line number
    # (any ts_ms after 1970 encodes greater).
    tier = ordering.BASE_TIER if op == SNAPSHOT_READ else ordering.CHANGE_TIER
    change = _change(line, _key(row, keys), DEBEZIUM_OPS[op], row, order, None, op, tier=tier, unset=unset)
    change.types = types
    return change


# What Debezium's PostgreSQL connector writes for an unchanged TOASTed column it does not have
# (`unavailable.value.placeholder`): the text, as bytes in each binary.handling.mode (base64,
# base64-url-safe, hex), or a one-element array of it for an array column.
UNAVAILABLE = "__debezium_unavailable_value"
_UNAVAILABLE_FORMS = frozenset({UNAVAILABLE, base64.b64encode(UNAVAILABLE.encode()).decode("ascii"),
                                base64.urlsafe_b64encode(UNAVAILABLE.encode()).decode("ascii"),
                                UNAVAILABLE.encode().hex()})


def _unavailable(value: object) -> bool:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return isinstance(value, str) and value in _UNAVAILABLE_FORMS


def _debezium_position(source: Mapping[str, object], snapshot_read: bool) -> str:
    """The connector's log position, after `source.ts_ms`. A snapshot read may
    lack position fields (they count as 0): it is ordered only among the snapshot reads."""
    connector = source.get("connector")
    if connector is None:
        connector = next((c for f, c in _CONNECTOR_FIELDS if source.get(f) is not None), None)
        if connector is None:
            raise RecordError("source has no 'connector' and no position (lsn, file and pos, commit_lsn or scn)")

    def number(name: str) -> int:
        return 0 if snapshot_read and source.get(name) is None else _int(source, name)

    def sql_server_lsn(name: str) -> list[int]:
        if snapshot_read and source.get(name) is None:
            return [0, 0, 0]
        parts = _hex_parts(source.get(name), name, ":")
        if len(parts) != 3:
            raise RecordError(f"source position {name!r} is not three ':'-separated hexadecimal numbers")
        return parts

    connector = str(connector).lower()
    if connector == "postgresql":
        # Debezium writes the LSN as one integer. A later transaction's change of a key follows the
        # commit of the one before it (the row is locked until then), so the LSN orders one key.
        return _sections([number("lsn")])
    if connector in ("mysql", "mariadb"):  # MariaDB's connector writes MySQL's binlog fields
        binlog = 0 if snapshot_read and source.get("file") is None else _binlog_number(source, "file")
        return _sections([binlog, number("pos"), number("row")])
    if connector == "sqlserver":
        serial = [] if source.get("event_serial_no") is None else [_int(source, "event_serial_no")]
        return _sections([*sql_server_lsn("commit_lsn"), *sql_server_lsn("change_lsn"), *serial])
    if connector == "oracle":
        # `scn` alone: `commit_scn` orders one key's changes no differently (a second transaction
        # changes the row only after the first commits, at a greater scn), and snapshot reads and
        # older connector versions do not write it. Changes at one scn rank by arrival.
        return _sections([number("scn")])
    raise RecordError("unsupported Debezium connector in 'source.connector' (expected postgresql, mysql, sqlserver "
                      "or oracle)")


def _connect_columns(schema: object, image_name: str) -> dict[str, dict[str, Any]]:
    """The Kafka Connect schema of each column of the envelope's `before` or `after` struct."""
    if isinstance(schema, dict) and isinstance(schema.get("fields"), list):
        for f in schema["fields"]:
            if isinstance(f, dict) and f.get("field") == image_name and isinstance(f.get("fields"), list):
                return {c["field"]: c for c in f["fields"] if isinstance(c, dict) and isinstance(c.get("field"), str)}
    return {}


_EPOCH = dt.datetime(1970, 1, 1)
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
# Logical types written as a number since the epoch, as microseconds; their values are wall-clock times.
_CONNECT_TIMESTAMPS: dict[str, Callable[[int], int]] = {
    "io.debezium.time.Timestamp": lambda n: n * 1000,
    "org.apache.kafka.connect.data.Timestamp": lambda n: n * 1000,
    "io.debezium.time.MicroTimestamp": lambda n: n,
    "io.debezium.time.NanoTimestamp": lambda n: n // 1000,  # Delta keeps microseconds
}
_CONNECT_DATES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("not an integer")
    return value


def _connect_decimal(scale: int) -> Callable[[object], Decimal]:
    def decode(value: object) -> Decimal:
        if isinstance(value, str):  # base64 of the unscaled value, big-endian two's complement
            unscaled = int.from_bytes(base64.b64decode(value, validate=True), "big", signed=True)
            return _held(Decimal(f"{unscaled}e{-scale}"))  # exact: no context rounds a decimal made from text
        if isinstance(value, (int, Decimal)) and not isinstance(value, bool):  # JsonConverter decimal.format=NUMERIC
            return _held(Decimal(value))
        raise ValueError("not base64 bytes or a number")

    def _held(d: Decimal) -> Decimal:
        # Without a precision of 38 or less the column is typed by its values, as a written number is:
        # a value of more digits is the record's fault (as an integer of 39 digits in JSON), not the table's.
        digits = decimal_size(d)[0] if d.is_finite() else 0
        if digits > MAX_PRECISION:
            raise ValueError(f"a number of {digits} digits, more than any number type holds ({MAX_PRECISION} digits)")
        return d
    return decode


def _connect_column(field: Mapping[str, Any]) -> tuple[str | None, Callable[[object], Value] | None]:
    """A column's type and decoder from its Kafka Connect schema, or (None, None) when its value
    is taken as written (the table's `columns:` or inference types it then)."""
    name = field.get("name")
    if name == CONNECT_DECIMAL:
        params = field.get("parameters") or {}
        scale = int(params.get("scale", 0))
        try:  # without a precision (or past 38 digits) the exact value is typed like a written number
            type_ = parse_type(decimal_type(int(params["connect.decimal.precision"]), scale))
        except (KeyError, ValueError):
            type_ = None
        return type_, _connect_decimal(scale)
    if name in _CONNECT_TIMESTAMPS:
        micros = _CONNECT_TIMESTAMPS[name]
        return TIMESTAMP_NTZ, lambda v: _EPOCH + dt.timedelta(microseconds=micros(_whole(v)))
    if name in _CONNECT_DATES:
        return DATE, lambda v: _EPOCH.date() + dt.timedelta(days=_whole(v))
    if name == "io.debezium.time.ZonedTimestamp":
        return TIMESTAMP, lambda v: convert(v, TIMESTAMP)
    if field.get("type") == "bytes":
        return BINARY, lambda v: convert(v, BINARY)
    if field.get("type") in ("float64", "float32"):  # Jackson writes NaN and the infinities as text
        return None, lambda v: convert(v, DOUBLE) if isinstance(v, str) else v
    return None, None


def _debezium_row(image: Record, fields: Mapping[str, Mapping[str, Any]], typing: Typing | None
                  ) -> tuple[Row, dict[str, str] | None]:
    """The row image, and the column types when the envelope's schema gives some: a column typed
    by the schema takes its type from it, the others the table's `columns:` types."""
    if not fields:
        return _row(image, typing), None
    # the schema may change from one event to the next
    own = Typing(typing.declared if typing else None, rename=dict(typing.rename) if typing else None)
    values = dict(image)
    for col, value in image.items():
        if col not in fields:
            continue
        try:
            type_, decode = _connect_column(fields[col])
            if decode is not None and value is not None:
                values[col] = decode(value)
        except (ValueError, OverflowError) as e:
            raise RecordError(f"column {col!r}: its value does not decode as Kafka Connect type "
                              f"{str(fields[col].get('name') or fields[col].get('type'))[:80]!r} ({e})") from None
        if type_:
            own.file_types[col] = type_
    return _row(values, own), own.types


def _bigquery_append(record: Record, keys: Sequence[str], options: ChangesetOptions, line: int,
                     typing: Typing | None = None) -> Change:
    meta = record.get("datastream_metadata")
    if not isinstance(meta, dict):
        raise RecordError("row has no 'datastream_metadata' record")
    change_type = _change_type(meta.get("change_type"), "datastream_metadata.change_type", DATASTREAM_TYPES)
    if meta.get("change_sequence_number") is None:
        raise RecordError("datastream_metadata has no change_sequence_number")
    rank = "0" if change_type == "UPDATE-DELETE" else "1"
    order = _ordered("datastream_metadata.change_sequence_number", ordering.change_sequence_number,
                     meta["change_sequence_number"]) + rank
    row = _row({k: v for k, v in record.items() if k != "datastream_metadata"}, typing)
    return _change(line, _key(row, keys), DATASTREAM_TYPES[change_type], row, order, meta.get("uuid"), change_type)


def _bigquery_cdc(record: Record, keys: Sequence[str], options: ChangesetOptions, line: int,
                  typing: Typing | None = None, unset: frozenset[str] = frozenset()) -> Change:
    change_type = _change_type(record.get("_CHANGE_TYPE"), "_CHANGE_TYPE", CDC_TYPES)
    csn = record.get("_CHANGE_SEQUENCE_NUMBER")
    # Without a sequence number only arrival orders the rows (it is appended later).
    order = "0" if csn is None else "1" + _ordered("_CHANGE_SEQUENCE_NUMBER", ordering.change_sequence_number,
                                                   str(csn) if isinstance(csn, int) else csn)
    row = _row({k: v for k, v in record.items() if k not in ("_CHANGE_TYPE", "_CHANGE_SEQUENCE_NUMBER")}, typing)
    return _change(line, _key(row, keys), CDC_TYPES[change_type], row, order, None, change_type,
                   content_ids=csn is not None, unset=unset)


def _postgresql(record: Record, keys: Sequence[str], options: ChangesetOptions, line: int,
                typing: Typing | None = None) -> Change:
    """A PostgreSQL source's extracted change (engine/postgres_source.py): bigquery-cdc's two columns,
    a TRUNCATE of the whole table (rules.md#rule-9) ranked by its capture's order like any change,
    `_CHANGE_UNSET`: the columns an upsert does not carry (unchanged TOASTed values, rules.md#rule-10), and
    `_CHANGE_REJECT`: why the change is quarantined (a value that does not fit its column)."""
    if record.get("_CHANGE_TYPE") == "TRUNCATE":
        order = "1" + _ordered("_CHANGE_SEQUENCE_NUMBER", ordering.change_sequence_number,
                               str(record.get("_CHANGE_SEQUENCE_NUMBER")))
        return _change(line, (), TRUNCATE, {}, order, None, "TRUNCATE")
    reject = record.get("_CHANGE_REJECT")
    if reject is not None:  # the extraction found a value that does not fit its column: the reason says which
        raise RecordError(str(reject))
    raw = record.get("_CHANGE_UNSET")
    try:
        unset = frozenset(json.loads(raw)) if isinstance(raw, str) else frozenset()
    except (ValueError, TypeError):
        raise RecordError("_CHANGE_UNSET is not a JSON list of column names") from None
    if raw is not None and not (isinstance(raw, str) and all(isinstance(c, str) for c in unset)):
        raise RecordError("_CHANGE_UNSET is not a JSON list of column names")
    record = {k: v for k, v in record.items() if k not in ("_CHANGE_UNSET", "_CHANGE_REJECT") and k not in unset}
    if unset:
        rename = dict(typing.rename) if typing else {}
        unset = frozenset(rename.get(c, c) for c in unset)
    return _bigquery_cdc(record, keys, options, line, typing, unset)


def _changeset(record: Record, keys: Sequence[str], options: ChangesetOptions, line: int,
               typing: Typing | None = None) -> Change:
    op_column = options["op_column"]
    if op_column not in record:
        raise RecordError(f"op column {op_column!r} is missing")
    flag = record[op_column]
    flag_text = "" if flag is None else str(flag)
    if flag_text in map(str, options.get("deletes", [])):
        op = DELETE
    elif flag_text in map(str, options.get("inserts", [])) or flag_text in map(str, options.get("updates", [])):
        op = UPSERT
    elif flag_text in map(str, options.get("truncates", [])):
        op = TRUNCATE
    elif flag is None:
        raise RecordError(f"op column {op_column!r} is null")
    else:
        raise RecordError(f"unknown change type in op column {op_column!r}: a value none of the table's "
                          "inserts, updates, deletes or truncates lists")
    parts = []
    renamed = dict(typing.rename) if typing else {}
    for col in options.get("sequence_by", []):
        if col not in record:
            raise RecordError(f"sequence column {col!r} is missing")
        declared = typing.declared.get(renamed.get(col, col)) if typing else None
        parts.append(_ordered(f"sequence column {col!r}", ordering.typed_value, record[col], declared))
    if op == TRUNCATE:  # rules.md#rule-9: the whole table; the row's other columns say nothing
        return _change(line, (), TRUNCATE, {}, "".join(parts), None, flag_text,
                       content_ids=bool(options.get("sequence_by")))
    row = _row({k: v for k, v in record.items() if k != op_column}, typing)
    return _change(line, _key(row, keys), op, row, "".join(parts), None, flag_text,
                   content_ids=bool(options.get("sequence_by")))


def _change(line: int, key: tuple[Value, ...], op: str, row: Row, order: str, event_id: object, change_type: str,
            content_ids: bool = True, tier: str | None = None, unset: frozenset[str] = frozenset()) -> Change:
    if event_id is not None and not isinstance(event_id, str):
        event_id = str(event_id)
    if event_id is None and content_ids:
        # A change's own tier is part of what it is: a snapshot read never collapses into a streamed change.
        event_id = content_id(key, op, (tier or "") + order, row, unset)
    return Change(line, key, op, row, order, event_id, change_type, tier=tier, unset=unset)


# a backfill read is an INSERT too; UPDATE-INSERT is the new image of an update
_DATASTREAM_INSERTS = frozenset({"INSERT"})
SPECS: dict[str, FormatSpec] = {s.name: s for s in (
    FormatSpec("datastream-json", _datastream, inserts=lambda options: set(_DATASTREAM_INSERTS)),
    FormatSpec("datastream-avro", _datastream, inserts=lambda options: set(_DATASTREAM_INSERTS)),
    FormatSpec("bigquery-append", _bigquery_append, inserts=lambda options: set(_DATASTREAM_INSERTS),
               header=lambda options: (), pseudo_columns=lambda options: ("datastream_metadata",),
               bigquery_table=True, source_position="datastream_metadata.change_sequence_number"),
    FormatSpec("bigquery-cdc", _bigquery_cdc, header=lambda options: (postgres.OP_COLUMN,),
               pseudo_columns=lambda options: (postgres.OP_COLUMN, postgres.SEQUENCE_COLUMN), bigquery_table=True),
    # its truncates are the op values `options.truncates` lists
    FormatSpec("changeset", _changeset, inserts=lambda options: {str(v) for v in options.get("inserts", [])},
               header=lambda options: (options["op_column"],), pseudo_columns=lambda options: (options["op_column"],)),
    FormatSpec("debezium-json", _debezium, inserts=lambda options: {"c", SNAPSHOT_READ}, truncates=True,
               leaves_columns_out=True),
    FormatSpec(SNAPSHOT, None, header=lambda options: (), whole_exports=True),
    FormatSpec(postgres.FORMAT, _postgresql, header=lambda options: (postgres.OP_COLUMN,),
               pseudo_columns=lambda options: postgres.PSEUDO_COLUMNS, truncates=True),
)}
FORMATS = tuple(SPECS)


def format_spec(fmt: str) -> FormatSpec:
    return SPECS[fmt]


def parse_snapshot(keys: Sequence[str], name: str, data: bytes, columns: Mapping[str, str] | None = None,
                   rename: Mapping[str, str] | None = None, text_columns: Iterable[str] = (),
                   limits: Limits = LIMITS) -> Iterator[Change | Rejection]:
    """A source export (base snapshot) as upserts ordered by line; the tier puts them below every change.
    `text_columns`: the columns earlier batches made text, whose CSV values keep their spelling."""
    typing = Typing(columns, text_columns, rename)
    return snapshot_changes(keys, _records(name, data, SNAPSHOT, typing.file_types,
                                           _header_needs(SNAPSHOT, {}, keys, typing),
                                           [typing.source_name(c) for c in [*typing.declared, *typing.text_columns]],
                                           limits=limits),
                            typing)


def parquet_row_group(keys: Sequence[str], source: str | io.IOBase, row_group: int,
                      columns: Mapping[str, str] | None = None,
                      rename: Mapping[str, str] | None = None, text_columns: Iterable[str] = ()
                      ) -> Iterator[Change | Rejection]:
    """One row group of a Parquet export, so that a large export is read by many tasks; lines
    count from the file's first row, as when the whole file is read."""
    import pyarrow.parquet as pq

    typing = Typing(columns, text_columns, rename)
    pf = pq.ParquetFile(source)
    for f in pf.schema_arrow:
        type_ = arrow_column_type(f.type)
        if type_:
            typing.file_types[f.name] = type_
    first = sum(pf.metadata.row_group(g).num_rows for g in range(row_group))
    records = ((first + n, r, _preview_of(r))
               for n, r in enumerate(pf.read_row_group(row_group).to_pylist(), start=1))
    return snapshot_changes(keys, records, typing)


def snapshot_changes(keys: Sequence[str], records: Iterable[RecordItem], typing: Typing) -> Iterator[Change | Rejection]:
    for line, record, raw in records:
        if isinstance(record, RecordError):
            yield Rejection(line, str(record), _text_of(raw))
            continue
        try:
            row = _row(record, typing)
            yield Change(line, _key(row, keys), UPSERT, row, ordering.u64(line), None, "SNAPSHOT", types=typing.types)
        except (RecordError, OrderingError) as e:
            yield Rejection(line, str(e), _text_of(raw), key=_key_of_rejected(record, keys, typing))


def _key_of_rejected(record: Record, keys: Sequence[str], typing: Typing) -> tuple[Value, ...] | None:
    """The key of an export row that cannot be taken, when its key columns can: the key of a row
    in quarantine is still in the export (a snapshot does not delete it)."""
    try:
        names = [typing.source_name(k) for k in keys]
        return _key(_row({n: record[n] for n in names if n in record}, typing), keys)
    except (RecordError, OrderingError):
        return None
