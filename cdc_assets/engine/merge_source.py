"""What an incremental apply merges into target, and the MERGE's parts.

The pending batches' staged changes (batch-sized) give each key's latest (or combine them with the
key's row, column by column, where changes leave columns out: `_combined_winners`); every winner is
compared with the key's current row by ordering key: target keeps each row's `_cdc_order`, base
rows included (their tier ranks below every change, rules.md#rule-3), and `tombstones` keeps the ordering
key of each deleted key (rules.md#rule-2). Neither the history nor the base is read again.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ..core import names
from ..core import target as shape
from ..core.changes import DELETE, REFILL, TRUNCATE, TRUNCATE_KEY, UPSERT
from ..core.config import TableConfig
from ..core.values import DATE, DOUBLE, INT, LONG, STRING, Misfit, convert, decimal_parts, decode_row, fits, same
from . import combine, delta
from .ingest import column_types
from .records import read_committed_records, read_records
from .stage import latest_of_batch
from .table_layout import BASE, STAGING, TOMBSTONE_FIELDS, TOMBSTONES, path
from .target_typing import as_target_rows, existing_columns, flagged_columns, known_columns, target_schema

_PRUNABLE = (INT, LONG, DOUBLE, STRING, DATE)


@dataclasses.dataclass
class MergeSource:
    """What an incremental apply merges: each pending key's latest change, typed as target rows."""
    pending: pa.Table  # the staged records of the pending batches
    winners: pa.Table  # each key's latest of them
    keys: list[str]
    ops: list[str]
    tombstones: dict[str, str]  # the ordering key of each winner's key that has a tombstone
    columns: dict[str, str]  # the target's columns and types once these rows are in
    source: pa.Table  # the live winners as target rows, `_cdc_apply` saying upsert or delete
    # The greatest pending truncate's ordering key: the target rows ranking at or below it go.
    truncate: str | None = None


def merge_source(table_dir: str, table: TableConfig, dt_: DeltaTable, applied: int, reached: int) -> MergeSource:
    """The rows a MERGE of batches applied+1..reached compares with the target (and a fresh read
    lays over it): batch-sized, read from staging and tombstones only."""
    pending = read_committed_records(path(table_dir, STAGING),
                                     f"_cdc_batch_seq > {applied} AND _cdc_batch_seq <= {reached}")
    winners = latest_of_batch(pending)
    refill: set[str] = set()
    if combine.combines(table):
        winners, refill = _combined_winners(table_dir, table, dt_, pending, winners, reached)
    keys, ops, orders = (winners[c].to_pylist() for c in ("_cdc_key", "_cdc_op", "_cdc_order"))
    tombs = _tombstone_orders(table_dir, [k for k, op in zip(keys, ops) if op == UPSERT] + [TRUNCATE_KEY])
    truncate = truncate_order(winners)
    # The whole table's tombstone: the greatest truncate, applied before or pending (rules.md#rule-9).
    floor = _greatest(tombs.pop(TRUNCATE_KEY, None), truncate) or ""
    # An upsert older than its key's tombstone, or than a truncate, is stale (rules.md#rule-2): it never
    # reaches the MERGE; nor does a truncate, which is no row.
    # A soft-delete table keeps them: they become rows flagged deleted (`with_flags`).
    soft = table.soft_deletes
    alive = [op == DELETE or (op == UPSERT and (soft or o > floor) and not (k in tombs and tombs[k] > o))
             for k, op, o in zip(keys, ops, orders)]
    live = winners.filter(pa.array(alive, pa.bool_()))
    applies = live["_cdc_op"]
    if refill:
        applies = pc.if_else(pc.is_in(live["_cdc_key"], value_set=pa.array(sorted(refill), pa.string())),
                             REFILL, applies)
    live = live.append_column("_cdc_apply", applies)
    images = [decode_row(r) for r in live["_cdc_row"].to_pylist() if r is not None]
    if not soft and DELETE in ops:
        images = _deletes_by_key(live, images, table)
    columns = flagged_columns(_columns(dt_, images, table_dir, table), table)
    if not soft and DELETE in ops:
        images = _fitting_deletes(live, images, columns)
    source = as_target_rows(live, columns, extra=("_cdc_apply",) + (("_cdc_op",) if soft else ()), images=images)
    if soft:
        source = with_flags(source, floor)
    return MergeSource(pending, winners, keys, ops, tombs, columns, source, truncate)


def _deletes_by_key(live: pa.Table, images: list[dict], table: TableConfig) -> list[dict]:
    """The row images of `live`'s imaged records, a (hard) delete's cut to its key and partition
    columns: a delete removes its key's row, and the rest of its image (a before-image, or an
    empty one) is no value of the target, so it neither types a column nor has to fit one."""
    kept = (*table.keys, *table.partition_by)
    ops = [op for op, r in zip(live["_cdc_op"].to_pylist(), live["_cdc_row"].to_pylist()) if r is not None]
    return [{c: image[c] for c in kept if c in image} if op == DELETE else image for op, image in zip(ops, images)]


def _fitting_deletes(live: pa.Table, images: list[dict], columns: dict[str, str]) -> list[dict]:
    """A delete's key or partition value that its column's type cannot hold is left out (null):
    the delete finds its key's row by `_cdc_key`, and no row holds that value anyway."""
    ops = [op for op, r in zip(live["_cdc_op"].to_pylist(), live["_cdc_row"].to_pylist()) if r is not None]
    return [{c: v for c, v in image.items() if fits(v, columns.get(c, STRING))} if op == DELETE else image
            for op, image in zip(ops, images)]


def _columns(dt_: DeltaTable | None, images: list[dict], table_dir: str, table: TableConfig) -> dict[str, str]:
    return shape.target_columns(known_columns(dt_), images, table.keys, table.partition_by,
                                history_types=column_types(table_dir, marked=False))


def _combined_winners(table_dir: str, table: TableConfig, dt_: DeltaTable, pending: pa.Table, winners: pa.Table,
                      reached: int) -> tuple[pa.Table, set[str]]:
    """The winners where a key's latest pending change alone is not its state (engine/combine.py):
    a partial_updates table's keys, keys with a change that leaves a column out, and a soft-delete
    table's deleted keys. Such a key's pending changes are combined with its state before them,
    its target row (or its tombstone), every column of which ranks below them, and with every
    truncate staged (applied ones rank in any order: the greatest is not the only one that ends a
    row its later upserts build on). A key is combined from
    its whole history (staging up to `reached`, and base, with every truncate there) instead when
    that state is not enough: a pending change ranking below its row (arrived late: it may carry a
    column the row's newer changes left out), a pending truncate ranking below its row (the row may
    hold a column only a change below the truncate carried), or a row a soft delete flagged (a
    re-insert must not take its values, a delete keeps them). The result replaces the row even at
    the row's own ordering key (REFILL), unless it is the row as it is. Returns the winners and
    the REFILL keys."""
    partial, soft = table.partial_updates, table.soft_deletes
    marks = combine.marked(pending["_cdc_row"])
    all_keys = [k for k in winners["_cdc_key"].to_pylist() if k != TRUNCATE_KEY]
    existing = {c: t for c, t in existing_columns(dt_).items() if c not in shape.META_COLUMNS}
    values = {c: t for c, t in existing.items() if c != shape.DELETED}
    wanted = set(all_keys) if partial else set(pc.filter(pending["_cdc_key"], marks).to_pylist())
    if soft:
        wanted |= set(pc.filter(pending["_cdc_key"], pc.equal(pending["_cdc_op"], DELETE)).to_pylist())
    flag = soft and shape.DELETED in existing
    seen = delta.rows_with_keys(dt_, (("_cdc_key", "string"), ("_cdc_order", "string"))
                                + (((shape.DELETED, "boolean"),) if flag else ()), all_keys)
    row_order = dict(zip(seen["_cdc_key"].to_pylist(), seen["_cdc_order"].to_pylist()))
    lowest = pa.table({"k": pending["_cdc_key"], "o": pending["_cdc_order"]}).group_by("k").aggregate([("o", "min")])
    late = {k for k, o in zip(lowest["k"].to_pylist(), lowest["o_min"].to_pylist()) if k in row_order and o < row_order[k]}
    if flag:
        late |= {k for k, d in zip(seen["_cdc_key"].to_pylist(), seen[shape.DELETED].to_pylist()) if d}
    pending_cuts = combine.cut_orders(pending)
    if pending_cuts and (partial or combine.leaves_columns_out(table_dir, reached)):
        late |= _keys_above(dt_, min(pending_cuts))
    fold = wanted - late
    if not fold and not late:
        return winners, set()
    current = {r["_cdc_key"]: r for r in _rows_of(dt_, target_schema(existing), sorted(fold | late)).to_pylist()}
    tombs = _tombstone_orders(table_dir, sorted(fold - set(current)) + [TRUNCATE_KEY])
    histories = _histories(table_dir, table, sorted(late) + [TRUNCATE_KEY], reached)
    # Every truncate, not only the greatest (the table's tombstone): one applied after a greater
    # one still ends what a key's later upserts keep, and a soft delete shows that row.
    cuts = sorted({r["_cdc_order"] for r in histories.pop(TRUNCATE_KEY, [])}
                  | {o for o in [tombs.pop(TRUNCATE_KEY, None)] + pending_cuts if o is not None})
    by_key: dict[str, list[dict]] = {}
    for r in pending.filter(pc.is_in(pending["_cdc_key"], value_set=pa.array(sorted(fold), pa.string()))).to_pylist():
        by_key.setdefault(r["_cdc_key"], []).append(r)
    out, refill = [], set()
    for k, records in by_key.items():
        before = current.get(k)
        start = {**before, "_cdc_op": UPSERT, "_cdc_row": None} if before is not None else \
            {"_cdc_key": k, "_cdc_op": DELETE, "_cdc_order": tombs[k], "_cdc_row": None} if k in tombs else None
        if start is None:
            out.append(combine.combined_record(records, partial, table.partition_by, soft, cuts))
            continue
        done = combine.combined_record([start] + records, partial, table.partition_by, soft, cuts)
        if done["_cdc_order"] != start["_cdc_order"]:  # else every pending change ranks below a tombstone: stale
            out.append(done)
    for k, records in histories.items():
        done = combine.combined_record(records, partial, table.partition_by, soft, cuts)
        row = current[k]  # every such key has a row
        if done["_cdc_op"] != UPSERT and not soft:
            out.append(done)
        elif done["_cdc_order"] != row["_cdc_order"]:
            out.append(done)  # a newer pending change: replaces the row as any newer one does
        elif not _same_row(decode_row(done["_cdc_row"]), row, values):
            out.append(done)
            refill.add(k)
    if not out:
        return winners, set()
    combined = pa.Table.from_pylist(out, schema=winners.schema)
    others = winners.filter(pc.invert(pc.is_in(winners["_cdc_key"], value_set=combined["_cdc_key"])))
    return pa.concat_tables([others, combined]), refill


def _keys_above(dt_: DeltaTable, order: str) -> set[str]:
    """The keys of the target rows ranking above `order`, a pending truncate's: every one, not only
    the batch's, since a row may hold a column only a change the truncate cuts carried. At most
    settings.local_apply_rows of them (`_truncate_reads_many` sends more to Spark). Through delta-rs'
    query engine, which skips the files ranking at or below `order` by their statistics: an Arrow
    dataset filter over a partitioned table compares each file's partition values, which delta-rs
    gives as string views, with plain strings, and Arrow has no kernel for that."""
    rows = delta.query(dt_, f"SELECT _cdc_key FROM t WHERE _cdc_order > {delta.sql_text(order)}")
    return set(rows["_cdc_key"].to_pylist())


def _rows_of(dt_: DeltaTable, schema: pa.Schema, keys: list[str]) -> pa.Table:
    """The target rows of `keys`, partition columns included: a batch's worth through the query
    engine (files skipped by their statistics), more in one pass over the table."""
    if len(keys) <= delta.IN_LIST_LIMIT:
        return delta.rows_with_keys(dt_, schema, keys)
    wanted = pa.array(keys, pa.string())
    found = [b.filter(pc.is_in(b.column("_cdc_key"), value_set=wanted)).select(schema.names)
             for b in dt_.to_pyarrow_dataset().to_batches(columns=schema.names)]
    return pa.Table.from_batches(found).cast(schema) if found else schema.empty_table()


def _histories(table_dir: str, table: TableConfig, keys: list[str], reached: int) -> dict[str, list[dict]]:
    """Every staged record (batches up to `reached`) and base row of `keys`, by key."""
    out: dict[str, list[dict]] = {}
    for start in range(0, len(keys), delta.IN_LIST_LIMIT):
        listed = ", ".join(delta.sql_text(k) for k in keys[start:start + delta.IN_LIST_LIMIT])
        sources = [(STAGING, f"_cdc_key IN ({listed}) AND _cdc_batch_seq <= {int(reached)}")]
        if table.base_snapshot is not None:
            sources.append((BASE, f"_cdc_key IN ({listed})"))
        for name, where in sources:
            rows = read_records(path(table_dir, name), where)
            for r in rows.to_pylist() if rows is not None else ():
                out.setdefault(r["_cdc_key"], []).append(r)
    return out


def _same_row(image: dict, row: dict, columns: dict[str, str]) -> bool:
    """Whether a row image holds the target row's values (each converted to its column's type); a
    value of a column the target does not have yet is one the row lacks."""
    if any(v is not None for c, v in image.items() if c not in columns):
        return False
    try:
        return all(same(convert(image.get(c), t), row.get(c)) for c, t in columns.items())
    except Misfit:
        return False


def _tombstone_orders(table_dir: str, keys: list[str]) -> dict[str, str]:
    if not keys:
        return {}
    data = delta.rows_with_keys(path(table_dir, TOMBSTONES), TOMBSTONE_FIELDS, keys)
    return dict(zip(data["_cdc_key"].to_pylist(), data["_cdc_order"].to_pylist())) if data is not None else {}


def truncate_order(records: pa.Table) -> str | None:
    """The greatest ordering key of the truncates among `records` (rules.md#rule-9), or None."""
    orders = records.filter(pc.equal(records["_cdc_op"], TRUNCATE))["_cdc_order"]
    return pc.max(orders).as_py() if len(orders) else None


def _greatest(*orders: str | None) -> str | None:
    return max((o for o in orders if o is not None), default=None)


def with_flags(rows: pa.Table, floor: str | None) -> pa.Table:
    """A soft-delete table's MERGE rows: each an upsert of its row image (a REFILL stays one),
    `_cdc_deleted` set when its change (`_cdc_op`, dropped) is a delete or ranks at or below the
    truncate `floor` (rules.md#rule-12)."""
    deleted = pc.equal(rows["_cdc_op"], DELETE)
    if floor:
        deleted = pc.or_(deleted, pc.less_equal(rows["_cdc_order"], floor))
    rows = rows.set_column(rows.schema.get_field_index(shape.DELETED), shape.DELETED, deleted)
    applies = pc.if_else(pc.equal(rows["_cdc_apply"], REFILL), REFILL, pa.scalar(UPSERT, pa.string()))
    return rows.set_column(rows.schema.get_field_index("_cdc_apply"), "_cdc_apply", applies).drop_columns(["_cdc_op"])


def _literal(value, type_: str) -> str | None:
    if value is None:
        return "NULL"
    if type_ in (INT, LONG, DOUBLE) or decimal_parts(type_):
        return str(value)
    if type_ == "boolean":
        return "true" if value else "false"
    if type_ == DATE and isinstance(value, dt.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


# A MERGE's condition: the key, no literal (see apply_pending).
MERGE_ON_KEY = "t._cdc_key = s._cdc_key"


def key_range(source: pa.Table, table: TableConfig, columns: dict[str, str], alias: str = "") -> str | None:
    """The batch's range of the first key column as SQL, for a query (never a commit: the range
    holds key values), which delta-rs checks against each file's statistics before reading it;
    None when that column's type is not compared that way."""
    first = table.keys[0]
    type_ = columns.get(first)
    if type_ not in _PRUNABLE or source.num_rows == 0:
        return None
    bounds = pc.min_max(source[first]).as_py()
    lo, hi = _literal(bounds["min"], type_), _literal(bounds["max"], type_)
    if bounds["min"] is None or lo is None or hi is None:
        return None
    column = alias + names.datafusion(first)
    return f"{column} >= {lo} AND {column} <= {hi}"


def every_column(source: pa.Table | pa.RecordBatchReader, except_cols=()) -> dict[str, str]:
    """A MERGE's assignment of every source column to the target's column of that name, quoted
    (delta-rs' update_all and insert_all do not quote a name holding a double quote)."""
    return {names.datafusion(c): "s." + names.datafusion(c) for c in source.schema.names if c not in except_cols}
