"""A `format: snapshot` batch -> `changes`: the changes that turn the table into the export (rules.md#rule-11).

Each batch, all its files together, is a complete export of the source table. Its rows are read
as a base export's are (the same readers, engine/base_import.py), ranked by their batch, and compared
key by key with the table's state before the batch: the target as of the batch it reached, with
the changes of the later batches laid over it (each key's latest). A key the state lacks is an
insert, a key whose row differs in any column (as the target would store it) an update, a key
of the state that the export lacks a delete; an unchanged row makes no change, so no new
version of it is written anywhere. The derived changes are committed to `changes` as a change
feed's are: staging, apply, history, the change data feed, publish and checks take them as any.

A row in quarantine keeps its key in the export: a key whose row cannot be taken is neither
updated nor deleted. A rejection whose key cannot be read (an unreadable line or file, a row
without its key) leaves the batch without deletes, since which key is missing cannot be told; a
batch whose files hold no rows and no rejections is an empty table, and deletes every key.

A batch of Parquet files of one schema whose every column has a column type is read column by
column (`typed_export`, as a typed base export is: core/typed_export.py) and compared with the
state a column at a time: in this process up to settings.local_build_rows rows of export and of
state (the size a typed base export is imported here), by Spark's tasks above that; only the
rows that change get a row image. Other batches are read row by row, by the code Spark's tasks
run, which names each bad row.

Another batch above settings.local_parse_bytes, or a state above settings.local_apply_rows rows, is read and
compared by Spark executors (the state from the target's Parquet files), in buckets of keys, by
the same comparison a small batch runs in this process (`derive`); the executors write the
derived changes and delta-rs commits them, so the driver holds counts and rejections only.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from ..core import names, ordering
from ..core import target as shape
from ..core.changes import DELETE, RECORD_FIELDS, REJECT_FIELDS, UPSERT
from ..core.config import Config, TableConfig
from ..core.errors import OutOfOrder
from ..core.formats import _target_names, arrow_column_type
from ..core.schema import admit_columns, joined, plain
from ..core.typed_export import export_batch, export_columns
from ..core.values import STRING, decode_row, encode_row, key_text, source_value
from . import delta, spark_apply, spark_files
from .ingest import (
    LEDGER,
    MAX_TASKS,
    PARSED_FIELDS,
    _parse_partition,
    batch_bytes,
    column_types,
    finish_changes,
    parse_files,
    quarantine,
    snapshot_listing,
)
from .landing import Batch, inside, is_done_or_next
from .records import read_records
from .settings import settings
from .spark import session_of
from .stage import first_of_each, latest_per_key
from .staged_history import base_records
from .step_results import ChangesResult
from .table_layout import BASE, CHANGES, TARGET, path
from .target_typing import (
    as_target_rows,
    as_target_types,
    cast_typed,
    known_columns,
    spark_columns,
    typed_frame,
)

KEY, ORDER, OP = "_cdc_key", "_cdc_order", "_cdc_op"
RECORD_NAMES = [n for n, _ in RECORD_FIELDS]
HELD = "Q"  # on the export's side of the comparison: the key of a row in quarantine
INSERT, UPDATE, DELETED = "INSERT", "UPDATE", "DELETE"  # the derived changes' change types
SOFT_DELETED = "_cdc_deleted"  # a target row kept for a deleted key (`deletes: soft`) is no live row
BUCKET = "_cdc_bucket"
BUCKET_ROWS = 100_000  # rows of state per bucket of keys the executors compare at once


def deletes_order(seq: int, n_files: int) -> str:
    """The ordering key of the deletes batch `seq` derives: in its batch, after its files' rows."""
    return ordering.CHANGE_TIER + ordering.u64(seq) + "|" + ordering.arrival(seq, n_files, 0)


def _same(a: pa.Array, b: pa.Array) -> pa.Array:
    """Per row, whether two values of one column type are the same value (null equals null, a
    NaN equals a NaN: a row holding either is unchanged when the export holds it again; -0.0 is
    not 0.0, so a double is compared by its bits)."""
    if pa.types.is_floating(a.type):
        nan = pc.and_(pc.fill_null(pc.is_nan(a), False), pc.fill_null(pc.is_nan(b), False))
        a, b = spark_files.by_bits(a), spark_files.by_bits(b)
    else:
        nan = None
    same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
    return same if nan is None else pc.or_(same, nan)


def derive(state: pa.Table, export: pa.Table, columns: dict[str, str], table: TableConfig, seq: int,
           batch_id: str, deletes_at: str | None, typed: TypedExport | None = None) -> pa.Table:
    """The changes (RECORD_FIELDS) that turn `state` into `export`.

    `state`: the live rows before the batch, `_cdc_key` and `columns` (in their target types).
    `export`: the batch's records (RECORD_FIELDS), op U; a record of op Q holds the key of a row
    in quarantine, which stays as it is. `typed`: the export read column by column, whose records
    carry the source columns instead of row images (`export` then holds them too). `deletes_at`:
    the derived deletes' ordering key; None when the batch derives none. Keys are compared whole,
    so the result of a bucket of keys is the result of the whole for those keys."""
    state = state.cast(pa.schema([pa.field(KEY, pa.string())]
                                 + [pa.field(c, shape.arrow_type(t)) for c, t in columns.items()]))
    ops = export[OP]
    held = export.filter(pc.equal(ops, HELD))[KEY]
    rows = _latest(export.filter(pc.equal(ops, UPSERT)))
    new = _compared_values(rows, columns, typed is not None)
    state_keys = state[KEY].combine_chunks()
    at = pc.index_in(rows[KEY], value_set=state_keys)
    known = pc.is_valid(at)
    differs = pc.invert(known)
    for c in columns:
        differs = pc.or_(differs, pc.invert(_same(new[c], state[c].combine_chunks().take(at))))
    kinds = pc.if_else(known, pa.scalar(UPDATE), pa.scalar(INSERT))
    rows = rows.set_column(rows.schema.get_field_index("_cdc_change_type"), "_cdc_change_type", kinds)
    upserts = rows.filter(differs)
    upserts = (_with_images(upserts, typed) if typed is not None else upserts).select(RECORD_NAMES)
    if deletes_at is None or state.num_rows == 0:
        return upserts.cast(delta.arrow_schema(RECORD_FIELDS))
    # a state row is gone when no export row (nor a row in quarantine) found it: the state has one
    # row per key, so the positions `index_in` found are the rows kept
    kept = np.zeros(state.num_rows, dtype=bool)
    kept[at.drop_null().to_numpy()] = True
    kept[pc.index_in(held.cast(pa.string()), value_set=state_keys).drop_null().to_numpy()] = True
    gone = state.filter(pa.array(~kept))
    return pa.concat_tables([upserts.cast(delta.arrow_schema(RECORD_FIELDS)),
                             _deletes(gone, table, seq, batch_id, deletes_at)])


def _compared_values(rows: pa.Table, columns: dict[str, str], by_column: bool) -> dict[str, pa.Array]:
    """Each column of the export's rows as the target would store it. Rows read column by column
    carry their source columns, cast to the target's types as typed changes are (exactly, or
    value by value as a row image's values are)."""
    if not by_column:
        typed = shape.typed_columns([decode_row(r) for r in rows["_cdc_row"].to_pylist()], columns)
        return {c: pa.array(typed[c], shape.arrow_type(t)) for c, t in columns.items()}
    typed = cast_typed(rows, columns, ())
    return {c: typed[c].combine_chunks() for c in columns}


def _with_images(rows: pa.Table, typed: TypedExport) -> pa.Table:
    """The row images of the changes derived from rows read column by column: each row's values
    as the row-by-row reader writes them (`_cdc_row`), every column of the export in its order."""
    values = rows.select(list(typed.columns)).to_pylist()
    images = [encode_row({c: source_value(v.get(c)) for c in typed.image_columns}) for v in values]
    return rows.set_column(rows.schema.get_field_index("_cdc_row"), "_cdc_row", pa.array(images, pa.string()))


def _latest(rows: pa.Table) -> pa.Table:
    """Each key's last row (by arrival: an export may repeat a key); no sort when keys are distinct."""
    return rows if pc.count_distinct(rows[KEY]).as_py() == rows.num_rows else first_of_each(rows, KEY)


def _deletes(gone: pa.Table, table: TableConfig, seq: int, batch_id: str, order: str) -> pa.Table:
    """Delete records of the state's rows `gone`: their images hold the key columns only."""
    n = gone.num_rows
    keyed = gone.select(list(table.keys)).to_pylist()
    parted = gone.select(list(table.partition_by)).to_pylist() if table.partition_by else None
    return pa.table({
        KEY: gone[KEY], OP: pa.array([DELETE] * n, pa.string()), ORDER: pa.array([order] * n, pa.string()),
        "_cdc_event_id": pa.nulls(n, pa.string()), "_cdc_row": pa.array([encode_row(k) for k in keyed], pa.string()),
        "_cdc_partition": pa.array([key_text(p.values()) for p in parted], pa.string()) if parted is not None
        else pa.nulls(n, pa.string()),
        "_cdc_change_type": pa.array([DELETED] * n, pa.string()), "_cdc_batch_seq": pa.array([seq] * n, pa.int64()),
        "_cdc_batch": pa.array([batch_id] * n, pa.string()), "_cdc_file": pa.nulls(n, pa.string()),
        "_cdc_line": pa.array([0] * n, pa.int64()),
    }).cast(delta.arrow_schema(RECORD_FIELDS))


# ---- an export read column by column -------------------------------------------------

@dataclass
class TypedExport:
    """A batch's export read column by column (core/typed_export.py): its records carry the
    source columns in their file types, and no row image until a row turns out to change. Each
    column's file type is its column type's own Arrow type, so a record's values are the values
    the row-by-row reader takes, and a changed row's image is made from them."""
    columns: dict[str, str]  # the source columns the records carry, and their column types
    image_columns: list[str]  # the export's columns in file order: a changed row's image holds each
    types: dict[str, str]  # the table's column types once the export's are admitted
    slices: list[dict]  # the export's row groups: file (as `files` lists it), row group, first line


def typed_export(table: TableConfig, files: list[dict], types: dict[str, str], root: str) -> TypedExport | None:
    """How to read the batch's export column by column, when it can be, from the files' metadata:
    every file is a readable Parquet file in the landing area, all of one schema whose every
    column has a column type whose Arrow type the file already has, every key column's statistics
    say it holds no null, and the columns join the table's column types whatever their values
    (`schema.admit_columns`, given one value of each column). Any other batch returns None: it is
    read row by row, which names each bad row in quarantine."""
    if table.rename or not files or not all(f["file"].lower().endswith(".parquet") for f in files):
        return None
    metas = []
    for f in files:
        if not inside(f["path"], root) or os.path.isdir(f["path"]):
            return None
        try:
            metas.append(pq.ParquetFile(f["path"]))
        except (pa.ArrowException, OSError):
            return None
    schema = metas[0].schema_arrow
    columns = export_columns(schema, table.keys, table.partition_by)
    if columns is None or any(not m.schema_arrow.equals(schema) for m in metas[1:]) \
            or any(schema.field(c).type != shape.arrow_type(t) for c, t in columns.items()) \
            or isinstance(_target_names(tuple(schema.names), ()), str) \
            or any(c not in types and names.same_but_case(c, types) is not None for c in schema.names) \
            or not all(_no_nulls(m, schema.get_field_index(k)) for m in metas for k in table.keys):
        return None
    sample = {c: v for c in columns if (v := _first_value(metas, c)) is not None}
    admitted = dict(types)
    file_types = {f.name: t for f in schema if (t := arrow_column_type(f.type))}
    if sample and not admit_columns(admitted, [sample], {**(table.columns or {}), **file_types}):
        return None
    slices, rows = [], 0
    for f, m in zip(files, metas):
        first = 0
        for g in range(m.metadata.num_row_groups):
            slices.append({**f, "row_group": g, "first_line": first})
            first += m.metadata.row_group(g).num_rows
        rows += first
    return TypedExport(columns, list(schema.names), joined(types, admitted), slices)


def _no_nulls(parquet: pq.ParquetFile, column: int) -> bool:
    """Whether the statistics of every row group say the column holds no null."""
    for g in range(parquet.metadata.num_row_groups):
        stats = parquet.metadata.row_group(g).column(column).statistics
        if stats is None or not stats.has_null_count or stats.null_count:
            return False
    return True


def _first_value(metas: list[pq.ParquetFile], column: str):
    """The column's first value that is not null, as the row-by-row reader takes it; None if all are."""
    for m in metas:
        for g in range(m.metadata.num_row_groups):
            values = m.read_row_group(g, columns=[column]).column(0)
            if values.null_count < len(values):
                return source_value(values.filter(pc.is_valid(values))[0].as_py())
    return None


def typed_rows(table: TableConfig, typed: TypedExport):
    """The function that turns slices of the export (TypedExport.slices) into records: RECORD_FIELDS
    (`_cdc_row` null), then the source columns; run here or by Spark's tasks."""
    keys, partition_by = list(table.keys), list(table.partition_by)
    columns = typed.columns

    def run(listings):
        for listing in listings:
            for s in listing.to_pylist():
                data = pq.ParquetFile(s["path"]).read_row_group(s["row_group"], columns=list(columns))
                part = export_batch(data, s["first_line"], keys, partition_by, s["file"], columns, shape.arrow_type,
                                    batch_seq=s["batch_seq"], batch_id=s["batch_id"], file_index=s["file_index"])
                yield part.drop_columns(["_cdc_reason", "_cdc_raw"])
    return run


def typed_records(table: TableConfig, typed: TypedExport, max_rows: int) -> pa.Table | None:
    """The export's records, read in this process; None above `max_rows` rows."""
    if sum(pq.ParquetFile(s["path"]).metadata.row_group(s["row_group"]).num_rows for s in typed.slices) > max_rows:
        return None
    listing = pa.RecordBatch.from_pylist(typed.slices)
    return pa.Table.from_batches(list(typed_rows(table, typed)([listing])))


# ---- the state before the batch ------------------------------------------------------

def _state_columns(table_dir: str, table: TableConfig, dt_: DeltaTable | None, types: dict[str, str]) -> dict[str, str]:
    """The target's source columns and types once this batch's rows are in (as an apply decides
    them): the columns a row is compared by."""
    columns = shape.target_columns(known_columns(dt_), [], table.keys, table.partition_by,
                                   history_types=plain(types))
    return {c: t for c, t in columns.items() if not c.startswith(names.BOOKKEEPING)}


def _live(rows, has_soft_deletes: bool):
    return rows if not has_soft_deletes else rows.filter(pc.invert(pc.fill_null(rows[SOFT_DELETED], False)))


def _since(applied: int, seq: int) -> str:
    return f"_cdc_batch_seq > {int(applied)} AND _cdc_batch_seq < {int(seq)}"


def _base_needed(table_dir: str, table: TableConfig, dt_: DeltaTable | None) -> bool:
    """Whether the state is built from `base` (no target yet): it must be imported first."""
    if dt_ is not None or table.base_snapshot is None:
        return False
    if delta.step_version(path(table_dir, BASE), BASE) < 0:
        raise OutOfOrder(f"table {table.name}: base snapshot not imported yet: materialize {table.name}/base first")
    return True


def state_here(table_dir: str, table: TableConfig, dt_: DeltaTable | None, applied: int, seq: int,
               columns: dict[str, str]) -> pa.Table:
    """The live rows before batch `seq`, in this process: `_cdc_key` and `columns`."""
    meta = (KEY, ORDER)
    parts = []
    if dt_ is not None:
        stored = set(dt_.schema().to_arrow().names)
        soft = SOFT_DELETED in stored
        # only the columns compared: the target's other bookkeeping is never read
        rows = dt_.to_pyarrow_dataset().to_table(
            columns=[c for c in (*meta, *columns, SOFT_DELETED) if c in stored and (c != SOFT_DELETED or soft)])
        cast = cast_typed(_live(rows, soft), columns, meta)
        parts.append(cast.append_column(OP, pa.repeat(pa.scalar(UPSERT, pa.string()), cast.num_rows)))
    records = [read_records(path(table_dir, CHANGES), _since(applied, seq))]
    if _base_needed(table_dir, table, dt_):
        records.append(base_records(path(table_dir, BASE)))
    for r in records:
        if r is not None and r.num_rows:
            parts.append(as_target_rows(r, columns, extra=(OP,)).select([*meta, *columns, OP]))
    schema = pa.schema([pa.field(KEY, pa.string()), pa.field(ORDER, pa.string())]
                       + [pa.field(c, shape.arrow_type(t)) for c, t in columns.items()] + [pa.field(OP, pa.string())])
    every = pa.concat_tables([p.select(schema.names).cast(schema) for p in parts]) if parts else schema.empty_table()
    # the target alone has one row per key: only changes laid over it need each key's latest
    latest = _latest(every) if len(parts) > 1 or dt_ is None else every
    return latest.filter(pc.equal(latest[OP], UPSERT)).select([KEY, *columns])


def _state_on_spark(session, table_dir: str, table: TableConfig, dt_: DeltaTable | None, applied: int, seq: int,
                    columns: dict[str, str]):
    """The same on Spark executors: the target's Parquet files of its snapshot `dt_`, laid over by
    the later batches' changes."""
    from pyspark.sql import functions as F

    ddl = f"{KEY} string, {ORDER} string, {OP} string, " + spark_columns(columns)
    wanted = [F.col(KEY), F.col(ORDER), F.col(OP)] + [F.col(names.spark(c)) for c in columns]
    frames = []
    if dt_ is not None:
        schema = spark_apply.plain_schema(pa.schema(dt_.schema().to_arrow()))
        files = spark_apply.files_of(path(table_dir, TARGET), dt_)
        rows = spark_apply.read(session, files, list(range(len(files))), schema).drop(spark_apply.FILE)
        soft = SOFT_DELETED in schema.names
        from .spark import map_in_arrow

        def as_state(batches):
            for b in batches:
                b = _live(pa.Table.from_batches([b]), soft)
                cast = cast_typed(b, columns, (KEY, ORDER))
                cast = cast.append_column(OP, pa.array([UPSERT] * cast.num_rows, pa.string()))
                yield from cast.select([KEY, ORDER, OP, *columns]).to_batches()
        frames.append(map_in_arrow(rows, as_state, ddl).select(*wanted))
    # batches are taken in order: `changes` holds none after the target's unless its last is later
    taken = delta.step_version(path(table_dir, CHANGES), CHANGES) > applied
    sources = ([CHANGES] if taken else []) + ([BASE] if _base_needed(table_dir, table, dt_) else [])
    for name in sources:
        if delta.open_table(path(table_dir, name)) is None:
            continue
        records = as_target_types(session, path(table_dir, name), columns)
        if name == CHANGES:
            records = records.where((F.col("_cdc_batch_seq") > applied) & (F.col("_cdc_batch_seq") < seq))
        frames.append(typed_frame(records, columns, spark_columns(columns) + ", "
                                   + ", ".join(f"`{m}` string" for m in shape.META_COLUMNS) + f", {OP} string",
                                   extra=(OP,)).select(*wanted))
    if not frames:
        return session.createDataFrame([], f"{KEY} string, " + spark_columns(columns))
    every = frames[0]
    for f in frames[1:]:
        every = every.unionByName(f)
    if len(frames) > 1 or dt_ is None:  # the target alone has one row per key: no shuffle to find each key's latest
        every = latest_per_key(every)
    return every.where(F.col(OP) == UPSERT).select(F.col(KEY), *[F.col(names.spark(c)) for c in columns])


# ---- the step ------------------------------------------------------------------------

def _state_rows(table_dir: str, dt_: DeltaTable | None, applied: int) -> int:
    """At most how many rows the state has: the target's, and the staged rows after it."""
    return (delta.file_stats(dt_)[2] if dt_ is not None else 0) + spark_apply.pending_rows(table_dir, applied)


def ingest_batch(spark, cfg: Config, table: TableConfig, batch: Batch, log=None) -> ChangesResult:
    """Commit the changes a `format: snapshot` table's batch (a complete export) derives, and its
    rejected rows; a second call does nothing. `spark`: a session, or a function that starts one
    when the batch or the table is large enough to need it."""
    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    if is_done_or_next(table.name, path(table_dir, CHANGES), CHANGES, batch):
        return ChangesResult(already_committed=True)
    landing = cfg.landing_dir(table.name)
    files = [{"path": os.path.join(landing, f), "file": f, "file_index": i, "batch_seq": batch.seq,
              "batch_id": batch.id} for i, f in enumerate(batch.files)]
    target = delta.open_table(path(table_dir, TARGET))  # the state is read through this one snapshot
    applied = delta.txn_version(target, TARGET)
    types = column_types(table_dir)
    # A column earlier batches made text stays text: its CSV values keep their spelling, so a key
    # reads the same in every export.
    text_columns = tuple(c for c, t in plain(types).items() if t == STRING)
    state_rows = _state_rows(table_dir, target, applied)
    # a typed export is compared here up to the size a typed base export is imported here
    typed = typed_export(table, files, types, landing)
    records = typed_records(table, typed, settings().local_build_rows) \
        if typed is not None and state_rows <= settings().local_build_rows else None
    if records is None and (typed is not None or batch_bytes(files) > settings().local_parse_bytes
                            or state_rows > settings().local_apply_rows):
        return _on_spark(session_of(spark), cfg, table, batch, files, types, text_columns, target, applied, log, t0,
                         typed)
    if typed is not None and records is not None:
        types, good, n_read = typed.types, records, records.num_rows
        rejected = delta.arrow_schema(REJECT_FIELDS + ((KEY, "string"),)).empty_table()
    else:
        good, rejected, types, n_read = _read_by_row(table, files, types, landing, text_columns)
    keyless = rejected.num_rows - pc.count(rejected[KEY]).as_py()
    held = rejected.filter(pc.is_valid(rejected[KEY])).select([KEY]).append_column(
        OP, pa.array([HELD] * (rejected.num_rows - keyless), pa.string()))
    columns = _state_columns(table_dir, table, target, types)
    state = state_here(table_dir, table, target, applied, batch.seq, columns)
    export = pa.concat_tables([good, held], promote_options="default")
    deletes_at = deletes_order(batch.seq, len(files)) if files and not keyless else None
    derived = derive(state, export, columns, table, batch.seq, batch.id, deletes_at, typed)
    n_rejected = quarantine(table, table_dir, rejected.select([c for c, _ in REJECT_FIELDS]), batch.seq, log)
    kinds = derived["_cdc_change_type"].to_pylist()
    taken = _taken(files, n_read, good.num_rows, pc.count_distinct(good[KEY]).as_py(),
                   n_rejected, keyless, {k: kinds.count(k) for k in (INSERT, UPDATE, DELETED)},
                   deletes_at is not None, typed_columns=len(typed.columns) if typed is not None else None)
    version = delta.append(path(table_dir, CHANGES), derived, CHANGES, batch.seq,
                           {**taken.to_metadata(), "column_types": json.dumps(types)})
    return finish_changes(path(table_dir, CHANGES), taken, version, t0)


def _read_by_row(table: TableConfig, files: list[dict], types: dict[str, str], landing: str,
                 text_columns: tuple[str, ...]) -> tuple[pa.Table, pa.Table, dict[str, str], int]:
    """The export read row by row, in this process by the code Spark's tasks run: its records
    (RECORD_FIELDS), its rejections (with the key of a row whose key could be read), the column
    types once its rows are admitted, and how many rows were read."""
    schema = delta.arrow_schema(PARSED_FIELDS)
    listing = pa.RecordBatch.from_pylist(snapshot_listing(files))
    parsed = pa.Table.from_batches(list(_parse_partition(table, False, landing, text_columns, types)([listing])),
                                   schema=schema)
    ops, reasons = parsed[OP], parsed["_cdc_reason"]
    ledgers = [json.loads(r) for r in parsed.filter(pc.equal(ops, LEDGER))["_cdc_row"].to_pylist()]
    rejected = parsed.filter(pc.is_valid(reasons)).select([c for c, _ in REJECT_FIELDS] + [KEY])
    good = parsed.filter(pc.and_(pc.is_null(reasons), pc.not_equal(ops, LEDGER))).select(RECORD_NAMES)
    return good, rejected, joined(types, *ledgers), parsed.num_rows - len(ledgers)


def _taken(files: list[dict], read: int, rows: int, keys: int, rejected: int, keyless: int,
           kinds: dict[str, int], deletes: bool, applied_on: str | None = None,
           typed_columns: int | None = None) -> ChangesResult:
    """A snapshot batch's figures. Each row read is quarantined, a key's earlier row in the export
    (`duplicates_skipped`), unchanged, or an insert or update; each key gone is a delete, a
    change no row was read for (`derived_deletes`): the batch_accounted check adds them up so."""
    # which key a rejected row without a readable key had cannot be told: none is deleted
    withheld = None if deletes else f"{keyless} quarantined rows without a readable key" if keyless else "no files"
    return ChangesResult(files=len(files), records_read=read, changes_new=sum(kinds.values()),
                         inserts=kinds[INSERT], updates=kinds[UPDATE], derived_deletes=kinds[DELETED],
                         unchanged=keys - kinds[INSERT] - kinds[UPDATE], duplicates_skipped=rows - keys,
                         quarantined=rejected, deletes_withheld=withheld, applied_on=applied_on,
                         typed_columns=typed_columns)


def _on_spark(session, cfg: Config, table: TableConfig, batch: Batch, files: list[dict], types: dict[str, str],
              text_columns: tuple[str, ...], target: DeltaTable | None, applied: int, log, t0: float,
              typed: TypedExport | None = None) -> ChangesResult:
    from pyspark.sql import functions as F

    table_dir = cfg.table_dir(table.name)
    changes_path = path(table_dir, CHANGES)
    if typed is not None:  # Spark's tasks read the export's row groups column by column
        listing = session.createDataFrame(typed.slices, "path string, file string, file_index int, batch_seq long, "
                                                        "batch_id string, row_group int, first_line long")
        parsed = listing.repartition(max(1, min(len(typed.slices), MAX_TASKS))).mapInArrow(
            typed_rows(table, typed), delta.spark_schema(RECORD_FIELDS) + ", " + spark_columns(typed.columns))
        parsed = parsed.toDF(*RECORD_NAMES, *[f"_{i}" for i in range(len(typed.columns))]).cache()
    else:
        parsed = parse_files(session, table, files, root=cfg.landing_dir(table.name), text_columns=text_columns,
                             ledger=types).cache()
    derived = None
    try:
        if typed is not None:
            types, ledgers, n_rejected, keyless, good, held = typed.types, [], 0, 0, parsed, None
        else:
            ledgers = [json.loads(r[0]) for r in parsed.where(F.col(OP) == LEDGER).select("_cdc_row").collect()]
            types = joined(types, *ledgers)
            rejected = parsed.where(F.col("_cdc_reason").isNotNull())
            n_rejected = quarantine(table, table_dir, rejected.select(*[c for c, _ in REJECT_FIELDS]).toArrow(),
                                    batch.seq, log)
            keyless = rejected.where(F.col(KEY).isNull()).count()
            good = parsed.where(F.col("_cdc_reason").isNull() & (F.col(OP) != LEDGER)).select(*RECORD_NAMES)
            held = rejected.where(F.col(KEY).isNotNull()).select(
                *[(F.lit(HELD) if n == OP else F.col(n) if n == KEY else F.lit(None).cast(t)).alias(n)
                  for n, t in ((n, "bigint" if t == "long" else t) for n, t in RECORD_FIELDS)])
        columns = _state_columns(table_dir, table, target, types)
        state = _state_on_spark(session, table_dir, table, target, applied, batch.seq, columns)
        buckets = max(16, math.ceil(_state_rows(table_dir, target, applied) / BUCKET_ROWS)
                      + math.ceil(batch_bytes(files) / (16 * 2**20)))
        deletes_at = deletes_order(batch.seq, len(files)) if files and not keyless else None
        export = good if held is None else good.unionByName(held)
        derived = _derive_on_spark(state, export, columns, table, batch, deletes_at, buckets, typed).cache()
        kinds = {r[0]: int(r[1]) for r in derived.groupBy("_cdc_change_type").count().collect()}
        kinds = {k: kinds.get(k, 0) for k in (INSERT, UPDATE, DELETED)}
        n_read, n_good, n_keys = parsed.count() - len(ledgers), good.count(), good.select(KEY).distinct().count()
        taken = _taken(files, n_read, n_good, n_keys, n_rejected, keyless, kinds, deletes_at is not None,
                       applied_on="spark", typed_columns=len(typed.columns) if typed is not None else None)
        dt_ = delta.open_table(changes_path)
        if delta.txn_version(dt_, CHANGES) >= batch.seq:
            raise delta.CommitConflict(f"{changes_path}: another writer committed {CHANGES} batch {batch.seq} first")
        schema = spark_apply.plain_schema(pa.schema(dt_.schema().to_arrow())) if dt_ is not None else \
            delta.arrow_schema(RECORD_FIELDS)
        adds = spark_files.write_files(derived, changes_path, sort_by=[KEY])
        props = delta.commit_props(CHANGES, batch.seq, {**taken.to_metadata(), "column_types": json.dumps(types)})
        try:
            final = spark_files.commit(changes_path, dt_, schema, adds, [], (), props)
        except BaseException:
            spark_files.discard(changes_path, adds)
            raise
        return finish_changes(changes_path, taken, final.version(), t0)
    finally:
        parsed.unpersist()
        if derived is not None:
            derived.unpersist()


def _derive_on_spark(state, export, columns: dict[str, str], table: TableConfig, batch: Batch,
                     deletes_at: str | None, buckets: int, typed: TypedExport | None = None):
    """`derive` on Spark executors, one bucket of keys at a time (every row of a key in one).
    `typed`: the export was read column by column; its source columns follow RECORD_FIELDS, under
    their positions (`_0`, `_1`, ...)."""
    from pyspark.sql import functions as F

    def bucketed(frame):
        return frame.withColumn(BUCKET, F.pmod(F.hash(F.col(KEY)), F.lit(buckets)))

    state_names = state.columns
    # columns travel under their positions: PySpark parses a column's name, which fails on a backtick
    left = bucketed(state).toDF(*[f"_{i}" for i in range(len(state_names))], BUCKET)
    right = bucketed(export)
    seq, batch_id = batch.seq, batch.id
    sources = list(typed.columns) if typed is not None else []
    export_schema = delta.arrow_schema(RECORD_FIELDS)
    for c, t in (typed.columns.items() if typed is not None else ()):
        export_schema = export_schema.append(pa.field(c, shape.arrow_type(t)))

    def run(state_part: pa.Table, export_part: pa.Table) -> pa.Table:
        state_part = state_part.drop_columns([BUCKET]).rename_columns(state_names) if state_part.num_columns else \
            pa.schema([pa.field(KEY, pa.string())]
                      + [pa.field(c, shape.arrow_type(t)) for c, t in columns.items()]).empty_table()
        export_part = export_part.drop_columns([BUCKET]).rename_columns([*RECORD_NAMES, *sources]).cast(export_schema) \
            if export_part.num_columns else export_schema.empty_table()
        return derive(state_part, export_part, columns, table, seq, batch_id, deletes_at, typed)

    return left.groupBy(BUCKET).cogroup(right.groupBy(BUCKET)).applyInArrow(run, delta.spark_schema(RECORD_FIELDS))
