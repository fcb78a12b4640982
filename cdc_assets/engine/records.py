"""The record tables (`changes`, `staging`, `base`): their typed source columns, and reading them.

Each holds the flat record (`core.changes.RECORD_FIELDS`) and, beside it, the source columns
its changes were stored in (`core.changes.stored_form`), under their own names.
"""
from __future__ import annotations

import pyarrow as pa

from ..core.changes import RECORD_FIELDS
from ..core.errors import OutOfOrder
from ..core.target import arrow_type, column_type
from . import delta


def stored_columns(table_path: str) -> dict[str, str]:
    """The typed source columns a `changes`, `staging` or `base` table holds, by stored type."""
    dt_ = delta.snapshot(table_path)
    if dt_ is None:
        return {}
    record = {n for n, _ in RECORD_FIELDS}
    return {f.name: column_type(f.type) for f in pa.schema(dt_.schema()) if f.name not in record}


def read_records(table_path: str, where: str) -> pa.Table | None:
    """The rows of `changes` or `staging` matching an SQL condition, with their typed columns
    (as their stored types: delta-rs may hand strings back as views)."""
    stored = stored_columns(table_path)
    fields = list(RECORD_FIELDS)
    names = ", ".join(_quoted(n) for n in [n for n, _ in fields] + list(stored))
    data = delta.query(table_path, f"SELECT {names} FROM t WHERE {where}")
    if data is None:
        return None
    schema = pa.schema(list(delta.arrow_schema(fields)) + [pa.field(c, arrow_type(t)) for c, t in stored.items()])
    return data.cast(schema)


def read_committed_records(table_path: str, where: str) -> pa.Table:
    """`read_records` of a table its caller knows has a commit (a step before it committed one)."""
    data = read_records(table_path, where)
    if data is None:
        raise OutOfOrder(f"{table_path}: no commit to read records from yet")
    return data


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
