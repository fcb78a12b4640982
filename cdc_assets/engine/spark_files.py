"""Spark writes a table's data files; delta-rs commits them: delta-spark does not load here.

Executors write Parquet into a fresh folder inside the table; the driver reads only the
files' footers (row counts and column statistics, so readers and the MERGE can prune
files by key) and commits adds and removes as one Delta version. Nothing sized like the
data passes through the driver.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import time
import uuid
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from ..core import names
from ..core.values import canonical_text
from . import delta, faults, storage
from .spark import map_in_arrow

# A whole-table write (a base import, a first build, a rebuild) of at most this many rows runs in
# this process with Arrow and delta-rs, the same way each Spark task writes its share: Spark costs
# 15-35 s to start and seconds per job, more than such a write takes. Larger tables go to Spark.

# Spark's name for a null partition value in a folder name
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Statistics are written for these kinds of columns; other columns simply have none, which
# makes a reader scan the file rather than skip it (never wrong, only slower).
_STAT_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string, pa.types.is_large_string,
               pa.types.is_date32)


@dataclasses.dataclass
class TableFile:
    """One file of a snapshot, as the driver plans with it."""
    action: dict  # get_add_actions' row: path, size_bytes
    uri: str
    partition: dict  # typed partition values
    low: object  # the statistics of the column the files are listed by (None without them)
    high: object
    rows: int  # from the statistics (0 without them)

    def reaches(self, lo, hi=None) -> bool:
        """Whether its statistics range meets [lo, hi] (`hi` None: no upper end); a file without
        them may hold anything."""
        return self.low is None or self.high is None or ((hi is None or self.low <= hi) and self.high >= lo)


def files_of(table_path: str, dt_: DeltaTable, column: str) -> list[TableFile]:
    """The snapshot's files with their `column` statistics: the one reader of the log's add
    actions the Spark steps plan with."""
    actions = pa.table(dt_.get_add_actions(flatten=True))
    columns = actions.column_names
    lows = actions[f"min.{column}"].to_pylist() if f"min.{column}" in columns else [None] * actions.num_rows
    highs = actions[f"max.{column}"].to_pylist() if f"max.{column}" in columns else [None] * actions.num_rows
    parts = {c[len("partition."):]: actions[c].to_pylist() for c in columns if c.startswith("partition.")}
    counts = actions["num_records"].to_pylist() if actions.num_rows else []
    out = []
    for n, row in enumerate(actions.select(["path", "size_bytes"]).to_pylist()):
        # get_add_actions gives paths URI-encoded once more than the files' names
        out.append(TableFile(row, storage.join(table_path, unquote(row["path"])), {c: v[n] for c, v in parts.items()},
                             lows[n], highs[n], counts[n] or 0))
    return out


def files_reaching(table_path: str, column: str, lo, hi=None) -> tuple[list[TableFile], list[int]]:
    """A table's files (listed by `column`) and the ids of those whose `column` statistics reach
    [lo, hi]; none when the table does not exist."""
    dt_ = delta.snapshot(table_path)
    if dt_ is None:
        return [], []
    files = files_of(table_path, dt_, column)
    return files, [i for i, f in enumerate(files) if f.reaches(lo, hi)]


def rows_reaching(table_path: str, column: str, lo, hi=None) -> int:
    """At most how many rows hold a `column` value in [lo, hi]: the rows of the files whose
    statistics reach it."""
    files, ids = files_reaching(table_path, column, lo, hi)
    return sum(files[i].rows for i in ids)


def rows_written(adds: list) -> int:
    """The rows of written files (their add actions), from their statistics."""
    return sum(json.loads(a.stats)["numRecords"] for a in adds)


def write_session_settings(spark) -> None:
    """Parquet as delta-rs and every Delta reader expect it: microsecond timestamps."""
    for key, value in {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                       "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
                       "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED"}.items():
        spark.conf.set(key, value)


def arrow_schema_of(frame) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(frame.schema, timezone="UTC", prefers_large_types=False)


def _stat_value(value):
    if isinstance(value, (dt.date,)):
        return value.isoformat()
    if isinstance(value, bytes):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no infinity: such a column keeps its null count only
    return value


def file_stats(meta: pq.FileMetaData, schema: pa.Schema) -> str:
    """Delta statistics (numRecords, minValues, maxValues, nullCount) from a Parquet footer."""
    mins, maxs, nulls = {}, {}, {}
    for i in range(meta.num_columns):
        column = meta.schema.column(i)
        name = column.path
        # a nested field's path has its parents' names before its own; a top-level name may hold dots
        if column.name != name or name not in schema.names or not any(f(schema.field(name).type) for f in _STAT_TYPES):
            continue
        lo = hi = None
        n_null, complete = 0, True
        for g in range(meta.num_row_groups):
            st = meta.row_group(g).column(i).statistics
            if st is None or not st.has_null_count:
                complete = False
                break
            n_null += st.null_count
            if st.has_min_max:
                lo = st.min if lo is None or st.min < lo else lo
                hi = st.max if hi is None or st.max > hi else hi
        if not complete:
            continue
        nulls[name] = n_null
        if lo is not None and _stat_value(lo) is not None and _stat_value(hi) is not None:
            mins[name], maxs[name] = _stat_value(lo), _stat_value(hi)
    # Raw UTF-8, not \u escapes: delta-rs decodes an escaped surrogate pair (a character outside
    # the Basic Multilingual Plane) 0x10000 too low, and its pruning then skips the file that
    # holds such a key.
    return json.dumps({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
                      default=str, ensure_ascii=False)


def _columns(column_names):
    """Spark columns by name, whatever the name holds (a dot names a column, not a struct's field)."""
    from pyspark.sql import functions as F

    return [F.col(names.spark(c)) for c in column_names]


def write_files(frame, table_path: str, partition_by=(), sort_by=()) -> list[AddAction]:
    """Executors write `frame` as Parquet into a new folder of the table; the add actions for them.
    A partitioned table's files are written by the workers' writer too: Spark names a folder by a
    partition value, which a value over 255 bytes cannot be (the write would fail on every run);
    the workers place files by no value, and the Delta log alone says each file's partition values."""
    if storage.is_remote(table_path) or partition_by:
        return _write_through_workers(frame, table_path, list(partition_by), list(sort_by))
    write_session_settings(frame.sparkSession)
    out = new_folder(table_path)
    if sort_by:
        frame = frame.sortWithinPartitions(*_columns(sort_by))  # files hold key ranges: statistics prune them
    frame.write.mode("error").option("compression", "snappy").parquet(out)
    schema = arrow_schema_of(frame)
    adds = []
    for root, _dirs, files in os.walk(out):
        for name in sorted(files):
            if not name.endswith(".parquet") or name.startswith((".", "_")):
                continue
            adds.append(add_action(table_path, os.path.join(root, name), schema))
    for leftover in (os.path.join(out, "_SUCCESS"),):
        if os.path.exists(leftover):
            os.remove(leftover)
    return adds


def add_action(table_path: str, full: str, schema: pa.Schema, partition_values: dict | None = None) -> AddAction:
    """The add action of a data file written into the table's folder, statistics from its footer."""
    if storage.is_remote(table_path):
        fs, p = storage.filesystem(full)
        return AddAction(path=full[len(table_path.rstrip("/")) + 1:], size=fs.get_file_info(p).size,
                         partition_values=partition_values or {}, modification_time=int(time.time() * 1000),
                         data_change=True, stats=file_stats(pq.read_metadata(p, filesystem=fs), schema))
    info = os.stat(full)
    return AddAction(path=os.path.relpath(full, table_path).replace(os.sep, "/"), size=info.st_size,
                     partition_values=partition_values or {}, modification_time=int(info.st_mtime * 1000),
                     data_change=True, stats=file_stats(pq.read_metadata(full), schema))


def new_folder(table_path: str) -> str:
    """A fresh folder inside the table for one write's files (discarded whole if not committed)."""
    return storage.join(table_path, f"spark-{uuid.uuid4().hex}")


# ---- tables in an object store: Spark's Python workers read and write the files ----------
# Spark here has no Cloud Storage or S3 connector, so for a warehouse in an object
# store each task reads or writes its own files through Arrow's filesystems, with the store's
# settings carried in the task. The driver still sees only file names and footers' figures.

WRITTEN = (("path", "string"), ("size", "long"), ("partition_values", "string"), ("stats", "string"))


def partition_text(value) -> str | None:
    """A partition value as the Delta log spells it (the protocol's partition value serialization)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        # as Spark names a timestamp's partition folder: seconds, then a fraction only if there is one
        text = value.isoformat(sep=" ", timespec="microseconds")
        return text.rstrip("0").rstrip(".") if value.microsecond else text[:19]
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return canonical_text(value)  # NaN, Infinity, -Infinity: as Spark writes and reads them
    return str(value)


_FLOAT_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def by_bits(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Values that are equal only when they are the same value: a float column as its bits, so
    -0.0 does not match 0.0 (two partition values) and one NaN matches another with its bits."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.view(_FLOAT_BITS[values.type.bit_width]) if pa.types.is_floating(values.type) else values


def split_by_partition(table: pa.Table, partition_by: list[str]):
    """(partition values, rows) for each distinct combination of `partition_by` in `table`."""
    if not partition_by:
        yield (), table
        return
    keys = pa.table({c: by_bits(table.column(c)) for c in partition_by})
    for combo in keys.group_by(partition_by, use_threads=False).aggregate([]).to_pylist():
        mask = None
        for c in partition_by:
            v = combo[c]
            m = pc.is_null(keys.column(c)) if v is None else pc.fill_null(pc.equal(keys.column(c), v), False)
            mask = m if mask is None else pc.and_(mask, m)
        part = table.filter(mask)
        yield tuple(part.column(c)[0].as_py() for c in partition_by), part


# Columns that hold a different value in every row: a dictionary for them is built, then dropped.
UNIQUE_COLUMNS = ("_cdc_key", "_cdc_order", "_cdc_line", "_cdc_event_id")


# Rows of a file's first rows looked at to tell whether a column repeats its values.
DICTIONARY_SAMPLE = 4096


def dictionary_columns(schema: pa.Schema, rows: pa.Table | pa.RecordBatch | None = None) -> list[str]:
    """The columns a Parquet writer tries to dictionary-encode: all but those unique per row, and,
    given the file's `rows`, but those whose first rows are mostly distinct values (an id, an
    amount): the writer would build their dictionary, find it too large and drop it, which takes
    more time than writing the file's values."""
    names = [n for n in schema.names if n not in UNIQUE_COLUMNS]
    if rows is None or not rows.num_rows:
        return names
    sample = rows.slice(0, DICTIONARY_SAMPLE)
    repeating = []
    for n in names:
        if n not in sample.schema.names:
            repeating.append(n)
            continue
        values = sample.column(n)
        present = len(values) - values.null_count
        try:
            distinct = pc.count_distinct(values).as_py() if present else 0
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # nested values: as the writer decides
            distinct = 0
        if distinct * 2 <= present or present < 16:
            repeating.append(n)
    return repeating


def writer_task(table_path: str, folder: str, schema: pa.Schema, partition_by: list[str], settings: dict):
    """What a task runs to write the batches it is handed as Parquet files of the table in
    `folder`, a file per partition value; it yields one WRITTEN record per file."""
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])  # Delta keeps those in the log
    out_schema = delta.arrow_schema(WRITTEN)

    def run(batches):
        fs, _ = storage.filesystem(table_path, settings)
        task = uuid.uuid4().hex
        writers = {}  # partition values -> (writer, location)
        try:
            for batch in batches:
                rows = pa.Table.from_batches([batch]).cast(schema)
                for values, part in split_by_partition(rows, partition_by):
                    # by the log's text of each value: -0.0 and 0.0 are two partitions, every NaN one
                    texts = tuple(partition_text(v) for v in values)
                    if texts not in writers:
                        location = storage.join(folder, f"part-{task}-{len(writers):05d}.snappy.parquet")
                        stream = fs.open_output_stream(storage.filesystem(location, settings)[1])
                        writers[texts] = (pq.ParquetWriter(stream, data_schema, compression="snappy",
                                                           use_dictionary=dictionary_columns(data_schema, part),
                                                           coerce_timestamps="us"), location, stream)
                    writers[texts][0].write_table(part.select(data_schema.names))
            written = []
            for texts, (writer, location, stream) in writers.items():
                writer.close()
                stream.close()
                meta = writer.writer.metadata
                size = fs.get_file_info(storage.filesystem(location, settings)[1]).size
                written.append({"path": location[len(table_path.rstrip("/")) + 1:], "size": size,
                                "partition_values": json.dumps(dict(zip(partition_by, texts))),
                                "stats": file_stats(meta, data_schema)})
            writers.clear()
        finally:
            for writer, _location, stream in writers.values():
                writer.close()
                stream.close()
        if written:
            yield pa.RecordBatch.from_pylist(written, schema=out_schema)
    return run


def _write_through_workers(frame, table_path: str, partition_by: list[str], sort_by: list[str]) -> list[AddAction]:
    schema = arrow_schema_of(frame)
    folder = new_folder(table_path)
    if not storage.is_remote(folder):
        os.makedirs(folder)  # an object store has no folders to make
    order = partition_by + sort_by
    if order:
        frame = frame.sortWithinPartitions(*_columns(order))  # one file per partition value per task; key ranges
    try:
        written = map_in_arrow(frame, writer_task(table_path, folder, schema, partition_by, storage.settings()),
                               delta.spark_schema(WRITTEN)).toArrow()
    except Exception:
        storage.remove_tree(folder)
        raise
    return add_actions(written.to_pylist())


def write_arrow(data: pa.Table, table_path: str, partition_by=(), rows_per_file: int | None = None) -> list[AddAction]:
    """`data` written in this process as Parquet files into a new folder of the table, in its
    row order, by the code each Spark task runs for an object store: a file per partition value
    per `rows_per_file` rows; the add actions for them."""
    partition_by = list(partition_by)
    folder = new_folder(table_path)
    if not storage.is_remote(folder):
        os.makedirs(folder)
    task = writer_task(table_path, folder, data.schema, partition_by, storage.settings())
    step = rows_per_file or max(data.num_rows, 1)
    try:
        written = [w for start in range(0, data.num_rows, step)
                   for b in task(data.slice(start, step).to_batches()) for w in b.to_pylist()]
    except Exception:
        storage.remove_tree(folder)
        raise
    return add_actions(written)


def add_actions(written: list[dict]) -> list[AddAction]:
    """The add actions of files writer_task wrote (its WRITTEN records)."""
    now = int(time.time() * 1000)
    return [AddAction(path=w["path"], size=w["size"], partition_values=json.loads(w["partition_values"]),
                      modification_time=now, data_change=True, stats=w["stats"])
            for w in sorted(written, key=lambda w: w["path"])]


def listed_files(batches, settings: dict):
    """Each Parquet file a task's listing batches name (their first column: URIs), opened."""
    for listing in batches:
        for uri in listing.column(0).to_pylist():
            fs, p = storage.filesystem(uri, settings)
            yield pq.ParquetFile(fs.open_input_file(p))


def _reader_task(schema: pa.Schema, settings: dict):
    def run(batches):
        for pf in listed_files(batches, settings):
            have = set(pf.schema_arrow.names)
            for rb in pf.iter_batches(columns=[n for n in schema.names if n in have]):
                # A column the file lacks (added later) reads as nulls, as Spark's reader does.
                yield pa.RecordBatch.from_arrays(
                    [rb.column(f.name).cast(f.type) if f.name in have else pa.nulls(rb.num_rows, f.type)
                     for f in schema], schema=schema)
    return run


def read_files(spark, uris: list[str], ddl: str):
    """The Parquet files `uris` of a table in an object store as one DataFrame with schema `ddl`,
    read by the executors' Python workers."""
    from pyspark.sql.pandas.types import to_arrow_schema

    listing = spark.createDataFrame([(u,) for u in uris], "uri string")
    schema = to_arrow_schema(listing.sparkSession.createDataFrame([], ddl).schema, timezone="UTC",
                             prefers_large_types=False)
    return listing.repartition(max(1, min(len(uris), 200))).mapInArrow(_reader_task(schema, storage.settings()), ddl)


def removes_for(dt_: DeltaTable, keep=lambda partition_values, file: False) -> list[RemoveAction]:
    """Remove actions for the snapshot's files, except those `keep` accepts (given a file's
    partition values and its path in the table)."""
    now = int(time.time() * 1000)
    out = []
    for a in pa.table(dt_.get_add_actions(flatten=False)).to_pylist():
        values = a.get("partition") or {}
        # get_add_actions gives paths URI-encoded once more than the files' names
        if keep(values, unquote(a["path"])):
            continue
        out.append(remove_action(a, values, now))
    return out


def remove_action(added: dict, partition: dict, now: int) -> RemoveAction:
    """The remove action of a file `get_add_actions` listed (`added`), `partition` its typed values."""
    # get_add_actions gives paths URI-encoded once more than the log holds them
    # get_add_actions types the partition values; a remove action carries them as the log's text
    return RemoveAction(path=unquote(added["path"]), data_change=True, deletion_timestamp=now,
                        size=added["size_bytes"],
                        partition_values={c: partition_text(v) for c, v in partition.items()} or None)


def commit(table_path: str, dt_: DeltaTable | None, schema: pa.Schema, adds: list[AddAction],
           removes: list[RemoveAction] | None, partition_by, props, configuration: dict | None = None) -> DeltaTable:
    """One Delta version with these adds and removes (a new table when `dt_` is None; with
    `removes` None, the adds replace every file and the schema). Through the snapshot `dt_`
    the caller checked, so a concurrent writer's commit makes ours fail. `configuration`: a new
    table's properties (delta.TABLE_CONFIGURATION by default)."""
    faults.point("spark_files.before_commit")
    try:
        if dt_ is None:
            create_table_with_add_actions(table_path, Schema.from_arrow(schema), adds, mode="error",
                                          partition_by=list(partition_by) or None,
                                          configuration=configuration or delta.TABLE_CONFIGURATION,
                                          commit_properties=props,
                                          storage_options=storage.delta_options(table_path))
        elif removes is None and list(dt_.metadata().partition_columns) != list(partition_by):
            # A table laid out again (engine/partition_layout.py): delta-rs' overwrite keeps the
            # partition columns, a replace of the table's metadata changes them, in one version. The
            # replace commits on the newest version: one since the snapshot `dt_` fails this write.
            if delta.load(table_path).version() != dt_.version():
                raise delta.CommitConflict(f"{table_path}: another writer committed since this write read the table")
            create_table_with_add_actions(table_path, Schema.from_arrow(schema), adds, mode="overwrite",
                                          partition_by=list(partition_by) or None,
                                          configuration=dict(dt_.metadata().configuration),
                                          commit_properties=props,
                                          storage_options=storage.delta_options(table_path))
        elif removes is None:
            dt_.create_write_transaction(list(adds), mode="overwrite", schema=Schema.from_arrow(schema),
                                         partition_by=list(partition_by) or None, commit_properties=props)
        else:
            dt_.create_write_transaction(list(adds) + list(removes), mode="append", schema=Schema.from_arrow(schema),
                                         partition_by=list(partition_by) or None, commit_properties=props)
    except Exception as e:
        if dt_ is None and "already exists" in str(e):
            raise delta.CommitConflict(f"{table_path}: another writer created the table first") from e
        raise
    return delta.load(table_path)


def discard(table_path: str, adds: list[AddAction]) -> None:
    """Files of a write that was not committed (a lost race): nothing references them."""
    for folder in {unquote(a.path).split("/")[0] for a in adds}:
        storage.remove_tree(storage.join(table_path, folder))


def spark_frame(spark, path: str, fields):
    """A snapshot of an unpartitioned Delta table as a Spark DataFrame (no delta-spark here)."""
    dt = delta.open_table(path)
    files = dt.file_uris() if dt is not None else []
    if not files:
        return spark.createDataFrame([], delta.spark_schema(fields))
    if storage.is_remote(path):
        return read_files(spark, files, delta.spark_schema(fields))
    return spark.read.schema(delta.spark_schema(fields)).parquet(*files)
