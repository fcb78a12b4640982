"""`changes` (+ `base`) -> `history`: every version of each key, SCD type 2 (core/history.py).

An update reads the new batches' changes, the history rows
of the keys they touch (files hold key ranges, so delta-rs skips the others by their
statistics), places the new changes among those versions in the driver, and commits one
MERGE on (key, valid_from) that inserts the new versions and closes or re-labels the ones
they follow; the MERGE reads every history file, since a key range in its condition would
go into the commit (apply.MERGE_ON_KEY). The first build, a rebuild and a type widening compute the whole history on
Spark executors with the same rules as window functions; delta-rs commits the files.
A truncate (rule 9) is no key's version: the history leaves it out.
"""
from __future__ import annotations

import math
import time

import pyarrow as pa
import pyarrow.compute as pc

from ..core import history as versions
from ..core import target as shape
from ..core.changes import DELETE, TRUNCATE
from ..core.config import Config, TableConfig
from ..core.errors import OutOfOrder, TerminalError
from ..core.names import spark as spark_name
from ..core.ordering import BASE_TIER
from ..core.values import decode_row
from . import delta, spark_files
from .apply import (
    ROWS_PER_FILE,
    _as_target_types,
    _cast_typed,
    _existing_columns,
    _spark_columns,
    _target_rows,
    _target_schema,
    _typed_frame,
    every_column,
    key_range,
)
from .ingest import column_types
from .records import read_committed_records
from .spark import session_of
from .tables import BASE, CHANGES, HISTORY, TARGET, path

_OP = ("_cdc_op",)  # kept beside the meta columns while rows are typed


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
    known = {**data_columns(dt_), **{c: t for c, t in _existing_columns(target).items() if c not in shape.META_COLUMNS}}
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


def update(spark, cfg: Config, table: TableConfig) -> dict:
    """Take the batches `changes` holds beyond the history's into it. `spark`: a session, or a
    function that starts one; only a first build or a widening calls it."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    history_path = path(table_dir, HISTORY)
    dt_ = delta.open_table(history_path)  # read and committed through: a concurrent writer's commit fails ours
    taken, through = delta.txn_version(dt_, HISTORY), reached(table_dir, table)
    if through <= taken:
        return {"nothing_new": True, "history_batch": taken}
    if dt_ is None:
        return _timed(_build(spark, cfg, table, None, through), t0)
    new = read_committed_records(path(table_dir, CHANGES), f"_cdc_batch_seq > {taken} AND _cdc_batch_seq <= {through}")
    new = new.filter(pc.not_equal(new["_cdc_op"], TRUNCATE))  # no key's version (see the module's note)
    imaged = pc.is_valid(new["_cdc_row"])
    image_rows = new.filter(imaged).to_pylist()
    images = [decode_row(r["_cdc_row"]) for r in image_rows]
    columns = _columns(dt_, images, table_dir, table)
    if any(data_columns(dt_).get(c, t) != t for c, t in columns.items()):
        # A column's type changed (it widened, or the target typed it): the history is rewritten
        # once with that type, new batches included.
        return _timed(_build(spark, cfg, table, dt_, through, columns, step="retype"), t0)
    meta = shape.META_COLUMNS + _OP
    typed = pa.concat_tables([_target_rows(image_rows, columns, images, extra=_OP),
                              _cast_typed(new.filter(pc.invert(imaged)), columns, meta).cast(
                                  _target_schema(columns, meta))])
    keys = pc.unique(typed["_cdc_key"]).to_pylist()
    in_range = key_range(typed, table, columns)
    existing = _versions_of(history_path, keys, in_range, _schema(columns))
    names = list(columns) + list(versions.CHANGE_FIELDS)
    together = pa.concat_tables([versions.as_changes(existing).select(names).cast(typed.select(names).schema),
                                 typed.select(names)])
    rows = versions.versions(together, list(columns), table.keys)
    # the key and version alone: a key range would put key values in the commit (apply.MERGE_ON_KEY)
    predicate = "t._cdc_key = s._cdc_key AND t._cdc_valid_from = s._cdc_valid_from"
    props = delta.commit_props(HISTORY, through, {"from_batch": taken + 1})
    if rows.num_rows:
        result = dt_.merge(rows, predicate, source_alias="s", target_alias="t", merge_schema=True,
                           streamed_exec=True, commit_properties=props).when_matched_update(every_column(rows)) \
            .when_not_matched_insert(every_column(rows)).execute()
    else:  # every change of these batches went to quarantine: the watermark still moves
        dt_.create_write_transaction([], mode="append", schema=dt_.schema(), commit_properties=props)
        result = {}
    final = delta.load(history_path)
    return _timed({"history_batch": through, "batches": f"{taken + 1}..{through}", "changes_read": new.num_rows,
                   "keys_touched": len(keys), "versions_before": existing.num_rows,
                   "versions_added": result.get("num_target_rows_inserted", 0),
                   "versions_relabelled": result.get("num_target_rows_updated", 0),
                   "rows": final.count(), "delta_version": final.version()}, t0)


def rebuild(spark, cfg: Config, table: TableConfig) -> dict:
    """The whole history again from `changes` and `base`, through the batch `changes` reached."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    dt_ = delta.open_table(path(table_dir, HISTORY))
    through = reached(table_dir, table)
    if through < 0:
        return {"nothing_new": True, "history_batch": through}
    figures = _build(spark, cfg, table, dt_, through, step="rebuild")
    figures["previous_version"] = dt_.version() if dt_ is not None else None
    return _timed(figures, t0)


def _timed(figures: dict, t0: float) -> dict:
    figures["seconds"] = round(time.time() - t0, 2)
    return figures


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
           step: str = "build") -> dict:
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
        frame = _as_target_types(spark, path(table_dir, name), columns)
        records = frame if records is None else records.unionByName(frame)
    if records is None:
        raise OutOfOrder(f"table {table.name}: no changes or base snapshot to build the history from yet")
    records = records.where((F.col("_cdc_batch_seq") <= through) & (F.col("_cdc_op") != TRUNCATE))
    meta = shape.META_COLUMNS + _OP
    typed = _typed_frame(records, columns, _spark_columns(columns) + ", " + ", ".join(f"`{m}` string" for m in meta),
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
    return {"history_batch": through, "built": step, "files_added": len(adds), "rows": final.count(),
            "delta_version": final.version()}


__all__ = ["HistoryError", "update", "rebuild", "pending", "reached", "data_columns"]
