"""`staging` (+ `base`) -> `target`: apply the pending batches.

An incremental apply merges each pending key's latest change into target (engine/merge_source.py).
Only the target files whose key statistics can hold a touched key are opened, and only those
holding a changed row are rewritten (engine/rewrite.py); a batch large enough is applied by Spark
executors (engine/spark_apply.py). The first apply, and a type widening that is no exact cast,
build the whole state from staging and base (engine/target_build.py).
"""
from __future__ import annotations

import dataclasses
import json
import time
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake

from ..core import target as shape
from ..core.changes import DELETE, REFILL, TRUNCATE, TRUNCATE_KEY, UPSERT
from ..core.config import Config, TableConfig
from ..core.errors import OutOfOrder
from ..core.values import STRING
from . import combine, delta, faults, retype, rewrite, spark_apply, spark_files, storage
from .ingest import column_types
from .merge_source import (
    MERGE_ON_KEY,
    MergeSource,
    every_column,
    merge_source,
)
from .partition_layout import RELAYOUT, PartitionLayout
from .settings import settings
from .spark import session_of
from .staged_history import SparkHistory
from .step_results import ApplyResult
from .table_layout import BASE, STAGING, TARGET, TOMBSTONE_FIELDS, TOMBSTONES, path
from .target_build import build, widen
from .target_typing import (
    ROWS_PER_FILE,
    as_target_types,
    existing_columns,
    flagged_columns,
    known_columns,
    target_frame,
)
from .truncate import STEP_COLUMNS, truncate_merge


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
        return dataclasses.replace(build(spark, cfg, table, dt_, reached, None, first=True),
                                   seconds=round(time.time() - t0, 2))

    if _switched_to_hard(dt_, table):
        # Switched from soft deletes: a flagged row is a deleted key, no row of a hard-delete
        # table, and the flag is no column of one: the target is built again without either.
        return dataclasses.replace(build(spark, cfg, table, dt_, reached, None, first=True),
                                   seconds=round(time.time() - t0, 2),
                                   applied_on="a whole build: deletes are hard now")

    layout = PartitionLayout.of(dt_, table.partition_by)
    texts = {c for c, t in existing_columns(dt_).items() if t == STRING}
    newly = layout.unfit_in_staging(table_dir, f"_cdc_batch_seq > {int(applied)} AND _cdc_batch_seq <= {int(reached)}",
                                    texts, delta.records_change_feed(dt_))
    if newly:
        # "" in a text partition column, which a Delta partition value cannot hold, a value too
        # long for a folder name, which delta-rs' MERGE and compaction cannot write, or one its
        # change data feed reader cannot find: the target is laid out again once, that column
        # stored as data and partitioned by its derived column.
        layout = layout.deriving(newly)
        dt_ = retype.relayout(target_path, dt_, layout, delta.CommitProperties(
            custom_metadata={"cdc.step": RELAYOUT, "cdc.reached": str(applied)}))
        done = _apply_laid_out(spark, cfg, table, dt_, layout, applied, reached, t0)
        return dataclasses.replace(done, derived_partitions=tuple(c for c in table.partition_by if c in newly))
    return _apply_laid_out(spark, cfg, table, dt_, layout, applied, reached, t0)


def _apply_laid_out(spark, cfg: Config, table: TableConfig, dt_: DeltaTable, layout: PartitionLayout, applied: int,
                    reached: int, t0: float) -> ApplyResult:
    """The incremental apply of batches applied+1..reached to the target `dt_`, laid out in `layout`."""
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    on_spark = None  # why a batch large enough for Spark is applied in this process
    many = _truncate_reads_many(table_dir, table, dt_, applied, reached)
    if spark_apply.runs_on_spark(table_dir, applied) or many:
        if table.insert_only:
            on_spark = "this process: an insert_only table's rows are appended by delta-rs"
        elif table.change_feed and many and _combines_above_truncate(table_dir, table, reached):
            return _apply_feed_on_spark(spark, cfg, table, dt_, applied, reached, t0)
        elif table.change_feed:
            on_spark = "this process: the change data feed's files are written by delta-rs' MERGE"
        elif combine.combines(table) and (table.partial_updates or table.soft_deletes or
                                           combine.leaves_columns_out(table_dir, reached)):
            # Each key's changes are combined column by column, with its earlier ones too (a soft
            # delete keeps the key's last live row, which a late change may set): Spark builds
            # the whole state from staging and base, as a first apply does.
            return dataclasses.replace(
                build(spark, cfg, table, dt_, reached, None, first=True), seconds=round(time.time() - t0, 2),
                applied_on="spark: the whole state, each key's changes combined column by column")
        else:
            return _apply_on_spark(spark, cfg, table, dt_, applied, reached, t0)

    m = merge_source(table_dir, table, dt_, applied, reached)
    pending, winners, keys, ops, tombs, columns = m.pending, m.winners, m.keys, m.ops, m.tombstones, m.columns
    faults.point("target.computed")  # decided; nothing is committed yet
    if any(existing_columns(dt_).get(c, t) != t for c, t in columns.items()):
        # A column widened: the target is rewritten once with the wider type, as of the batch
        # it reached; this apply then goes on from there.
        widened = widen(spark, cfg, table, dt_, applied, columns)
        if (widened.applied_batch or 0) >= reached:  # built as of this apply's batch (a trimmed staging)
            return dataclasses.replace(widened, seconds=round(time.time() - t0, 2))
        dt_ = delta.load(target_path)
    if table.insert_only:
        return _append(table, target_path, dt_, layout, m, applied, reached, t0)
    if DELETE in ops or TRUNCATE in ops or tombs:
        # Only a delete or truncate, or an upsert of a key that has a tombstone, can change tombstones.
        touching = [op != UPSERT or k in tombs for k, op in zip(keys, ops)]
        _merge_tombstones(table_dir, winners.filter(pa.array(touching, pa.bool_())), reached)
    dt_ = delta.keep_change_feed(target_path, dt_, table.change_feed)  # before the MERGE that it is to record
    files_before, version_before = len(dt_.file_uris()), dt_.version()
    source = layout.with_derived(m.source)
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
            dt_ = delta.add_columns(target_path, dt_, source.drop_columns(["_cdc_apply"]).schema, STEP_COLUMNS)
    if rewrite.applies(dt_, source):
        done = rewrite.rewrite(target_path, dt_, source, layout.delta_columns,
                               lambda figures: delta.commit_props(TARGET, reached, {**marks, **figures}),
                               ROWS_PER_FILE, truncate=m.truncate, soft=table.soft_deletes)
        inserts, updates, deletes = done.inserts, done.updates, done.deletes
    else:
        # A new column (schema evolution) or a change data feed to write: delta-rs' MERGE, on
        # the join alone, since delta-rs writes a MERGE's predicate, and any early filter it
        # derives from the source's values, into the commit's operationParameters, so a key
        # range there would put key values in the Delta log's commit info (streamed_exec
        # derives none). It reads every target file's keys.
        inserts, updates, deletes = _merge(dt_, source, props)
    faults.point("target.committed")
    return _applied_figures(table, target_path, applied, reached, pending.num_rows, winners.num_rows,
                            (inserts, updates, deletes + truncated), files_before, version_before, t0, on_spark)


def _merge(dt_: DeltaTable, source, props: delta.CommitProperties) -> tuple[int, int, int]:
    """delta-rs' MERGE of `source` (target rows, each with `_cdc_apply`; an Arrow table or stream)
    into the target: the rows it inserted, updated and deleted."""
    assigned = every_column(source, except_cols=["_cdc_apply"])
    merge = dt_.merge(source, MERGE_ON_KEY, source_alias="s", target_alias="t", merge_schema=True,
                      streamed_exec=True, commit_properties=props)
    result = merge \
        .when_matched_delete(f"s._cdc_apply = '{DELETE}' AND s._cdc_order > t._cdc_order") \
        .when_matched_update(assigned, f"(s._cdc_apply = '{UPSERT}' AND s._cdc_order > t._cdc_order) OR "
                                       f"(s._cdc_apply = '{REFILL}' AND s._cdc_order >= t._cdc_order)") \
        .when_not_matched_insert(assigned, f"s._cdc_apply IN ('{UPSERT}', '{REFILL}')") \
        .execute()
    return tuple(int(result.get(f"num_target_rows_{n}", 0)) for n in ("inserted", "updated", "deleted"))  # type: ignore[return-value]


def _switched_to_hard(dt_: DeltaTable, table: TableConfig) -> bool:
    """Whether a hard-delete table's target still has a soft-delete table's flag column."""
    return not table.soft_deletes and shape.DELETED in existing_columns(dt_)


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
        partitions_rewritten=tuple(_partitions_of(target_path, adds + removes, PartitionLayout.of(final, table.partition_by))
                                   if table.partition_by else []),
        rows=final.count(), delta_version=final.version(), seconds=round(time.time() - t0, 2), applied_on=applied_on,
    )


def _truncate_reads_many(table_dir: str, table: TableConfig, dt_: DeltaTable, applied: int, reached: int) -> bool:
    """Whether a pending truncate makes this apply read, row by row, more target rows than an apply
    in this process takes (the rows of the files it cuts only in part, engine/rewrite.py): such an
    apply runs on Spark executors, as a large batch does."""
    if not table.carries_truncates:
        return False
    found = delta.query(path(table_dir, STAGING),
                        f"SELECT min(_cdc_order) AS lo, max(_cdc_order) AS o FROM t WHERE _cdc_key = "
                        f"{delta.sql_text(TRUNCATE_KEY)} AND _cdc_batch_seq > {int(applied)} AND _cdc_batch_seq <= "
                        f"{int(reached)}")
    if found is None or not found.num_rows or found["o"][0].as_py() is None:
        return False
    rows = rewrite.rows_read_for(dt_, found["o"][0].as_py(), table.soft_deletes)
    if _combines_above_truncate(table_dir, table, reached):
        # each key whose row ranks above the lowest pending truncate is combined again from its
        # history (`_combined_winners`): its row may hold a column only a change the truncate cuts carried
        rows += rewrite.rows_above(dt_, found["lo"][0].as_py())
    return rows > settings().local_apply_rows


def _combines_above_truncate(table_dir: str, table: TableConfig, reached: int) -> bool:
    """Whether a pending truncate makes the apply combine again every row ranking above it: a
    row may hold a column only a change the truncate cuts carried."""
    return combine.combines(table) and (table.partial_updates or combine.leaves_columns_out(table_dir, reached))


def _apply_feed_on_spark(spark, cfg: Config, table: TableConfig, dt_: DeltaTable, applied: int, reached: int,
                         t0: float) -> ApplyResult:
    """A truncate below more rows than this process combines again, on a table whose change data
    feed delta-rs' MERGE writes: Spark's executors build the whole state from staging and base (as
    a first apply does) and compare it with the target, and delta-rs' MERGE, after the truncate's
    own, streams in only the rows that change. The feed records what the apply in this process
    records; nothing table-sized is in this process."""
    from pyspark.sql import functions as F

    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    columns = flagged_columns(shape.target_columns(known_columns(dt_), [], table.keys, table.partition_by,
                                                   history_types=column_types(table_dir, marked=False)), table)
    if any(existing_columns(dt_).get(c, t) != t for c, t in columns.items()):
        # A column widened: as in this process, the target is rewritten once with the wider type first.
        widened = widen(spark, cfg, table, dt_, applied, columns)
        if (widened.applied_batch or 0) >= reached:  # built as of this apply's batch (a trimmed staging)
            return dataclasses.replace(widened, seconds=round(time.time() - t0, 2))
        dt_ = delta.load(target_path)
    session = session_of(spark)
    history = SparkHistory(session, table_dir, table, columns, reached)
    try:
        staged = as_target_types(session, path(table_dir, STAGING), columns)
        pending = staged.where((F.col("_cdc_batch_seq") > applied) & (F.col("_cdc_batch_seq") <= reached))
        n_pending, n_winners = pending.agg(F.count(F.lit(1)), F.countDistinct("_cdc_key")).first()
        deletes = history.latest.where(F.col("_cdc_op") == DELETE)
        changing = spark_apply.changing_rows(session, target_path, dt_,
                                             PartitionLayout.of(dt_, table.partition_by).spark_with_derived(
                                                 target_frame(history.live(table), columns, table, history.truncate)),
                                             deletes, history.truncate, table.soft_deletes)
    finally:
        history.close()
    try:
        faults.point("target.computed")  # decided; nothing is committed yet
        spark_apply.tombstones_after(session, table_dir, staged, applied, reached, ROWS_PER_FILE)
        dt_ = delta.keep_change_feed(target_path, dt_, table.change_feed)  # before the MERGEs that it is to record
        files_before, version_before = len(dt_.file_uris()), dt_.version()
        props = delta.commit_props(TARGET, reached, {"from_batch": applied + 1, "truncate": "true"})
        truncated = 0
        if history.truncate is not None:
            dt_, truncated = truncate_merge(target_path, dt_, history.truncate, table.soft_deletes,
                                            props if changing.rows == 0 else None)
        inserts = updates = deletes_ = 0
        if changing.rows:
            fs, paths = storage.arrow_paths(changing.uris)
            rows = ds.dataset(paths, format="parquet", filesystem=fs)
            inserts, updates, deletes_ = _merge(dt_, rows.scanner().to_reader(), props)
    finally:
        spark_files.discard(target_path, changing.adds)
    faults.point("target.committed")
    return _applied_figures(table, target_path, applied, reached, int(n_pending), int(n_winners),
                            (inserts, updates, deletes_ + truncated), files_before, version_before, t0,
                            "spark: the whole state compared with the target; delta-rs' MERGE writes the rows that "
                            "change and their change data feed")


def _apply_on_spark(spark, cfg: Config, table: TableConfig, dt_: DeltaTable, applied: int, reached: int,
                    t0: float) -> ApplyResult:
    """A large incremental apply, computed and written by Spark executors (engine/spark_apply.py)."""
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    columns = flagged_columns(shape.target_columns(known_columns(dt_), [], table.keys, table.partition_by,
                                                   history_types=column_types(table_dir, marked=False)), table)
    if existing_columns(dt_) != columns | {m: STRING for m in shape.META_COLUMNS}:
        # A column is new or wider: the target is rewritten once with it, as of the batch it
        # reached (a commit of added files cannot change a Delta table's schema); this apply
        # then goes on from there.
        widened = widen(spark, cfg, table, dt_, applied, columns)
        if (widened.applied_batch or 0) >= reached:  # built as of this apply's batch (a trimmed staging)
            return dataclasses.replace(widened, seconds=round(time.time() - t0, 2))
        dt_ = delta.load(target_path)
    dt_ = delta.keep_change_feed(target_path, dt_, False)
    files_before, version_before = len(dt_.file_uris()), dt_.version()
    session = session_of(spark)
    staged = as_target_types(session, path(table_dir, STAGING), columns)
    done = spark_apply.apply(session, table, table_dir, dt_, applied, reached, staged,
                             lambda frame, floor: target_frame(frame, columns, table, floor),
                             lambda figures: delta.commit_props(TARGET, reached, {"from_batch": applied + 1,
                                                                                  **figures}), ROWS_PER_FILE,
                             PartitionLayout.of(dt_, table.partition_by))
    faults.point("target.committed")
    return _applied_figures(table, target_path, applied, reached, done.changes_pending, done.winners,
                            (done.inserts, done.updates, done.deletes), files_before, version_before, t0, "spark")


def _append(table: TableConfig, target_path: str, dt_: DeltaTable, layout: PartitionLayout, m: MergeSource,
            applied: int, reached: int, t0: float) -> ApplyResult:
    """An insert_only table's batches: their rows appended, no target file read or rewritten
    (ingest quarantined every change that is not an insert)."""
    rows = m.source.filter(pc.equal(m.source["_cdc_apply"], UPSERT)).drop_columns(["_cdc_apply"])
    files_before = len(dt_.file_uris())
    props = delta.commit_props(TARGET, reached, {"from_batch": applied + 1, "insert_only": "true"})
    # through the snapshot the watermark was read on: another run appending the same batch makes ours fail
    if table.partition_by:
        _append_partitioned(target_path, dt_, layout.with_derived(rows), layout.delta_columns, props)
    else:
        write_deltalake(dt_, rows, mode="append", schema_mode="merge", commit_properties=props)
    faults.point("target.committed")
    final = delta.snapshot(target_path)
    assert final is not None  # the apply's caller made or found the target
    adds, _ = _commit_files(target_path, final.version())
    return ApplyResult(
        batches_applied=f"{applied + 1}..{reached}", applied_batch=reached, appended=True,
        changes_pending=m.pending.num_rows, keys_changed=rows.num_rows, inserts=rows.num_rows,
        updates=0, deletes=0, stale_skipped=0, superseded=m.pending.num_rows - m.winners.num_rows,
        files_added=len(adds), files_removed=0, files_before=files_before,
        partitions_rewritten=tuple(_partitions_of(target_path, adds, layout) if table.partition_by else []),
        rows=final.count(), delta_version=final.version(), seconds=round(time.time() - t0, 2),
    )


def _append_partitioned(target_path: str, dt_: DeltaTable, rows: pa.Table, partition_by: list[str], props) -> None:
    """`rows` appended to a partitioned target in files placed by no partition value (delta-rs
    names a folder by the value, which a value over 255 bytes cannot be): the Delta log alone says
    each file's partition values, so every value is stored exactly."""
    dt_ = delta.add_columns(target_path, dt_, rows.schema, STEP_COLUMNS)
    schema = pa.schema(dt_.schema().to_arrow())
    rows = pa.table({f.name: rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
                     for f in schema}).cast(schema)
    adds = spark_files.write_arrow(rows, target_path, partition_by, ROWS_PER_FILE)
    try:
        spark_files.commit(target_path, dt_, schema, adds, [], partition_by, props)
    except BaseException:
        spark_files.discard(target_path, adds)  # nothing references an uncommitted write's files
        raise


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


def _partitions_of(target_path: str, actions: list[dict], layout: PartitionLayout) -> list[str]:
    """The partition keys of the files of a commit's actions (the configured columns' values)."""
    # a removed file is still there to read (a vacuum keeps it for the retention's hours at least)
    keys = {shape.partition_key(layout.partition_by, layout.values(
        a.get("partitionValues") or {}, storage.join(target_path, unquote(a["path"])))) for a in actions}
    return sorted(keys)
