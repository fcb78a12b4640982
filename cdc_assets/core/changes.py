"""The canonical change every format is turned into, and its flat record form."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from . import ordering
from .values import encode_row, key_text

UPSERT, DELETE = "U", "D"

# The flat record shared by `changes`, `staging` and `base`; `_cdc_row` keeps the
# row image as JSON (values JSON has no type for are tagged, see values.encode_row)
# so that a new source column never needs a schema change there.
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


@dataclass
class Change:
    line: int
    key: tuple
    op: str
    row: dict
    order: str  # the source's own order; tier and arrival are added by `to_record`
    event_id: str | None
    change_type: str
    _id_from_content: bool = field(default=False, repr=False)
    types: dict | None = field(default=None, repr=False, kw_only=True)  # the file's or declared column types


@dataclass
class Rejection:
    line: int
    reason: str
    raw: str


def content_id(key: tuple, op: str, order: str, row: dict) -> str:
    """An event id for formats without one: identical re-deliveries collapse."""
    text = json.dumps([key_text(key), op, order, encode_row(row, sort_keys=True)], ensure_ascii=False)
    return "sha1:" + hashlib.sha1(text.encode("utf-8")).hexdigest()


def to_record(change: Change, *, batch_seq: int, batch_id: str, file_name: str, file_index: int,
              partition_by: list[str], tier: str = ordering.CHANGE_TIER) -> dict:
    return {
        "_cdc_key": key_text(change.key),
        "_cdc_op": change.op,
        "_cdc_order": tier + change.order + "|" + ordering.arrival(batch_seq, file_index, change.line),
        "_cdc_event_id": change.event_id,
        "_cdc_row": encode_row(change.row),
        "_cdc_partition": key_text([change.row.get(c) for c in partition_by]) if partition_by else None,
        "_cdc_change_type": change.change_type,
        "_cdc_batch_seq": batch_seq,
        "_cdc_batch": batch_id,
        "_cdc_file": file_name,
        "_cdc_line": change.line,
        "_cdc_types": _types_text(change.types),
    }


_last_types: list = [None, None]  # the last types and their text: a file's rows share them


def _types_text(types: dict | None) -> str | None:
    if not types:
        return None
    if _last_types[0] != types:
        _last_types[:] = [dict(types), json.dumps(types, sort_keys=True)]
    return _last_types[1]


def to_reject(rej: Rejection, *, batch_seq: int, batch_id: str, file_name: str) -> dict:
    return {
        "_cdc_batch_seq": batch_seq,
        "_cdc_batch": batch_id,
        "_cdc_file": file_name,
        "_cdc_line": rej.line,
        "_cdc_reason": rej.reason,
        "_cdc_raw": rej.raw[:RAW_LIMIT],
    }
