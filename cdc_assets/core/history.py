"""SCD type 2 history: every version of each key, in the source's order.

A version is a change that reached `changes` (or a base snapshot row). Its place is its
ordering key (`_cdc_order`: tier, source order, then arrival as the last tie-break), so a late
arrival lands between the versions it falls between, whatever batch brought it. A
re-delivery, the same change arriving again (same key, same source order, same operation,
same values, only its arrival differs), counts once: its first delivery is the version.

A truncate closes every version current at its ordering key with a delete version of that key
there. Each version holds the key's row as that change left it: a column the change leaves out (a
TOAST placeholder; on a `partial_updates` table a null) keeps the key's value (rules.md#rule-10). With
`track_except`, a change whose row differs from the version before it only in those columns opens
no version: that version takes its values in place. Each version has:
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

import bisect
import json
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

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
# Optionally beside them: the JSON list of the columns a change leaves out (a TOAST placeholder).
UNSET = "_cdc_unset"


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


@dataclass(frozen=True)
class Truncate:
    """A truncate (rules.md#rule-9) as the history reads it: no key's change, it closes every version
    current at its ordering key with a delete version of that key at it."""
    order: str
    batch: str | None = None
    event_id: str | None = None


@dataclass(frozen=True)
class Rules:
    """What a table's history needs beyond its changes."""
    partial: bool = False  # a null or absent column in an upsert keeps the key's value (rules.md#rule-10)
    track_except: frozenset[str] = frozenset()  # a change of only these columns updates its version in place
    truncates: tuple[Truncate, ...] = ()  # every truncate of the table, any order


@dataclass
class _Version:
    """A version while it is built: a change folded into it replaces its row."""
    key: str
    op: str
    order: str
    batch: str | None
    event_id: str | None
    row: list[object]
    operation: str
    number: int


def unset_columns(text: str | None) -> frozenset[str]:
    """The columns a change leaves out, from the JSON list the engine puts in UNSET."""
    return frozenset(json.loads(text)) if text else frozenset()


def _closing(orders: list[str], after: str, before: str | None) -> int | None:
    """The index of the first truncate ranking above `after` and below `before` (None: none)."""
    i = bisect.bisect_right(orders, after)
    return i if i < len(orders) and (before is None or orders[i] < before) else None


def versions(changes: pa.Table, data_columns: list[str], keys: Iterable[str], rules: Rules = Rules()) -> pa.Table:
    """Every version of the keys in `changes` (typed rows with CHANGE_FIELDS and `data_columns`,
    and optionally UNSET; `keys` the table's key columns): the history rows of those keys, whole,
    ordered by key and version. A delete at a truncate's ordering key is taken for that
    truncate's (an earlier computation's) and placed again, or not, from `rules.truncates`."""
    data_schema = pa.schema([changes.schema.field(c) for c in data_columns])
    if changes.num_rows == 0:
        return history_schema(data_schema).empty_table()
    key_columns = set(keys)
    truncates = sorted(rules.truncates, key=lambda t: t.order)
    at_truncate = {t.order for t in truncates}
    ordered = key_only_deletes(changes, key_columns).sort_by([("_cdc_key", "ascending"), ("_cdc_order", "ascending")])
    meta = {c: ordered[c].to_pylist() for c in CHANGE_FIELDS}
    values = [ordered[c].to_pylist() for c in data_columns]
    unset = ordered[UNSET].to_pylist() if UNSET in ordered.schema.names else [None] * ordered.num_rows
    keep, seen = [], set()
    for i, (key, op, order) in enumerate(zip(meta["_cdc_key"], meta["_cdc_op"], meta["_cdc_order"])):
        if op == DELETE and order in at_truncate:
            continue  # a truncate's delete: placed again below
        identity = (key, source_order(order), op, tuple(_same(v[i]) for v in values))
        if identity in seen:
            continue  # a re-delivery: the first delivery is the version
        seen.add(identity)
        keep.append(i)
    # The key's changes in order, each truncate that finds the key live between two of them
    # (an index of `truncates`, negated less one) placed as a delete.
    sequence: list[int] = []
    orders = [t.order for t in truncates]
    for j, i in enumerate(keep):
        sequence.append(i)
        following = keep[j + 1] if j + 1 < len(keep) and meta["_cdc_key"][keep[j + 1]] == meta["_cdc_key"][i] else None
        if meta["_cdc_op"][i] != DELETE and truncates:
            t = _closing(orders, meta["_cdc_order"][i], None if following is None else meta["_cdc_order"][following])
            if t is not None:
                sequence.append(-1 - t)
    tracked = [n for n, c in enumerate(data_columns) if c not in key_columns and c not in rules.track_except]
    out: list[_Version] = []
    state: dict[int, object] = {}
    previous_key = None
    for s in sequence:
        if s >= 0:
            key, op, order = meta["_cdc_key"][s], meta["_cdc_op"][s], meta["_cdc_order"][s]
            batch, event_id = meta["_cdc_batch"][s], meta["_cdc_event_id"][s]
        else:
            truncate = truncates[-1 - s]
            key, op, order, batch, event_id = out[-1].key, DELETE, truncate.order, truncate.batch, truncate.event_id
        if key != previous_key:
            state, previous_key = {}, key
        if op == DELETE:
            state = {}
            row = [values[n][s] if s >= 0 and data_columns[n] in key_columns else
                   out[-1].row[n] if data_columns[n] in key_columns else None for n in range(len(data_columns))]
        else:
            # each column the change carries takes its value; one it leaves out keeps the key's (rules.md#rule-10)
            left_out = unset_columns(unset[s])
            for n, c in enumerate(data_columns):
                v = values[n][s]
                if c not in left_out and (not rules.partial or v is not None or c in key_columns):
                    state[n] = v
            row = [state.get(n) for n in range(len(data_columns))]
        last = out[-1] if out and out[-1].key == key else None
        if (rules.track_except and last is not None and op != DELETE and last.op != DELETE
                and all(_same(row[n]) == _same(last.row[n]) for n in tracked)):
            last.row = row  # only untracked columns changed: the current version takes them in place
            continue
        out.append(_Version(key, op, order, batch, event_id, row, operation(op, order, None if last is None else last.op),
                            1 if last is None else last.number + 1))
    n = len(out)
    valid_to = [out[j + 1].order if j + 1 < n and out[j + 1].key == v.key else None for j, v in enumerate(out)]
    schema = history_schema(data_schema)
    columns = [pa.array([v.row[i] for v in out], f.type) for i, f in enumerate(data_schema)] + [
        pa.array([v.key for v in out], pa.string()), pa.array([v.order for v in out], pa.string()),
        pa.array(valid_to, pa.string()),
        pa.array([valid_to[j] is None and v.op != DELETE for j, v in enumerate(out)], pa.bool_()),
        pa.array([v.operation for v in out], pa.string()), pa.array([v.number for v in out], pa.int64()),
        pa.array([v.batch for v in out], pa.string()), pa.array([v.event_id for v in out], pa.string())]
    return pa.Table.from_arrays(columns, schema=schema)


def as_changes(history: pa.Table) -> pa.Table:
    """History rows back as the changes they were made from (what `versions` takes), so a batch's
    new changes can be placed among a key's existing versions."""
    op = pc.if_else(pc.equal(history[OPERATION], "delete"), DELETE, UPSERT)
    names = [n for n in history.schema.names if n not in dict(HISTORY_FIELDS)]
    return pa.table([history[n] for n in names] + [history["_cdc_key"], op, history[VALID_FROM],
                                                   history["_cdc_batch"], history["_cdc_event_id"],
                                                   pa.nulls(history.num_rows, pa.string())],
                    names=names + list(CHANGE_FIELDS) + [UNSET])
