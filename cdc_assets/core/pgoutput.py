"""PostgreSQL's `pgoutput` logical replication messages (protocol version 1, values in text format),
as `capture: logical` reads them from its replication slot, and the changes of one source table
they hold, in the order the source committed them.

Messages (PostgreSQL's "Logical Replication Message Formats"): Begin, Commit, Relation, Insert,
Update, Delete, Truncate; Origin, Type and Message say nothing about a row and are passed over.
A change's ordering key is its transaction's commit LSN, then its position within the transaction:
two transactions never share a commit LSN, and within one the messages come in the order the rows
were changed.

An update whose old key differs from its new key (the old key comes with the update when the
table's replica identity covers the key columns and they changed, or always with REPLICA IDENTITY
FULL) is a delete of the old key and an upsert of the new one. A value the update left unchanged
and that PostgreSQL stored out of line (TOAST) is not sent ('u'): the upsert does not carry that
column (core/partial.py keeps the key's stored value), unless the old row came whole (REPLICA
IDENTITY FULL), which holds it.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from .errors import TerminalError
from .postgres import PgColumn, column_type

UPSERT, DELETE, TRUNCATE = "UPSERT", "DELETE", "TRUNCATE"


class DecodeError(TerminalError, ValueError):
    """A message that is not what protocol version 1 of pgoutput sends (names the message kind and
    the byte; never a value)."""


class Unchanged:
    """An unchanged TOASTed value an update does not send."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged()
Text = str | None | Unchanged


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # the commit's LSN
    commit_time: int  # microseconds since 2000-01-01 UTC
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # the end of the commit record: a slot confirmed there has this transaction behind it
    commit_time: int


@dataclass(frozen=True)
class RelationColumn:
    name: str
    key: bool  # part of the replica identity
    type_oid: int
    typmod: int


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True)
class Insert:
    oid: int
    new: tuple[Text, ...]


@dataclass(frozen=True)
class Update:
    oid: int
    old_kind: str | None  # 'K' the old key's columns, 'O' the whole old row, None: the key did not change
    old: tuple[Text, ...] | None
    new: tuple[Text, ...]


@dataclass(frozen=True)
class Delete:
    oid: int
    old_kind: str
    old: tuple[Text, ...]


@dataclass(frozen=True)
class Truncate:
    oids: tuple[int, ...]


@dataclass(frozen=True)
class Other:
    kind: str


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | Other


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise DecodeError(f"message {chr(self.data[0])!r} ends at byte {len(self.data)}, {n} more expected at "
                              f"byte {self.at}")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def int(self, size: int, signed: bool = False) -> int:
        return int.from_bytes(self.take(size), "big", signed=signed)

    def byte(self) -> str:
        return chr(self.take(1)[0])

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError(f"message {chr(self.data[0])!r}: a string at byte {self.at} has no terminator")
        out = self.data[self.at:end].decode("utf-8")
        self.at = end + 1
        return out

    def tuple(self) -> tuple[Text, ...]:
        values: list[Text] = []
        for _ in range(self.int(2)):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind == "t":
                values.append(self.take(self.int(4)).decode("utf-8"))
            else:
                raise DecodeError(f"message {chr(self.data[0])!r}: column kind {kind!r} at byte {self.at - 1} "
                                  "(text format sends n, u or t)")
        return tuple(values)


def decode(data: bytes) -> Message:
    """One pgoutput message."""
    if not data:
        raise DecodeError("an empty message")
    r = _Reader(bytes(data))
    kind = r.byte()
    if kind == "B":
        return Begin(r.int(8), r.int(8, signed=True), r.int(4))
    if kind == "C":
        r.take(1)  # flags, unused
        return Commit(r.int(8), r.int(8), r.int(8, signed=True))
    if kind == "R":
        oid, namespace, name, identity = r.int(4), r.string(), r.string(), r.byte()
        cols = []
        for _ in range(r.int(2)):
            flags = r.int(1)
            cols.append(RelationColumn(r.string(), bool(flags & 1), r.int(4), r.int(4, signed=True)))
        return Relation(oid, namespace, name, identity, tuple(cols))
    if kind == "I":
        oid = r.int(4)
        _expect(r, "N", kind)
        return Insert(oid, r.tuple())
    if kind == "U":
        oid = r.int(4)
        first = r.byte()
        old_kind, old = None, None
        if first in ("K", "O"):
            old_kind, old = first, r.tuple()
            first = r.byte()
        if first != "N":
            raise DecodeError(f"message 'U': {first!r} at byte {r.at - 1} where the new row ('N') belongs")
        return Update(oid, old_kind, old, r.tuple())
    if kind == "D":
        oid = r.int(4)
        old_kind = r.byte()
        if old_kind not in ("K", "O"):
            raise DecodeError(f"message 'D': {old_kind!r} at byte {r.at - 1} where the old row ('K' or 'O') belongs")
        return Delete(oid, old_kind, r.tuple())
    if kind == "T":
        count = r.int(4)
        r.take(1)  # options: cascade, restart identity; the table's rows go either way
        return Truncate(tuple(r.int(4) for _ in range(count)))
    if kind in ("O", "Y", "M"):
        return Other(kind)
    raise DecodeError(f"unknown message kind {kind!r}")


def _expect(r: _Reader, byte: str, kind: str) -> None:
    got = r.byte()
    if got != byte:
        raise DecodeError(f"message {kind!r}: {got!r} at byte {r.at - 1} where {byte!r} belongs")


# ---- one table's changes ------------------------------------------------------------------

@dataclass(frozen=True)
class LogicalChange:
    commit_lsn: int
    position: int  # within the transaction
    op: str  # UPSERT, DELETE or TRUNCATE
    values: Mapping[str, str | None]  # by column name, as text; a delete carries what its old row had
    commit_time: int  # microseconds since 2000-01-01 UTC
    unset: frozenset[str] = field(default=frozenset())  # unchanged TOASTed values the upsert does not carry

    @property
    def sequence(self) -> str:
        """The ordering key as `_CHANGE_SEQUENCE_NUMBER` holds it: two hexadecimal sections."""
        return f"{self.commit_lsn:x}/{self.position:x}"


class TableChanges:
    """The changes of one table (schema.table) in a stream of messages; `keys` are the target's key
    columns, whose change in an update makes a delete and an upsert."""

    def __init__(self, schema: str, table: str, keys: Sequence[str]):
        self.schema, self.table, self.keys = schema, table, tuple(keys)
        self.relations: dict[int, Relation] = {}
        self.begin: Begin | None = None
        self.position = 0
        self.last_end: int | None = None  # the end LSN of the last commit read

    def feed(self, data: bytes) -> list[LogicalChange]:
        """The changes one message holds (most hold none)."""
        message = decode(data)
        if isinstance(message, Begin):
            self.begin, self.position = message, 0
            return []
        if isinstance(message, Commit):
            self.begin, self.last_end = None, message.end_lsn
            return []
        if isinstance(message, Relation):
            self.relations[message.oid] = message
            return []
        if isinstance(message, Other):
            return []
        if self.begin is None:
            raise DecodeError(f"a change ({type(message).__name__}) outside a transaction")
        if isinstance(message, Truncate):
            return [self._change(TRUNCATE, {})] if any(self._ours(o) for o in message.oids) else []
        if not self._ours(message.oid):
            return []
        names = [c.name for c in self.relations[message.oid].columns]
        if isinstance(message, Insert):
            return [self._change(UPSERT, _named(names, message.new))]
        if isinstance(message, Delete):
            return [self._change(DELETE, _named(names, message.old))]
        new = _named(names, message.new)
        out = []
        if message.old is not None:
            old = _named(names, message.old)
            if message.old_kind == "O":  # the whole old row: it holds the values left unsent
                new = {c: old[c] if v is UNCHANGED else v for c, v in new.items()}
            if any(old.get(k) != new.get(k) and new.get(k) is not UNCHANGED for k in self.keys):
                out.append(self._change(DELETE, old))
        return [*out, self._change(UPSERT, new)]

    def _ours(self, oid: int) -> bool:
        rel = self.relations.get(oid)
        if rel is None:
            raise DecodeError(f"a change of relation {oid} before its Relation message")
        return (rel.namespace, rel.name) == (self.schema, self.table)

    def _change(self, op: str, values: Mapping[str, Text]) -> LogicalChange:
        assert self.begin is not None
        unset = frozenset(c for c, v in values.items() if v is UNCHANGED)
        change = LogicalChange(self.begin.final_lsn, self.position, op,
                               {c: v for c, v in values.items() if not isinstance(v, Unchanged)},
                               self.begin.commit_time, unset)
        self.position += 1
        return change


def _named(names: Sequence[str], values: Sequence[Text]) -> dict[str, Text]:
    if len(names) != len(values):
        raise DecodeError(f"a row of {len(values)} values for a relation of {len(names)} columns")
    return dict(zip(names, values))


# ---- text values, typed as the catalog types them -----------------------------------------

_INTEGERS = ("int2", "int4", "int8")
_FLOATS = ("float4", "float8")
_JSON_NUMBERS = (*_INTEGERS, "numeric", "oid")


def typed(column: PgColumn, text: str | None) -> object:
    """A value's text (PostgreSQL's output form, with DateStyle ISO and TimeZone UTC) as the extract
    holds it (engine/postgres_source.py `_field`): booleans, integers, floats and bytea typed; arrays
    as JSON arrays (to_jsonb's text); every other value its text, typed by the extract's reader. A
    text that is not of the column's current type (its type was changed since the change was
    written) is a DecodeError naming the column, never the value."""
    if text is None:
        return None
    try:
        return _typed(column, text)
    except (ValueError, IndexError):
        raise DecodeError(f"a captured value of column {column.name!r} is not a {column.formatted} in PostgreSQL's "
                          "text form (was the column's type changed?)") from None


def _typed(column: PgColumn, text: str) -> object:
    if column.category == "A":
        return array_json(text, column.base[1:] if column.base.startswith("_") else column.base)
    kind = column_type(column)
    if kind == "boolean":
        if text not in ("t", "f"):
            raise ValueError("not a boolean")
        return text == "t"
    if kind in ("int", "long") and column.base in _INTEGERS:
        value, bits = int(text), {"int2": 16, "int4": 32, "int8": 64}[column.base]
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise ValueError("out of the column's range")
        return value
    if kind == "double" and column.base in _FLOATS:
        return float(text)  # NaN, Infinity and -Infinity included
    if kind == "binary":
        if not text.startswith("\\x"):
            raise ValueError("a bytea value not in hex output form (bytea_output must be hex)")
        return bytes.fromhex(text[2:])
    return text


def array_json(text: str, element: str) -> str:
    """An array's output text (`{1,2}`, `{{"a b",NULL}}`, `[0:1]={1,2}`) as the JSON text
    `to_jsonb(array)::text` gives: numbers as numbers, booleans as true/false, json elements as
    JSON, others as strings; bounds dropped."""
    if text.startswith("["):
        text = text[text.index("=") + 1:]
    items, end = _array(text, 0)
    if text[end:].strip():
        raise DecodeError(f"array text has {len(text) - end} characters after its closing brace")
    return _json(items, element)


def _array(s: str, i: int) -> tuple[list[object], int]:
    if s[i] != "{":
        raise DecodeError(f"array text: no '{{' at character {i}")
    items: list[object] = []
    i += 1
    if s[i] == "}":
        return items, i + 1
    while True:
        if s[i] == "{":
            sub, i = _array(s, i)
            items.append(sub)
        elif s[i] == '"':
            i += 1
            chars = []
            while s[i] != '"':
                if s[i] == "\\":
                    i += 1
                chars.append(s[i])
                i += 1
            i += 1
            items.append(("quoted", "".join(chars)))
        else:
            j = i
            while s[j] not in ",}":
                j += 1
            token = s[i:j].strip()
            items.append(None if token.upper() == "NULL" else ("bare", token))
            i = j
        if s[i] == ",":
            i += 1
        elif s[i] == "}":
            return items, i + 1
        else:
            raise DecodeError(f"array text: no ',' or '}}' at character {i}")


def _json(item: object, element: str) -> str:
    if item is None:
        return "null"
    if isinstance(item, list):
        return "[" + ", ".join(_json(x, element) for x in item) + "]"
    assert isinstance(item, tuple)
    value: str = item[1]
    if element in _JSON_NUMBERS + _FLOATS and value not in ("NaN", "Infinity", "-Infinity"):
        # to_jsonb reads a float through numeric: 1e+20 is 100000000000000000000
        return value if element in _JSON_NUMBERS else format(Decimal(value), "f")
    if element == "bool":
        return "true" if value == "t" else "false"
    if element in ("json", "jsonb"):
        return value
    return str(json.dumps(value, ensure_ascii=False))


# ---- building messages (tests, and whoever needs to write a stream) ------------------------

def _cstring(s: str) -> bytes:
    return s.encode() + b"\0"


def encode_tuple(values: Sequence[Text]) -> bytes:
    out = struct.pack(">H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif isinstance(v, Unchanged):
            out += b"u"
        else:
            raw = v.encode()
            out += b"t" + struct.pack(">I", len(raw)) + raw
    return out


def encode(message: Message) -> bytes:
    """The bytes pgoutput sends for a message (the inverse of `decode`)."""
    if isinstance(message, Begin):
        return b"B" + struct.pack(">QqI", message.final_lsn, message.commit_time, message.xid)
    if isinstance(message, Commit):
        return b"C\0" + struct.pack(">QQq", message.commit_lsn, message.end_lsn, message.commit_time)
    if isinstance(message, Relation):
        out = b"R" + struct.pack(">I", message.oid) + _cstring(message.namespace) + _cstring(message.name)
        out += message.replica_identity.encode() + struct.pack(">H", len(message.columns))
        for c in message.columns:
            out += bytes([int(c.key)]) + _cstring(c.name) + struct.pack(">Ii", c.type_oid, c.typmod)
        return out
    if isinstance(message, Insert):
        return b"I" + struct.pack(">I", message.oid) + b"N" + encode_tuple(message.new)
    if isinstance(message, Update):
        old = b"" if message.old is None else (message.old_kind or "K").encode() + encode_tuple(message.old)
        return b"U" + struct.pack(">I", message.oid) + old + b"N" + encode_tuple(message.new)
    if isinstance(message, Delete):
        return b"D" + struct.pack(">I", message.oid) + message.old_kind.encode() + encode_tuple(message.old)
    if isinstance(message, Truncate):
        return b"T" + struct.pack(">IB", len(message.oids), 0) + b"".join(struct.pack(">I", o) for o in message.oids)
    return message.kind.encode()


def changes(messages: Iterator[bytes], schema: str, table: str, keys: Sequence[str], after: int = 0,
            before: int | None = None) -> Iterator[LogicalChange]:
    """The changes of schema.table in a stream of messages, in commit order: those of transactions
    whose commit LSN is at least `after` and below `before` (engine/postgres_logical.py: why)."""
    reader = TableChanges(schema, table, keys)
    for data in messages:
        for change in reader.feed(data):
            if change.commit_lsn >= after and (before is None or change.commit_lsn < before):
                yield change
