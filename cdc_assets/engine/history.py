"""`changes` (+ `base`) -> `history`: every version of each key, SCD type 2 (core/history.py).

An update reads the new batches' changes, the history rows
of the keys they touch (files hold key ranges, so delta-rs skips the others by their
statistics), places the new changes among those versions in the driver, and commits one
MERGE on (key, valid_from) that inserts the new versions and closes or re-labels the ones
they follow; the MERGE reads every history file, since a key range in its condition would
go into the commit (merge_source.MERGE_ON_KEY). The first build, a rebuild and a type widening compute the whole history on
Spark executors with the same rules as window functions; delta-rs commits the files.
A truncate (rules.md#rule-9) is no key's change: it closes the versions current at it, so a new one touches
every key live at it. A touched key's versions are computed again from all its changes, read from
`changes` by key, where its versions cannot stand for them: `track_except` folds changes into
versions, and where changes leave columns out (rules.md#rule-10) a change landing below a key's versions
changes their combined rows. Elsewhere its versions and the new changes are enough.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time

import pyarrow as pa
import pyarrow.compute as pc

from ..core import history as versions
from ..core import target as shape
from ..core.changes import DELETE, TRUNCATE, TRUNCATE_KEY
from ..core.config import Config, ConfigError, TableConfig
from ..core.errors import OutOfOrder, TerminalError
from ..core.names import spark as spark_name
from ..core.ordering import BASE_TIER
from ..core.values import NULL, UNSET_KEY, decode_image, decode_row
from . import delta, spark_files
from .combine import combines, marked
from .ingest import column_types
from .merge_source import every_column, key_range
from .records import read_committed_records, read_records
from .settings import settings
from .spark import session_of
from .step_results import HistoryResult
from .table_layout import BASE, CHANGES, HISTORY, TARGET, path
from .target_typing import (
    ROWS_PER_FILE,
    as_target_rows,
    as_target_types,
    known_columns,
    spark_columns,
    spark_type,
    target_schema,
    typed_frame,
    valueless_columns,
)

_OP = ("_cdc_op", versions.UNSET)  # kept beside the meta columns while rows are typed


class HistoryError(TerminalError, RuntimeError):
    """The history cannot be computed yet (its base snapshot is not imported)."""


def data_columns(dt_) -> dict[str, str]:
    """The source's columns of an existing history table, with their types."""
    if dt_ is None:
        return {}
    meta = {n for n, _ in versions.HISTORY_FIELDS}
    return {f.name: shape.column_type(f.type) for f in pa.schema(dt_.schema()) if f.name not in meta}


def _columns(dt_, images: list[dict], table_dir: str, table: TableConfig) -> dict[str, str]:
    """The history's columns: the target's, with their types, where the target has them, so that
    a current version and its target row hold the same values; the others as the target would
    type them. A history built before the target (from a base snapshot alone, whose text columns
    the changes then type) is rebuilt once with the target's types."""
    target = delta.open_table(path(table_dir, TARGET))
    # a column holding no value yet (a history or target of only an empty export) is typed by its first value
    valueless = valueless_columns(dt_)
    known = {**{c: NULL if c in valueless else t for c, t in data_columns(dt_).items()},
             **{c: t for c, t in known_columns(target).items() if c not in shape.META_COLUMNS}}
    return shape.target_columns(known, images, table.keys, table.partition_by,
                                history_types=column_types(table_dir, marked=False))


def _schema(columns: dict[str, str]) -> pa.Schema:
    return versions.history_schema(pa.schema([pa.field(c, shape.arrow_type(t)) for c, t in columns.items()]))


def reached(table_dir: str, table: TableConfig) -> int:
    """The last batch whose changes are in `changes` (0: only the base snapshot)."""
    has_base = table.base_snapshot is not None
    if has_base and delta.step_version(path(table_dir, BASE), BASE) < 0:
        raise HistoryError(f"table {table.name}: base snapshot not imported yet: materialize {table.name}/base first")
    return max(delta.step_version(path(table_dir, CHANGES), CHANGES), 0 if has_base else -1)


def pending(cfg: Config, table: TableConfig) -> bool:
    """Whether `changes` holds batches the history has not taken yet."""
    table_dir = cfg.table_dir(table.name)
    try:
        return reached(table_dir, table) > delta.step_version(path(table_dir, HISTORY), HISTORY)
    except HistoryError:
        return False


def update(spark, cfg: Config, table: TableConfig) -> HistoryResult:
    """Take the batches `changes` holds beyond the history's into it. `spark`: a session, or a
    function that starts one; only a first build or a widening calls it."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    history_path = path(table_dir, HISTORY)
    dt_ = delta.open_table(history_path)  # read and committed through: a concurrent writer's commit fails ours
    taken, through = delta.txn_version(dt_, HISTORY), reached(table_dir, table)
    if through <= taken:
        return HistoryResult(nothing_new=True, history_batch=taken)
    if dt_ is None:
        return _timed(_build(spark, cfg, table, None, through), t0)
    new = read_committed_records(path(table_dir, CHANGES), f"_cdc_batch_seq > {taken} AND _cdc_batch_seq <= {through}")
    is_truncate = pc.equal(new["_cdc_op"], TRUNCATE)
    new_truncates = new.filter(is_truncate)["_cdc_order"].to_pylist()
    new = new.filter(pc.invert(is_truncate))
    images = [decode_row(r["_cdc_row"]) for r in new.filter(pc.is_valid(new["_cdc_row"])).to_pylist()]
    columns = _columns(dt_, images, table_dir, table)
    _check_track_except(table, columns)
    if any(data_columns(dt_).get(c, t) != t for c, t in columns.items()):
        # A column's type changed (it widened, or the target typed it): the history is rewritten
        # once with that type, new batches included.
        return _timed(_build(spark, cfg, table, dt_, through, columns, step="retype"), t0)
    if new_truncates and _live_versions(history_path, new_truncates) > settings().local_apply_rows:
        # A truncate closes every version live at it, which may be every key's: more than an update
        # in this process takes, and the history is built again by Spark's executors.
        return _timed(_build(spark, cfg, table, dt_, through, columns, step="truncate"), t0)
    typed = _typed(new, columns, images)
    keys = sorted(set(pc.unique(typed["_cdc_key"]).to_pylist()) | _live_at(history_path, new_truncates))
    in_range = None if new_truncates else key_range(typed, table, columns)
    existing = _versions_of(history_path, keys, in_range, _schema(columns))
    names = list(columns) + list(versions.CHANGE_FIELDS) + [versions.UNSET]
    # A version's row combines the key's earlier changes, and a folded change is in no row: where a
    # key's new changes (or a new truncate) rank below one of its versions, or changes can fold,
    # its versions are computed again from every change of its; elsewhere its versions stand.
    again = set(keys) if table.history_track_except else _late(existing, typed, new_truncates) \
        if combines(table) else set()
    standing = pc.invert(pc.is_in(existing["_cdc_key"], value_set=pa.array(sorted(again), pa.string())))
    fresh = pc.invert(pc.is_in(typed["_cdc_key"], value_set=pa.array(sorted(again), pa.string())))
    parts = [versions.as_changes(existing.filter(standing)).select(names).cast(typed.select(names).schema),
             typed.filter(fresh).select(names)]
    if again:
        parts.append(_changes_of(table_dir, table, sorted(again), through, columns).select(names))
    source = pa.concat_tables(parts)
    rows = versions.versions(source, list(columns), table.keys, _rules(table, _truncates(table_dir, table, through)))
    source_rows = pa.concat_tables([rows, _gone(existing, rows)])
    # the key and version alone: a key range would put key values in the commit (merge_source.MERGE_ON_KEY)
    predicate = "t._cdc_key = s._cdc_key AND t._cdc_valid_from = s._cdc_valid_from"
    props = delta.commit_props(HISTORY, through, {"from_batch": taken + 1})
    if source_rows.num_rows:
        result = dt_.merge(source_rows, predicate, source_alias="s", target_alias="t", merge_schema=True,
                           streamed_exec=True, commit_properties=props) \
            .when_matched_delete(f"s.{versions.OPERATION} IS NULL") \
            .when_matched_update(every_column(rows)) \
            .when_not_matched_insert(every_column(rows), f"s.{versions.OPERATION} IS NOT NULL").execute()
    else:  # every change of these batches went to quarantine: the watermark still moves
        dt_.create_write_transaction([], mode="append", schema=dt_.schema(), commit_properties=props)
        result = {}
    final = delta.load(history_path)
    return _timed(HistoryResult(history_batch=through, batches=f"{taken + 1}..{through}", changes_read=new.num_rows,
                                truncates_read=len(new_truncates), keys_touched=len(keys),
                                versions_before=existing.num_rows,
                                versions_added=result.get("num_target_rows_inserted", 0),
                                versions_relabelled=result.get("num_target_rows_updated", 0),
                                versions_removed=result.get("num_target_rows_deleted", 0),
                                rows=final.count(), delta_version=final.version()), t0)


def _late(existing: pa.Table, typed: pa.Table, new_truncates: list[str]) -> set[str]:
    """The keys with a new change ranking below one of its versions, or with it by source order (a
    re-delivery, whose row is not yet combined, is known by its source order and values), and the
    keys with a version above a new truncate."""
    latest = dict(zip(*[c.to_pylist() for c in existing.group_by("_cdc_key").aggregate(
        [(versions.VALID_FROM, "max")]).select(["_cdc_key", f"{versions.VALID_FROM}_max"]).columns]))
    earliest = typed.group_by("_cdc_key").aggregate([("_cdc_order", "min")])
    late = {k for k, o in zip(earliest["_cdc_key"].to_pylist(), earliest["_cdc_order_min"].to_pylist())
            if k in latest and versions.source_order(o) <= versions.source_order(latest[k])}
    if new_truncates:
        cut = min(new_truncates)
        late.update(k for k, o in latest.items() if o > cut)
    return late


def _check_track_except(table: TableConfig, columns: dict[str, str]) -> None:
    missing = [c for c in table.history_track_except if c not in columns]
    if missing:
        raise ConfigError(f"table {table.name}: field 'history.track_except' names {missing[0]!r}, which is not "
                          f"a column of the table (its columns: {', '.join(repr(c) for c in columns)})")


def _rules(table: TableConfig, truncates: tuple[versions.Truncate, ...]) -> versions.Rules:
    return versions.Rules(partial=table.partial_updates, track_except=frozenset(table.history_track_except),
                          truncates=truncates)


def _truncates(table_dir: str, table: TableConfig, through: int) -> tuple[versions.Truncate, ...]:
    """Every truncate (rules.md#rule-9) `changes` holds through batch `through`."""
    if not table.carries_truncates:
        return ()  # the format has none
    # A truncate's pseudo-key sorts above every row's key ('[]' after '["'), so the files' key
    # statistics rule out every file without one: the query reads what the truncates are in, not
    # all of `changes`.
    found = delta.query(path(table_dir, CHANGES), "SELECT _cdc_order, _cdc_batch, _cdc_event_id FROM t "
                                                  f"WHERE _cdc_key = {delta.sql_text(TRUNCATE_KEY)} "
                                                  f"AND _cdc_op = '{TRUNCATE}' AND _cdc_batch_seq <= {through}")
    if found is None:
        return ()
    text = [[None if v is None else str(v) for v in found.column(n).to_pylist()] for n in range(3)]
    return tuple(versions.Truncate(str(o), b, e) for o, b, e in zip(*text))


def _live_where(orders: list[str]) -> str:
    """SQL: a version live at any of `orders` (new truncates: each closes those versions)."""
    at = [delta.sql_text(o) for o in orders]
    return f"{versions.OPERATION} <> 'delete' AND (" + " OR ".join(
        f"({versions.VALID_FROM} < {a} AND ({versions.VALID_TO} IS NULL OR {versions.VALID_TO} > {a}))"
        for a in at) + ")"


def _live_versions(history_path: str, orders: list[str]) -> int:
    """How many versions are live at any of `orders`: counted by delta-rs' query engine, which
    streams the files (those whose `valid_from` statistics rank above every order skipped)."""
    found = delta.query(history_path, f"SELECT count(*) AS n FROM t WHERE {_live_where(orders)}")
    return int(found["n"][0].as_py() or 0) if found is not None and found.num_rows else 0


def _live_at(history_path: str, orders: list[str]) -> set[str]:
    """The keys with a live version at any of `orders`: at most settings.local_apply_rows of them
    (`update` takes a larger truncate to Spark)."""
    if not orders:
        return set()
    found = delta.query(history_path, f"SELECT DISTINCT _cdc_key FROM t WHERE {_live_where(orders)}")
    return {str(k) for k in found.column(0).to_pylist()} if found is not None else set()


def _gone(existing: pa.Table, rows: pa.Table) -> pa.Table:
    """The versions of `existing` that `rows` no longer has (a truncate's delete that another
    delete now precedes, a change folded into the version before it), as MERGE rows that
    delete them: their operation null."""
    now = set(zip(rows["_cdc_key"].to_pylist(), rows[versions.VALID_FROM].to_pylist()))
    was = zip(existing["_cdc_key"].to_pylist(), existing[versions.VALID_FROM].to_pylist())
    gone = existing.filter(pa.array([k not in now for k in was], pa.bool_()))
    gone = gone.set_column(gone.schema.get_field_index(versions.OPERATION), versions.OPERATION,
                           pa.nulls(gone.num_rows, pa.string()))
    return gone.select(rows.schema.names).cast(rows.schema)


def _with_unset(records: pa.Table) -> pa.Table:
    """`records` with UNSET: the JSON list of the columns each change leaves out (TOAST placeholders)."""
    hits = marked(records["_cdc_row"]).to_pylist()
    texts = records["_cdc_row"].to_pylist() if any(hits) else []
    unset = [json.dumps(sorted(decode_image(texts[i])[1])) if hit else None for i, hit in enumerate(hits)]
    return records.append_column(versions.UNSET, pa.array(unset, pa.string()))


def _typed(records: pa.Table, columns: dict[str, str], images: list[dict] | None = None) -> pa.Table:
    """Records as typed rows with the meta columns, `_cdc_op` and UNSET. `images`: the decoded
    images of `records`' imaged records, in order, when the caller has them already."""
    return as_target_rows(_with_unset(records), columns, extra=_OP, images=images)


def _changes_of(table_dir: str, table: TableConfig, keys: list[str], through: int,
                columns: dict[str, str]) -> pa.Table:
    """Every change (and base row) of `keys` through batch `through`, typed."""
    where = f"_cdc_batch_seq <= {through} AND _cdc_op <> '{TRUNCATE}'"
    if len(keys) <= delta.IN_LIST_LIMIT:
        where += f" AND _cdc_key IN ({', '.join(delta.sql_text(k) for k in keys) or 'NULL'})"
    parts = []
    for name in [CHANGES] + ([BASE] if table.base_snapshot else []):
        found = read_records(path(table_dir, name), where)
        if found is None:
            continue
        if len(keys) > delta.IN_LIST_LIMIT:
            found = found.filter(pc.is_in(found["_cdc_key"], value_set=pa.array(keys, pa.string())))
        parts.append(_typed(found, columns))
    return pa.concat_tables(parts) if parts else target_schema(columns, shape.META_COLUMNS + _OP).empty_table()


def rebuild(spark, cfg: Config, table: TableConfig) -> HistoryResult:
    """The whole history again from `changes` and `base`, through the batch `changes` reached."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    dt_ = delta.open_table(path(table_dir, HISTORY))
    through = reached(table_dir, table)
    if through < 0:
        return HistoryResult(nothing_new=True, history_batch=through)
    figures = _build(spark, cfg, table, dt_, through, step="rebuild")
    return _timed(dataclasses.replace(figures, previous_version=dt_.version() if dt_ is not None else None), t0)


def _timed(figures: HistoryResult, t0: float) -> HistoryResult:
    return dataclasses.replace(figures, seconds=round(time.time() - t0, 2))


def _versions_of(history_path: str, keys: list[str], in_range: str | None, schema: pa.Schema) -> pa.Table:
    """The history rows of `keys`, in `schema` (a column the table does not have yet is null)."""
    if not keys:
        return schema.empty_table()
    if len(keys) <= delta.IN_LIST_LIMIT:
        where = f"_cdc_key IN ({', '.join(delta.sql_text(k) for k in keys)})"
    else:  # the key range alone, then the keys matched here: far longer IN lists overflow the parser
        where = "TRUE"
    if in_range:
        where += f" AND {in_range}"
    found = delta.query(history_path, f"SELECT * FROM t WHERE {where}")
    if found is None:  # no history table yet: no versions
        return schema.empty_table()
    if len(keys) > delta.IN_LIST_LIMIT:
        found = found.filter(pc.is_in(found["_cdc_key"].cast(pa.string()), value_set=pa.array(keys, pa.string())))
    return pa.table([found[f.name].cast(f.type) if f.name in found.schema.names else pa.nulls(found.num_rows, f.type)
                     for f in schema], schema=schema)


def _build(spark, cfg: Config, table: TableConfig, dt_, through: int, columns: dict[str, str] | None = None,
           step: str = "build") -> HistoryResult:
    """The whole history through batch `through`, computed by Spark executors: the rules of
    core/history.py as window functions over every change (and base row)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = session_of(spark)
    table_dir = cfg.table_dir(table.name)
    history_path = path(table_dir, HISTORY)
    if columns is None:
        columns = _columns(dt_, [], table_dir, table)
    sources = [CHANGES] + ([BASE] if table.base_snapshot else [])
    records = None
    for name in sources:
        if delta.open_table(path(table_dir, name)) is None:
            continue
        frame = as_target_types(spark, path(table_dir, name), columns)
        records = frame if records is None else records.unionByName(frame)
    if records is None:
        raise OutOfOrder(f"table {table.name}: no changes or base snapshot to build the history from yet")
    _check_track_except(table, columns)
    records = records.where((F.col("_cdc_batch_seq") <= through) & (F.col("_cdc_op") != TRUNCATE)) \
        .withColumn(versions.UNSET, F.to_json(  # from_json reads NaN and Infinity, which images may hold
            F.from_json(F.col("_cdc_row"), f"struct<`{UNSET_KEY}`: array<string>>")[UNSET_KEY]))
    meta = shape.META_COLUMNS + _OP
    typed = typed_frame(records, columns, spark_columns(columns) + ", " + ", ".join(f"`{m}` string" for m in meta),
                         extra=_OP)
    order, op = F.col("_cdc_order"), F.col("_cdc_op")
    # a delete holds its key only (core/history.key_only_deletes)
    typed = typed.select(*[F.col(spark_name(c)) if c in table.keys else
                           F.when(op == DELETE, F.lit(None)).otherwise(F.col(spark_name(c))).alias(c) for c in columns],
                         *[F.col(m) for m in meta])
    data = [F.col(spark_name(c)) for c in columns]
    # a re-delivery: the same key, source order, operation and values; its first delivery stays
    same = Window.partitionBy(F.col("_cdc_key"), F.substring_index(order, "|", 1), op, *data).orderBy(order)
    first = typed.withColumn("_n", F.row_number().over(same)).where("_n = 1").drop("_n")
    first = _spark_rules(first, table, columns, _truncates(table_dir, table, through))
    per_key = Window.partitionBy("_cdc_key").orderBy(order)
    following, previous = F.lead(order).over(per_key), F.lag(op).over(per_key)
    operation = (F.when(op == DELETE, "delete").when(order.startswith(BASE_TIER), versions.SNAPSHOT)
                 .when(previous.isNull() | (previous == DELETE), versions.INSERT).otherwise(versions.UPDATE))
    rows = first.select(*data, F.col("_cdc_key"), order.alias(versions.VALID_FROM),
                        following.alias(versions.VALID_TO),
                        (following.isNull() & (op != DELETE)).alias(versions.IS_CURRENT),
                        operation.alias(versions.OPERATION),
                        F.row_number().over(per_key).cast("bigint").alias(versions.VERSION),
                        F.col("_cdc_batch"), F.col("_cdc_event_id"))
    # Files of about ROWS_PER_FILE rows, each a range of keys, as target's: an update's key range
    # rules most of them out by their statistics.
    n_files = max(1, math.ceil(records.count() / ROWS_PER_FILE))
    rows = rows.repartitionByRange(n_files, *[F.col(spark_name(k)) for k in table.keys])
    adds = spark_files.write_files(rows, history_path, (), sort_by=list(table.keys) + [versions.VALID_FROM])
    props = delta.commit_props(HISTORY, through, {"build": step})
    try:
        final = spark_files.commit(history_path, dt_, _schema(columns), adds, None, (), props)
    except Exception:
        spark_files.discard(history_path, adds)
        raise
    return HistoryResult(history_batch=through, built=step, files_added=len(adds), rows=final.count(),
                         delta_version=final.version())


def _spark_rules(first, table: TableConfig, columns: dict[str, str], truncates: tuple[versions.Truncate, ...]):
    """core/history.versions' rules beyond ordering, on Spark: each truncate that finds a key live
    placed as a delete of it, each upsert's row combined with the key's earlier changes (rules.md#rule-10),
    and a change of only `track_except` columns folded into the version before it."""
    from functools import reduce

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order, op = F.col("_cdc_order"), F.col("_cdc_op")
    per_key = Window.partitionBy("_cdc_key").orderBy(order)
    so_far = per_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    keys = set(table.keys)
    if truncates:
        by_order = {t.order: t for t in truncates}
        closing = F.array_min(F.filter(F.array(*[F.lit(o) for o in sorted(by_order)]), lambda t: t > order))
        about = F.create_map(*[x for t in by_order.values() for x in (
            F.lit(t.order), F.struct(F.lit(t.batch).cast("string").alias("b"), F.lit(t.event_id).cast("string").alias("e")))])
        found = first.withColumn("_t", closing).withColumn("_next", F.lead(order).over(per_key))
        closes = found.where((op != DELETE) & F.col("_t").isNotNull() & (F.col("_next").isNull() | (F.col("_next") > F.col("_t"))))
        deletes = closes.select(
            *[F.col(spark_name(c)) if c in keys else F.lit(None).cast(spark_type(t)).alias(c) for c, t in columns.items()],
            F.col("_cdc_key"), F.col("_t").alias("_cdc_order"), F.element_at(about, F.col("_t"))["b"].alias("_cdc_batch"),
            F.element_at(about, F.col("_t"))["e"].alias("_cdc_event_id"), F.lit(DELETE).alias("_cdc_op"),
            F.lit(None).cast("string").alias(versions.UNSET))
        first = first.unionByName(deletes.select(*[F.col(spark_name(c)) for c in first.columns]))
    others = [F.col(spark_name(c)) for c in first.columns if c not in columns]
    if combines(table):
        # each column from the latest change since the key's last delete that carried it
        first = first.withColumn("_seg", F.sum((op == DELETE).cast("int")).over(so_far))
        run = Window.partitionBy("_cdc_key", "_seg").orderBy(order).rowsBetween(Window.unboundedPreceding,
                                                                                   Window.currentRow)
        unset = F.from_json(F.col(versions.UNSET), "array<string>")
        filled = []
        for c in columns:
            value = F.col(spark_name(c))
            if c in keys:
                filled.append(value)
                continue
            carried = (op != DELETE) & ~F.coalesce(F.array_contains(unset, F.lit(c)), F.lit(False))
            if table.partial_updates:
                carried = carried & value.isNotNull()
            kept = F.last(F.when(carried, F.struct(value.alias("v"))), ignorenulls=True).over(run)["v"]
            filled.append(F.when(op == DELETE, value).otherwise(kept).alias(c))
        first = first.select(*filled, *others)
    if table.history_track_except:
        tracked = [c for c in columns if c not in keys and c not in table.history_track_except]
        same = reduce(lambda a, b: a & b, [F.col(spark_name(c)).eqNullSafe(F.lag(F.col(spark_name(c))).over(per_key))
                                           for c in tracked], F.lit(True))
        previous = F.lag(op).over(per_key)
        first = first.withColumn("_fold", (op != DELETE) & previous.isNotNull() & (previous != DELETE) & same)
        first = first.withColumn("_grp", F.sum((~F.col("_fold")).cast("int")).over(so_far))
        whole = Window.partitionBy("_cdc_key", "_grp").orderBy(order).rowsBetween(Window.unboundedPreceding,
                                                                                    Window.unboundedFollowing)
        # the version takes the values of the last change folded into it
        first = first.select(*[F.last(F.col(spark_name(c))).over(whole).alias(c) for c in columns], *others,
                             F.col("_fold")).where(~F.col("_fold")).drop("_fold")
    return first


__all__ = ["HistoryError", "update", "rebuild", "pending", "reached", "data_columns"]
