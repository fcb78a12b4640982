"""Each key once, proven file by file (core/key_order): what a first build from an export in key
order, and the check after it, run instead of counting every key of the table at once.

A task reads one file, or makes one, and hands back only what is small: its row count, whether
its rows are in strictly ascending key order, and its first and last keys (as Arrow IPC bytes,
so that they keep their types on the way back from a Spark task). Memory follows one file. The
tasks run in this process, a thread per core, for at most settings.local_build_rows rows, and as
Spark tasks above that.

The first and last keys are row values: they stay in memory, compared and dropped; they are never
logged or recorded.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from ..core.key_order import ascending, spans_disjoint
from . import delta, spark_files, storage
from .ingest import MAX_TASKS
from .settings import settings
from .spark import map_in_arrow, session_of

SPAN_FIELDS = (("rows", "long"), ("ascending", "boolean"), ("first", "binary"), ("last", "binary"))
LISTING = pa.schema([("uri", pa.string())])


def _ipc(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def span(rows: pa.Table, keys: Sequence[str]) -> dict:
    """What a task says of the rows of one file (SPAN_FIELDS)."""
    n = rows.num_rows
    part = rows.select(list(keys))
    return {"rows": n, "ascending": ascending(part, keys),
            "first": _ipc(part.slice(0, 1)) if n else None, "last": _ipc(part.slice(n - 1, 1)) if n else None}


def proven_unique(spans: pa.Table, keys: Sequence[str]) -> bool:
    """Whether the files the `spans` describe hold each key once between them: each file strictly
    ascending, and their key spans disjoint."""
    spans = spans.filter(pc.greater(spans["rows"], 0))
    if not all(spans["ascending"].to_pylist()):
        return False
    if spans.num_rows < 2:
        return True
    firsts = pa.concat_tables([_from_ipc(b) for b in spans["first"].to_pylist()])
    lasts = pa.concat_tables([_from_ipc(b) for b in spans["last"].to_pylist()])
    return spans_disjoint(firsts, lasts, keys)


def run_per_file(spark, uris: list[str], rows: int, task: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
                 fields) -> pa.Table:
    """`task`'s results over the files `uris` (a listing of them, LISTING): in this process, a
    thread per core (Arrow and Parquet work without the interpreter lock), for at most
    settings.local_build_rows `rows`; else by Spark tasks, a file each (up to ingest.MAX_TASKS
    tasks). `spark`: a session or a function that starts one."""
    schema = delta.arrow_schema(fields)
    if not uris:
        return schema.empty_table()
    if rows > settings().local_build_rows:
        listing = session_of(spark).createDataFrame([(u,) for u in uris], "uri string")
        tasks = min(len(uris), MAX_TASKS)  # a task takes several files of a large table, one after another
        return map_in_arrow(listing.repartition(tasks), task, delta.spark_schema(fields)).toArrow()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        parts = pool.map(lambda u: list(task([pa.RecordBatch.from_pylist([{"uri": u}], schema=LISTING)])), uris)
        return pa.Table.from_batches([b for bs in parts for b in bs], schema=schema)


def _key_task(keys: Sequence[str], store: dict):
    """A task reading the key columns of each file it is handed, saying their span."""
    keys = list(keys)
    out = delta.arrow_schema(SPAN_FIELDS)

    def run(batches):
        for pf in spark_files.listed_files(batches, store):
            yield pa.RecordBatch.from_pylist([span(pf.read(columns=keys), keys)], schema=out)
    return run


def keys_unique_by_order(dt: delta.DeltaTable, keys: Sequence[str], spark=None) -> bool:
    """Whether the table's files are proven to hold each key once (by their key order, reading
    only the key columns, file by file); False says only "not proven". A partitioned table, whose
    files hold their partition's keys, is not proven this way. `spark`: a function returning a
    session, for a table above settings.local_build_rows rows (without one, not proven)."""
    if dt.metadata().partition_columns or not set(keys) <= set(dt.schema().to_arrow().names):
        return False
    rows = delta.file_stats(dt)[2]
    if rows > settings().local_build_rows and spark is None:
        return False
    spans = run_per_file(spark, dt.file_uris(), rows, _key_task(keys, storage.settings()), SPAN_FIELDS)
    return proven_unique(spans, keys)
