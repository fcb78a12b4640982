"""A live PostgreSQL table as a source (`source: postgresql://USER@HOST:PORT/DATABASE/SCHEMA.TABLE`):
what needs no database: the URL, the column types a catalog type maps to, and the sets of changelog
sequence numbers an extract takes (engine/postgres_source.py does the capture and the extraction).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .values import BINARY, BOOLEAN, DATE, DOUBLE, INT, LONG, MAX_PRECISION, STRING, TIMESTAMP, TIMESTAMP_NTZ

SCHEME = "postgresql://"
# USER@HOST:PORT/DATABASE/SCHEMA.TABLE; no password: libpq takes it from PGPASSWORD or ~/.pgpass, so it
# is never in cdc.yaml, in a log line or in Dagster's metadata.
SOURCE = re.compile(r"postgresql://(?P<user>[A-Za-z0-9_.-]+)@(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])"
                    r":(?P<port>[0-9]{1,5})/(?P<database>[^/@:?#\s]+)/(?P<schema>[A-Za-z_][A-Za-z0-9_$]*)"
                    r"\.(?P<table>[A-Za-z_][A-Za-z0-9_$]*)")
CAPTURE_METHODS = ("changelog", "logical")
FORMAT = "postgresql"  # the format of the extracts a PostgreSQL source's changes are written to
CAPTURE_DIR = "capture"  # <warehouse>/<TABLE>/capture/: the base snapshot and what capture enable found
# The columns an extract gives each change beside the source's own (the `postgresql` format reads them
# as `bigquery-cdc` reads its own: UPSERT or DELETE, and the changelog's sequence as the ordering key).
OP_COLUMN, SEQUENCE_COLUMN = "_CHANGE_TYPE", "_CHANGE_SEQUENCE_NUMBER"
# The columns an upsert does not carry (a JSON list; null: it carries them all): `capture: logical`'s
# unchanged TOASTed values, which keep the key's stored value (core/partial.py).
UNSET_COLUMN = "_CHANGE_UNSET"
# Why a change is quarantined instead of applied (null: it applies): a captured value that does not fit
# its column's current type (the column was altered since the change was captured). The reason names
# the columns, never a value; the change's other values are kept, the misfits null.
REJECT_COLUMN = "_CHANGE_REJECT"
PSEUDO_COLUMNS = (OP_COLUMN, SEQUENCE_COLUMN, UNSET_COLUMN, REJECT_COLUMN)


@dataclass(frozen=True)
class PgSource:
    user: str
    host: str
    port: int
    database: str
    schema: str
    table: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    def conninfo(self) -> dict[str, str | int]:
        """libpq's connection parameters; the password and TLS come from libpq's own sources
        (PGPASSWORD, ~/.pgpass, PGSSLMODE...), which libpq reads when these leave them out."""
        return {"host": self.host.strip("[]"), "port": self.port, "user": self.user, "dbname": self.database}

    def __str__(self) -> str:  # what messages name: no password can be in it
        return f"{SCHEME}{self.user}@{self.host}:{self.port}/{self.database}/{self.qualified}"


def parse_source(url: str) -> PgSource:
    """The parts of a `postgresql://` source (ValueError saying the expected shape otherwise)."""
    m = SOURCE.fullmatch(url)
    if not m or not 0 < int(m["port"]) < 65536:
        raise ValueError(f"{redacted(url)!r} must be postgresql://USER@HOST:PORT/DATABASE/SCHEMA.TABLE (no password: "
                         "libpq reads it from PGPASSWORD or ~/.pgpass)")
    return PgSource(m["user"], m["host"], int(m["port"]), m["database"], m["schema"], m["table"])


# A URL's `user:password@`: everything from the user's colon to the last @ (a password written with an
# unescaped @ or / is masked whole, the host with it at worst).
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#\s]*):.*@", re.DOTALL)
# A query's `key=value` (up to the next & or #) and libpq's `key = value` or `key = 'quoted value'`.
_QUERY_PAIR = re.compile(r"(?P<key>[^?&=#\s]+)=(?P<value>[^&#]*)")
_CONNINFO_PAIR = re.compile(r"(?P<key>[^\s=']+)(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|\S*)")


def redacted(source: str) -> str:
    """A source as any message, status line, log or metadata may show it: every password it holds
    replaced by ***, whatever its form: `user:password@` in a URL, a query's `password=` or
    `sslpassword=` (any case, percent-encoded or not), libpq's `password = '...'`. cdc.yaml refuses
    them all (libpq reads the password from PGPASSWORD or ~/.pgpass); this is what its errors show."""
    from urllib.parse import unquote

    def secret(key: str) -> bool:  # libpq's password and sslpassword, and any key naming a password
        return "password" in unquote(key).lower()

    def masked(pair: re.Match[str]) -> str:
        return f"{pair['key']}{pair.groupdict().get('eq', '=')}***" if secret(pair["key"]) else pair[0]

    if "://" in source:
        shown = _USERINFO.sub(r"\g<head>:***@", source, count=1)
        base, question, query = shown.partition("?")
        return base + question + _QUERY_PAIR.sub(masked, query)
    return _CONNINFO_PAIR.sub(masked, source)


def is_postgresql(source: str | None) -> bool:
    return source is not None and source.startswith(SCHEME)


@dataclass(frozen=True)
class PgColumn:
    """A source column as the catalog describes it: `format_type`'s text, its type's category
    (pg_type.typcategory: 'A' for arrays) and its base type's name."""
    name: str
    formatted: str  # e.g. numeric(12,2), timestamp with time zone, integer[]
    category: str
    base: str  # pg_type.typname of the column's type, e.g. numeric, timestamptz, int4, _int4


_SCALARS = {"bool": BOOLEAN, "int2": INT, "int4": INT, "int8": LONG, "float4": DOUBLE, "float8": DOUBLE,
            "date": DATE, "timestamptz": TIMESTAMP, "timestamp": TIMESTAMP_NTZ, "bytea": BINARY,
            "text": STRING, "varchar": STRING, "bpchar": STRING, "name": STRING, "char": STRING}
_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")


def column_type(column: PgColumn) -> str:
    """The target type of a source column (rules.md#types): numeric(p,s) a decimal, timestamptz an
    instant, timestamp a wall-clock time, text types a string, bytea binary; json, jsonb, arrays and
    every other type (uuid, interval, an unconstrained numeric...) their text (`as_text`)."""
    if column.category == "A":
        return STRING
    if column.base == "numeric":
        m = _NUMERIC.fullmatch(column.formatted)
        if m and int(m[1]) <= MAX_PRECISION:
            return f"decimal({m[1]},{m[2]})"
        return STRING  # an unconstrained numeric has no precision to store it at
    return _SCALARS.get(column.base, STRING)


def as_text(column: PgColumn) -> bool:
    """Whether a column is read as text: every type `column_type` maps to a string that is not one of
    PostgreSQL's text types (json as its JSON, arrays as JSON arrays, others as their output form)."""
    return column_type(column) == STRING and column.base not in ("text", "varchar", "bpchar", "name", "char")


def as_json(column: PgColumn) -> bool:
    """Arrays become JSON arrays (json and jsonb are JSON already)."""
    return column.category == "A"


def misfit_reason(columns: Sequence[str], types: Mapping[str, str]) -> str:
    """The reason a change whose values of `columns` do not fit their current types (`types`: each
    column's catalog type) is quarantined."""
    named = " and ".join(f"column {c!r} is {types.get(c, 'of another type')}" for c in columns)
    return (f"{named} at the source; this change's value does not fit it (was the column's type changed "
            "since the change was captured?)")


@dataclass(frozen=True)
class CaptureRecord:
    """What `capture enable` found and made, kept in the warehouse beside the table."""
    source: str  # the source URL (never a password: the URL holds none)
    method: str
    keys: tuple[str, ...]  # the key columns the capture records key changes of


def capture_dir(table_dir: str) -> str:
    return os.path.join(table_dir, CAPTURE_DIR)


def base_path(table_dir: str) -> str:
    """The table's base snapshot, taken by `capture enable`."""
    return os.path.join(capture_dir(table_dir), "base.parquet")


def record_path(table_dir: str) -> str:
    return os.path.join(capture_dir(table_dir), "source.json")


def read_record(table_dir: str) -> CaptureRecord | None:
    try:
        with open(record_path(table_dir), encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        return None
    return CaptureRecord(str(raw["source"]), str(raw["method"]), tuple(str(k) for k in raw["keys"]))


def record_json(record: CaptureRecord) -> str:
    return json.dumps({"source": record.source, "method": record.method, "keys": list(record.keys)})


# ---- the changelog sequence numbers an extract takes ----------------------------------------

Ranges = tuple[tuple[int, int], ...]


def ranges(numbers: Iterable[int]) -> Ranges:
    """Sorted numbers as runs of consecutive numbers [(first, last), ...]. A gap is never bridged: a
    number missing from a run may belong to a transaction still open when the rows were read."""
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        elif not out or n > out[-1][1]:
            out.append((n, n))
    return tuple(out)


def encode_ranges(taken: Ranges) -> list[list[int]]:
    return [[a, b] for a, b in taken]


def decode_ranges(raw: Sequence[Sequence[int]]) -> Ranges:
    return tuple((int(a), int(b)) for a, b in raw)
