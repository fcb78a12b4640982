"""SCD type 2 history: every version of each key, in the source's order.

A version is a change that reached `changes` (or a base snapshot row). Its place is its
ordering key (`_cdc_order`: tier, source order, then arrival as the last tie-break), so a late
arrival lands between the versions it falls between, whatever batch brought it. A
re-delivery, the same change arriving again (same key, same source order, same operation,
same values, only its arrival differs), counts once: its first delivery is the version.

Each version holds the row as that change left it, and:
- `_cdc_valid_from`: its ordering key; `_cdc_valid_to`: the next version's (null for the last);
- `_cdc_operation`: `snapshot` (a base row), `insert` (the first version, or the first after a
  delete), `update`, or `delete` (the key is gone from `_cdc_valid_from` on; a delete's row
  holds its key columns only, whatever image the source sent with it);
- `_cdc_is_current`: the last version of a key that is not deleted, so the current versions
  are the target's rows;
- `_cdc_version`: 1, 2, ... per key.

Pure: Arrow tables in and out; the engine (engine/history.py) feeds it a batch's touched keys,
and computes the same rules with Spark window functions for a full build.
"""
from __future__ import annotations

import math
from collections.abc import Collection, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from .changes import DELETE, UPSERT
from .ordering import BASE_TIER

VALID_FROM, VALID_TO, IS_CURRENT, OPERATION, VERSION = (
    "_cdc_valid_from", "_cdc_valid_to", "_cdc_is_current", "_cdc_operation", "_cdc_version")
SNAPSHOT, INSERT, UPDATE = "snapshot", "insert", "update"
OPERATIONS = (SNAPSHOT, INSERT, UPDATE, "delete")
# The columns every history row carries after the source's columns.
HISTORY_FIELDS = (("_cdc_key", pa.string()), (VALID_FROM, pa.string()), (VALID_TO, pa.string()),
                  (IS_CURRENT, pa.bool_()), (OPERATION, pa.string()), (VERSION, pa.int64()),
                  ("_cdc_batch", pa.string()), ("_cdc_event_id", pa.string()))
# What `versions` needs of each change besides the source's columns.
CHANGE_FIELDS = ("_cdc_key", "_cdc_op", "_cdc_order", "_cdc_batch", "_cdc_event_id")


def source_order(order: str) -> str:
    """The ordering key without its arrival: what a re-delivery shares with the first delivery."""
    return order.split("|", 1)[0]


def operation(op: str, order: str, previous_op: str | None) -> str:
    if op == DELETE:
        return "delete"
    if order.startswith(BASE_TIER):
        return SNAPSHOT
    return INSERT if previous_op is None or previous_op == DELETE else UPDATE


def _same(value: object) -> object:
    """A value as re-deliveries compare it: NaN equals NaN, as in Spark's grouping."""
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def history_schema(data: pa.Schema) -> pa.Schema:
    return pa.schema(list(data) + [pa.field(n, t) for n, t in HISTORY_FIELDS])


def key_only_deletes(changes: pa.Table, keys: Collection[str]) -> pa.Table:
    """Deletes with their non-key columns null: a delete's image differs by source (a full
    before-image, or the key alone), and what it says is only that the key is gone."""
    is_delete = pc.equal(changes["_cdc_op"], DELETE)
    out = changes
    for i, name in enumerate(changes.schema.names):
        if name not in keys and name not in CHANGE_FIELDS and name != "_cdc_row":
            column = changes[name]
            out = out.set_column(i, name, pc.if_else(is_delete, pa.nulls(len(column), column.type), column))
    return out


def versions(changes: pa.Table, data_columns: list[str], keys: Iterable[str]) -> pa.Table:
    """Every version of the keys in `changes` (typed rows with CHANGE_FIELDS and `data_columns`;
    `keys` the table's key columns): the history rows of those keys, whole, ordered by key and
    version."""
    data_schema = pa.schema([changes.schema.field(c) for c in data_columns])
    if changes.num_rows == 0:
        return history_schema(data_schema).empty_table()
    ordered = key_only_deletes(changes, set(keys)).sort_by([("_cdc_key", "ascending"), ("_cdc_order", "ascending")])
    meta = {c: ordered[c].to_pylist() for c in CHANGE_FIELDS}
    values = [ordered[c].to_pylist() for c in data_columns]
    keep, seen = [], set()
    for i, (key, op, order) in enumerate(zip(meta["_cdc_key"], meta["_cdc_op"], meta["_cdc_order"])):
        identity = (key, source_order(order), op, tuple(_same(v[i]) for v in values))
        if identity in seen:
            continue  # a re-delivery: the first delivery is the version
        seen.add(identity)
        keep.append(i)
    n = len(keep)
    valid_to: list[str | None] = [None] * n
    ops: list[str | None] = [None] * n
    current, numbers = [False] * n, [0] * n
    for j, i in enumerate(keep):
        key, op, order = meta["_cdc_key"][i], meta["_cdc_op"][i], meta["_cdc_order"][i]
        first = j == 0 or meta["_cdc_key"][keep[j - 1]] != key
        last = j == n - 1 or meta["_cdc_key"][keep[j + 1]] != key
        numbers[j] = 1 if first else numbers[j - 1] + 1
        ops[j] = operation(op, order, None if first else meta["_cdc_op"][keep[j - 1]])
        if not last:
            valid_to[j] = meta["_cdc_order"][keep[j + 1]]
        current[j] = last and op != DELETE
    rows = ordered.take(pa.array(keep, pa.int64()))
    columns = [rows[c] for c in data_columns] + [
        rows["_cdc_key"], rows["_cdc_order"], pa.array(valid_to, pa.string()), pa.array(current, pa.bool_()),
        pa.array(ops, pa.string()), pa.array(numbers, pa.int64()), rows["_cdc_batch"], rows["_cdc_event_id"]]
    schema = history_schema(data_schema)
    return pa.Table.from_arrays([pc.cast(c, f.type) for c, f in zip(columns, schema)], schema=schema)


def as_changes(history: pa.Table) -> pa.Table:
    """History rows back as the changes they were made from (what `versions` takes), so a batch's
    new changes can be placed among a key's existing versions."""
    op = pc.if_else(pc.equal(history[OPERATION], "delete"), DELETE, UPSERT)
    names = [n for n in history.schema.names if n not in dict(HISTORY_FIELDS)]
    return pa.table([history[n] for n in names] + [history["_cdc_key"], op, history[VALID_FROM],
                                                   history["_cdc_batch"], history["_cdc_event_id"]],
                    names=names + list(CHANGE_FIELDS))
