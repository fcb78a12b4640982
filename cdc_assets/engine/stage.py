"""`changes` -> `staging`: per key, the batch's latest change (seed 002's T_STAGING).

Staging keeps one row per key and batch, so a rebuild or backfill never needs
to re-read the change files; changes a batch superseded itself are counted.
"""
from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc

from ..core.config import Config, TableConfig
from ..core.errors import OutOfOrder
from . import delta
from .landing import Batch, is_done_or_next
from .records import read_committed_records
from .tables import CHANGES, STAGING, path


def latest_per_key(frame):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("_cdc_key").orderBy(F.col("_cdc_order").desc())
    return frame.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")


def first_of_each(rows: pa.Table, column: str, order: str = "descending") -> pa.Table:
    """Per value of `column`, the row that comes first by ordering key in `order` (in the driver)."""
    if rows.num_rows == 0:
        return rows
    ordered = rows.sort_by([(column, "ascending"), ("_cdc_order", order)])
    values = ordered[column]
    first = pc.not_equal(values.slice(1), values.slice(0, len(values) - 1))
    return ordered.filter(pa.concat_arrays([pa.array([True]), first.combine_chunks()]))


def latest_of_batch(changes: pa.Table) -> pa.Table:
    """Per key, the change with the greatest ordering key (a batch's worth, in the driver)."""
    return first_of_each(changes, "_cdc_key")


def stage_batch(cfg: Config, table: TableConfig, batch: Batch) -> dict:
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    staging_path = path(table_dir, STAGING)
    if is_done_or_next(table.name, staging_path, STAGING, batch):
        return {"already_committed": True}
    if delta.step_version(path(table_dir, CHANGES), CHANGES) < batch.seq:
        raise OutOfOrder(f"table {table.name}: batch {batch.id} has no committed changes yet: materialize changes first")
    # The batch's changes only: delta-rs skips the files of other batches by their statistics.
    batch_changes = read_committed_records(path(table_dir, CHANGES), f"_cdc_batch_seq = {batch.seq}")
    staged = latest_of_batch(batch_changes)
    n_changes = batch_changes.num_rows
    metrics = {"changes": n_changes, "staged": staged.num_rows, "superseded_in_batch": n_changes - staged.num_rows}
    version = delta.append(staging_path, staged, STAGING, batch.seq, metrics)
    metrics["compacted"] = delta.compact_if_fragmented(staging_path)
    metrics.update({"delta_version": version, "seconds": round(time.time() - t0, 2)})
    return metrics
