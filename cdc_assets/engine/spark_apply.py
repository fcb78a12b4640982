"""A large incremental apply on Spark executors: the same rules as the in-process apply
(engine/apply.py, engine/rewrite.py), with nothing batch- or table-sized on the driver.

Executors pick each pending key's latest change from `staging`, drop upserts older than
their key's tombstone (rules.md#rule-2), read the target files whose `_cdc_key` statistics range can
hold a winner's key, and write the files that change again, key-sorted, about
ROWS_PER_FILE rows each, per partition. The tombstones are rewritten the same way. The driver
plans (which files: their names and statistics, from the Delta log), counts, and commits each
table's adds and removes as one delta-rs version through the snapshot the apply read
(spark_files.commit), so a concurrent commit still fails this one.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import re
import time
from urllib.parse import unquote

import pyarrow as pa

from ..core import names
from ..core.changes import DELETE, REFILL, TRUNCATE, TRUNCATE_KEY, UPSERT
from ..core.config import TableConfig
from ..core.target import DELETED
from . import delta, spark_files, storage
from .latest import latest_per_key
from .partition_layout import PartitionLayout
from .settings import settings
from .spark import map_in_arrow
from .spark_files import TableFile
from .table_layout import STAGING, TARGET, TOMBSTONE_FIELDS, TOMBSTONES, path

# An incremental apply of at most this many pending staged rows (counted from the staging
# log's statistics) runs in the run's own process; a larger one (a catch-up, random keys) on
# Spark executors. 0 sends every incremental apply to Spark.

KEY, ORDER, FILE = "_cdc_key", "_cdc_order", "_cdc_file_id"


def pending_rows(table_dir: str, applied: int) -> int:
    """At most how many staged rows batches after `applied` hold: the rows of every staging
    file whose `_cdc_batch_seq` statistics reach past it (a file without them counts whole)."""
    return spark_files.rows_reaching(path(table_dir, STAGING), "_cdc_batch_seq", applied + 1)


def runs_on_spark(table_dir: str, applied: int) -> bool:
    return pending_rows(table_dir, applied) > settings().local_apply_rows


def files_of(table_path: str, dt_) -> list[TableFile]:
    """The snapshot's files with their `_cdc_key` statistics, as the apply plans with them."""
    return spark_files.files_of(table_path, dt_, KEY)


def _holding(files: list[TableFile]):
    """What each task runs on a slice of keys: the ids of the files whose `_cdc_key` range
    holds one of them (a file's bounds are truncated outward, so a range never misses a key)."""
    ranged = [(i, f.low, f.high) for i, f in enumerate(files) if f.low is not None and f.high is not None]
    schema = pa.schema([pa.field(FILE, pa.int32())])

    def run(batches):
        keys = sorted({k for b in batches for k in b.column(KEY).to_pylist() if k is not None})
        hit = []
        for i, lo, hi in ranged:
            at = bisect.bisect_left(keys, lo)
            if at < len(keys) and keys[at] <= hi:
                hit.append(i)
        if hit:
            yield pa.RecordBatch.from_arrays([pa.array(hit, pa.int32())], schema=schema)
    return run


def candidates(keys_frame, files: list[TableFile]) -> list[int]:
    """The ids of the files that can hold a key of `keys_frame` (its `_cdc_key` column): the
    keys stay on the executors, only file ids come back."""
    unranged = [i for i, f in enumerate(files) if f.low is None or f.high is None]
    if len(unranged) == len(files):
        return unranged
    found = map_in_arrow(keys_frame.select(KEY), _holding(files), f"{FILE} int").distinct().collect()
    return sorted(set(unranged) | {r[0] for r in found})


def _reader(files: list[TableFile], ids: list[int], schema: pa.Schema, settings: dict):
    """What each task runs on a slice of file ids: the files' rows in `schema` (partition
    columns from the log's typed values, a column a file lacks as nulls), each with its file id."""
    chosen = {i: (files[i].uri, files[i].partition) for i in ids}

    def run(batches):
        import pyarrow.parquet as pq

        for listing in batches:
            for i in listing.column(0).to_pylist():
                uri, partition = chosen[i]
                fs, p = storage.filesystem(uri, settings)
                pf = pq.ParquetFile(fs.open_input_file(p))
                have = set(pf.schema_arrow.names)
                wanted = [f.name for f in schema if f.name in have and f.name not in partition and f.name != FILE]
                for rb in pf.iter_batches(columns=wanted):
                    n = rb.num_rows
                    arrays = []
                    for f in schema:
                        if f.name == FILE:
                            arrays.append(pa.array([i] * n, f.type))
                        elif f.name in partition:
                            arrays.append(pa.array([partition[f.name]] * n, f.type))
                        elif f.name in have:
                            arrays.append(rb.column(f.name).cast(f.type))
                        else:
                            arrays.append(pa.nulls(n, f.type))
                    yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    return run


# A local file whose path Spark reports as it is (`_metadata.file_path` is `file:` and the
# path, URI-escaped): Spark's own Parquet reader reads it; other files go through Python workers.
_SPARK_SPELLS = re.compile(r"/[A-Za-z0-9_.=/-]*")


def read(spark, files: list[TableFile], ids: list[int], schema: pa.Schema):
    """The rows of files `ids` as a DataFrame of `schema` plus each row's file id, read by the
    executors (the driver sends file names only)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    with_file = pa.schema(list(schema) + [pa.field(FILE, pa.int32())])
    struct = from_arrow_schema(with_file)
    native = [i for i in ids if not storage.is_remote(files[i].uri) and _SPARK_SPELLS.fullmatch(files[i].uri)]
    others = sorted(set(ids) - set(native))
    frames = [_read_natively(spark, files, native, with_file)] if native else []
    if others or not native:
        listing = spark.createDataFrame([(i,) for i in others], "id int")
        frames.append(listing.repartition(max(1, min(len(others), 200))).mapInArrow(
            _reader(files, others, with_file, storage.settings()), struct))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _read_natively(spark, files: list[TableFile], ids: list[int], with_file: pa.Schema):
    """Spark's Parquet reader on local files, each row given its file's id and partition values
    (the log's typed values) through a join with the list of files on the path Spark reports."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    partition = set(files[ids[0]].partition)
    data = pa.schema([f for f in with_file if f.name not in partition and f.name != FILE])
    listed = pa.schema([pa.field("_cdc_path", pa.string())] + [f for f in with_file if f.name in partition]
                       + [with_file.field(FILE)])
    rows = [("file:" + files[i].uri, *[files[i].partition[f.name] for f in listed if f.name in partition], i)
            for i in ids]
    listing = spark.createDataFrame(rows, from_arrow_schema(listed))
    frame = spark.read.schema(from_arrow_schema(data)).parquet(*[files[i].uri for i in ids]) \
        .withColumn("_cdc_path", F.col("_metadata.file_path"))
    return frame.join(F.broadcast(listing), "_cdc_path").select(*[F.col(names.spark(f.name)) for f in with_file])


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """A Delta schema as Spark reads and writes it: plain strings and binaries."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t = pa.binary()
        fields.append(pa.field(f.name, t))
    return pa.schema(fields)


@dataclasses.dataclass
class Rewrite:
    """A table's files to replace and the add actions of the files replacing them."""
    removes: list
    adds: list


def _write(rows, table_path: str, partition_by: list[str], n_rows: int, rows_per_file: int) -> list:
    """`rows` (about `n_rows` of them, planned from counts: counting would be one more pass) as
    new files of the table."""
    from pyspark.sql import functions as F

    if n_rows <= 0 and rows.isEmpty():
        return []
    n_files = max(1, math.ceil(n_rows / rows_per_file))
    # key ranges in files of about `rows_per_file` rows, per partition: statistics prune them.
    # The range partitioner samples its input, a job of its own: cached, the rows are computed
    # once for the sample and the write, not twice.
    order = [F.col(names.spark(c)) for c in partition_by] + [F.col(KEY)]
    rows = rows.cache()
    try:
        return spark_files.write_files(rows.repartitionByRange(n_files, *order), table_path, partition_by,
                                       sort_by=[KEY])
    finally:
        rows.unpersist()


def _removes(files: list[TableFile], ids: list[int]) -> list:
    now = int(time.time() * 1000)
    return [spark_files.remove_action(files[i].action, files[i].partition, now) for i in ids]


@dataclasses.dataclass
class Applied:
    """What an apply on Spark did: the figures the in-process apply reports."""
    changes_pending: int
    winners: int
    inserts: int
    updates: int
    deletes: int


def apply(spark, table: TableConfig, table_dir: str, dt_, applied: int, reached: int, staged, target_rows,
          props_for, rows_per_file: int, layout: PartitionLayout) -> Applied:
    """Apply batches applied+1..reached to the target snapshot `dt_` and its tombstones.
    `staged`: staging's records, typed columns cast to the target's types; `target_rows(frame,
    floor)`: such records as target rows (`floor`: the truncate they rank against); `props_for(figures)`:
    the target commit's properties; `layout`: how the target's partition columns are laid out."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    target_path = path(table_dir, TARGET)
    partition_by = layout.delta_columns
    pending = staged.where((F.col("_cdc_batch_seq") > applied) & (F.col("_cdc_batch_seq") <= reached))
    # Each winner carries its key's count of pending changes, so one job counts both and finds the
    # greatest pending truncate (one winner: truncates share TRUNCATE_KEY).
    counted_winners = latest_per_key(pending.withColumn("_n_pending", F.count(F.lit(1)).over(Window.partitionBy(KEY)))) \
        .cache()
    tombs = live = pairs = classified = old = None
    try:
        counted = counted_winners.agg(F.count(F.lit(1)), F.sum("_n_pending"),
                                      F.max(F.when(F.col(KEY) == TRUNCATE_KEY, F.col(ORDER)))).first()
        n_winners, n_pending, truncate = int(counted[0]), int(counted[1] or 0), counted[2]
        winners = counted_winners.drop("_n_pending")
        tomb_path = path(table_dir, TOMBSTONES)
        tomb_dt = delta.open_table(tomb_path)  # apply_pending builds the whole state when it is missing
        # The whole table's tombstone: the greatest truncate applied before or pending (rules.md#rule-9).
        stored = delta.rows_with_keys(tomb_dt, TOMBSTONE_FIELDS, [TRUNCATE_KEY]) if tomb_dt is not None else None
        before = stored["_cdc_order"].to_pylist() if stored is not None else []
        floor = max(before + ([truncate] if truncate else []), default="")
        tomb_files = files_of(tomb_path, tomb_dt)
        tombs = _tombstone_rows(spark, tomb_files, winners).cache()
        # An upsert older than its key's tombstone, or than a truncate, is stale (rules.md#rule-2): it never
        # reaches the target (a soft-delete table keeps the latter, flagged deleted); nor does a
        # truncate, which is no row.
        soft = table.soft_deletes
        with_tomb = winners.join(tombs.groupBy(KEY).agg(F.max("_t_order").alias("_t_order")), KEY, "left")
        below = F.lit(False) if soft else F.col(ORDER) < F.lit(floor)
        live = with_tomb.where(~((F.col("_cdc_op") == UPSERT) & F.col("_t_order").isNotNull()
                                 & (F.col("_t_order") > F.col(ORDER)))
                               & ~((F.col("_cdc_op") == UPSERT) & below)
                               & (F.col("_cdc_op") != TRUNCATE)).drop("_t_order").cache()
        live.count()  # decided from the tombstones as they were, before they change
        if delta.txn_version(tomb_dt, TOMBSTONES) < reached:
            _tombstones(tomb_path, tomb_dt, tomb_files, tombs, winners, reached, rows_per_file)

        schema = plain_schema(pa.schema(dt_.schema().to_arrow()))
        files = files_of(target_path, dt_)
        # a truncate can take a row of any file
        ids = list(range(len(files))) if truncate else candidates(live, files)
        old = read(spark, files, ids, pa.schema([schema.field(KEY), schema.field(ORDER)]
                                                + ([schema.field(DELETED)] if soft else [])))
        if truncate:
            old = old.cache()
        pairs = old.join(live.select(KEY, F.col(ORDER).alias("_w_order")), KEY).cache()
        changing = pairs.where(F.col("_w_order") > F.col(ORDER))
        keyinfo = pairs.groupBy(KEY).agg(F.max((F.col("_w_order") > F.col(ORDER)).cast("int")).alias("_changing"))
        classified = live.join(keyinfo, KEY, "left").cache()
        is_upsert = F.col("_cdc_op") == UPSERT
        arrives = F.lit(True) if soft else is_upsert  # a soft-delete table's delete is a row too
        new_or_changing = F.col("_changing").isNull() | (F.col("_changing") == 1)
        # in a soft-delete table, the rows this apply flags deleted count as deletes (as in rewrite.py)
        live_row = (is_upsert & (F.col(ORDER) > F.lit(floor))) if soft else is_upsert
        counts = classified.agg(
            F.sum(F.when(live_row & F.col("_changing").isNull(), 1).otherwise(0)),
            F.sum(F.when(live_row & (F.col("_changing") == 1), 1).otherwise(0)),
            F.sum(F.when(~live_row & (new_or_changing if soft else F.col("_changing") == 1), 1).otherwise(0))).first()
        inserts, updates, deletes = (int(c or 0) for c in counts)
        leaving = changing.select(KEY, FILE)
        touched = leaving
        if truncate:
            # the rows the truncate takes (or, in a soft-delete table, flags), but for those a winner
            # replaces or deletes (counted as that)
            cut = old.where(F.col(ORDER) <= F.lit(truncate))
            if soft:
                cut = cut.where(~F.coalesce(F.col(DELETED), F.lit(False)))
            cut = cut.join(changing.select(KEY), KEY, "left_anti")
            cut_counts = cut.groupBy(FILE).count().collect()
            deletes += sum(r[1] for r in cut_counts)
            touched = leaving.unionByName(cut.select(KEY, FILE))
            if not soft:
                leaving = touched
        done = Applied(n_pending, n_winners, inserts, updates, deletes)
        if inserts + updates + deletes == 0:
            return done  # as a MERGE that changes no row: no version
        changed_ids = sorted(r[0] for r in touched.select(FILE).distinct().collect())
        kept = read(spark, files, changed_ids, schema).drop(FILE) \
            .join(leaving.select(KEY).distinct(), KEY, "left_anti")
        if soft and truncate:
            kept = kept.withColumn(DELETED, F.coalesce(F.col(DELETED), F.lit(False)) | (F.col(ORDER) <= F.lit(truncate)))
        arriving = classified.where(arrives & new_or_changing)
        typed = layout.spark_with_derived(target_rows(arriving, floor))
        rows = kept.unionByName(typed.select(*[F.col(names.spark(n)) for n in schema.names]))
        # each changing key leaves its file; each upsert arrives (a soft-delete table keeps its rows)
        n_rows = sum(files[i].rows for i in changed_ids) + (inserts if soft else inserts - deletes)
        adds = _write(rows, target_path, partition_by, n_rows, rows_per_file)
        try:
            spark_files.commit(target_path, dt_, schema, adds, _removes(files, changed_ids), partition_by,
                               props_for({"rows_inserted": inserts, "rows_updated": updates,
                                          "rows_deleted": deletes, **({"truncate": "true"} if truncate else {})}))
        except BaseException:
            spark_files.discard(target_path, adds)
            raise
        return done
    finally:
        for frame in (counted_winners, tombs, live, pairs, classified, old):
            if frame is not None:
                frame.unpersist()


def _tombstones(tomb_path: str, tomb_dt, files: list[TableFile], tombs, winners, reached: int,
                rows_per_file: int) -> None:
    """The tombstones after these winners, as the in-process apply merges them: a newer delete
    (or truncate) updates (or adds) its key's ordering key, a newer upsert removes the tombstone."""
    from pyspark.sql import functions as F

    w = winners.select(KEY, F.col(ORDER).alias("_w_order"), "_cdc_op")
    pairs = tombs.join(w, KEY)
    newer = pairs.where(F.col("_w_order") > F.col("_t_order"))
    changed_ids = sorted(r[0] for r in newer.select("_t_file").distinct().collect())
    added = w.where(F.col("_cdc_op") != UPSERT).join(tombs.select(KEY), KEY, "left_anti")
    n_added = added.count()
    if not changed_ids and not n_added:
        return
    kept = tombs.where(F.col("_t_file").isin(changed_ids)).join(newer.select(KEY), KEY, "left_anti") \
        .select(KEY, F.col("_t_order").alias(ORDER))
    updated = newer.where(F.col("_cdc_op") != UPSERT).select(KEY, F.col("_w_order").alias(ORDER))
    rows = kept.unionByName(updated).unionByName(added.select(KEY, F.col("_w_order").alias(ORDER)))
    adds = _write(rows, tomb_path, [], sum(files[i].rows for i in changed_ids) + n_added, rows_per_file)
    try:
        spark_files.commit(tomb_path, tomb_dt, delta.arrow_schema(TOMBSTONE_FIELDS), adds, _removes(files, changed_ids),
                           (), delta.commit_props(TOMBSTONES, reached))
    except BaseException:
        spark_files.discard(tomb_path, adds)
        raise


def _tombstone_rows(spark, files: list[TableFile], winners):
    """The tombstones of the winners' keys (the files that can hold them), each with its file's id."""
    from pyspark.sql import functions as F

    return read(spark, files, candidates(winners, files), delta.arrow_schema(TOMBSTONE_FIELDS)) \
        .select(F.col(KEY), F.col(ORDER).alias("_t_order"), F.col(FILE).alias("_t_file"))


def tombstones_after(spark, table_dir: str, staged, applied: int, reached: int, rows_per_file: int) -> None:
    """The tombstones after batches applied+1..reached of `staged` (staging's records), as `apply`
    leaves them."""
    from pyspark.sql import functions as F

    tomb_path = path(table_dir, TOMBSTONES)
    tomb_dt = delta.open_table(tomb_path)
    if delta.txn_version(tomb_dt, TOMBSTONES) >= reached:
        return  # an earlier attempt of this apply committed them
    winners = latest_per_key(staged.where((F.col("_cdc_batch_seq") > applied) & (F.col("_cdc_batch_seq") <= reached)))
    files = files_of(tomb_path, tomb_dt)
    tombs = _tombstone_rows(spark, files, winners).cache()
    try:
        _tombstones(tomb_path, tomb_dt, files, tombs, winners, reached, rows_per_file)
    finally:
        tombs.unpersist()


@dataclasses.dataclass
class Changing:
    """The rows a MERGE changes the target with, written by executors as Parquet files into a
    folder of the target that no commit references (`discard` removes them)."""
    adds: list
    uris: list[str]
    rows: int


def changing_rows(spark, target_path: str, dt_, state, deletes, truncate: str | None, soft: bool) -> Changing:
    """What a MERGE into the target `dt_` (after the truncate's own MERGE has taken, or in a
    soft-delete table flagged, its rows at or below `truncate`) needs to hold the whole state
    `state` (typed target rows), each row with `_cdc_apply`: an upsert of a key the target lacks, a
    refill of a row that differs in any column, a delete of a row whose key's latest change is one
    (`deletes`: key and ordering key of each). Executors compare the two, so only the rows that
    change leave them."""
    from pyspark.sql import functions as F

    schema = plain_schema(pa.schema(dt_.schema().to_arrow()))
    files = files_of(target_path, dt_)
    old = read(spark, files, list(range(len(files))), schema).drop(FILE)
    if truncate is not None:
        cut = F.col(ORDER) <= F.lit(truncate)
        old = old.withColumn(DELETED, F.coalesce(F.col(DELETED), F.lit(False)) | cut) if soft else old.where(~cut)
    have = set(schema.names)
    fields = list(state.schema.fields)
    # positional names: a source column's name may be anything Delta holds
    new = state.select(*[F.col(names.spark(f.name)).alias(f"_n{i}") for i, f in enumerate(fields)])
    was = old.select(*[(F.col(names.spark(f.name)) if f.name in have else F.lit(None).cast(f.dataType)).alias(f"_o{i}")
                       for i, f in enumerate(fields)])
    k = [f.name for f in fields].index(KEY)
    both = new.join(was, F.col(f"_n{k}") == F.col(f"_o{k}"), "full_outer")
    same = functools.reduce(lambda a, b: a & b, [F.col(f"_n{i}").eqNullSafe(F.col(f"_o{i}")) for i in range(len(fields))])
    as_new = [F.col(f"_n{i}").alias(f.name) for i, f in enumerate(fields)]
    upserts = both.where(F.col(f"_o{k}").isNull()).select(*as_new, F.lit(UPSERT).alias("_cdc_apply"))
    refills = both.where(F.col(f"_n{k}").isNotNull() & F.col(f"_o{k}").isNotNull() & ~same) \
        .select(*as_new, F.lit(REFILL).alias("_cdc_apply"))
    gone = both.where(F.col(f"_n{k}").isNull()).select(F.col(f"_o{k}").alias(KEY)).join(deletes.select(KEY, ORDER), KEY)
    gone = gone.select(*[F.col(f.name) if f.name in (KEY, ORDER) else F.lit(None).cast(f.dataType).alias(f.name)
                         for f in fields], F.lit(DELETE).alias("_cdc_apply"))
    adds = spark_files.write_files(upserts.unionByName(refills).unionByName(gone), target_path)
    return Changing(adds, [storage.join(target_path, unquote(a.path)) for a in adds], spark_files.rows_written(adds))
