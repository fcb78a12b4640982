"""The target's shape: columns, their types, and Dagster partition keys for partition values.

Pure helpers used by the apply step: row images (JSON dicts) become typed
columns, and each target partition gets a readable, reversible partition key.
"""
from __future__ import annotations

from urllib.parse import quote, unquote

from .values import NULL, STRING, coerce, join_types, key_text, value_type

META_COLUMNS = ("_cdc_key", "_cdc_order", "_cdc_batch", "_cdc_event_id")
NULL_PARTITION = "__null__"


def target_columns(existing: dict[str, str], rows: list[dict], keys, partition_by=()) -> dict[str, str]:
    """Existing columns keep their place; new ones follow in order of first appearance.

    Types are joined with every value seen, so a column only ever widens.
    """
    cols = {c: t for c, t in existing.items() if c not in META_COLUMNS}
    for k in list(keys) + list(partition_by):
        cols.setdefault(k, NULL)
    for row in rows:
        for c, v in row.items():
            cols[c] = join_types(cols.get(c, NULL), value_type(v))
    return {c: (STRING if t == NULL else t) for c, t in cols.items()}


def typed_columns(rows: list[dict], columns: dict[str, str]) -> dict[str, list]:
    return {c: [coerce(r.get(c), t) for r in rows] for c, t in columns.items()}


def partition_key(partition_by, partition_text_values) -> str:
    """'region=eu' (several columns joined by '/'); values are canonical text or None."""
    parts = []
    for col, v in zip(partition_by, partition_text_values):
        parts.append(f"{col}={NULL_PARTITION if v is None else quote(str(v), safe='')}")
    return "/".join(parts)


def partition_values(partition_key_text: str) -> list:
    out = []
    for part in partition_key_text.split("/"):
        _, _, v = part.partition("=")
        out.append(None if v == NULL_PARTITION else unquote(v))
    return out


def partition_text(values) -> str:
    """The `_cdc_partition` form of partition values, as stored with each change."""
    return key_text(values)
