"""The target built from all of staging and base: the first apply, a rebuild, a type widening.

Spark executors compute and write the state (or this process for a small history, or one task per
base file for a base exported in key order); delta-rs commits the files (spark_files). A widening
whose values cast exactly rewrites the target's files with a cast instead (engine/retype.py).
"""
from __future__ import annotations

import dataclasses
import os
import time

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ..core import target as shape
from ..core.changes import UPSERT
from ..core.config import Config, TableConfig
from ..core.values import DATE, DOUBLE, LONG, STRING, TIMESTAMP, TIMESTAMP_NTZ
from . import delta, faults, key_spans, retype, spark_files, storage
from .ingest import column_types
from .partition_layout import PartitionLayout
from .settings import settings
from .spark import session_of
from .staged_history import LocalHistory, SparkHistory, history_rows
from .step_results import ApplyResult
from .table_layout import BASE, STAGING, STAGING_TRIM, TARGET, TOMBSTONE_FIELDS, TOMBSTONES, path
from .target_typing import cast_keeps, cast_typed, existing_columns, flagged_columns, known_columns, target_schema


def build(spark, cfg: Config, table: TableConfig, dt_: DeltaTable | None, reached: int,
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
        columns = flagged_columns(shape.target_columns(known_columns(dt_), [], table.keys, table.partition_by,
                                                       history_types=ledger), table)
    if partition_keys is not None and existing_columns(dt_) != columns | {m: STRING for m in shape.META_COLUMNS}:
        partition_keys = None  # a column is new or wider since: every file is rewritten with the new schema
    has_base = table.base_snapshot is not None
    layout = PartitionLayout.of(dt_, table.partition_by)
    newly = layout.unfit_in_staging(table_dir, f"_cdc_batch_seq <= {int(reached)}",
                                    {c for c, t in columns.items() if t == STRING}, table.change_feed, base=has_base)
    if newly:
        # a value of a text partition column that a Delta partition value of the native layout
        # cannot stand for: the target is built whole in the derived layout (engine/partition_layout.py)
        layout, partition_keys = layout.deriving(newly), None
    history: _BaseFiles | LocalHistory | SparkHistory
    by_files = _BaseFiles.of(spark, table_dir, table, columns, reached, partition_keys)
    adds = by_files.build(target_path, table) if by_files is not None else None
    if by_files is not None and adds is not None:
        history = by_files
    elif history_rows(table_dir, has_base) <= settings().local_build_rows:
        history = LocalHistory(table_dir, table, columns, reached)
    else:
        history = SparkHistory(session_of(spark), table_dir, table, columns, reached)
    try:
        if not isinstance(history, _BaseFiles):
            adds = history.write_target(target_path, table, partition_keys, layout)
        assert adds is not None
        arrow_schema = layout.schema(target_schema(columns))
        if partition_keys is None or dt_ is None:
            removes = None  # every file, and the schema, replaced
        else:
            wanted_keys = set(partition_keys)
            removes = spark_files.removes_for(dt_, keep=lambda pv, file: shape.partition_key(
                table.partition_by, layout.values(pv, storage.join(target_path, file))) not in wanted_keys)
        if first:
            props = delta.commit_props(TARGET, reached, {"from_batch": max(delta.txn_version(dt_, TARGET), -1) + 1,
                                                         "build": "full"})
        else:
            # "widen" when an apply rewrites the target for a wider column type, "rebuild" otherwise
            step = "widen" if widen else "rebuild"
            props = delta.CommitProperties(custom_metadata={"cdc.step": step, "cdc.reached": str(reached)})
        faults.point("target.computed")
        try:
            final = spark_files.commit(target_path, dt_, arrow_schema, adds, removes, layout.delta_columns, props,
                                       delta.target_configuration(table.change_feed))
        except Exception:
            spark_files.discard(target_path, adds)
            raise
        if first or tombstones:
            _build_tombstones(history, table_dir, reached)
        faults.point("target.committed")
    finally:
        history.close()
    rows = spark_files.rows_written(adds)
    replaced = len(dt_.file_uris()) if removes is None and dt_ is not None else len(removes or [])
    figures = ApplyResult(applied_batch=reached, rows_written=rows, files_added=len(adds), files_removed=replaced,
                          rows=final.count(), delta_version=final.version(),
                          partitions_rewritten=tuple(sorted(partition_keys)) if partition_keys is not None else None,
                          derived_partitions=tuple(c for c in table.partition_by if c in newly) or None)
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
    schema = target_schema(columns)
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
            rows = cast_typed(records, columns)
            if soft:  # every base row is live (rules.md#rule-12)
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


def _casts_exactly(have: str, want: str) -> bool:
    """Whether every value of column type `have` is a value of `want` as it is, so that a stored
    value cast to `want` is the value a rebuild from its change would give (a long into a double
    can round, and text needs the value as it was written: those are rebuilt)."""
    if have == DATE:
        return want in (TIMESTAMP, TIMESTAMP_NTZ)  # its midnight, in UTC for an instant
    return cast_keeps(have, want) and (have, want) != (LONG, DOUBLE)


def widen(spark, cfg: Config, table: TableConfig, dt_: DeltaTable, applied: int,
           columns: dict[str, str]) -> ApplyResult:
    """The target as of batch `applied` with the column types `columns` (wider ones, new ones):
    its files cast to them when each changed column's values cast exactly, none is a partition
    column and the target is of a size this process builds (engine/retype.py: one streamed read
    and write of the target), else built again from staging and base."""
    existing = existing_columns(dt_)
    changed = {c: t for c, t in columns.items() if c in existing and existing[c] != t}
    # a target above the local size is built on Spark's executors: nothing table-sized in this process
    if (any(c in table.partition_by or not _casts_exactly(existing[c], t) for c, t in changed.items())
            or delta.file_stats(dt_)[2] > settings().local_build_rows):
        return build(spark, cfg, table, dt_, applied, None, first=False, columns=columns, widen=True)
    files = len(dt_.file_uris())
    props = delta.CommitProperties(custom_metadata={"cdc.step": "widen", "cdc.reached": str(applied)})
    layout = PartitionLayout.of(dt_, table.partition_by)
    final = retype.rewrite(path(cfg.table_dir(table.name), TARGET), dt_, layout.schema(target_schema(columns)),
                           layout.delta_columns, props)
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
    return build(spark, cfg, table, dt_, reached, None, first=False, tombstones=True)


def rebuild(spark, cfg: Config, table: TableConfig, partition_keys: list[str] | None) -> ApplyResult:
    """Rebuild partitions (or the whole target) from staging as of the batch the target reached;
    a target restored to a batch a staging trim has passed is built whole as of the last staged
    batch (`build`)."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    dt_ = delta.open_table(path(table_dir, TARGET))  # read and committed through, as in apply_pending
    reached = delta.txn_version(dt_, TARGET)
    if dt_ is None or reached < 0:
        return ApplyResult(nothing_applied_yet=True)
    before = dt_.version()
    figures = build(spark, cfg, table, dt_, reached, partition_keys, first=False)
    whole = (figures.applied_batch or 0) > reached  # a target older than a staging trim's reach (`build`)
    return dataclasses.replace(figures, rebuilt_as_of_batch=figures.applied_batch,
                               partitions="all" if whole else (tuple(partition_keys or ()) or "all"),
                               previous_version=before, seconds=round(time.time() - t0, 2))
