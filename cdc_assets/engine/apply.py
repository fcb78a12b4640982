"""`staging` (+ `base`) -> `target`: apply the pending batches, or rebuild partitions.

An incremental apply reads the pending batches' staged changes (batch-sized), keeps each
key's latest (or combines them with the key's row, column by column, where changes leave
columns out: `_combined_winners`), and compares every winner with the key's current row by ordering key: target
keeps each row's `_cdc_order`, base rows included (their tier ranks below every change, rule
3), and `tombstones` keeps the ordering key of each deleted key (rule 2). Neither the history
nor the base is read again. Only the target files whose key statistics can hold a touched key
are opened, and only those holding a changed row are rewritten (engine/rewrite.py).

The first apply, a rebuild and a type widening that is no exact cast compute the state from all
of staging and base; Spark executors compute and write it, delta-rs commits the files (spark_files).
A widening whose values cast exactly rewrites the target's files with a cast (engine/retype.py).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from ..core import names
from ..core import target as shape
from ..core.changes import DELETE, RECORD_FIELDS, REFILL, TRUNCATE, TRUNCATE_KEY, UPSERT
from ..core.config import Config, TableConfig
from ..core.errors import OutOfOrder
from ..core.values import (
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    Misfit,
    convert,
    decimal_parts,
    decode_row,
    same,
)
from . import combine, delta, faults, key_spans, retype, rewrite, spark_apply, spark_files, storage
from .ingest import column_types
from .records import read_committed_records, read_records, stored_columns
from .settings import settings
from .spark import map_in_arrow, session_of
from .stage import latest_of_batch, latest_per_key
from .step_results import ApplyResult
from .tables import BASE, STAGING, STAGING_TRIM, TARGET, TOMBSTONE_FIELDS, TOMBSTONES, path
from .truncate import add_columns, truncate_merge

_SPARK_TYPES = {"boolean": "boolean", INT: "int", LONG: "bigint", DOUBLE: "double", STRING: "string", DATE: "date",
                "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz", "binary": "binary"}
_PRUNABLE = (INT, LONG, DOUBLE, STRING, DATE)
# A MERGE rewrites every target file that holds a touched key, so a file's size is what a
# small batch costs: a 1M-row file took delta-rs 0.84 s to rewrite, a 250k-row one 0.22 s.
ROWS_PER_FILE = 250_000


def _history(spark, table_dir: str, has_base: bool, columns: dict[str, str]):
    """Staging and base as one frame of records whose typed columns have the target's types
    (`columns`); a record stored as a row image has them null."""
    sources = [STAGING] + ([BASE] if has_base else [])
    frames = [_as_target_types(spark, path(table_dir, name), columns) for name in sources]
    history = frames[0]
    for frame in frames[1:]:
        history = history.unionByName(frame)
    return history


def _as_target_types(spark, table_path: str, columns: dict[str, str]):
    """A record table's rows with its typed columns cast to the target's types: by Spark when
    every cast keeps its values, else value by value (`_cast_typed`)."""
    from pyspark.sql import functions as F

    stored = stored_columns(table_path)
    frame = spark_files.spark_frame(spark, table_path, list(RECORD_FIELDS) + [(c, spark_type(t)) for c, t in stored.items()])
    record = [F.col(n) for n, _ in RECORD_FIELDS]
    if all(_cast_keeps(stored[c], t) for c, t in columns.items() if c in stored):
        cast = [(F.col(names.spark(c)) if c in stored else F.lit(None)).cast(spark_type(t)).alias(c)
                for c, t in columns.items()]
        return frame.select(*record, *cast)
    schema = _spark_columns(columns) + ", " + delta.spark_schema(RECORD_FIELDS)
    return map_in_arrow(frame, lambda batches: (_cast_typed(b, columns, [n for n, _ in RECORD_FIELDS]) for b in batches),
                        schema)


def _spark_columns(columns: dict[str, str]) -> str:
    return ", ".join(f"{names.spark(c)} {spark_type(t)}" for c, t in columns.items())


def _target_ddl(columns: dict[str, str]) -> str:
    """Target rows' Spark schema: the columns, then the bookkeeping ones."""
    return _spark_columns(columns) + ", " + ", ".join(f"`{m}` string" for m in shape.META_COLUMNS)


def _existing_columns(dt_: DeltaTable | None) -> dict[str, str]:
    if dt_ is None:
        return {}
    return {f.name: shape.column_type(f.type) for f in pa.schema(dt_.schema())}


def _columns(dt_: DeltaTable | None, images: list[dict], table_dir: str, table: TableConfig) -> dict[str, str]:
    return shape.target_columns(_existing_columns(dt_), images, table.keys, table.partition_by,
                                history_types=column_types(table_dir, marked=False))


def _target_schema(columns: dict[str, str], meta=shape.META_COLUMNS) -> pa.Schema:
    return pa.schema([pa.field(c, shape.arrow_type(t)) for c, t in columns.items()] + [pa.field(m, pa.string()) for m in meta])


def _target_rows(winners: list[dict], columns: dict[str, str], images: list[dict], extra=()) -> pa.Table:
    data = shape.typed_columns(images, columns)
    meta = shape.META_COLUMNS + tuple(extra)
    arrays = [pa.array(data[c], type=shape.arrow_type(t)) for c, t in columns.items()]
    arrays += [pa.array([w[m] for w in winners], pa.string()) for m in meta]
    return pa.Table.from_arrays(arrays, schema=_target_schema(columns, meta))


def spark_type(type_: str) -> str:
    parts = decimal_parts(type_)
    return f"decimal({parts[0]},{parts[1]})" if parts else _SPARK_TYPES[type_]


def _typed_batches(columns: dict[str, str], extra=()):
    """What Spark runs on each slice of winners stored as row images: images -> typed target columns
    (then the meta columns and `extra` ones)."""
    def run(batches):
        for batch in batches:
            if batch.num_rows:
                winners = batch.to_pylist()
                images = [decode_row(w["_cdc_row"]) for w in winners]
                yield from _target_rows(winners, columns, images, extra).to_batches()
    return run


def _cast_keeps(have: str, want: str) -> bool:
    """Whether a cast (Spark's or Arrow's) from column type `have` to `want` keeps every value as
    `convert` would: the same type, or a widening no value can overflow (with ANSI off, Spark's
    overflowing cast gives NULL, so anything narrower goes value by value through `convert`)."""
    if have == want or (have, want) in ((INT, LONG), (INT, DOUBLE), (LONG, DOUBLE)):
        return True
    integer_digits = {INT: 10, LONG: 19}
    want_parts, have_parts = decimal_parts(want), decimal_parts(have)
    if want_parts is None:
        return False
    if have in integer_digits:
        return want_parts[0] - want_parts[1] >= integer_digits[have]
    return have_parts is not None and want_parts[1] >= have_parts[1] and \
        want_parts[0] - want_parts[1] >= have_parts[0] - have_parts[1]


def _typed_frame(live, columns: dict[str, str], schema: str, extra=()):
    """Winners as typed target rows: those stored typed have their columns already (`_history`);
    those stored as row images go through `_typed_batches`. `extra`: string columns kept after
    the meta columns."""
    from pyspark.sql import functions as F

    imaged = map_in_arrow(live.where(F.col("_cdc_row").isNotNull()), _typed_batches(columns, extra), schema)
    plain = live.where(F.col("_cdc_row").isNull()).select(*[F.col(names.spark(c)) for c in columns],
                                                          *[F.col(m) for m in shape.META_COLUMNS + tuple(extra)])
    return plain.unionByName(imaged)


def _target_frame(live, columns: dict[str, str], table: TableConfig, floor: str | None):
    """Winners (upserts, and a soft-delete table's deletes) as typed target rows on Spark; in a
    soft-delete table, `_cdc_deleted` says whether each is a delete or ranks at or below the
    truncate `floor` (rule 12)."""
    from pyspark.sql import functions as F

    if not table.soft_deletes:
        return _typed_frame(live, columns, _target_ddl(columns))
    typed = _typed_frame(live, columns, _target_ddl(columns) + ", `_cdc_op` string", extra=("_cdc_op",))
    deleted = F.col("_cdc_op") == DELETE
    if floor:
        deleted = deleted | (F.col("_cdc_order") <= F.lit(floor))
    return typed.withColumn(shape.DELETED, deleted).drop("_cdc_op")


def _cast_typed(batch, columns: dict[str, str], meta=shape.META_COLUMNS):
    """Typed records (a RecordBatch or Table) as target rows: each column cast to its target
    type, exactly (a cast that could change a value goes value by value through `convert`, as
    row images do), followed by the `meta` columns."""
    arrays, fields = [], []
    names = set(batch.schema.names)
    for c, t in columns.items():
        want = shape.arrow_type(t)
        if c not in names:
            values = pa.nulls(batch.num_rows, want)
        else:
            values = batch.column(c)
            if values.type != want:
                values = pc.cast(values, want) if _cast_keeps(shape.column_type(values.type), t) else \
                    pa.array([convert(v, t) for v in values.to_pylist()], want)
        arrays.append(values)
        fields.append(pa.field(c, want))
    for m in meta:
        arrays.append(batch.column(m))
        fields.append(batch.schema.field(m))
    return type(batch).from_arrays(arrays, schema=pa.schema(fields))


# ---- the incremental apply ---------------------------------------------------------

def _tombstone_orders(table_dir: str, keys: list[str]) -> dict[str, str]:
    if not keys:
        return {}
    data = delta.rows_with_keys(path(table_dir, TOMBSTONES), TOMBSTONE_FIELDS, keys)
    return dict(zip(data["_cdc_key"].to_pylist(), data["_cdc_order"].to_pylist())) if data is not None else {}


def truncate_order(records: pa.Table) -> str | None:
    """The greatest ordering key of the truncates among `records` (rule 9), or None."""
    orders = records.filter(pc.equal(records["_cdc_op"], TRUNCATE))["_cdc_order"]
    return pc.max(orders).as_py() if len(orders) else None


def _greatest(*orders: str | None) -> str | None:
    return max((o for o in orders if o is not None), default=None)


def flagged_columns(columns: dict[str, str], table: TableConfig) -> dict[str, str]:
    """A soft-delete table's target columns end with its `_cdc_deleted` flag (rule 12); another
    table has none (one switched back to hard deletes loses it)."""
    if not table.soft_deletes:
        return {c: t for c, t in columns.items() if c != shape.DELETED}
    return {**columns, shape.DELETED: "boolean"} if shape.DELETED not in columns else columns


def _switched_to_hard(dt_: DeltaTable, table: TableConfig) -> bool:
    """Whether a hard-delete table's target still has a soft-delete table's flag column."""
    return not table.soft_deletes and shape.DELETED in _existing_columns(dt_)


def with_flags(rows: pa.Table, floor: str | None) -> pa.Table:
    """A soft-delete table's MERGE rows: each an upsert of its row image (a REFILL stays one),
    `_cdc_deleted` set when its change (`_cdc_op`, dropped) is a delete or ranks at or below the
    truncate `floor` (rule 12)."""
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


def every_column(source: pa.Table, except_cols=()) -> dict[str, str]:
    """A MERGE's assignment of every source column to the target's column of that name, quoted
    (delta-rs' update_all and insert_all do not quote a name holding a double quote)."""
    return {names.datafusion(c): "s." + names.datafusion(c) for c in source.column_names if c not in except_cols}


def _commit_files(table_path: str, version: int) -> tuple[list[dict], list[dict]]:
    """The add and remove actions a commit holds, from its log entry."""
    adds, removes = [], []
    log = storage.read_bytes(storage.join(table_path, "_delta_log", f"{version:020d}.json")).decode("utf-8")
    # One action per "\n"-ended line; str.splitlines would also split inside a value holding
    # U+2028 or U+0085, which delta-rs writes unescaped into a file's statistics.
    for line in log.split("\n"):
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            adds.append(action["add"])
        elif "remove" in action:
            removes.append(action["remove"])
    return adds, removes


def _partitions_of(actions: list[dict], partition_by) -> list[str]:
    keys = {shape.partition_key(partition_by, [(a.get("partitionValues") or {}).get(c) for c in partition_by])
            for a in actions}
    return sorted(keys)


def _merge_tombstones(table_dir: str, winners: pa.Table, reached: int) -> None:
    """Remember each deleted key's greatest ordering key, and the greatest truncate's as the
    tombstone of TRUNCATE_KEY; forget a key's once a newer upsert wins."""
    tomb_path = path(table_dir, TOMBSTONES)
    tomb = delta.open_table(tomb_path)
    if delta.txn_version(tomb, TOMBSTONES) >= reached:
        return  # an earlier attempt of this apply committed it
    source = winners.select(["_cdc_key", "_cdc_order", "_cdc_op"])
    props = delta.commit_props(TOMBSTONES, reached)
    if tomb is None:
        deletes = source.filter(pc.not_equal(source["_cdc_op"], UPSERT)).select(["_cdc_key", "_cdc_order"])
        delta.create(tomb_path, deletes.cast(delta.arrow_schema(TOMBSTONE_FIELDS)), commit_properties=props)
        return
    tomb.merge(source, "t._cdc_key = s._cdc_key", source_alias="s", target_alias="t", commit_properties=props) \
        .when_matched_update({"_cdc_order": "s._cdc_order"}, f"s._cdc_op <> '{UPSERT}' AND s._cdc_order > t._cdc_order") \
        .when_matched_delete(f"s._cdc_op = '{UPSERT}' AND s._cdc_order > t._cdc_order") \
        .when_not_matched_insert({"_cdc_key": "s._cdc_key", "_cdc_order": "s._cdc_order"}, f"s._cdc_op <> '{UPSERT}'") \
        .execute()


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
    # The whole table's tombstone: the greatest truncate, applied before or pending (rule 9).
    floor = _greatest(tombs.pop(TRUNCATE_KEY, None), truncate) or ""
    # An upsert older than its key's tombstone, or than a truncate, is stale (rule 2): it never
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
    columns = flagged_columns(_columns(dt_, images, table_dir, table), table)
    source = _as_target_rows(live, columns, extra=("_cdc_apply",) + (("_cdc_op",) if soft else ()), images=images)
    if soft:
        source = with_flags(source, floor)
    return MergeSource(pending, winners, keys, ops, tombs, columns, source, truncate)


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
    existing = {c: t for c, t in _existing_columns(dt_).items() if c not in shape.META_COLUMNS}
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
    if pending_cuts and (partial or _leaves_columns_out(table_dir, reached)):
        late |= _keys_above(dt_, min(pending_cuts))
    fold = wanted - late
    if not fold and not late:
        return winners, set()
    current = {r["_cdc_key"]: r for r in _rows_of(dt_, _target_schema(existing), sorted(fold | late)).to_pylist()}
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


def _as_target_rows(live: pa.Table, columns: dict[str, str], extra=(), images: list[dict] | None = None) -> pa.Table:
    """Staged records as target rows: row images decoded into typed columns, typed columns cast
    (`_cast_typed`), the `extra` columns kept after the bookkeeping ones. `images`: the decoded
    images of `live`'s imaged records, in order, when the caller has them already."""
    imaged = pc.is_valid(live["_cdc_row"])
    meta = shape.META_COLUMNS + tuple(extra)
    typed = _cast_typed(_where(live, pc.invert(imaged)), columns, meta).cast(_target_schema(columns, meta))
    if live["_cdc_row"].null_count == live.num_rows:
        return typed
    image_rows = live.filter(imaged).to_pylist()
    if images is None:
        images = [decode_row(w["_cdc_row"]) for w in image_rows]
    return pa.concat_tables([_target_rows(image_rows, columns, images, extra), typed])


def apply_pending(spark, cfg: Config, table: TableConfig) -> ApplyResult:
    """Apply the pending batches. `spark`: a session, or a function that starts one; an
    incremental apply never calls it (only a first apply or a type widening needs Spark)."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    # The one snapshot of target this apply reads and commits through: a concurrent commit to
    # target (another run of this table) then fails ours with a conflict instead of being
    # overwritten with winners computed from an older watermark.
    dt_ = delta.open_table(target_path)
    applied = delta.txn_version(dt_, TARGET)
    staged = delta.step_version(path(table_dir, STAGING), STAGING)
    has_base = table.base_snapshot is not None
    if has_base and delta.step_version(path(table_dir, BASE), BASE) < 0:
        raise OutOfOrder(f"table {table.name}: base snapshot not imported yet: materialize {table.name}/base first")
    reached = max(staged, 0 if has_base else -1)
    if reached <= applied:
        return ApplyResult(nothing_new=True, applied_batch=applied)
    if dt_ is None or delta.open_table(path(table_dir, TOMBSTONES)) is None:
        # The first apply (or a target from before `tombstones` existed): the whole state at once.
        return dataclasses.replace(_build(spark, cfg, table, dt_, reached, None, first=True),
                                   seconds=round(time.time() - t0, 2))

    if _switched_to_hard(dt_, table):
        # Switched from soft deletes: a flagged row is a deleted key, no row of a hard-delete
        # table, and the flag is no column of one: the target is built again without either.
        return dataclasses.replace(_build(spark, cfg, table, dt_, reached, None, first=True),
                                   seconds=round(time.time() - t0, 2),
                                   applied_on="a whole build: deletes are hard now")

    on_spark = None  # why a batch large enough for Spark is applied in this process
    if spark_apply.runs_on_spark(table_dir, applied) or _truncate_reads_many(table_dir, table, dt_, applied, reached):
        if table.insert_only:
            on_spark = "this process: an insert_only table's rows are appended by delta-rs"
        elif table.change_feed:
            on_spark = "this process: the change data feed's files are written by delta-rs' MERGE"
        elif combine.combines(table) and (table.partial_updates or table.soft_deletes or
                                           _leaves_columns_out(table_dir, reached)):
            # Each key's changes are combined column by column, with its earlier ones too (a soft
            # delete keeps the key's last live row, which a late change may set): Spark builds
            # the whole state from staging and base, as a first apply does.
            return dataclasses.replace(
                _build(spark, cfg, table, dt_, reached, None, first=True), seconds=round(time.time() - t0, 2),
                applied_on="spark: the whole state, each key's changes combined column by column")
        else:
            return _apply_on_spark(spark, cfg, table, dt_, applied, reached, t0)

    m = merge_source(table_dir, table, dt_, applied, reached)
    pending, winners, keys, ops, tombs, columns = m.pending, m.winners, m.keys, m.ops, m.tombstones, m.columns
    faults.point("target.computed")  # decided; nothing is committed yet
    if any(_existing_columns(dt_).get(c, t) != t for c, t in columns.items()):
        # A column widened: the target is rewritten once with the wider type, as of the batch
        # it reached; this apply then goes on from there.
        widened = _widen(spark, cfg, table, dt_, applied, columns)
        if (widened.applied_batch or 0) >= reached:  # built as of this apply's batch (a trimmed staging)
            return dataclasses.replace(widened, seconds=round(time.time() - t0, 2))
        dt_ = delta.load(target_path)
    if table.insert_only:
        return _append(table, target_path, dt_, m, applied, reached, t0)
    if DELETE in ops or TRUNCATE in ops or tombs:
        # Only a delete or truncate, or an upsert of a key that has a tombstone, can change tombstones.
        touching = [op != UPSERT or k in tombs for k, op in zip(keys, ops)]
        _merge_tombstones(table_dir, winners.filter(pa.array(touching, pa.bool_())), reached)
    dt_ = delta.keep_change_feed(target_path, dt_, table.change_feed)  # before the MERGE that it is to record
    files_before, version_before = len(dt_.file_uris()), dt_.version()
    source = m.source
    # A truncate can change any row: the commit says so (a BigQuery publish then sends the whole target).
    marks = {"from_batch": applied + 1, **({"truncate": "true"} if m.truncate else {})}
    props = delta.commit_props(TARGET, reached, marks)
    truncated = 0  # rows a truncate's own MERGE deleted (or flagged)
    if m.truncate and not rewrite.applies(dt_, source):
        # A truncate never reads the whole table's keys (engine/truncate.py): a new column is added
        # first, and the file-by-file rewrite takes the batch; a change data feed's truncate is a
        # MERGE of its own, whose change files record each row it takes.
        if delta.records_change_feed(dt_):
            dt_, truncated = truncate_merge(target_path, dt_, m.truncate, table.soft_deletes,
                                            props if source.num_rows == 0 else None)
        else:
            dt_ = add_columns(target_path, dt_, source.drop_columns(["_cdc_apply"]).schema)
    if rewrite.applies(dt_, source):
        done = rewrite.rewrite(target_path, dt_, source, table.partition_by,
                               lambda figures: delta.commit_props(TARGET, reached, {**marks, **figures}),
                               ROWS_PER_FILE, truncate=m.truncate, soft=table.soft_deletes)
        inserts, updates, deletes = done.inserts, done.updates, done.deletes
    else:
        # A new column (schema evolution) or a change data feed to write: delta-rs' MERGE, on
        # the join alone, since delta-rs writes a MERGE's predicate, and any early filter it
        # derives from the source's values, into the commit's operationParameters, so a key
        # range there would put key values in the Delta log's commit info (streamed_exec
        # derives none). It reads every target file's keys.
        merge = dt_.merge(source, MERGE_ON_KEY, source_alias="s", target_alias="t", merge_schema=True,
                          streamed_exec=True, commit_properties=props)
        result = merge \
            .when_matched_delete(f"s._cdc_apply = '{DELETE}' AND s._cdc_order > t._cdc_order") \
            .when_matched_update(every_column(source, except_cols=["_cdc_apply"]),
                                 f"(s._cdc_apply = '{UPSERT}' AND s._cdc_order > t._cdc_order) OR "
                                 f"(s._cdc_apply = '{REFILL}' AND s._cdc_order >= t._cdc_order)") \
            .when_not_matched_insert(every_column(source, except_cols=["_cdc_apply"]),
                                     f"s._cdc_apply IN ('{UPSERT}', '{REFILL}')") \
            .execute()
        inserts, updates, deletes = (result.get(f"num_target_rows_{n}", 0) for n in ("inserted", "updated", "deleted"))
    faults.point("target.committed")
    return _applied_figures(table, target_path, applied, reached, pending.num_rows, winners.num_rows,
                            (inserts, updates, deletes + truncated), files_before, version_before, t0, on_spark)


def _applied_figures(table: TableConfig, target_path: str, applied: int, reached: int, pending: int, winners: int,
                     changed: tuple[int, int, int], files_before: int, version_before: int, t0: float,
                     applied_on: str | None = None) -> ApplyResult:
    """An incremental apply's figures: its rows from the counts, its files from its commit."""
    inserts, updates, deletes = changed
    final = delta.snapshot(target_path)
    assert final is not None  # the apply's caller made or found the target
    adds, removes = _commit_files(target_path, final.version()) if final.version() > version_before else ([], [])
    return ApplyResult(
        batches_applied=f"{applied + 1}..{reached}", applied_batch=reached,
        changes_pending=pending, keys_changed=sum(changed),
        inserts=inserts, updates=updates, deletes=deletes, stale_skipped=winners - sum(changed),
        superseded=pending - winners,
        files_added=len(adds), files_removed=len(removes), files_before=files_before,
        partitions_rewritten=tuple(_partitions_of(adds + removes, table.partition_by) if table.partition_by else []),
        rows=final.count(), delta_version=final.version(), seconds=round(time.time() - t0, 2), applied_on=applied_on,
    )


def _truncate_reads_many(table_dir: str, table: TableConfig, dt_: DeltaTable, applied: int, reached: int) -> bool:
    """Whether a pending truncate makes this apply read, row by row, more target rows than an apply
    in this process takes (the rows of the files it cuts only in part, engine/rewrite.py): such an
    apply runs on Spark executors, as a large batch does."""
    if table.format != "debezium-json" and not table.options.get("truncates"):
        return False
    found = delta.query(path(table_dir, STAGING),
                        f"SELECT min(_cdc_order) AS lo, max(_cdc_order) AS o FROM t WHERE _cdc_key = "
                        f"{delta.sql_text(TRUNCATE_KEY)} AND _cdc_batch_seq > {int(applied)} AND _cdc_batch_seq <= "
                        f"{int(reached)}")
    if found is None or not found.num_rows or found["o"][0].as_py() is None:
        return False
    rows = rewrite.rows_read_for(dt_, found["o"][0].as_py(), table.soft_deletes)
    if combine.combines(table) and (table.partial_updates or _leaves_columns_out(table_dir, reached)):
        # each key whose row ranks above the lowest pending truncate is combined again from its
        # history (`_combined_winners`): its row may hold a column only a change the truncate cuts carried
        rows += rewrite.rows_above(dt_, found["lo"][0].as_py())
    return rows > settings().local_apply_rows


def _leaves_columns_out(table_dir: str, reached: int) -> bool:
    """Whether a staged change up to batch `reached` may leave a column out (its image lists some)."""
    found = delta.query(path(table_dir, STAGING), "SELECT count(*) AS n FROM t WHERE _cdc_batch_seq <= "
                                                  f"{int(reached)} AND _cdc_row LIKE '%{combine.UNSET_KEY}%'")
    return found is not None and found.num_rows > 0 and int(found["n"][0].as_py() or 0) > 0


def _apply_on_spark(spark, cfg: Config, table: TableConfig, dt_: DeltaTable, applied: int, reached: int,
                    t0: float) -> ApplyResult:
    """A large incremental apply, computed and written by Spark executors (engine/spark_apply.py)."""
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    columns = flagged_columns(shape.target_columns(_existing_columns(dt_), [], table.keys, table.partition_by,
                                                   history_types=column_types(table_dir, marked=False)), table)
    if _existing_columns(dt_) != columns | {m: STRING for m in shape.META_COLUMNS}:
        # A column is new or wider: the target is rewritten once with it, as of the batch it
        # reached (a commit of added files cannot change a Delta table's schema); this apply
        # then goes on from there.
        widened = _widen(spark, cfg, table, dt_, applied, columns)
        if (widened.applied_batch or 0) >= reached:  # built as of this apply's batch (a trimmed staging)
            return dataclasses.replace(widened, seconds=round(time.time() - t0, 2))
        dt_ = delta.load(target_path)
    dt_ = delta.keep_change_feed(target_path, dt_, False)
    files_before, version_before = len(dt_.file_uris()), dt_.version()
    session = session_of(spark)
    staged = _as_target_types(session, path(table_dir, STAGING), columns)
    done = spark_apply.apply(session, table, table_dir, dt_, applied, reached, staged,
                             lambda frame, floor: _target_frame(frame, columns, table, floor),
                             lambda figures: delta.commit_props(TARGET, reached, {"from_batch": applied + 1,
                                                                                  **figures}), ROWS_PER_FILE)
    faults.point("target.committed")
    return _applied_figures(table, target_path, applied, reached, done.changes_pending, done.winners,
                            (done.inserts, done.updates, done.deletes), files_before, version_before, t0, "spark")


def _append(table: TableConfig, target_path: str, dt_: DeltaTable, m: MergeSource, applied: int, reached: int,
            t0: float) -> ApplyResult:
    """An insert_only table's batches: their rows appended, no target file read or rewritten
    (ingest quarantined every change that is not an insert)."""
    rows = m.source.filter(pc.equal(m.source["_cdc_apply"], UPSERT)).drop_columns(["_cdc_apply"])
    files_before = len(dt_.file_uris())
    props = delta.commit_props(TARGET, reached, {"from_batch": applied + 1, "insert_only": "true"})
    # through the snapshot the watermark was read on: another run appending the same batch makes ours fail
    write_deltalake(dt_, rows, mode="append", schema_mode="merge", partition_by=list(table.partition_by) or None,
                    commit_properties=props)
    faults.point("target.committed")
    final = delta.snapshot(target_path)
    assert final is not None  # the apply's caller made or found the target
    adds, _ = _commit_files(target_path, final.version())
    return ApplyResult(
        batches_applied=f"{applied + 1}..{reached}", applied_batch=reached, appended=True,
        changes_pending=m.pending.num_rows, keys_changed=rows.num_rows, inserts=rows.num_rows,
        updates=0, deletes=0, stale_skipped=0, superseded=m.pending.num_rows - m.winners.num_rows,
        files_added=len(adds), files_removed=0, files_before=files_before,
        partitions_rewritten=tuple(_partitions_of(adds, table.partition_by) if table.partition_by else []),
        rows=final.count(), delta_version=final.version(), seconds=round(time.time() - t0, 2),
    )


# ---- whole-state builds: on Spark executors, or in this process for a small table -------

class _SparkHistory:
    """Staging and base as of a batch on Spark, and each key's latest change (combined column by
    column where the key's changes leave columns out, engine/combine.py). One aggregation
    over the history counts its rows, its keys and its upserts, and says whether every key has
    one change (a first build from an export with distinct keys, the common case): such a
    history is its own latest, which spares the shuffle and sort of picking the latest per key,
    and its counts are the target's and the tombstones' sizes, so no later pass counts again."""

    def __init__(self, spark, table_dir: str, table: TableConfig, columns: dict[str, str], reached: int):
        from pyspark.sql import functions as F

        has_base = table.base_snapshot is not None
        self.columns = columns
        history = _history(spark, table_dir, has_base, columns).where(F.col("_cdc_batch_seq") <= reached)
        per_key = history.groupBy("_cdc_key").agg(
            F.count(F.lit(1)).alias("n"), F.sum(F.when(F.col("_cdc_op") == UPSERT, 1).otherwise(0)).alias("up"),
            F.max(F.when(F.col("_cdc_op") == TRUNCATE, F.col("_cdc_order"))).alias("cut"))
        n, keys, most, upserts, cut = per_key.agg(F.sum("n"), F.count(F.lit(1)), F.max("n"), F.sum("up"),
                                                  F.max("cut")).first()
        self.history_rows, self.keys = int(n or 0), int(keys)
        self.distinct = (most or 0) <= 1
        if self.distinct:
            self.latest = history
        elif combine.combines(table):
            cuts = [r[0] for r in history.where(F.col("_cdc_op") == TRUNCATE).select("_cdc_order").collect()] \
                if cut is not None else []
            self.latest = combine.spark_latest_or_combined(history, table.partial_updates, table.partition_by,
                                                           table.soft_deletes, cuts).cache()
        else:
            self.latest = latest_per_key(history).cache()
        self.truncate = cut  # the greatest truncate: the rows ranking at or below it are gone (rule 9)
        # with one change per key and no truncate, the upserts are the target's rows and the rest its tombstones
        self.upserts = int(upserts or 0) if self.distinct and cut is None else None

    def write_target(self, target_path: str, table: TableConfig, partition_keys: list[str] | None) -> list:
        from pyspark.sql import functions as F

        if table.soft_deletes:  # every key's latest change is a row (rule 12)
            live, rows = self.latest.where(F.col("_cdc_op") != TRUNCATE), None
        else:
            live = self.latest.where(F.col("_cdc_op") == UPSERT)
            if self.truncate is not None:
                live = live.where(F.col("_cdc_order") > F.lit(self.truncate))
            rows = self.upserts
        if partition_keys is not None:
            wanted = [shape.partition_text(shape.partition_values(k)) for k in partition_keys]
            live, rows = live.where(F.col("_cdc_partition").isin(wanted)), None
        typed = _target_frame(live, self.columns, table, self.truncate)
        # Files of about ROWS_PER_FILE rows, each holding one range of keys (within a partition),
        # so that a batch's keys sit in few files, the ones a MERGE rewrites, and a lookup of keys
        # skips the others by their statistics.
        n_files = max(1, math.ceil((live.count() if rows is None else rows) / ROWS_PER_FILE))
        order = [F.col(names.spark(c)) for c in list(table.partition_by) + list(table.keys)]
        typed = typed.repartitionByRange(n_files, *order)
        return spark_files.write_files(typed, target_path, table.partition_by, sort_by=list(table.keys))

    def write_deletes(self, tomb_path: str) -> list:
        from pyspark.sql import functions as F

        if self.distinct and self.upserts == self.history_rows:
            return []  # no delete: no pass over the history for it
        # deletes, and the greatest truncate as the tombstone of TRUNCATE_KEY
        deleted = self.latest.where(F.col("_cdc_op") != UPSERT).select("_cdc_key", "_cdc_order")
        return spark_files.write_files(deleted, tomb_path, sort_by=["_cdc_key"])

    def close(self) -> None:
        if not self.distinct:
            self.latest.unpersist()


class _LocalHistory:
    """The same as _SparkHistory, for a history of at most settings.local_build_rows rows, in this
    process with Arrow: read through delta-rs, each key's latest picked by one sort, the files
    written as Spark's tasks write them (spark_files.write_arrow)."""

    def __init__(self, table_dir: str, table: TableConfig, columns: dict[str, str], reached: int):
        self.columns = columns
        has_base = table.base_snapshot is not None
        record = [n for n, _ in RECORD_FIELDS]
        staged = read_records(path(table_dir, STAGING), f"_cdc_batch_seq <= {int(reached)}")
        parts = [rows for rows in (staged, _base_records(path(table_dir, BASE)) if has_base else None)
                 if rows is not None]
        history = pa.concat_tables([_cast_typed(rows, columns, record) for rows in parts]) if parts else \
            _cast_typed(delta.arrow_schema(RECORD_FIELDS).empty_table(), columns, record)
        self.history_rows = history.num_rows
        self.keys = pc.count_distinct(history["_cdc_key"]).as_py() if history.num_rows else 0
        if self.keys == history.num_rows:
            self.latest = history
        elif combine.combines(table):
            self.latest = combine.latest_or_combined(history, table.partial_updates, table.partition_by,
                                                     table.soft_deletes)
        else:
            self.latest = latest_of_batch(history)
        self.truncate = truncate_order(self.latest)  # rule 9, as _SparkHistory

    def write_target(self, target_path: str, table: TableConfig, partition_keys: list[str] | None) -> list:
        if table.soft_deletes:  # every key's latest change is a row (rule 12)
            live = _where(self.latest, pc.not_equal(self.latest["_cdc_op"], TRUNCATE))
        else:
            live = _where(self.latest, pc.equal(self.latest["_cdc_op"], UPSERT))
            if self.truncate is not None:
                live = _where(live, pc.greater(live["_cdc_order"], self.truncate))
        if partition_keys is not None:
            wanted = [shape.partition_text(shape.partition_values(k)) for k in partition_keys]
            live = _where(live, pc.is_in(live["_cdc_partition"], value_set=pa.array(wanted, pa.string())))
        if table.soft_deletes:
            typed = _as_target_rows(live.append_column("_cdc_apply", live["_cdc_op"]), self.columns,
                                    extra=("_cdc_apply", "_cdc_op"))
            typed = with_flags(typed, self.truncate).drop_columns(["_cdc_apply"])
        else:
            typed = _as_target_rows(live, self.columns)
        # key ranges in files of ROWS_PER_FILE rows (within a partition), as _SparkHistory writes them
        order = pc.sort_indices(typed, [(c, "ascending") for c in list(table.partition_by) + list(table.keys)])
        if not np.array_equal(order.to_numpy(), np.arange(len(order))):  # an export in key order is kept as it is
            typed = typed.take(order)
        return spark_files.write_arrow(typed, target_path, table.partition_by, ROWS_PER_FILE)

    def write_deletes(self, tomb_path: str) -> list:
        deleted = self.latest.filter(pc.not_equal(self.latest["_cdc_op"], UPSERT)).select(["_cdc_key", "_cdc_order"])
        return spark_files.write_arrow(deleted.sort_by("_cdc_key").cast(delta.arrow_schema(TOMBSTONE_FIELDS)),
                                       tomb_path)

    def close(self) -> None:
        pass


class _BaseFiles:
    """The first build of a target from its base alone (no change staged yet), a base file at a
    time: each typed base file becomes one target file, by a task that reads it, casts its columns
    to the target's types and writes it (engine/key_spans.run_per_file: threads here, or Spark
    tasks for a base above settings.local_build_rows rows). An export in key order, each file
    strictly ascending and their key spans disjoint, holds each key once, which is what a build
    must otherwise learn by counting every key of the table at once; its rows are their own
    latest changes and already in key order. Anything else (an export out of key order, a
    repeated key, a row image) is not proven, and the build takes the general way."""

    def __init__(self, spark, base: DeltaTable, columns: dict[str, str]):
        self.spark, self.base, self.columns = spark, base, columns
        self.history_rows = self.keys = delta.file_stats(base)[2]

    @classmethod
    def of(cls, spark, table_dir: str, table: TableConfig, columns: dict[str, str], reached: int,
           partition_keys) -> _BaseFiles | None:
        """The build when the target as of batch `reached` is a typed base alone, built whole and
        unpartitioned; else None."""
        if reached != 0 or partition_keys is not None or table.base_snapshot is None or table.partition_by:
            return None
        base = delta.open_table(path(table_dir, BASE))
        # an export read row by row keeps its rows as images: its import records no typed columns
        if base is None or "typed_columns" not in (delta.step_commit(base, BASE, 0) or {}):
            return None
        return cls(spark, base, columns)

    def build(self, target_path: str, table: TableConfig) -> list | None:
        """The target's files, written; None (and nothing left written) when they do not prove each key once."""
        folder = spark_files.new_folder(target_path)
        if not storage.is_remote(folder):
            os.makedirs(folder)
        fields = spark_files.WRITTEN + key_spans.SPAN_FIELDS
        try:
            done = key_spans.run_per_file(self.spark, sorted(self.base.file_uris()), self.history_rows,
                                          _base_file_task(target_path, folder, self.columns, table), fields)
        except Exception:
            storage.remove_tree(folder)
            raise
        if sum(done["rows"].to_pylist()) != self.history_rows or not key_spans.proven_unique(done, table.keys):
            storage.remove_tree(folder)
            return None
        return spark_files.add_actions(done.select([n for n, _ in spark_files.WRITTEN]).to_pylist())

    def write_deletes(self, tomb_path: str) -> list:
        return []  # a base holds no deletes

    def close(self) -> None:
        pass


def _base_file_task(target_path: str, folder: str, columns: dict[str, str], table: TableConfig):
    """A task making a target file of each base file it is handed (_BaseFiles)."""
    keys, soft = list(table.keys), table.soft_deletes
    schema = _target_schema(columns)
    store = storage.settings()
    write = spark_files.writer_task(target_path, folder, schema, [], store)
    out = delta.arrow_schema(spark_files.WRITTEN + key_spans.SPAN_FIELDS)

    def run(batches):
        for pf in spark_files.listed_files(batches, store):
            have = set(pf.schema_arrow.names)
            records = pf.read(columns=[c for c in [*columns, *shape.META_COLUMNS, "_cdc_row", "_cdc_op"]
                                       if c in have])
            if not records.num_rows:
                continue
            rows = _cast_typed(records, columns)
            if soft:  # every base row is live (rule 12)
                i = rows.schema.get_field_index(shape.DELETED)
                rows = rows.set_column(i, shape.DELETED, pa.repeat(pa.scalar(False), rows.num_rows))
            rows = rows.cast(schema)
            said = key_spans.span(rows, keys)
            # a row image, or a change other than an upsert, is no typed base row: not proven either
            said["ascending"] = said["ascending"] and records["_cdc_row"].null_count == records.num_rows \
                and pc.all(pc.equal(records["_cdc_op"], UPSERT)).as_py()
            if not said["ascending"]:  # the build takes the general way: no file is worth writing
                yield pa.RecordBatch.from_pylist([said], schema=out)
                continue
            for b in write(rows.to_batches()):  # one file: the writer keeps one per partition value
                for w in b.to_pylist():
                    yield pa.RecordBatch.from_pylist([{**w, **said}], schema=out)
    return run


def _where(rows: pa.Table, mask) -> pa.Table:
    """rows.filter(mask), without copying the rows when the mask keeps all of them."""
    return rows if pc.all(pc.fill_null(mask, False)).as_py() else rows.filter(mask)


def _base_records(base_path: str) -> pa.Table | None:
    """The base's records in the export's order: its files' names sort in the order of the
    export's lines (base._export_tasks), so an export in key order is read in key order."""
    import pyarrow.dataset as ds

    dt_ = delta.open_table(base_path)
    if dt_ is None:
        return None
    schema = pa.schema(list(delta.arrow_schema(RECORD_FIELDS))
                       + [pa.field(c, shape.arrow_type(t)) for c, t in stored_columns(base_path).items()])
    fs, paths = storage.arrow_paths(sorted(dt_.file_uris()))
    return ds.dataset(paths, format="parquet", schema=schema, filesystem=fs).to_table()


def _history_rows(table_dir: str, has_base: bool) -> int:
    """Rows in staging and base, from their logs' statistics (no data file read)."""
    return sum(delta.file_stats(delta.open_table(path(table_dir, name)))[2]
               for name in [STAGING] + ([BASE] if has_base else []))


def _build(spark, cfg: Config, table: TableConfig, dt_: DeltaTable | None, reached: int,
           partition_keys: list[str] | None, first: bool, columns: dict[str, str] | None = None,
           widen: bool = False, tombstones: bool = False) -> ApplyResult:
    """Target (or some of its partitions) as of batch `reached`, from staging and base: each
    key's latest change, row images turned into typed columns, the files written (by Spark, or
    in this process for a history of at most settings.local_build_rows rows); delta-rs commits
    them in one version replacing the files they supersede."""
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    staging = delta.open_table(path(table_dir, STAGING))
    if not first and reached < delta.txn_version(staging, STAGING_TRIM):
        # A trim kept of staging's batches up to its reach only each key's latest change: the
        # state as of an earlier batch (a target restored to a version before the trim) is no
        # longer there to compute, and a partition of it beside the others would be a state no
        # run passes through. The whole target is built as of the last staged batch instead,
        # as a first build does, with that batch as the one it reached.
        reached, partition_keys, first = delta.txn_version(staging, STAGING), None, True
    if columns is None:
        ledger = column_types(table_dir, marked=False)
        columns = flagged_columns(shape.target_columns(_existing_columns(dt_), [], table.keys, table.partition_by,
                                                       history_types=ledger), table)
    if partition_keys is not None and _existing_columns(dt_) != columns | {m: STRING for m in shape.META_COLUMNS}:
        partition_keys = None  # a column is new or wider since: every file is rewritten with the new schema
    has_base = table.base_snapshot is not None
    history: _BaseFiles | _LocalHistory | _SparkHistory
    by_files = _BaseFiles.of(spark, table_dir, table, columns, reached, partition_keys)
    adds = by_files.build(target_path, table) if by_files is not None else None
    if by_files is not None and adds is not None:
        history = by_files
    elif _history_rows(table_dir, has_base) <= settings().local_build_rows:
        history = _LocalHistory(table_dir, table, columns, reached)
    else:
        history = _SparkHistory(session_of(spark), table_dir, table, columns, reached)
    try:
        if not isinstance(history, _BaseFiles):
            adds = history.write_target(target_path, table, partition_keys)
        assert adds is not None
        arrow_schema = _target_schema(columns)
        if partition_keys is None or dt_ is None:
            removes = None  # every file, and the schema, replaced
        else:
            wanted_keys = set(partition_keys)
            removes = spark_files.removes_for(dt_, keep=lambda pv: shape.partition_key(
                table.partition_by, [pv.get(c) for c in table.partition_by]) not in wanted_keys)
        if first:
            props = delta.commit_props(TARGET, reached, {"from_batch": max(delta.txn_version(dt_, TARGET), -1) + 1,
                                                         "build": "full"})
        else:
            # "widen" when an apply rewrites the target for a wider column type, "rebuild" otherwise
            step = "widen" if widen else "rebuild"
            props = delta.CommitProperties(custom_metadata={"cdc.step": step, "cdc.reached": str(reached)})
        faults.point("target.computed")
        try:
            final = spark_files.commit(target_path, dt_, arrow_schema, adds, removes, table.partition_by, props,
                                       delta.target_configuration(table.change_feed))
        except Exception:
            spark_files.discard(target_path, adds)
            raise
        if first or tombstones:
            _build_tombstones(history, table_dir, reached)
        faults.point("target.committed")
    finally:
        history.close()
    rows = sum(json.loads(a.stats)["numRecords"] for a in adds)
    replaced = len(dt_.file_uris()) if removes is None and dt_ is not None else len(removes or [])
    figures = ApplyResult(applied_batch=reached, rows_written=rows, files_added=len(adds), files_removed=replaced,
                          rows=final.count(), delta_version=final.version(),
                          partitions_rewritten=tuple(sorted(partition_keys)) if partition_keys is not None else None)
    if first:
        applied = delta.txn_version(dt_, TARGET)
        start = applied + 1 if applied >= 0 or table.base_snapshot else 1
        # Every staged change up to the batch is pending at once; of each key's latest, the live
        # ones become rows and the deletes (of keys never in this target) change nothing.
        figures = dataclasses.replace(
            figures, batches_applied=f"{start}..{reached}", changes_pending=history.history_rows,
            inserts=rows, updates=0, deletes=0, keys_changed=rows,
            stale_skipped=history.keys - rows, superseded=history.history_rows - history.keys)
    return figures


def _casts_exactly(have: str, want: str) -> bool:
    """Whether every value of column type `have` is a value of `want` as it is, so that a stored
    value cast to `want` is the value a rebuild from its change would give (a long into a double
    can round, and text needs the value as it was written: those are rebuilt)."""
    if have == DATE:
        return want in (TIMESTAMP, TIMESTAMP_NTZ)  # its midnight, in UTC for an instant
    return _cast_keeps(have, want) and (have, want) != (LONG, DOUBLE)


def _widen(spark, cfg: Config, table: TableConfig, dt_: DeltaTable, applied: int,
           columns: dict[str, str]) -> ApplyResult:
    """The target as of batch `applied` with the column types `columns` (wider ones, new ones):
    its files cast to them when each changed column's values cast exactly, none is a partition
    column and the target is of a size this process builds (engine/retype.py: one streamed read
    and write of the target), else built again from staging and base."""
    existing = _existing_columns(dt_)
    changed = {c: t for c, t in columns.items() if c in existing and existing[c] != t}
    # a target above the local size is built on Spark's executors: nothing table-sized in this process
    if (any(c in table.partition_by or not _casts_exactly(existing[c], t) for c, t in changed.items())
            or delta.file_stats(dt_)[2] > settings().local_build_rows):
        return _build(spark, cfg, table, dt_, applied, None, first=False, columns=columns, widen=True)
    files = len(dt_.file_uris())
    props = delta.CommitProperties(custom_metadata={"cdc.step": "widen", "cdc.reached": str(applied)})
    final = retype.rewrite(path(cfg.table_dir(table.name), TARGET), dt_, _target_schema(columns), table.partition_by,
                           props)
    faults.point("target.committed")
    return ApplyResult(applied_batch=applied, files_added=files, files_removed=files, rows=final.count(),
                       delta_version=final.version())


def _build_tombstones(history, table_dir: str, reached: int) -> None:
    """The tombstones table again: each key whose latest change is a delete, with its ordering key."""
    tomb_path = path(table_dir, TOMBSTONES)
    old = delta.open_table(tomb_path)
    if delta.txn_version(old, TOMBSTONES) >= reached:
        return
    adds = history.write_deletes(tomb_path)
    removes = spark_files.removes_for(old) if old is not None else []
    spark_files.commit(tomb_path, old, delta.arrow_schema(TOMBSTONE_FIELDS), adds, removes, (),
                       delta.commit_props(TOMBSTONES, reached))


def rebuild_whole(spark, cfg: Config, table: TableConfig, dt_: DeltaTable, reached: int) -> ApplyResult:
    """The whole target and its tombstones again from staging as of batch `reached` (the
    tombstones table must be gone: a tombstone is a key only, rebuilt from the deletes)."""
    return _build(spark, cfg, table, dt_, reached, None, first=False, tombstones=True)


def rebuild(spark, cfg: Config, table: TableConfig, partition_keys: list[str] | None) -> ApplyResult:
    """Rebuild partitions (or the whole target) from staging as of the batch the target reached;
    a target restored to a batch a staging trim has passed is built whole as of the last staged
    batch (`_build`)."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    dt_ = delta.open_table(path(table_dir, TARGET))  # read and committed through, as in apply_pending
    reached = delta.txn_version(dt_, TARGET)
    if dt_ is None or reached < 0:
        return ApplyResult(nothing_applied_yet=True)
    before = dt_.version()
    figures = _build(spark, cfg, table, dt_, reached, partition_keys, first=False)
    whole = (figures.applied_batch or 0) > reached  # a target older than a staging trim's reach (`_build`)
    return dataclasses.replace(figures, rebuilt_as_of_batch=figures.applied_batch,
                               partitions="all" if whole else (tuple(partition_keys or ()) or "all"),
                               previous_version=before, seconds=round(time.time() - t0, 2))
