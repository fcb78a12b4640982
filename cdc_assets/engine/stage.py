"""`changes` -> `staging`: per key, the batch's latest change (rules.md#tables).

Staging keeps one row per key and batch, so a rebuild or backfill never needs
to re-read the change files; changes a batch superseded itself are counted. A key
whose changes leave columns out, or a soft-delete table's key with a delete and another
change, keeps every change of the batch (engine/combine.py).
"""
from __future__ import annotations

import time

from ..core.config import Config, TableConfig
from ..core.errors import OutOfOrder
from . import delta, spark_ingest
from .combine import left_out_through, lists_unset
from .combine import staged as staged_records
from .landing import Batch, is_done_or_next
from .latest import first_of_each, latest_of_batch, latest_per_key
from .records import read_committed_records
from .settings import settings
from .spark import session_of
from .step_results import StageResult
from .table_layout import CHANGES, STAGING, path

__all__ = ["first_of_each", "latest_of_batch", "latest_per_key", "stage_batch"]


def stage_batch(cfg: Config, table: TableConfig, batch: Batch, spark=None) -> StageResult:
    """Commit the batch's staged records; a second call does nothing. A batch of at most
    `local_apply_rows` changes (counted from the `changes` log's statistics) is staged in this
    process, a larger one by Spark's tasks (`spark`: a session, or a function that starts one;
    without it every batch is staged here)."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    staging_path = path(table_dir, STAGING)
    if is_done_or_next(table.name, staging_path, STAGING, batch):
        return StageResult(already_committed=True)
    if delta.step_version(path(table_dir, CHANGES), CHANGES) < batch.seq:
        raise OutOfOrder(f"table {table.name}: batch {batch.id} has no committed changes yet: materialize changes first")
    if spark is not None and spark_ingest.batch_rows(table_dir, batch.seq) > settings().local_apply_rows:
        counts, version = spark_ingest.stage_on_spark(session_of(spark), table, table_dir, batch)
    else:
        # The batch's changes only: delta-rs skips the files of other batches by their statistics.
        batch_changes = read_committed_records(path(table_dir, CHANGES), f"_cdc_batch_seq = {batch.seq}")
        staged = staged_records(batch_changes, table)
        n_changes = batch_changes.num_rows
        counts = {"changes": n_changes, "staged": staged.num_rows, "superseded_in_batch": n_changes - staged.num_rows}
        marks = left_out_through(table_dir, batch.seq, lists_unset(staged["_cdc_row"]))
        version = delta.append(staging_path, staged, STAGING, batch.seq, {**counts, **marks})  # batch_accounted reads them
    return StageResult(**counts, compacted=delta.compact_if_fragmented(staging_path), delta_version=version,
                       seconds=round(time.time() - t0, 2))
