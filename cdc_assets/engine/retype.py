"""A target whose column types widened, rewritten file by file with the wider types.

delta-rs cannot change a column's type in place (its `alter` adds columns, constraints and
properties; it has no type widening feature), and a Delta reader reads each file with the
table's schema, so every data file is rewritten. When each widened column's values cast
exactly (an integer into a long, a double or a decimal wide enough, a decimal into a wider one,
a date into a timestamp at its midnight), the rows need not be computed again from the history:
each file is read, its columns cast, and written again beside the others with the same rows, in
the same order and partition (its key range and statistics stay what they were). The new files
replace the old ones in one overwrite commit that carries the new schema. The cost is one read
and one write of the target, streamed a row group at a time, with no Spark and no pass over
staging or base.
"""
from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from ..core.partition_text import derived_value
from . import faults, spark_files, storage
from .partition_layout import PartitionLayout


def rewrite(target_path: str, dt_: DeltaTable, schema: pa.Schema, partition_by, props) -> DeltaTable:
    """Every file of the snapshot `dt_` written again with `schema` (each column cast to its type
    there, a column a file lacks read as nulls), committed through `dt_` as one overwrite that
    replaces every file and the schema. The caller has checked that each cast keeps every value."""
    def place(added: dict) -> tuple[dict, dict | None]:
        return {c: spark_files.partition_text(v) for c, v in (added.get("partition") or {}).items()}, None

    return _rewrite_every_file(target_path, dt_, schema, list(partition_by), props, place)


def relayout(target_path: str, dt_: DeltaTable, layout: PartitionLayout, props) -> DeltaTable:
    """The target laid out again in `layout` (engine/partition_layout.py), file by file as a
    widening rewrites it: each file's rows keep their order and key range, a newly derived
    column's value (the file's partition value) is written into the file, and the derived column
    partitions the table in its place; one overwrite commit carries the new schema and partition
    columns. A value an older version stored as null (an empty text) stays null."""
    delta_columns, before = layout.delta_columns, PartitionLayout.of(dt_, layout.partition_by)

    def place(added: dict) -> tuple[dict, dict | None]:
        # a column derived before keeps its derived value; a newly derived one's value (as the old
        # layout's log holds it, exact) is written into the file and derived
        logged = added.get("partition") or {}
        values = {c: logged.get(c) for c in layout.partition_by if c not in before.derived}
        return {d: logged.get(d) if c in before.derived else spark_files.partition_text(
                    derived_value(values[c], c) if c in layout.derived else values[c])
                for c, d in zip(layout.partition_by, delta_columns)}, values

    return _rewrite_every_file(target_path, dt_, layout.schema(pa.schema(dt_.schema().to_arrow())), delta_columns,
                               props, place)


def _rewrite_every_file(target_path: str, dt_: DeltaTable, schema: pa.Schema, delta_columns: list[str], props,
                        place: Callable[[dict], tuple[dict, dict | None]]) -> DeltaTable:
    """Every file of `dt_` written again with `schema`, its partition values and the values of
    columns it lacks given by `place` (from its add action); one overwrite commit through `dt_`
    with `delta_columns` as the partition columns."""
    data_schema = pa.schema([f for f in schema if f.name not in delta_columns])
    folder = spark_files.new_folder(target_path)
    fs, _ = storage.filesystem(target_path)
    if not storage.is_remote(folder):
        os.makedirs(folder)
    adds: list[AddAction] = []
    try:
        for added in pa.table(dt_.get_add_actions(flatten=False)).to_pylist():
            # get_add_actions gives a path URI-encoded once more than the file's own
            source = storage.filesystem(storage.join(target_path, unquote(added["path"])))[1]
            location = storage.join(folder, f"part-{uuid.uuid4().hex}.snappy.parquet")
            partition, fill = place(added)
            adds.append(_rewrite_file(fs, source, target_path, location, data_schema, partition, fill))
        faults.point("target.computed")
        return spark_files.commit(target_path, dt_, schema, adds, None, delta_columns, props)
    except Exception:
        storage.remove_tree(folder)  # nothing references an uncommitted write's files
        raise


def _rewrite_file(fs, source: str, target_path: str, location: str, schema: pa.Schema,
                  partition_values: dict, fill: dict | None = None) -> AddAction:
    """One file written again with `schema`; a column it lacks is `fill`'s value for it, or null."""
    fill = fill or {}
    with fs.open_input_file(source) as raw:
        pf = pq.ParquetFile(raw)
        have = set(pf.schema_arrow.names)
        stream = fs.open_output_stream(storage.filesystem(location)[1])
        writer = pq.ParquetWriter(stream, schema, compression="snappy",
                                  use_dictionary=spark_files.dictionary_columns(schema), coerce_timestamps="us")
        try:
            for batch in pf.iter_batches(columns=[n for n in schema.names if n in have]):
                writer.write_batch(pa.RecordBatch.from_arrays(
                    [batch.column(f.name).cast(f.type) if f.name in have
                     else pa.array([fill.get(f.name)] * batch.num_rows, f.type) for f in schema], schema=schema))
        finally:
            writer.close()
            stream.close()
    meta = writer.writer.metadata
    size = fs.get_file_info(storage.filesystem(location)[1]).size
    return AddAction(path=location[len(target_path.rstrip("/")) + 1:].replace(os.sep, "/"), size=size,
                     partition_values=partition_values, modification_time=int(time.time() * 1000),
                     data_change=True, stats=spark_files.file_stats(meta, schema))
