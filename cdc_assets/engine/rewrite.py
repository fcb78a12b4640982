"""Apply a batch's winners to target by rewriting only the files that can hold a touched key.

The Delta log's statistics give each file's smallest and largest `_cdc_key`; a file whose
range holds none of the batch's keys is never opened. Of the others, only the key and
ordering key columns are read to find the rows the batch changes, and only a file holding
such a row is rewritten, one file at a time. delta-rs then commits the adds and removes as
one version. Unlike a delta-rs MERGE, nothing here puts a key value into the commit: the
choice of files is made in this process, from statistics, and a MERGE records its condition
and any filter it derives in the commit's `operationParameters`.

A replaced row goes back into its own file of an unpartitioned table, so files keep their
key ranges; new keys (and, in a partitioned table, every new row image, which may move its
key to another partition) are written as new files, key-sorted, per partition.

Small files (under a quarter of a full one) are merged as they are met: a small file the batch
changes, and a small file whose key range holds a batch key, go into the new files of their
partition with the new rows. Keys inserted all over the key range (random ids, UUIDs) make each
batch's new file span the whole range, so without this every batch would leave one more small file
that every later batch opens and reads, and an apply would cost more with each batch since the
last compaction. What a batch merges is bounded (about one full file's rows), so its cost still
follows the batch.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
import os
import re
import time
import uuid
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from ..core.changes import DELETE, REFILL, UPSERT
from ..core.target import DELETED
from . import delta, spark_files, storage

KEY, ORDER, APPLY = "_cdc_key", "_cdc_order", "_cdc_apply"


@dataclasses.dataclass
class Rewritten:
    """The rows one rewrite changed (its files are in its commit)."""
    inserts: int
    updates: int
    deletes: int


def applies(dt_: DeltaTable, source: pa.Table) -> bool:
    """Whether this path can apply `source`: the target's columns are the source's (a new
    column takes delta-rs' MERGE with schema evolution) and the target records no change
    data feed (a MERGE writes its change files)."""
    if delta.records_change_feed(dt_):
        return False
    return {f.name for f in dt_.schema().fields} == set(source.column_names) - {APPLY}


def _candidates(dt_: DeltaTable, keys: list[str] | None, partition_by: list[str]) -> list[dict]:
    """The add actions (path, size, typed partition values) whose `_cdc_key` statistics range
    holds one of `keys` (all of them without statistics, or with `keys` None); delta-rs
    truncates long strings' bounds outward, so a range never excludes a key its file holds."""
    actions = pa.table(dt_.get_add_actions(flatten=True))
    lows = actions[f"min.{KEY}"].to_pylist() if f"min.{KEY}" in actions.column_names else [None] * actions.num_rows
    highs = actions[f"max.{KEY}"].to_pylist() if f"max.{KEY}" in actions.column_names else [None] * actions.num_rows
    parts = [actions[f"partition.{c}"].to_pylist() for c in partition_by]
    counts = actions["num_records"].to_pylist() if "num_records" in actions.column_names else [None] * actions.num_rows
    ordered = sorted(keys or ())
    out = []
    for n, (row, lo, hi) in enumerate(zip(actions.select(["path", "size_bytes"]).to_pylist(), lows, highs)):
        row["rows"] = counts[n]
        if keys is not None and lo is not None and hi is not None:
            i = bisect.bisect_left(ordered, lo)
            if i == len(ordered) or ordered[i] > hi:
                continue
        row["partition"] = {c: parts[j][n] for j, c in enumerate(partition_by)}
        out.append(row)
    return out


def _location(table_path: str, action: dict) -> str:
    # get_add_actions gives paths URI-encoded once more than the files' names
    return storage.join(table_path, unquote(action["path"]))


_PLAIN = re.compile(r"[A-Za-z0-9_.-]+")


def _partition_folder(folder: str, partition: dict) -> str:
    """Where one partition's new files go: `col=value` folders in the table, as Spark and
    delta-rs lay a partitioned table out, when every name and value is plain; the table's own
    folder otherwise (the Delta log, not the folder, says a file's partition values)."""
    parts = [f"{c}={spark_files.NULL_PARTITION if v is None else v}" for c, v in partition.items()]
    if parts and all(_PLAIN.fullmatch(c) and (v is None or _PLAIN.fullmatch(v)) for c, v in partition.items()):
        return storage.join(folder, *parts)
    return folder


def _write(table_path: str, name: str, rows: pa.Table, data_schema: pa.Schema, partition: dict,
           start: int, rows_per_file: int, written: list[str]) -> list[AddAction]:
    """`rows` (one partition's) sorted by key into files of at most `rows_per_file` rows."""
    rows = rows.take(pc.sort_indices(rows, [(KEY, "ascending")]))
    folder = _partition_folder(table_path, partition)
    if not storage.is_remote(folder):
        os.makedirs(folder, exist_ok=True)  # an object store has no folders to make
    adds = []
    for n, offset in enumerate(range(0, rows.num_rows, rows_per_file)):
        location = storage.join(folder, f"part-{start + n:05d}-{name}.snappy.parquet")
        written.append(location)
        fs, p = storage.filesystem(location)
        with fs.open_output_stream(p) as stream:
            part = rows.slice(offset, rows_per_file).select(data_schema.names).cast(data_schema)
            pq.write_table(part, stream, compression="snappy", coerce_timestamps="us",
                           use_dictionary=spark_files.dictionary_columns(data_schema, part))
        adds.append(spark_files.add_action(table_path, location, data_schema, partition))
    return adds


def rewrite(table_path: str, dt_: DeltaTable, source: pa.Table, partition_by, props_for,
            rows_per_file: int, truncate: str | None = None, soft: bool = False) -> Rewritten:
    """Apply `source` (each key's winner, `_cdc_apply` saying upsert, delete or REFILL, target's
    columns) to the snapshot `dt_`: a row changes only when the winner's ordering key is
    greater than the row's (an older or equal change is stale; a REFILL's equal one replaces it),
    and a winning upsert of a key target lacks is inserted. One commit through `dt_`, so a concurrent commit that
    removed one of these files fails ours; `props_for(figures)`: its commit properties, given
    the rows it inserts, updates and deletes (a MERGE's commit has them as its metrics).
    `truncate`: a truncate's ordering key: every row ranking at or below it goes too, so every
    file is a candidate (rule 9); with `soft` (a soft-delete table, rule 12) such a row stays,
    its `_cdc_deleted` set."""
    partition_by = list(partition_by)
    schema = pa.schema(dt_.schema().to_arrow())
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    source = source.select(schema.names + [APPLY]).cast(pa.schema(list(schema) + [pa.field(APPLY, pa.string())]))
    keys = source[KEY].to_pylist()
    chosen = {_location(table_path, a): a for a in _candidates(dt_, None if truncate else keys, partition_by)}
    fs, paths = storage.arrow_paths(list(chosen))
    at = dict(zip(paths, chosen))  # the path Arrow reads -> the file's location

    # The target's rows of the batch's keys: which file each is in, and its ordering key.
    if paths:
        # Filtered here, not in the scan: a file delta-rs wrote keeps its strings as string_view,
        # and Arrow's scan cannot compare those statistics with a string filter.
        read = [KEY, ORDER] + ([DELETED] if soft else [])
        found = ds.dataset(paths, schema=pa.schema([schema.field(c) for c in read]), format="parquet",
                           filesystem=fs).to_table(columns=read + ["__filename"])
    else:
        found = pa.schema([schema.field(KEY), schema.field(ORDER)] + ([schema.field(DELETED)] if soft else [])
                          + [pa.field("__filename", pa.string())]).empty_table()
    # The rows a truncate takes, per file, and the files it empties (those need not be read again).
    cut: dict[str, set[str]] = {}
    emptied: set[str] = set()
    if truncate is not None:
        at_or_below = pc.less_equal(found[ORDER].cast(pa.string()), truncate)
        if soft:  # a row flagged already stays as it is
            at_or_below = pc.and_(at_or_below, pc.invert(pc.fill_null(found[DELETED], False)))
        below = found.filter(at_or_below).select([KEY, "__filename"])
        cut_rows = _counts(below["__filename"])
        emptied = set() if soft else {f for f, n in _counts(found["__filename"]).items() if cut_rows.get(f) == n}
        # the keys are needed only where a file keeps some rows: an emptied file is not read again
        partial = below.filter(pc.invert(pc.is_in(below["__filename"], pa.array(sorted(emptied), pa.string()))))
        for key, file in zip(*(partial[c].to_pylist() for c in (KEY, "__filename"))):
            cut.setdefault(file, set()).add(key)
    found = found.filter(pc.is_in(found[KEY], value_set=source[KEY]))
    winner_at = {k: i for i, k in enumerate(keys)}
    orders, applies_ = source[ORDER].to_pylist(), source[APPLY].to_pylist()
    matched = set()
    changed_in: dict[str, set[str]] = {}  # file -> keys whose row there this batch replaces or deletes
    for key, order, file in zip(*(found[c].to_pylist() for c in (KEY, ORDER, "__filename"))):
        matched.add(key)
        i = winner_at[key]
        if orders[i] > order or (orders[i] == order and applies_[i] == REFILL):
            changed_in.setdefault(file, set()).add(key)
    changing = set().union(*changed_in.values()) if changed_in else set()
    # in a soft-delete table every winner is a row; those it flags deleted count as deletes
    deleting = source[DELETED].to_pylist() if soft else [a == DELETE for a in applies_]
    deletes = sum(1 for k in changing if deleting[winner_at[k]])
    updates = len(changing) - deletes
    flag_in: dict[str, set[str]] = {}  # file -> keys whose row a truncate flags deleted (soft deletes)
    for file, keys_cut in cut.items():
        truncated = keys_cut - changing  # a key a winner replaces or deletes is counted as that
        deletes += len(truncated)
        if truncated:
            (flag_in if soft else changed_in).setdefault(file, set()).update(truncated)
            changed_in.setdefault(file, set())
    for file in emptied:  # every row of it ranks at or below the truncate; those a winner changes count as that
        deletes += cut_rows[file] - len(changed_in.get(file, ()))
        changed_in.setdefault(file, set())
    is_upsert = pc.is_in(source[APPLY], value_set=pa.array([UPSERT, REFILL], pa.string()))
    inserted = source.filter(pc.and_(is_upsert, pc.invert(pc.is_in(source[KEY], pa.array(sorted(matched),
                                                                                          pa.string())))))
    replaced = source.filter(pc.and_(is_upsert, pc.is_in(source[KEY], pa.array(sorted(changing), pa.string()))))
    inserts = inserted.num_rows
    if soft:  # a delete of a key the target lacks keeps its row too, flagged
        flagged_new = pc.sum(pc.fill_null(inserted[DELETED], False)).as_py() or 0
        inserts, deletes = inserts - flagged_new, deletes + flagged_new
    if not changed_in and inserted.num_rows == 0:
        return Rewritten(0, 0, 0)  # as a MERGE that changes no row: no version

    now = int(time.time() * 1000)
    name = uuid.uuid4().hex  # this write's files, discarded if it is not committed
    written: list[str] = []
    adds: list[AddAction] = []
    removes: list[RemoveAction] = []
    pool = [inserted]  # rows written as new files
    small = max(1, rows_per_file // SMALL_FILE_SHARE)
    merged = {f for f in changed_in if f not in emptied and _rows_in(chosen[at[f]]) < small}
    spill: list[pa.Table] = []  # the rows of merged small files, written with the new rows
    placed: set[str] = set()
    try:
        for file, keys_here in sorted(changed_in.items()):
            action = chosen[at[file]]
            partition = action["partition"]
            if file in emptied:
                rows = schema.empty_table()
            else:
                rows = _with_partition(pq.read_table(file, filesystem=fs, schema=data_schema), partition, schema)
                rows = rows.filter(pc.invert(pc.is_in(rows[KEY], pa.array(sorted(keys_here), pa.string()))))
                if file in flag_in:
                    flagged = pc.is_in(rows[KEY], pa.array(sorted(flag_in[file]), pa.string()))
                    rows = rows.set_column(rows.schema.get_field_index(DELETED), DELETED,
                                           pc.or_(pc.fill_null(rows[DELETED], False), flagged))
            # a key found in two files (a target from before keys were unique) gets one row
            fresh_keys = sorted((keys_here & changing) - placed)
            placed.update(fresh_keys)
            back = replaced.filter(pc.is_in(replaced[KEY], pa.array(fresh_keys, pa.string())))
            if partition_by or file in merged:
                pool.append(back)  # a new image may name another partition
            else:
                rows = pa.concat_tables([rows, back.drop_columns([APPLY])])
            removes.append(spark_files.remove_action(action, partition, now))
            if file in merged:
                spill.append(rows)
            elif rows.num_rows:
                adds += _write(table_path, name, rows, data_schema, _texts(partition), len(adds), rows_per_file,
                               written)
        new_rows = pa.concat_tables([t.drop_columns([APPLY]) for t in pool] + spill)
        # Small files the batch's keys fall in, unchanged, join the new files of their partition
        # (only where the batch writes new files: elsewhere merging would not lessen the files).
        writing = {_part_id(dict(zip(partition_by, values)))
                   for values, part in spark_files.split_by_partition(new_rows.select(partition_by), partition_by)
                   if part.num_rows}
        absorbed: list[pa.Table] = []
        budget: float = rows_per_file  # rows merged unchanged: about one full file's, whatever the table
        for file in sorted((f for f in at if f not in changed_in and _rows_in(chosen[at[f]]) < small
                            and _part_id(chosen[at[f]]["partition"]) in writing),
                           key=lambda f: _rows_in(chosen[at[f]])):
            action = chosen[at[file]]
            budget -= _rows_in(action)
            if budget < 0:
                break
            absorbed.append(_with_partition(pq.read_table(file, filesystem=fs, schema=data_schema),
                                            action["partition"], schema))
            removes.append(spark_files.remove_action(action, action["partition"], now))
        new_rows = pa.concat_tables([new_rows, *absorbed])
        for values, part in spark_files.split_by_partition(new_rows, partition_by):
            if part.num_rows:
                partition = dict(zip(partition_by, values))
                adds += _write(table_path, name, part, data_schema, _texts(partition), len(adds), rows_per_file,
                               written)
        figures = {"rows_inserted": inserts, "rows_updated": updates, "rows_deleted": deletes}
        spark_files.commit(table_path, dt_, schema, adds, removes, partition_by, props_for(figures))
    except BaseException:
        for location in written:  # nothing references them
            fs_, p = storage.filesystem(location)
            try:
                fs_.delete_file(p)
            except OSError:
                pass  # never written
        raise
    return Rewritten(inserts, updates, deletes)


# A file under 1/SMALL_FILE_SHARE of a full one is merged when a batch meets it.
SMALL_FILE_SHARE = 4


def _rows_in(action: dict) -> int | float:
    """A file's rows from its statistics (a file without them counts as full: never merged)."""
    return action["rows"] if action.get("rows") is not None else math.inf


def _part_id(partition: dict) -> tuple:
    """A partition's identity as the Delta log spells its values."""
    return tuple(sorted(_texts(partition).items()))


def _counts(values: pa.ChunkedArray) -> dict[str, int]:
    """How many times each value occurs."""
    counted = pc.value_counts(values.combine_chunks())
    return dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist()))


def _with_partition(rows: pa.Table, partition: dict, schema: pa.Schema) -> pa.Table:
    """A data file's rows with its partition columns (Delta keeps those in the log), in the table's order."""
    for c, v in partition.items():
        rows = rows.append_column(schema.field(c), pa.array([v] * rows.num_rows, schema.field(c).type))
    return rows.select(schema.names)


def _texts(partition: dict) -> dict:
    return {c: spark_files.partition_text(v) for c, v in partition.items()}
