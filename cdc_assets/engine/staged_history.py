"""Staging and base as of a batch, and each key's latest change, for a build of the whole state.

On Spark executors (`SparkHistory`), or in this process with Arrow for a history of at most
settings.local_build_rows rows (`LocalHistory`). Each writes the target's files and the
tombstones' files; delta-rs commits them (engine/target_build.py).
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core import names
from ..core import target as shape
from ..core.changes import RECORD_FIELDS, TRUNCATE, UPSERT
from ..core.config import TableConfig
from . import combine, delta, spark_files, storage
from .merge_source import truncate_order, with_flags
from .partition_layout import PartitionLayout
from .records import read_records, stored_columns
from .stage import latest_of_batch, latest_per_key
from .table_layout import BASE, STAGING, TOMBSTONE_FIELDS, path
from .target_typing import ROWS_PER_FILE, as_target_rows, as_target_types, cast_typed, rows_where, target_frame


def _history(spark, table_dir: str, has_base: bool, columns: dict[str, str]):
    """Staging and base as one frame of records whose typed columns have the target's types
    (`columns`); a record stored as a row image has them null."""
    sources = [STAGING] + ([BASE] if has_base else [])
    frames = [as_target_types(spark, path(table_dir, name), columns) for name in sources]
    history = frames[0]
    for frame in frames[1:]:
        history = history.unionByName(frame)
    return history


class SparkHistory:
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
        self.truncate = cut  # the greatest truncate: the rows ranking at or below it are gone (rules.md#rule-9)
        # with one change per key and no truncate, the upserts are the target's rows and the rest its tombstones
        self.upserts = int(upserts or 0) if self.distinct and cut is None else None

    def live(self, table: TableConfig):
        """The latest changes that are target rows: upserts above the greatest truncate (in a
        soft-delete table every key's latest change, rules.md#rule-12)."""
        from pyspark.sql import functions as F

        if table.soft_deletes:
            return self.latest.where(F.col("_cdc_op") != TRUNCATE)
        live = self.latest.where(F.col("_cdc_op") == UPSERT)
        return live.where(F.col("_cdc_order") > F.lit(self.truncate)) if self.truncate is not None else live

    def write_target(self, target_path: str, table: TableConfig, partition_keys: list[str] | None,
                     layout: PartitionLayout) -> list:
        from pyspark.sql import functions as F

        live, rows = self.live(table), None if table.soft_deletes else self.upserts
        if partition_keys is not None:
            wanted = [shape.partition_text(shape.partition_values(k)) for k in partition_keys]
            live, rows = live.where(F.col("_cdc_partition").isin(wanted)), None
        typed = layout.spark_with_derived(target_frame(live, self.columns, table, self.truncate))
        # Files of about ROWS_PER_FILE rows, each holding one range of keys (within a partition),
        # so that a batch's keys sit in few files, the ones a MERGE rewrites, and a lookup of keys
        # skips the others by their statistics.
        n_files = max(1, math.ceil((live.count() if rows is None else rows) / ROWS_PER_FILE))
        order = [F.col(names.spark(c)) for c in list(table.partition_by) + list(table.keys)]
        typed = typed.repartitionByRange(n_files, *order)
        return spark_files.write_files(typed, target_path, layout.delta_columns, sort_by=list(table.keys))

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


class LocalHistory:
    """The same as SparkHistory, for a history of at most settings.local_build_rows rows, in this
    process with Arrow: read through delta-rs, each key's latest picked by one sort, the files
    written as Spark's tasks write them (spark_files.write_arrow)."""

    def __init__(self, table_dir: str, table: TableConfig, columns: dict[str, str], reached: int):
        self.columns = columns
        has_base = table.base_snapshot is not None
        record = [n for n, _ in RECORD_FIELDS]
        staged = read_records(path(table_dir, STAGING), f"_cdc_batch_seq <= {int(reached)}")
        parts = [rows for rows in (staged, base_records(path(table_dir, BASE)) if has_base else None)
                 if rows is not None]
        history = pa.concat_tables([cast_typed(rows, columns, record) for rows in parts]) if parts else \
            cast_typed(delta.arrow_schema(RECORD_FIELDS).empty_table(), columns, record)
        self.history_rows = history.num_rows
        self.keys = pc.count_distinct(history["_cdc_key"]).as_py() if history.num_rows else 0
        if self.keys == history.num_rows:
            self.latest = history
        elif combine.combines(table):
            self.latest = combine.latest_or_combined(history, table.partial_updates, table.partition_by,
                                                     table.soft_deletes)
        else:
            self.latest = latest_of_batch(history)
        self.truncate = truncate_order(self.latest)  # rules.md#rule-9, as SparkHistory

    def write_target(self, target_path: str, table: TableConfig, partition_keys: list[str] | None,
                     layout: PartitionLayout) -> list:
        if table.soft_deletes:  # every key's latest change is a row (rules.md#rule-12)
            live = rows_where(self.latest, pc.not_equal(self.latest["_cdc_op"], TRUNCATE))
        else:
            live = rows_where(self.latest, pc.equal(self.latest["_cdc_op"], UPSERT))
            if self.truncate is not None:
                live = rows_where(live, pc.greater(live["_cdc_order"], self.truncate))
        if partition_keys is not None:
            wanted = [shape.partition_text(shape.partition_values(k)) for k in partition_keys]
            live = rows_where(live, pc.is_in(live["_cdc_partition"], value_set=pa.array(wanted, pa.string())))
        if table.soft_deletes:
            typed = as_target_rows(live.append_column("_cdc_apply", live["_cdc_op"]), self.columns,
                                    extra=("_cdc_apply", "_cdc_op"))
            typed = with_flags(typed, self.truncate).drop_columns(["_cdc_apply"])
        else:
            typed = as_target_rows(live, self.columns)
        # key ranges in files of ROWS_PER_FILE rows (within a partition), as SparkHistory writes them
        order = pc.sort_indices(typed, [(c, "ascending") for c in list(table.partition_by) + list(table.keys)])
        if not np.array_equal(order.to_numpy(), np.arange(len(order))):  # an export in key order is kept as it is
            typed = typed.take(order)
        return spark_files.write_arrow(layout.with_derived(typed), target_path, layout.delta_columns, ROWS_PER_FILE)

    def write_deletes(self, tomb_path: str) -> list:
        deleted = self.latest.filter(pc.not_equal(self.latest["_cdc_op"], UPSERT)).select(["_cdc_key", "_cdc_order"])
        return spark_files.write_arrow(deleted.sort_by("_cdc_key").cast(delta.arrow_schema(TOMBSTONE_FIELDS)),
                                       tomb_path)

    def close(self) -> None:
        pass


def base_records(base_path: str) -> pa.Table | None:
    """The base's records in the export's order: its files' names sort in the order of the
    export's lines (base_import._export_tasks), so an export in key order is read in key order."""
    import pyarrow.dataset as ds

    dt_ = delta.open_table(base_path)
    if dt_ is None:
        return None
    schema = pa.schema(list(delta.arrow_schema(RECORD_FIELDS))
                       + [pa.field(c, shape.arrow_type(t)) for c, t in stored_columns(base_path).items()])
    fs, paths = storage.arrow_paths(sorted(dt_.file_uris()))
    return ds.dataset(paths, format="parquet", schema=schema, filesystem=fs).to_table()


def history_rows(table_dir: str, has_base: bool) -> int:
    """Rows in staging and base, from their logs' statistics (no data file read)."""
    return sum(delta.file_stats(delta.open_table(path(table_dir, name)))[2]
               for name in [STAGING] + ([BASE] if has_base else []))
