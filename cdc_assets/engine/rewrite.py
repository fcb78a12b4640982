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
from ..core.partition_text import MAX_FOLDER_NAME, PLAIN
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


def _candidates(dt_: DeltaTable, keys: list[str], partition_by: list[str], truncate: str | None = None) -> list[dict]:
    """The add actions (path, size, typed partition values, rows, `hit`) of the files the batch can
    change: those whose `_cdc_key` statistics range holds one of `keys` (`hit`; every file without
    statistics), and with a `truncate`, those whose `_cdc_order` range reaches down to it (`lowest`
    and `highest` order from the statistics, None without them). delta-rs truncates long strings'
    bounds outward, so a range never excludes a value its file holds."""
    actions = pa.table(dt_.get_add_actions(flatten=True))

    def stat(name: str) -> list:
        return actions[name].to_pylist() if name in actions.column_names else [None] * actions.num_rows

    lows, highs = stat(f"min.{KEY}"), stat(f"max.{KEY}")
    order_lows, order_highs = stat(f"min.{ORDER}"), stat(f"max.{ORDER}")
    parts = [actions[f"partition.{c}"].to_pylist() for c in partition_by]
    counts = stat("num_records")
    ordered = sorted(keys)
    out = []
    for n, (row, lo, hi) in enumerate(zip(actions.select(["path", "size_bytes"]).to_pylist(), lows, highs)):
        i = bisect.bisect_left(ordered, lo) if lo is not None else 0
        hit = lo is None or hi is None or (i < len(ordered) and ordered[i] <= hi)
        reaches = truncate is not None and (order_lows[n] is None or order_lows[n] <= truncate)
        if not hit and not reaches:
            continue
        row.update(rows=counts[n], hit=hit, lowest=order_lows[n], highest=order_highs[n],
                   partition={c: parts[j][n] for j, c in enumerate(partition_by)})
        out.append(row)
    return out


def _cut_whole(action: dict, truncate: str) -> bool:
    """Whether every row of a file ranks at or below `truncate`, from its statistics alone."""
    return action["highest"] is not None and action["highest"] <= truncate and action["rows"] is not None


def rows_read_for(dt_: DeltaTable, truncate: str, soft: bool = False) -> int | float:
    """How many target rows a truncate makes `rewrite` read beyond a batch's own files: the rows of
    every file it reaches but does not take whole from statistics (in a soft-delete table, which
    flags rows instead, of every file it reaches)."""
    reached = _candidates(dt_, [], [], truncate)
    return sum(math.inf if a["rows"] is None else a["rows"] for a in reached if soft or not _cut_whole(a, truncate))


def rows_above(dt_: DeltaTable, order: str) -> int | float:
    """At most how many target rows rank above `order`: the rows of every file whose `_cdc_order`
    statistics reach above it (every file without them), from the log alone."""
    actions = pa.table(dt_.get_add_actions(flatten=True))
    names = actions.column_names
    highs = actions[f"max.{ORDER}"].to_pylist() if f"max.{ORDER}" in names else [None] * actions.num_rows
    counts = actions["num_records"].to_pylist() if "num_records" in names else [None] * actions.num_rows
    return sum(math.inf if n is None else n for h, n in zip(highs, counts) if h is None or h > order)


def _location(table_path: str, action: dict) -> str:
    # get_add_actions gives paths URI-encoded once more than the files' names
    return storage.join(table_path, unquote(action["path"]))


def _partition_folder(folder: str, partition: dict) -> str:
    """Where one partition's new files go: `col=value` folders in the table, as Spark and
    delta-rs lay a partitioned table out, when every name and value is plain and each folder name
    fits a file system's limit; the table's own folder otherwise (the Delta log, not the folder,
    says a file's partition values, so a value of any length or character is stored exactly)."""
    parts = [f"{c}={spark_files.NULL_PARTITION if v is None else v}" for c, v in partition.items()]
    plain = all(all(map(PLAIN.fullmatch, f"{c}{'' if v is None else v}")) for c, v in partition.items())
    if parts and plain and all(len(p) <= MAX_FOLDER_NAME for p in parts):  # plain text: a character is a byte
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
    file whose ordering keys reach down to it is a candidate (rules.md#rule-9); with `soft` (a soft-delete table, rules.md#rule-12) such a row stays,
    its `_cdc_deleted` set."""
    partition_by = list(partition_by)
    schema = pa.schema(dt_.schema().to_arrow())
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    source = source.select(schema.names + [APPLY]).cast(pa.schema(list(schema) + [pa.field(APPLY, pa.string())]))
    keys = source[KEY].to_pylist()
    chosen = {_location(table_path, a): a for a in _candidates(dt_, keys, partition_by, truncate)}
    fs, paths = storage.arrow_paths(list(chosen))
    at = dict(zip(paths, chosen))  # the path Arrow reads -> the file's location

    # A truncate (rules.md#rule-9) takes the rows ranking at or below it. A file whose `_cdc_order` range
    # lies at or below it and that holds no batch key is emptied whole from its statistics, unread;
    # the others' key and ordering key columns are streamed once: what is kept of them is the rows
    # of the batch's keys and, per file, how many rows the truncate takes, so memory follows the
    # batch and the number of files, not the table. The rows themselves are cut when a file is
    # rewritten.
    cut_rows: dict[str, int] = {}  # file -> rows the truncate takes (or, soft, flags)
    all_rows: dict[str, int] = {}  # file -> its rows (where a truncate reaches it)
    whole = [] if truncate is None or soft else \
        [p for p in paths if not chosen[at[p]]["hit"] and _cut_whole(chosen[at[p]], truncate)]
    for p in whole:
        cut_rows[p] = all_rows[p] = chosen[at[p]]["rows"]
    scan = [p for p in paths if p not in cut_rows]
    read = [KEY, ORDER] + ([DELETED] if soft else [])
    matched_parts = []
    cut_keys: list[tuple[str, str]] = []  # (key, file) of the batch's keys whose row the truncate takes
    if scan:
        # Filtered here, not in the scan: a file delta-rs wrote keeps its strings as string_view,
        # and Arrow's scan cannot compare those statistics with a string filter.
        scanner = ds.dataset(scan, schema=pa.schema([schema.field(c) for c in read]), format="parquet",
                             filesystem=fs).scanner(columns=read + ["__filename"], batch_readahead=1,
                                                    fragment_readahead=1)
        for batch in scanner.to_batches():
            hits = pc.is_in(batch.column(KEY), value_set=source[KEY])
            matched_parts.append(pa.Table.from_batches([batch.filter(hits)]))
            if truncate is None:
                continue
            at_or_below = pc.less_equal(batch.column(ORDER).cast(pa.string()), truncate)
            if soft:  # a row flagged already stays as it is
                at_or_below = pc.and_(at_or_below, pc.invert(pc.fill_null(batch.column(DELETED), False)))
            files = batch.column("__filename")
            for counted, values in ((cut_rows, files.filter(at_or_below)), (all_rows, files)):
                for f, n in _counts(values).items():
                    counted[f] = counted.get(f, 0) + n
            both = batch.filter(pc.and_(hits, at_or_below))
            cut_keys += zip(both.column(KEY).to_pylist(), both.column("__filename").to_pylist())
    found = pa.concat_tables(matched_parts) if matched_parts else \
        pa.schema([schema.field(c) for c in read] + [pa.field("__filename", pa.string())]).empty_table()
    cut_rows = {f: n for f, n in cut_rows.items() if n}
    emptied = set() if soft else {f for f, n in cut_rows.items() if n == all_rows[f]}
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
    # a row the truncate takes whose key a winner replaces or deletes is counted as that
    deletes += sum(cut_rows.values()) - sum(1 for k, _ in cut_keys if k in changing)
    for file in cut_rows:
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
                if file in cut_rows:  # the truncate's rows: gone, or in a soft-delete table flagged
                    at_or_below = pc.less_equal(rows[ORDER].cast(pa.string()), truncate)
                    rows = rows.set_column(rows.schema.get_field_index(DELETED), DELETED,
                                           pc.or_(pc.fill_null(rows[DELETED], False), at_or_below)) if soft \
                        else rows.filter(pc.invert(at_or_below))
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


def _counts(values: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    """How many times each value occurs."""
    counted = pc.value_counts(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values)
    return dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist()))


def _with_partition(rows: pa.Table, partition: dict, schema: pa.Schema) -> pa.Table:
    """A data file's rows with its partition columns (Delta keeps those in the log), in the table's order."""
    for c, v in partition.items():
        rows = rows.append_column(schema.field(c), pa.array([v] * rows.num_rows, schema.field(c).type))
    return rows.select(schema.names)


def _texts(partition: dict) -> dict:
    return {c: spark_files.partition_text(v) for c, v in partition.items()}
