"""A large batch -> `changes` (+ `quarantine`) and `staging` on Spark executors, by the rules and
the code of the in-process path (engine/ingest.py, engine/stage.py); the run's own process holds
only what is small: rejected records, counts, column-type ledgers, file lists and footers.

Tasks parse the files; keep, per event id, the first change by ordering key (hash-partitioned by
the id, each task running `ingest.first_of_each_event`); drop the ids earlier batches hold (the
`changes` and `seen` files whose ordering-key statistics reach the batch's range of source orders);
then admit the column types over slices of the batch in arrival order, as the in-process path
does over the whole batch: each task widens a copy of the table's ledger over its slice, the
driver joins the ledgers (`core.schema.joined`) into the types each slice starts from, the
tasks admit their rows from there and send back the misfits and the types they end with (a
slice that started from other types than the ones before it ended with is admitted again:
`_admitted`), and tasks store the admitted changes (`ingest.stored_changes`) under the types
after the whole batch. Executors write the Parquet files; delta-rs commits them as one version
carrying the step's mark and figures, as `delta.append` does, so a crash before the commit
leaves only unreferenced files. (A batch that brings a new typed column first adds the column
in a version of its own, without rows: delta-rs commits written files only under the table's
schema.)

A batch's `staging` records are picked the same way: partitioned by key, each task running
`combine.staged`, written by the executors and committed by delta-rs.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence

import pyarrow as pa

from ..core import names
from ..core.changes import DELETE, RECORD_FIELDS, REJECT_FIELDS, UPSERT, storable_name
from ..core.config import Config, TableConfig
from ..core.errors import OutOfOrder
from ..core.schema import STRICT, Rules, is_text_source, joined, split, widened_to_text
from ..core.target import arrow_type
from ..core.values import NULL, decode_row
from . import delta, faults, gcs, spark_apply, spark_files
from .combine import UNSET_KEY, left_out_through
from .combine import staged as staged_records
from .delta import CommitConflict
from .ingest import (
    MAX_TASKS,
    TYPED_FIELDS,
    admit_rows,
    admit_types,
    batch_bytes,
    changes_metadata,
    finish_changes,
    first_of_each_event,
    in_arrival_order,
    ingest_prepared,
    parse_files,
    prepare,
    quarantine,
    stored_changes,
    type_rules,
)
from .landing import Batch
from .records import stored_columns
from .settings import settings
from .spark import session_of
from .step_results import ChangesResult
from .table_layout import CHANGES, SEEN, SEEN_FIELDS, STAGING, path

LEDGER = "_cdc_ledger"  # a task's column types, among its output records
ARRIVAL_CHARS = 40  # an ordering key's arrival part (ordering.arrival): batch, file, line
ROWS_PER_SLICE = 100_000  # changes a task admits to the column types, one after another


def _table(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """A task's batches as one table in `schema` (its columns in that order)."""
    return pa.Table.from_batches(batches).select(schema.names).cast(schema) if batches else schema.empty_table()


def _whole(schema: pa.Schema, fn):
    """A task function running `fn` on its whole slice as one Arrow table (in `schema`)."""
    def run(batches):
        rows = _table(list(batches), schema)
        if rows.num_rows:
            yield from fn(rows).to_batches()
    return run


def _struct(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _persisted(frame):
    from pyspark import StorageLevel

    return frame.persist(StorageLevel.MEMORY_AND_DISK)


def _earlier_ids(spark, table_dir: str, lo: str, hi: str):
    """The event ids earlier batches hold with an ordering key in [lo, hi], read by the executors,
    or None when no file can hold one."""
    from pyspark.sql import functions as F

    found = None
    for name in (CHANGES, SEEN):
        files, ids = spark_files.files_reaching(path(table_dir, name), "_cdc_order", lo, hi)
        if not ids:
            continue
        ranged = spark_apply.read(spark, files, ids, delta.arrow_schema(SEEN_FIELDS)) \
            .where((F.col("_cdc_order") >= F.lit(lo)) & (F.col("_cdc_order") <= F.lit(hi))).select("_cdc_event_id")
        found = ranged if found is None else found.unionByName(ranged)
    return found


def _distinct(spark, good, table_dir: str):
    """`good`'s distinct changes: per event id the first by ordering key, none an earlier batch
    holds, and every change without an id."""
    from pyspark.sql import functions as F

    typed = delta.arrow_schema(TYPED_FIELDS)
    with_id = good.where(F.col("_cdc_event_id").isNotNull())
    firsts = _persisted(with_id.repartition("_cdc_event_id").mapInArrow(
        _whole(typed, lambda rows: first_of_each_event(rows)[0]), delta.spark_schema(TYPED_FIELDS)))
    # A re-delivered event carries its original's source order (see ingest.seen_event_ids).
    source = F.regexp_replace(F.col("_cdc_order"), r"\|[^|]*$", "")
    lo, hi = firsts.agg(F.min(source), F.max(F.concat(source, F.lit("}")))).first()
    earlier = _earlier_ids(spark, table_dir, lo, hi) if lo is not None else None
    new = firsts if earlier is None else firsts.join(earlier.distinct(), "_cdc_event_id", "left_anti")
    return new.unionByName(good.where(F.col("_cdc_event_id").isNull())), firsts


def _slice() -> int:
    """The slice (partition) of the batch a task holds: slices are numbered in arrival order."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "called outside a Spark task"
    return context.partitionId()


def _widened(types: dict, batch_files: Sequence[str], stored_ops: tuple[str, ...], rules: Rules):
    """Phase one: each slice's copy of the ledger, widened over its rows in arrival order."""
    schema = pa.schema([("slice", pa.int64()), ("types", pa.string())])

    def run(batches):
        rows = _table(list(batches), delta.arrow_schema(TYPED_FIELDS))
        ledger = dict(types)
        if rows.num_rows:
            admit_rows(ledger, in_arrival_order(rows, batch_files), is_text_source, None, stored_ops, rules)
        yield pa.RecordBatch.from_pylist([{"slice": _slice(), "types": json.dumps(ledger)}], schema=schema)
    return run


def _shaped(rows: pa.Table, out: pa.Schema) -> pa.RecordBatch:
    """Rows as one batch of `out`: columns they lack as nulls."""
    n = rows.num_rows
    return pa.RecordBatch.from_arrays([rows.column(f.name).combine_chunks().cast(f.type) if f.name in rows.column_names
                                       else pa.nulls(n, f.type) for f in out], schema=out)


ADMITTED = pa.schema(list(delta.arrow_schema(RECORD_FIELDS)) + list(delta.arrow_schema(
    (("_cdc_reason", "string"), ("_cdc_raw", "string"), (LEDGER, "string"), ("_cdc_slice", "long")))))


def _admit_task(starts: dict[int, dict], batch: Batch, landing: str, stored_ops: tuple[str, ...], rules: Rules):
    """Phase two: each slice admits its rows in arrival order from the column types it starts
    from (`starts`), and yields its admitted records, its misfits as rejections, and the column
    types it ends with."""
    store = gcs.settings()  # a gs:// landing's client settings: misfits quote their lines from the files

    def run(batches):
        gcs.use(store)
        k = _slice()
        given = _table(list(batches), delta.arrow_schema(TYPED_FIELDS))
        ledger = dict(starts[k])
        if given.num_rows:
            kept, _images, misfits = admit_types(given, ledger, batch, landing, None, stored_ops, rules)
            for rows in (kept, misfits):
                if rows.num_rows:
                    yield _shaped(rows, ADMITTED)
        yield pa.RecordBatch.from_pylist([{LEDGER: json.dumps(ledger), "_cdc_slice": k}], schema=ADMITTED)
    return run


def _admitted(parts, types: dict, batch: Batch, landing: str, stored_ops, rules: Rules, upstream=()):
    """The batch's changes admitted to the column types exactly as in arrival order: (the
    slices' output, the column types after the whole batch).

    Each slice is admitted from the types the slices before it end with. Those are guessed
    first by joining the earlier slices' own widenings (phase one), then checked: where a
    slice ends with other types than the next one started from, the slices after it are
    admitted again from what it ended with. Every slice then started from the types the whole
    batch before it leads to, which is the in-process path's arrival-order widening.
    `upstream`: cached frames `parts` is computed from, released once `parts` is cached."""
    from pyspark.sql import functions as F

    own = {int(r[0]): json.loads(r[1]) for r in parts.mapInArrow(_widened(types, batch.files, stored_ops, rules),
                                                                 "slice long, types string").collect()}
    for frame in upstream:  # `parts` is cached now: a task holds at most the slices and what they become
        frame.unpersist()
    order = sorted(own)
    starts: dict[int, dict] = {}

    def guess(first: int, ledger: dict) -> None:
        for k in order[first:]:
            starts[k] = ledger
            ledger = joined(ledger, own[k])
    guess(0, dict(types))
    while True:
        admitted = _persisted(parts.mapInArrow(_admit_task(starts, batch, landing, stored_ops, rules), _struct(ADMITTED)))
        ends = {int(r[0]): json.loads(r[1]) for r in admitted.where(F.col(LEDGER).isNotNull())
                .select("_cdc_slice", LEDGER).collect()}
        wrong = next((i for i in range(len(order) - 1) if ends[order[i]] != starts[order[i + 1]]), None)
        if wrong is None:
            return admitted, (ends[order[-1]] if order else dict(types))
        admitted.unpersist()
        guess(wrong + 1, ends[order[wrong]])


def _typed_columns(ledger: dict[str, str], stored: dict[str, str]) -> dict[str, str]:
    """The typed columns `stored_changes` can give a batch under `ledger`: the stored ones, and
    each strict column's."""
    out = dict(stored)
    for column, marked in ledger.items():
        mark, type_ = split(marked)
        if column not in out and mark == STRICT and type_ != NULL and storable_name(column):
            out[column] = type_
    return out


def _stored_task(ledger: dict, stored: dict[str, str], out: pa.Schema, keys: tuple[str, ...]):
    """Phase three: each task stores its admitted records (`ingest.stored_changes`) under the
    column types after the whole batch."""
    records = delta.arrow_schema(RECORD_FIELDS)

    def run(batches):
        rows = _table(list(batches), records)
        if rows.num_rows:
            images = [decode_row(text) for text in rows["_cdc_row"].to_pylist()]
            yield _shaped(stored_changes(rows, images, ledger, stored, keys), out)
    return run


def commit_written(table_path: str, step: str, batch_seq: int, schema: pa.Schema, adds: list, metadata: dict) -> int:
    """Files the executors wrote into the table, committed by delta-rs as one version marking
    `step` done for `batch_seq` (as `delta.append` does): its version. Files not committed are
    removed; a crash leaves them unreferenced."""
    try:
        dt_ = delta.open_table(table_path)
        if delta.txn_version(dt_, step) >= batch_seq:
            raise CommitConflict(f"{table_path}: another writer committed {step} batch {batch_seq} first")
        # A new typed column is added before the rows that fill it: a version with no rows.
        if dt_ is not None:
            dt_ = delta.add_columns(table_path, dt_, schema)
        faults.point(f"{step}.before_commit")
        final = spark_files.commit(table_path, dt_, schema, adds, [] if dt_ is not None else None, (),
                                   delta.commit_props(step, batch_seq, metadata))
    except BaseException:
        spark_files.discard(table_path, adds)
        raise
    faults.point(f"{step}.committed")
    return final.version()


def _small(frame, fields) -> pa.Table:
    """A frame the caller knows is small (rejections), in this process."""
    return frame.select(*[_column(n) for n, _ in fields]).toArrow().cast(delta.arrow_schema(fields))


def _column(name: str):
    """A column of a frame by its name, quoted for Spark."""
    from pyspark.sql import functions as F

    return F.col(names.spark(name))


def ingest_batch(spark, cfg: Config, table: TableConfig, batch: Batch, log=None) -> ChangesResult:
    """Commit the batch's distinct changes and its rejected records; a second call does nothing.
    A batch whose files hold at most `local_parse_bytes` is taken in this process
    (`ingest.ingest_prepared`), a larger one by Spark's tasks. `spark`: a session, or a function
    that starts one; called only for a large batch."""
    t0 = time.time()
    given = prepare(cfg, table, batch)
    if given is None:
        return ChangesResult(already_committed=True)
    if batch_bytes(given.files) <= settings().local_parse_bytes:
        return ingest_prepared(given, table, batch, log, t0)
    taken, version = ingest_on_spark(session_of(spark), table, given.table_dir, batch, given.files, given.landing,
                                     given.types, given.text_columns, log)
    return finish_changes(given.changes_path, taken, version, t0)


def ingest_on_spark(spark, table: TableConfig, table_dir: str, batch: Batch, files: list[dict], landing: str,
                    types: dict[str, str], text_columns: tuple[str, ...], log=None) -> tuple[ChangesResult, int]:
    """`ingest_batch`'s work for a large batch, on the executors: its figures and the
    `changes` version. `types`: the table's column types so far."""
    from pyspark.sql import functions as F

    changes_path = path(table_dir, CHANGES)
    stored_ops = (UPSERT, DELETE) if table.soft_deletes else (UPSERT,)
    stored = stored_columns(changes_path)
    frames = []
    try:
        parsed = _persisted(parse_files(spark, table, files, root=landing, text_columns=text_columns))
        frames.append(parsed)
        records_read = parsed.count()
        faults.point("changes.parsed")
        unreadable = _small(parsed.where(F.col("_cdc_reason").isNotNull()), REJECT_FIELDS)
        good = parsed.where(F.col("_cdc_reason").isNull()).select(*[_column(c) for c, _ in TYPED_FIELDS])
        distinct, firsts = _distinct(spark, good, table_dir)
        frames.append(firsts)
        n_distinct = distinct.count()
        # slices of the batch in arrival order (file, line), each admitted by one task
        parts = _persisted(distinct.repartitionByRange(max(1, min(MAX_TASKS, -(-n_distinct // ROWS_PER_SLICE))),
                                                       F.substring(F.col("_cdc_order"), -ARRIVAL_CHARS, ARRIVAL_CHARS)))
        frames.append(parts)
        admitted, ledger = _admitted(parts, types, batch, landing, stored_ops, type_rules(table),
                                     upstream=(parsed, firsts))
        frames.append(admitted)
        parts.unpersist()  # `admitted` is cached: the slices are read again only if it is lost
        misfits = _small(admitted.where(F.col("_cdc_reason").isNotNull()), REJECT_FIELDS)
        columns = _typed_columns(ledger, stored)
        out = pa.schema(list(delta.arrow_schema(RECORD_FIELDS)) + [pa.field(c, arrow_type(t)) for c, t in columns.items()])
        rows = (admitted.where(F.col("_cdc_reason").isNull() & F.col(LEDGER).isNull())
                .select(*[_column(c) for c, _ in RECORD_FIELDS])
                .mapInArrow(_stored_task(ledger, stored, out, table.keys), _struct(out)))
        new_columns = [c for c in columns if c not in stored]
        if new_columns:  # read twice: counted for the new columns that hold values, then written
            rows = _persisted(rows)
            frames.append(rows)
        present = rows.agg(F.lit(0), *[F.count(_column(c)) for c in new_columns]).first()[1:] if new_columns else []
        # a new column only when some typed change has a value there (as `stored_changes` adds one)
        dropped = {c for c, n in zip(new_columns, present) if not n}
        n_rejected = quarantine(table, table_dir, pa.concat_tables([unreadable, misfits]), batch.seq, log)
        written = rows.select(*[_column(c) for c in [n for n, _ in RECORD_FIELDS] + list(columns) if c not in dropped])
        adds = spark_files.write_files(written, changes_path)
        taken = ChangesResult(files=len(files), records_read=records_read, changes_new=spark_files.rows_written(adds),
                              duplicates_skipped=records_read - unreadable.num_rows - n_distinct,
                              quarantined=n_rejected, widened_to_text=widened_to_text(types, ledger) or None)
        version = commit_written(changes_path, CHANGES, batch.seq, spark_files.arrow_schema_of(written), adds,
                                 changes_metadata(taken, ledger))
        return taken, version
    finally:
        for frame in frames:
            frame.unpersist()


def batch_rows(table_dir: str, batch_seq: int) -> int:
    """At most how many changes a batch holds in `changes`: the rows of the files whose
    `_cdc_batch_seq` statistics reach it (a compacted file holds other batches too)."""
    return spark_files.rows_reaching(path(table_dir, CHANGES), "_cdc_batch_seq", batch_seq, batch_seq)


def stage_on_spark(spark, table: TableConfig, table_dir: str, batch: Batch) -> tuple[dict, int]:
    """`stage.stage_batch`'s work for a large batch, on the executors (each task picks its keys'
    changes with `combine.staged`): its counts and the `staging` version."""
    from pyspark.sql import functions as F

    changes_path = path(table_dir, CHANGES)
    stored = stored_columns(changes_path)
    schema = pa.schema(list(delta.arrow_schema(RECORD_FIELDS)) + [pa.field(c, arrow_type(t)) for c, t in stored.items()])
    files, ids = spark_files.files_reaching(changes_path, "_cdc_batch_seq", batch.seq, batch.seq)
    if not ids:
        raise OutOfOrder(f"table {table.name}: batch {batch.id} has no committed changes yet")
    # Not cached: one job counts the batch's changes and asks whether one lists columns it does not
    # carry (where columns are combined, staging keeps every such change); the staging reads them once.
    changes = spark_apply.read(spark, files, ids, schema).drop(spark_apply.FILE).where(F.col("_cdc_batch_seq") == batch.seq)
    n_changes, listed = changes.agg(F.count(F.lit(1)), F.max(F.col("_cdc_row").contains(UNSET_KEY))).first()
    staged = changes.repartition("_cdc_key").mapInArrow(_whole(schema, lambda rows: staged_records(rows, table)),
                                                        _struct(schema))
    staging_path = path(table_dir, STAGING)
    adds = spark_files.write_files(staged, staging_path)
    n_staged = spark_files.rows_written(adds)
    counts = {"changes": n_changes, "staged": n_staged, "superseded_in_batch": n_changes - n_staged}
    return counts, commit_written(staging_path, STAGING, batch.seq, spark_files.arrow_schema_of(staged), adds,
                                  {**counts, **left_out_through(table_dir, batch.seq, bool(listed))})
