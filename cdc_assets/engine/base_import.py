"""A source export -> `base`: the rows a table starts from, ranked below every change.

Spark tasks read the export (a Parquet export in slices of its row groups), parse it and
write the `base` files; the driver gathers only what is small (rejections, each task's
column types, the partition list) and commits the files with delta-rs. A typed export of at
most settings.local_build_rows rows runs the same tasks in this process instead.

A Parquet export whose columns all have column types keeps them as typed columns in
`base` (core/typed_export.py): no row image is made or read again, and its column types
come from its schema. Other exports (CSV, JSON lines, Avro, Parquet with nested values)
keep each row's image in `_cdc_row`, as changes do.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from ..core import csv_export
from ..core import target as shape
from ..core.changes import RECORD_FIELDS, REJECT_FIELDS
from ..core.config import Config, ConfigError, TableConfig
from ..core.schema import STRICT, joined
from ..core.typed_export import base_schema, export_batch, export_columns
from . import delta, spark_files, storage
from .ingest import (
    LEDGER,
    MAX_TASKS,
    PARSED_FIELDS,
    _parse_partition,
    batch_bytes,
    parse_files,
    quarantine,
    rejected_rows,
    snapshot_listing,
)
from .settings import settings
from .spark import session_of
from .step_results import BaseResult
from .table_layout import BASE, BASE_BATCH, BASE_ID, path


def _export_path(table: TableConfig) -> str:
    """The table's base export (`base_snapshot:`): only a table with one has a base to import."""
    if table.base_snapshot is None:
        raise ConfigError(f"table {table.name}: no base_snapshot to import")
    return table.base_snapshot


def import_base(spark, cfg: Config, table: TableConfig, log=None) -> BaseResult:
    """`spark`: a session, or a function that starts one; a typed export of at most
    settings.local_build_rows rows, or another of at most settings.local_parse_bytes, is imported
    without calling it."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    base_path = path(table_dir, BASE)
    if delta.step_version(base_path, BASE) >= BASE_BATCH:
        return BaseResult(already_committed=True)
    export = _export_path(table)
    files = [{"path": export, "file": os.path.basename(export), "file_index": 0,
              "batch_seq": BASE_BATCH, "batch_id": BASE_ID}]
    columns = typed_export_columns(table)
    if columns is not None:
        typed = _import_typed(spark, table, table_dir, columns, log, t0)
        if typed is not None:
            return typed
    if batch_bytes(files) <= settings().local_parse_bytes:
        ledgers, n_rejected, partitions, adds = _import_rows_here(table, table_dir, files, log)
    else:
        ledgers, n_rejected, partitions, adds = _import_rows_on_spark(session_of(spark), table, table_dir, files, log)
    rows = spark_files.rows_written(adds)
    # An export's values widen the column types; a CSV export's are inferred and never misfit.
    types = joined(*ledgers)
    imported = BaseResult(rows_read=rows + n_rejected, rows=rows, quarantined=n_rejected, files=len(adds))
    props = delta.commit_props(BASE, BASE_BATCH, {**imported.to_metadata(), "column_types": json.dumps(types),
                                                  "partitions": json.dumps(partitions)})
    try:
        final = spark_files.commit(base_path, None, delta.arrow_schema(RECORD_FIELDS), adds, [], (), props)
    except Exception:
        spark_files.discard(base_path, adds)
        raise
    return dataclasses.replace(imported, delta_version=final.version(), seconds=round(time.time() - t0, 2))


def _import_rows_on_spark(spark, table: TableConfig, table_dir: str, files: list[dict], log):
    """An export read row by row by Spark's tasks: (column types, rejections, partitions, adds)."""
    parsed = parse_files(spark, table, files, snapshot=True).cache()  # read three times below
    try:
        ledgers = [json.loads(r["_cdc_row"]) for r in parsed.where(F.col("_cdc_op") == LEDGER)
                   .select("_cdc_row").collect()]
        n_rejected = quarantine(table, table_dir, rejected_rows(parsed), BASE_BATCH, log)
        good = parsed.where(F.col("_cdc_reason").isNull() & (F.col("_cdc_op") != LEDGER)) \
            .select(*[c for c, _ in RECORD_FIELDS])
        partitions = sorted(r[0] for r in good.select("_cdc_partition").distinct().collect()
                            if r[0] is not None) if table.partition_by else []
        return ledgers, n_rejected, partitions, spark_files.write_files(good, path(table_dir, BASE))
    finally:
        parsed.unpersist()


def _import_rows_here(table: TableConfig, table_dir: str, files: list[dict], log):
    """The same for an export of at most settings.local_parse_bytes (as a batch of that size is
    parsed), in this process by the code Spark's tasks run."""
    schema = delta.arrow_schema(PARSED_FIELDS)
    listing = pa.RecordBatch.from_pylist(snapshot_listing(files))
    parsed = pa.Table.from_batches(list(_parse_partition(table, True, None)([listing])), schema=schema)
    ops, reasons = parsed["_cdc_op"], parsed["_cdc_reason"]
    ledgers = [json.loads(r) for r in parsed.filter(pc.equal(ops, LEDGER))["_cdc_row"].to_pylist()]
    n_rejected = quarantine(table, table_dir, parsed.filter(pc.is_valid(reasons)).select(
        [c for c, _ in REJECT_FIELDS]), BASE_BATCH, log)
    good = parsed.filter(pc.and_(pc.is_null(reasons), pc.not_equal(ops, LEDGER))) \
        .select([c for c, _ in RECORD_FIELDS]).cast(delta.arrow_schema(RECORD_FIELDS))
    partitions = sorted(v for v in pc.unique(good["_cdc_partition"]).to_pylist()
                        if v is not None) if table.partition_by else []
    return ledgers, n_rejected, partitions, spark_files.write_arrow(good, path(table_dir, BASE))


# ---- a typed export -----------------------------------------------------------------

SLICE_ROWS = 64 * 1024  # rows per Arrow batch a task hands to Spark


def typed_export_columns(table: TableConfig) -> dict[str, str] | None:
    """The export's column types when it is a readable Parquet file every column of which has
    one, or a local CSV file every column of which is declared (`csv_export.export_columns`);
    None sends it down the row-by-row path (which also names an unreadable file)."""
    export = table.base_snapshot
    if table.rename or export is None:
        return None  # columns are renamed record by record
    if export.lower().endswith(".csv"):
        header = _csv_header(export)
        return None if header is None else \
            csv_export.export_columns(header, table.columns or {}, table.keys, table.partition_by)
    if not export.lower().endswith(".parquet"):
        return None
    try:
        schema = pq.read_schema(export)
    except Exception:  # noqa: BLE001 - the row-by-row path quarantines it with its reason
        return None
    return export_columns(schema, table.keys, table.partition_by)


FILE_ROWS = 256 * 1024  # rows of a base file: a large row group is written as several
# An export of at least this many row groups gives each task whole row groups: tasks enough to keep
# the cores busy, and each row group read once (a task reads the whole row group it slices, and
# slices of one row group in several processes would each read it).
WHOLE_ROW_GROUPS = 8


def _export_slices(file_path: str) -> list[dict]:
    """The export's rows as task slices: (row group, first row in it, rows); a slice is written as
    base files of at most FILE_ROWS rows."""
    meta = pq.ParquetFile(file_path).metadata
    step = None if meta.num_row_groups >= WHOLE_ROW_GROUPS else FILE_ROWS
    out = []
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        out += [{"path": file_path, "row_group": g, "start": s, "rows": min(step or max(n, 1), n - s)}
                for s in range(0, max(n, 1), step or max(n, 1))]
    return out


def _csv_header(file_path: str) -> list[str] | None:
    if not os.path.isfile(file_path):
        return None  # an export in an object store is read row by row
    with open(file_path, "rb") as fh:
        return csv_export.header_of(fh.readline().rstrip(b"\n"))


CSV_SLICE_BYTES = 32 * 2**20  # bytes of a CSV export a task reads: whole lines, from a line's start
_SAMPLE_BYTES = 2**16


def _csv_slices(file_path: str) -> tuple[list[dict], int]:
    """The lines after a CSV export's header as task slices (CSV_LISTING: byte ranges that start
    and end at a line's start, their first lines not yet counted), and an estimate of its rows
    from the lines at its start, middle and end."""
    size = os.path.getsize(file_path)
    with open(file_path, "rb") as fh:
        start = len(fh.readline())
        bounds = [start]
        at = start + CSV_SLICE_BYTES
        while at < size:
            fh.seek(at)
            at += len(fh.readline())  # to the start of the next line
            if at < size:
                bounds.append(at)
            at += CSV_SLICE_BYTES
        sample = b""
        for where in (start, (start + size) // 2, max(start, size - _SAMPLE_BYTES)):
            fh.seek(where)
            sample += fh.read(_SAMPLE_BYTES)
    bounds.append(size)
    per_line = len(sample) / max(1, sample.count(b"\n")) if sample else 1
    slices = [{"path": file_path, "slice": i, "start": a, "length": b - a, "first_line": 0}
              for i, (a, b) in enumerate(zip(bounds, bounds[1:])) if b > a]
    return slices, round((size - start) / per_line)


_READING = threading.Lock()


def _row_group(file_path: str, modified: int, row_group: int, columns: tuple[str, ...]) -> pa.Table:
    """A row group of the export, read once for the several slices of it a process works on: the
    threads of an import here ask for it together, and one reads while the others wait for it."""
    with _READING:
        return _read_row_group(file_path, modified, row_group, columns)


@functools.lru_cache(maxsize=2)
def _read_row_group(file_path: str, modified: int, row_group: int, columns: tuple[str, ...]) -> pa.Table:
    return pq.ParquetFile(file_path).read_row_group(row_group, columns=list(columns))


# What a task hands back: a written file's name, a partition value, or a rejection.
TASK_RESULT_FIELDS = (("kind", "string"), ("text", "string")) + REJECT_FIELDS


def _export_tasks(table: TableConfig, columns: dict[str, str], folder: str, header: list[str] | None = None):
    """What each Spark task runs on its slices of the export: typed base records, written by
    the task itself as a Parquet file in `folder`. The task hands Spark only what is small: the
    file's name, its rejections and its partition values (rows never cross into the JVM).
    `header`: the export is CSV with these columns (its slices: CSV_LISTING); a task also names
    the columns holding a value, and says "decline" for a slice the column reader does not take."""
    keys, partition_by, file_name = list(table.keys), list(table.partition_by), os.path.basename(_export_path(table))
    file_schema = base_schema(columns, shape.arrow_type)
    out_schema = delta.arrow_schema(TASK_RESULT_FIELDS)
    settings = storage.settings()  # a warehouse in an object store: each task writes its file there
    declared_order = list(table.columns or {})

    def small(kind: str, text: str | None = None, reject: dict | None = None) -> dict:
        return {"kind": kind, "text": text, **(reject or {})}

    def run(batches):
        for listing in batches:
            for f in listing.to_pylist():
                if header is not None:
                    yield from csv_slice(f)
                    continue
                pf = pq.ParquetFile(f["path"])
                first = sum(pf.metadata.row_group(g).num_rows for g in range(f["row_group"])) + f["start"]
                data = _row_group(f["path"], os.stat(f["path"]).st_mtime_ns, f["row_group"], tuple(columns)) \
                    .slice(f["start"], f["rows"])
                for at in range(0, max(data.num_rows, 1), FILE_ROWS):
                    yield write_file(data.slice(at, FILE_ROWS), f["row_group"], f["start"] + at, first + at)

    def csv_slice(f: dict):
        assert header is not None
        with open(f["path"], "rb") as fh:
            fh.seek(f["start"])
            raw = fh.read(f["length"])
        text = csv_export.read_text_columns(raw, header)
        if text is None:
            yield pa.RecordBatch.from_pylist([small("decline")], schema=out_schema)
            return
        data, misfits = csv_export.typed_columns(text, columns, declared_order, shape.arrow_type)
        valued = csv_export.non_null_columns(data, misfits)
        for at in range(0, max(data.num_rows, 1), FILE_ROWS):
            yield write_file(data.slice(at, FILE_ROWS), f["slice"], at, f["first_line"] + at, _within(misfits, at, FILE_ROWS),
                             _shifted(lambda rows: csv_export.line_texts(raw, rows), at))
        yield pa.RecordBatch.from_pylist([small("column", c) for c in valued], schema=out_schema)

    def write_file(data: pa.Table, row_group: int, start: int, first: int, rejected: dict[int, str] | None = None,
                   raw_of=None) -> pa.RecordBatch:
        """One base file of the export's rows `data` (lines first+1 ...), and what Spark is handed of it;
        `rejected` and `raw_of`: as export_batch takes them, for the rows of `data`."""
        target = storage.join(folder, f"part-{row_group:05d}-{start:012d}-{uuid.uuid4().hex}.parquet")
        out: list[dict] = []
        partitions: set[str] = set()
        fs, target_path = storage.filesystem(target, settings)
        with fs.open_output_stream(target_path) as stream, pq.ParquetWriter(
                stream, file_schema, use_dictionary=spark_files.dictionary_columns(file_schema, data)) as writer:
            for at in range(0, max(data.num_rows, 1), SLICE_ROWS):
                batch = export_batch(data.slice(at, SLICE_ROWS), first + at, keys, partition_by,
                                     file_name, columns, shape.arrow_type, rejected=_within(rejected or {}, at, SLICE_ROWS),
                                     raw_of=_shifted(raw_of, at) if raw_of else None)
                bad = pc.is_valid(batch.column("_cdc_reason"))
                for r in batch.filter(bad).select([n for n, _ in REJECT_FIELDS]).to_pylist():
                    out.append(small("reject", reject=r))
                good = batch.filter(pc.invert(bad)).select(file_schema.names)
                if partition_by:
                    partitions.update(v for v in pc.unique(good.column("_cdc_partition")).to_pylist()
                                      if v is not None)
                writer.write_batch(good)
        out += [small("file", storage.basename(target))] + [small("partition", p) for p in partitions]
        return pa.RecordBatch.from_pylist(out, schema=out_schema)
    return run


def _within(rejected: dict[int, str], at: int, n: int) -> dict[int, str]:
    """The rejected rows among rows at .. at+n, numbered from `at`."""
    return {i - at: why for i, why in rejected.items() if at <= i < at + n}


def _shifted(raw_of: Callable[[list[int]], list[str]], by: int) -> Callable[[list[int]], list[str]]:
    """`raw_of` for the rows of a slice starting at row `by`."""
    return lambda rows: raw_of([by + i for i in rows])


def _csv_line_counts():
    """A task counting the line breaks of each CSV slice it is handed: where each slice's lines start."""
    out = delta.arrow_schema(LINE_BREAKS)

    def run(batches):
        for listing in batches:
            for f in listing.to_pylist():
                with open(f["path"], "rb") as fh:
                    fh.seek(f["start"])
                    n = fh.read(f["length"]).count(b"\n")
                yield pa.RecordBatch.from_pylist([{"slice": f["slice"], "breaks": n}], schema=out)
    return run


LISTING = (("path", "string"), ("row_group", "long"), ("start", "long"), ("rows", "long"))
# A CSV export's slice: bytes start .. start+length, whose first line follows line first_line
CSV_LISTING = (("path", "string"), ("slice", "long"), ("start", "long"), ("length", "long"), ("first_line", "long"))
LINE_BREAKS = (("slice", "long"), ("breaks", "long"))


def _run_tasks(spark, task, slices: list[dict], listing: tuple, out: tuple, rows: int) -> pa.Table:
    """`task`'s results over the export's slices: Spark runs them for a large export; a small one
    (at most settings.local_build_rows rows) runs them in this process, one thread per core (Arrow
    and Parquet work without the interpreter lock), so that Spark is not started for it."""
    if rows > settings().local_build_rows:
        frame = session_of(spark).createDataFrame(slices, delta.spark_schema(listing))
        return frame.repartition(max(1, min(len(slices), MAX_TASKS))) \
            .mapInArrow(task, delta.spark_schema(out)).toArrow()
    schema = delta.arrow_schema(listing)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        parts = pool.map(lambda s: list(task([pa.RecordBatch.from_pylist([s], schema=schema)])), slices)
        return pa.Table.from_batches([b for bs in parts for b in bs], schema=delta.arrow_schema(out))


def _written(spark, table: TableConfig, columns: dict[str, str], folder: str) -> tuple[pa.Table, set[str]] | None:
    """The export tasks' results, and the columns holding a value (all of them, for Parquet); None
    when a CSV export has a stretch the column reader does not take (nothing is then kept)."""
    export = _export_path(table)
    out = TASK_RESULT_FIELDS
    if not export.lower().endswith(".csv"):
        slices = _export_slices(export)
        return _run_tasks(spark, _export_tasks(table, columns, folder), slices, LISTING, out,
                          sum(s["rows"] for s in slices)), set(columns)
    listing, rows = _csv_slices(export)
    # Counting line breaks costs a read of the file; this process reads twice the rows it would
    # parse itself, so that an estimate a little high does not send an export of its size to Spark.
    breaks = dict(zip(*_run_tasks(spark, _csv_line_counts(), listing, CSV_LISTING, LINE_BREAKS, rows // 2).to_pydict().values()))
    rows = sum(breaks.values())
    line = 1  # the header's
    for s in listing:
        s["first_line"], line = line, line + breaks[s["slice"]]
    header = list(columns)  # csv_export.export_columns: the header's columns, in its order
    results = _run_tasks(spark, _export_tasks(table, columns, folder, header), listing, CSV_LISTING, out, rows)
    kinds = results.column("kind")
    if pc.any(pc.equal(kinds, "decline")).as_py():
        return None
    return results, set(results.filter(pc.equal(kinds, "column")).column("text").to_pylist())


def _import_typed(spark, table: TableConfig, table_dir: str, columns: dict[str, str], log, t0: float
                  ) -> BaseResult | None:
    """The import of a typed export; None (nothing written) for a CSV export the column reader
    does not take."""
    base_path = path(table_dir, BASE)
    folder = spark_files.new_folder(base_path)
    if not storage.is_remote(folder):
        os.makedirs(folder)
    try:
        written = _written(spark, table, columns, folder)
        if written is None:
            storage.remove_tree(folder)
            return None
        results, valued = written
        kinds = results.column("kind")
        rejected = results.filter(pc.equal(kinds, "reject")).select([n for n, _ in REJECT_FIELDS])
        n_rejected = quarantine(table, table_dir, rejected.cast(delta.arrow_schema(REJECT_FIELDS)), BASE_BATCH, log)
        partitions = sorted(set(results.filter(pc.equal(kinds, "partition")).column("text").to_pylist()))
        names = sorted(results.filter(pc.equal(kinds, "file")).column("text").to_pylist())
        schema = base_schema(columns, shape.arrow_type)
        adds = [spark_files.add_action(base_path, storage.join(folder, n), schema) for n in names]
    except Exception:
        storage.remove_tree(folder)
        raise
    rows = spark_files.rows_written(adds)
    # the export's own schema says them; a CSV column holding no value has no type yet, as when read row by row
    types = {c: STRICT + t for c, t in columns.items() if c in valued}
    imported = BaseResult(rows_read=rows + n_rejected, rows=rows, quarantined=n_rejected, files=len(adds),
                          typed_columns=len(columns))
    props = delta.commit_props(BASE, BASE_BATCH, {**imported.to_metadata(), "column_types": json.dumps(types),
                                                  "partitions": json.dumps(partitions)})
    try:
        final = spark_files.commit(base_path, None, schema, adds, [], (), props)
    except Exception:
        spark_files.discard(base_path, adds)
        raise
    return dataclasses.replace(imported, delta_version=final.version(), seconds=round(time.time() - t0, 2))
