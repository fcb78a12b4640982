"""`staging` (+ `base`) -> `target`: apply the pending batches, or rebuild partitions.

Spark picks, per key, the change with the greatest ordering key over everything
staged (rules 1-3: deletes are remembered in staging, base rows rank lowest);
delta-rs commits the result as one MERGE, so readers see the old or the new
target and nothing between, and the commit records the batch it reached.
"""
from __future__ import annotations

import json
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from ..core import target as shape
from ..core.changes import RECORD_FIELDS
from ..core.config import Config, TableConfig
from ..core.values import BOOLEAN, STRING, decimal_parts, decode_row
from . import delta, faults
from .ingest import column_types
from .stage import latest_per_key
from .tables import BASE, STAGING, TARGET, path


def _history(spark, table_dir: str, has_base: bool):
    staged = delta.spark_frame(spark, path(table_dir, STAGING), RECORD_FIELDS)
    if has_base:
        staged = staged.unionByName(delta.spark_frame(spark, path(table_dir, BASE), RECORD_FIELDS))
    return staged


def _existing_columns(dt: DeltaTable | None) -> dict[str, str]:
    if dt is None:
        return {}
    schema = pa.schema(dt.schema())
    return {f.name: shape.column_type(f.type) for f in schema}


def _columns(dt: DeltaTable | None, images: list[dict], table_dir: str, table: TableConfig) -> dict[str, str]:
    return shape.target_columns(_existing_columns(dt), images, table.keys, table.partition_by,
                                history_types=column_types(table_dir, marked=False))


def _target_rows(winners: list[dict], columns: dict[str, str], with_apply: bool, images: list[dict]) -> pa.Table:
    data = shape.typed_columns(images, columns)
    fields = [pa.field(c, shape.arrow_type(t)) for c, t in columns.items()]
    arrays = [pa.array(data[c], type=shape.arrow_type(t)) for c, t in columns.items()]
    for m in shape.META_COLUMNS:
        fields.append(pa.field(m, pa.string()))
        arrays.append(pa.array([w[m] for w in winners], pa.string()))
    if with_apply:
        fields.append(pa.field("_cdc_apply", pa.string()))
        arrays.append(pa.array([w["_cdc_op"] for w in winners], pa.string()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _widen(dt: DeltaTable, columns: dict[str, str], partition_by) -> DeltaTable:
    """A column whose type widened (long -> double -> string): rewrite the table once, same rows."""
    existing = _existing_columns(dt)
    if all(existing.get(c, t) == t for c, t in columns.items()):
        return dt
    data = dt.to_pyarrow_table()
    for c, t in columns.items():
        if c in existing and existing[c] != t:
            i = data.schema.get_field_index(c)
            # FIX (SPEC 4.6/4.7): a safe cast refused integers beyond 2**53 when a long column
            # widened to double, failing the table on every later run; convert them as new
            # rows are (float(), nearest double), the only lossy step of the type lattice.
            data = data.set_column(i, c, data.column(c).cast(shape.arrow_type(t), safe=False))
    # Through `dt` with predicate "true": the rewrite then counts as reading the whole snapshot,
    # so delta-rs refuses it if another writer committed since (a bare overwrite would not).
    write_deltalake(dt, data, mode="overwrite", predicate="true", schema_mode="overwrite",
                    partition_by=list(partition_by) or None,
                    commit_properties=delta.CommitProperties(custom_metadata={"cdc.step": "widen"}))
    return dt


def apply_pending(spark, cfg: Config, table: TableConfig) -> dict:
    from pyspark.sql import functions as F

    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    # The one snapshot of target this apply reads and commits through: a concurrent commit to
    # target (another run of this table) then fails ours with a conflict instead of being
    # overwritten with winners computed from an older watermark.
    dt = delta.open_table(target_path)
    applied = delta.txn_version(dt, TARGET)
    staged = delta.step_version(path(table_dir, STAGING), STAGING)
    has_base = table.base_snapshot is not None
    if has_base and delta.step_version(path(table_dir, BASE), BASE) < 0:
        raise RuntimeError(f"table {table.name}: base snapshot not imported yet: materialize {table.name}/base first")
    reached = max(staged, 0 if has_base else -1)
    if reached <= applied:
        return {"nothing_new": True, "applied_batch": applied}

    history = _history(spark, table_dir, has_base)
    pending = history.where(F.col("_cdc_batch_seq") > applied)
    touched = history.join(pending.select("_cdc_key").distinct(), "_cdc_key", "left_semi").cache()
    try:
        old = latest_per_key(touched.where(F.col("_cdc_batch_seq") <= applied)) \
            .select("_cdc_key", F.col("_cdc_order").alias("_old_order"), F.col("_cdc_op").alias("_old_op"),
                    F.col("_cdc_partition").alias("_old_partition"))
        new = latest_per_key(touched)
        changed = new.where(F.col("_cdc_batch_seq") > applied).join(old, "_cdc_key", "left")
        winners = changed.toArrow().to_pylist()
        n_pending = pending.count()
        stale = pending.join(old, "_cdc_key").where(F.col("_cdc_order") < F.col("_old_order")).count()
    finally:
        touched.unpersist()

    faults.point("target.computed")  # Spark has decided; nothing is committed yet
    images = [decode_row(w["_cdc_row"]) for w in winners]
    columns = _columns(dt, images, table_dir, table)
    props = delta.commit_props(TARGET, reached, {"from_batch": applied + 1})
    partitions = sorted({w["_cdc_partition"] for w in winners if w["_cdc_op"] == "U"}
                        | {w["_old_partition"] for w in winners if w["_old_op"] == "U"}) if table.partition_by else []
    if dt is None:
        live = [i for i, w in enumerate(winners) if w["_cdc_op"] == "U"]
        rows = _target_rows([winners[i] for i in live], columns, False, [images[i] for i in live])
        delta.create(target_path, rows, partition_by=list(table.partition_by) or None, commit_properties=props)
        result = {"num_target_rows_inserted": rows.num_rows, "num_target_rows_updated": 0,
                  "num_target_rows_deleted": 0, "num_target_files_added": len(DeltaTable(target_path).file_uris()),
                  "num_target_files_removed": 0}
    elif not winners:
        # Every pending change was stale or a re-delivery: nothing to commit, so readers see no
        # new version. The watermark stays; the next run re-checks these batches, cheaply.
        result = {}
    else:
        dt = _widen(dt, columns, table.partition_by)
        source = _target_rows(winners, columns, True, images)
        result = dt.merge(source, "t._cdc_key = s._cdc_key", source_alias="s", target_alias="t",
                          merge_schema=True, commit_properties=props) \
            .when_matched_delete("s._cdc_apply = 'D'") \
            .when_matched_update_all("s._cdc_apply = 'U'", except_cols=["_cdc_apply"]) \
            .when_not_matched_insert_all("s._cdc_apply = 'U'", except_cols=["_cdc_apply"]) \
            .execute()
    faults.point("target.committed")
    final = DeltaTable(target_path)
    return {
        "batches_applied": f"{applied + 1 if applied >= 0 or has_base else 1}..{reached}", "applied_batch": reached,
        "changes_pending": n_pending, "keys_changed": len(winners),
        "inserts": result.get("num_target_rows_inserted", 0), "updates": result.get("num_target_rows_updated", 0),
        "deletes": result.get("num_target_rows_deleted", 0), "stale_skipped": stale,
        "superseded": n_pending - stale - len(winners),
        "files_added": result.get("num_target_files_added", 0), "files_removed": result.get("num_target_files_removed", 0),
        "partitions_rewritten": [shape.partition_key(table.partition_by, json.loads(p)) for p in partitions if p],
        "rows": final.count(), "delta_version": final.version(), "seconds": round(time.time() - t0, 2),
    }


def _literal(value, type_: str) -> str:
    if value is None:
        return "NULL"
    if type_ in ("int", "long", "double") or decimal_parts(type_):
        return str(value)
    if type_ == BOOLEAN:
        return "true" if str(value).lower() in ("true", "1") else "false"
    return "'" + str(value).replace("'", "''") + "'"


def partition_predicate(partition_by, columns: dict[str, str], keys: list[str]) -> str:
    ors = []
    for key in keys:
        ands = []
        for col, v in zip(partition_by, shape.partition_values(key)):
            ands.append(f'"{col}" IS NULL' if v is None else f'"{col}" = {_literal(v, columns.get(col, STRING))}')
        ors.append("(" + " AND ".join(ands) + ")")
    return " OR ".join(ors)


def rebuild(spark, cfg: Config, table: TableConfig, partition_keys: list[str] | None) -> dict:
    """Rebuild partitions (or the whole target) from staging as of the batch the target reached."""
    from pyspark.sql import functions as F

    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    dt = delta.open_table(target_path)  # read and committed through, as in apply_pending
    reached = delta.txn_version(dt, TARGET)
    if reached < 0:
        return {"nothing_applied_yet": True}
    history = _history(spark, table_dir, table.base_snapshot is not None) \
        .where(F.col("_cdc_batch_seq") <= reached)
    live = latest_per_key(history).where(F.col("_cdc_op") == "U")
    if partition_keys is not None:
        wanted = [shape.partition_text(shape.partition_values(k)) for k in partition_keys]
        live = live.where(F.col("_cdc_partition").isin(wanted))
    winners = live.toArrow().to_pylist()
    images = [decode_row(w["_cdc_row"]) for w in winners]
    columns = _columns(dt, images, table_dir, table)
    dt = _widen(dt, columns, table.partition_by)
    before = dt.version()
    rows = _target_rows(winners, columns, False, images)
    # "true" for all: a predicate makes delta-rs check the rows it replaces against concurrent commits.
    predicate = partition_predicate(table.partition_by, columns, partition_keys) if partition_keys else "true"
    write_deltalake(dt, rows, mode="overwrite", predicate=predicate, schema_mode="merge",
                    partition_by=list(table.partition_by) or None,
                    commit_properties=delta.CommitProperties(custom_metadata={
                        "cdc.step": "rebuild", "cdc.reached": str(reached)}))
    final = DeltaTable(target_path)
    return {"rebuilt_as_of_batch": reached, "partitions": partition_keys or "all", "rows_written": rows.num_rows,
            "rows": final.count(), "delta_version": final.version(), "previous_version": before,
            "seconds": round(time.time() - t0, 2)}
