"""The target's shape: columns, their types, and Dagster partition keys for partition values.

Pure helpers used by the apply step: row images become typed columns, and each
target partition gets a readable, reversible partition key.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import quote, unquote

import pyarrow as pa

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
    Row,
    Value,
    convert,
    decimal_parts,
    decimal_type,
    join_types,
    key_text,
    value_type,
    widen,
)

_ARROW = {BOOLEAN: pa.bool_(), INT: pa.int32(), LONG: pa.int64(), DOUBLE: pa.float64(), STRING: pa.string(),
          DATE: pa.date32(), TIMESTAMP: pa.timestamp("us", tz="UTC"), TIMESTAMP_NTZ: pa.timestamp("us"),
          BINARY: pa.binary()}


def arrow_type(type_: str) -> pa.DataType:
    parts = decimal_parts(type_)
    return pa.decimal128(*parts) if parts else _ARROW[type_]


def column_type(t: pa.DataType) -> str:
    """The column type of a target column as Delta stores it."""
    if pa.types.is_decimal(t):
        return decimal_type(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        return TIMESTAMP if t.tz else TIMESTAMP_NTZ
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return STRING
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return BINARY
    if pa.types.is_integer(t):
        return LONG if t.bit_width > 32 else INT
    if pa.types.is_floating(t):
        return DOUBLE
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_date(t):
        return DATE
    return STRING

META_COLUMNS = ("_cdc_key", "_cdc_order", "_cdc_batch", "_cdc_event_id")
# A soft-delete table's flag (rules.md#rule-12), after its source columns: true on the row of a key whose
# latest change is a delete, or ranks at or below a truncate.
DELETED = "_cdc_deleted"
NULL_PARTITION = "__null__"


def target_columns(existing: dict[str, str], rows: Iterable[Row], keys: Iterable[str],
                   partition_by: Iterable[str] = (),
                   history_types: dict[str, str] | None = None) -> dict[str, str]:
    """Existing columns keep their place; new ones follow in the order the history met them.

    A column's type is the one the history's column types give it (`history_types`, see
    core/schema.py); a column the history has no type for (a warehouse from before column
    types were recorded) takes the join of its values in `rows`. A column only ever widens.
    """
    history_types = history_types or {}
    cols = {c: t for c, t in existing.items() if c not in META_COLUMNS}
    for k in list(keys) + list(partition_by):
        cols.setdefault(k, NULL)
    for c in history_types:
        cols.setdefault(c, NULL)
    for row in rows:
        for c, v in row.items():
            if c not in history_types:
                cols[c] = join_types(cols.get(c, NULL), value_type(v))
    for c, t in cols.items():
        h = history_types.get(c, NULL)
        if h != NULL:
            cols[c] = h if t == NULL else (widen(t, h) or join_types(t, h))
    return {c: (STRING if t == NULL else t) for c, t in cols.items()}


def typed_columns(rows: Sequence[Row], columns: dict[str, str]) -> dict[str, list[Value]]:
    return {c: [convert(r.get(c), t) for r in rows] for c, t in columns.items()}


def partition_key(partition_by: Iterable[str], partition_text_values: Iterable[str | None]) -> str:
    """'region=eu' (several columns joined by '/'); values are canonical text or None."""
    parts = []
    for col, v in zip(partition_by, partition_text_values):
        parts.append(f"{col}={NULL_PARTITION if v is None else quote(str(v), safe='')}")
    return "/".join(parts)


def partition_values(partition_key_text: str) -> list[str | None]:
    # A value is quoted (no '/' or '=' in it) and no column name holds '=' (Delta forbids it), but
    # a name may hold '/': each value runs from an '=' to the next '/'.
    out: list[str | None] = []
    for part in partition_key_text.split("=")[1:]:
        v = part.split("/", 1)[0]
        out.append(None if v == NULL_PARTITION else unquote(v))
    return out


def partition_text(values: Iterable[Value]) -> str:
    """The `_cdc_partition` form of partition values, as stored with each change."""
    return key_text(values)
