"""The canonical change every format is turned into, and its flat record form."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypedDict

import pyarrow as pa
import pyarrow.compute as pc

from . import names, ordering
from .schema import STRICT, split
from .target import arrow_type
from .values import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    LONG,
    NULL,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    Misfit,
    Row,
    Value,
    convert,
    decimal_parts,
    encode_row,
    key_text,
)

UPSERT, DELETE = "U", "D"
# A truncate (rules.md#rule-9) names no key: it is stored as a change of the table's own pseudo-key, which
# no row has (a row's key has 1 to 16 values), so that staging keeps its latest and `tombstones`
# remembers it as the tombstone of the whole table.
TRUNCATE = "T"
TRUNCATE_KEY = key_text(())
# An apply's upsert of a key recomputed from every change it has (a change arrived older than the
# key's row and carries a column no newer change carried): it replaces the row even at the row's
# own ordering key.
REFILL = "R"

# The flat record shared by `changes`, `staging` and `base`. Beside it, those tables hold
# source columns as typed columns (`stored_form`); a change whose values cannot be stored
# that way keeps its row image as JSON in `_cdc_row` instead (values JSON has no type for
# are tagged, see values.encode_row), and its typed columns stay null.
RECORD_FIELDS = (
    ("_cdc_key", "string"),
    ("_cdc_op", "string"),
    ("_cdc_order", "string"),
    ("_cdc_event_id", "string"),
    ("_cdc_row", "string"),
    ("_cdc_partition", "string"),
    ("_cdc_change_type", "string"),
    ("_cdc_batch_seq", "long"),
    ("_cdc_batch", "string"),
    ("_cdc_file", "string"),
    ("_cdc_line", "long"),
)
REJECT_FIELDS = (
    ("_cdc_batch_seq", "long"),
    ("_cdc_batch", "string"),
    ("_cdc_file", "string"),
    ("_cdc_line", "long"),
    ("_cdc_reason", "string"),
    ("_cdc_raw", "string"),
)
RAW_LIMIT = 64 * 1024  # quarantine keeps the raw text up to this many characters

class ChangeRecord(TypedDict):
    """A change as a flat record: RECORD_FIELDS, and its column types."""
    _cdc_key: str
    _cdc_op: str
    _cdc_order: str
    _cdc_event_id: str | None
    _cdc_row: str
    _cdc_partition: str | None
    _cdc_change_type: str
    _cdc_batch_seq: int
    _cdc_batch: str
    _cdc_file: str
    _cdc_line: int
    _cdc_types: str | None  # the change's column types as JSON (`Change.types`)


class RejectRecord(TypedDict):
    """A rejection as a quarantine record: REJECT_FIELDS."""
    _cdc_batch_seq: int
    _cdc_batch: str
    _cdc_file: str
    _cdc_line: int
    _cdc_reason: str
    _cdc_raw: str


@dataclass
class Change:
    line: int
    key: tuple[Value, ...]
    op: str
    row: Row
    order: str  # the source's own order; tier and arrival are added by `to_record`
    event_id: str | None
    change_type: str
    _id_from_content: bool = field(default=False, repr=False)
    types: dict[str, str] | None = field(default=None, repr=False, kw_only=True)  # the file's or declared column types
    # The change's own tier when its format says it (a Debezium snapshot read ranks as a base row,
    # rules.md#rule-3); None takes the tier of the file it came in.
    tier: str | None = field(default=None, repr=False, kw_only=True)
    # Columns the change does not carry (a PostgreSQL TOAST placeholder): each keeps the key's value.
    unset: frozenset[str] = field(default=frozenset(), repr=False, kw_only=True)


@dataclass
class Rejection:
    line: int
    reason: str
    raw: str
    # the record's key when it could be read (an export row whose other values cannot be taken)
    key: tuple[Value, ...] | None = field(default=None, repr=False, kw_only=True)


def content_id(key: Sequence[Value], op: str, order: str, row: Mapping[str, Value],
               unset: frozenset[str] = frozenset()) -> str:
    """An event id for formats without one: identical re-deliveries collapse."""
    text = json.dumps([key_text(key), op, order, encode_row(row, sort_keys=True, unset=unset)], ensure_ascii=False)
    return "sha1:" + hashlib.sha1(text.encode("utf-8")).hexdigest()


def to_record(change: Change, *, batch_seq: int, batch_id: str, file_name: str, file_index: int,
              partition_by: Sequence[str], tier: str = ordering.CHANGE_TIER) -> ChangeRecord:
    return {
        "_cdc_key": key_text(change.key),
        "_cdc_op": change.op,
        "_cdc_order": (tier if change.tier is None else change.tier) + change.order + "|"
                      + ordering.arrival(batch_seq, file_index, change.line),
        "_cdc_event_id": change.event_id,
        "_cdc_row": encode_row(change.row, unset=change.unset),
        "_cdc_partition": key_text([change.row.get(c) for c in partition_by])
                          if partition_by and change.op != TRUNCATE else None,
        "_cdc_change_type": change.change_type,
        "_cdc_batch_seq": batch_seq,
        "_cdc_batch": batch_id,
        "_cdc_file": file_name,
        "_cdc_line": change.line,
        "_cdc_types": _types_text(change.types),
    }


# The last column types made text, and their text, as one tuple: a file's rows share them.
_last_types: tuple[dict[str, str] | None, str | None] = (None, None)


def _types_text(types: dict[str, str] | None) -> str | None:
    global _last_types
    if not types:
        return None
    last, text = _last_types
    if last != types or text is None:
        text = json.dumps(types, sort_keys=True)
        _last_types = (dict(types), text)
    return text


def to_reject(rej: Rejection, *, batch_seq: int, batch_id: str, file_name: str) -> RejectRecord:
    return {
        "_cdc_batch_seq": batch_seq,
        "_cdc_batch": batch_id,
        "_cdc_file": file_name,
        "_cdc_line": rej.line,
        "_cdc_reason": rej.reason,
        "_cdc_raw": rej.raw[:RAW_LIMIT],
    }


def storable_name(column: str) -> bool:
    """A source column name that can be a typed column beside the record's own (`_cdc_` ones);
    one holding a backtick stays in the row image."""
    return names.unstorable(column) is None and "`" not in column


def stored_form(images: list[Row], from_text: list[bool], ledger: dict[str, str],
                stored: dict[str, str]) -> tuple[dict[str, pa.Array], list[bool]]:
    """How each change of a batch is stored: in typed columns, or as its row image.

    A change is stored in typed columns when every value it has is of a strict column type
    (declared in `columns:`, or given by an Avro or Parquet file's schema: such a type only
    widens exactly, so the target casts a stored value exactly to whatever type the column
    reaches) and fits the column's stored type, which never changes once the column exists
    (`stored`). Changes from text files (CSV) and changes with an inferred value keep their
    row image: a later widening to text needs the value as it was written.

    Returns the typed columns (the stored ones and new ones; null where a change keeps its
    image) and which changes keep their image."""
    typed = [not t for t in from_text]
    names: dict[str, None] = {}
    for image in images:
        names.update(dict.fromkeys(image))
    arrays: dict[str, pa.Array] = {}
    for column in names:
        values = [image.get(column) for image in images]
        mark, type_ = split(ledger.get(column, ""))
        want = stored.get(column) or type_
        if mark != STRICT or want == NULL or not storable_name(column):
            typed = [ok and v is None for ok, v in zip(typed, values)]
            continue
        arrays[column], fits = _typed_array(values, want)
        typed = [ok and f for ok, f in zip(typed, fits)]
    kept = pa.array(typed, pa.bool_())
    out: dict[str, pa.Array] = {}
    for column, type_ in stored.items():
        out[column] = pa.nulls(len(images), arrow_type(type_)) if column not in arrays else arrays.pop(column)
    out.update(arrays)
    out = {c: pc.if_else(kept, a, pa.nulls(len(images), a.type)) for c, a in out.items()}
    # A new column only when some typed change has a value there.
    out = {c: a for c, a in out.items() if c in stored or a.null_count < len(a)}
    return out, [not ok for ok in typed]


# Python types whose values Arrow turns into a column type exactly as `convert` does.
_EXACT = {BOOLEAN: (bool,), INT: (int,), LONG: (int,), DOUBLE: (float,), STRING: (str,), DATE: (dt.date,),
          BINARY: (bytes,)}


def _typed_array(values: list[Value], type_: str) -> tuple[pa.Array, list[bool]]:
    """Values as a column of a column type, and which of them fit it (nulls fit). Values of
    one exact Python type are converted by Arrow (a decimal by a safe cast, which refuses
    to round or overflow), the others value by value through `convert`."""
    want = arrow_type(type_)
    kinds = {type(v) for v in values if v is not None}
    exact = _EXACT.get(type_)
    try:
        if kinds <= set(exact or ()):
            return pa.array(values, want), [True] * len(values)
        if decimal_parts(type_) and kinds <= {Decimal}:
            return pc.cast(pa.array(values), want), [True] * len(values)
        if type_ in (TIMESTAMP, TIMESTAMP_NTZ) and kinds <= {dt.datetime} and \
                all(isinstance(v, dt.datetime) and (v.tzinfo is not None) == (type_ == TIMESTAMP)
                    for v in values if v is not None):
            return pa.array(values, want), [True] * len(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        pass  # some value does not fit as it is: each is converted (or refused) on its own
    out: list[Value] = []
    fits: list[bool] = []
    for v in values:
        try:
            out.append(convert(v, type_))
            fits.append(True)
        except Misfit:
            out.append(None)
            fits.append(False)
    return pa.array(out, want), fits
