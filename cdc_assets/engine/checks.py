"""What the asset checks measure, read straight from the warehouse's Delta tables."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..core import names, reconcile
from ..core.config import Config, ConfigError, TableConfig
from ..core.figures import Figures
from ..core.formats import parse_snapshot
from ..core.ordering import origin
from ..core.target import DELETED, arrow_type
from . import delta, key_spans, postgres_reconcile, replay, spark_apply, spark_files, storage
from .settings import settings
from .table_layout import CHANGES, CHANGES_TRIM, QUARANTINE, REPLAYS, STAGING, STAGING_TRIM, TARGET, path
from .target_typing import existing_columns, spark_columns


@dataclass(frozen=True, kw_only=True)
class KeyUniqueness(Figures):
    """The `keys_unique` check's report: how many keys were looked up, how many are in the target
    more than once, and where a sample of those came from (places, never the keys)."""
    rows: int | None = None  # the target's rows, when every key was counted
    keys_checked: int
    duplicate_keys: int
    sample_duplicates: tuple[str, ...] = ()


NO_KEYS = KeyUniqueness(rows=0, keys_checked=0, duplicate_keys=0)


def key_uniqueness(cfg: Config, table: TableConfig, spark=None) -> KeyUniqueness:
    """Each key the last apply touched is in the target once. The keys of the batches it applied
    are read from staging (batch-sized) and looked up in target, whose files outside their range
    are skipped; after a whole-state build every key is checked: files each in strictly ascending
    key order with disjoint key spans prove it from their key columns alone (engine/key_spans),
    else every key is counted, by Spark when a session is at hand (`spark`: a function
    returning it)."""
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    dt = delta.snapshot(target_path)
    if dt is None:
        return NO_KEYS
    commit = {k[4:]: v for k, v in delta.last_commit(dt).items() if k.startswith("cdc.")}
    incremental = commit.get("step") == TARGET and commit.get("build") != "full" and "from_batch" in commit
    # A batch too big for this process (a catch-up the executors applied) is checked as a build
    # is: its keys, millions of them, never come here.
    if not incremental or (spark is not None and spark_apply.pending_rows(table_dir, int(commit["from_batch"]) - 1)
                           > settings().local_apply_rows):
        rows = delta.file_stats(dt)[2]
        if key_spans.keys_unique_by_order(dt, table.keys, spark):  # files in key order: nothing to count
            return KeyUniqueness(rows=rows, keys_checked=rows, duplicate_keys=0)
        if spark is None or rows <= settings().local_build_rows:  # small enough to count in this process
            return _all_keys_unique_here(dt, rows, table.keys)
        return _all_keys_unique(spark(), dt, table.keys)
    touched = delta.select(path(table_dir, STAGING), (("_cdc_key", "string"),),
                           f"_cdc_batch_seq >= {int(commit['from_batch'])} AND _cdc_batch_seq <= {int(commit['batch_seq'])}")
    keys = sorted(set(touched["_cdc_key"].to_pylist())) if touched is not None else []
    if not keys:
        return KeyUniqueness(keys_checked=0, duplicate_keys=0)
    # the keys' own range, for this query only: it lets delta-rs skip target files by statistics
    span = f"_cdc_key >= {delta.sql_text(keys[0])} AND _cdc_key <= {delta.sql_text(keys[-1])}"
    found = delta.rows_with_keys(dt, _with_key_columns(dt, table.keys), keys, also=span)
    counts = found.group_by("_cdc_key").aggregate([("_cdc_key", "count")])
    dupes = counts.filter(pc.greater(counts["_cdc_key_count"], 1))["_cdc_key"]
    values, shared = _key_values_shared(dt, table.keys, found)
    return KeyUniqueness(keys_checked=len(keys), duplicate_keys=max(len(dupes), values),
                         sample_duplicates=_origins(found, dupes) if len(dupes) else _origins(shared, shared["_cdc_key"]))


KEY_AND_ORDER = (("_cdc_key", "string"), ("_cdc_order", "string"))
SAMPLE = 10


def _origins(rows: pa.Table, keys) -> tuple[str, ...]:
    """Where the rows of some duplicated keys came from (places, not the keys: keys are row data)."""
    picked = rows.filter(pc.is_in(rows["_cdc_key"], value_set=pa.array(list(keys)[:SAMPLE], pa.string())))
    return tuple(sorted(origin(o) for o in picked["_cdc_order"].to_pylist()))


def _with_key_columns(dt: delta.DeltaTable, keys) -> pa.Schema:
    """The `_cdc_key` and `_cdc_order` fields, and the key columns as the target types them."""
    have = existing_columns(dt)
    return pa.schema(list(delta.arrow_schema(KEY_AND_ORDER)) + [pa.field(k, arrow_type(have[k])) for k in keys if k in have])


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _sql_value(value) -> str | None:
    """A key value as an SQL literal, for the types a lookup by value takes (else None)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return delta.sql_text(value)
    return None


def _key_values_shared(dt: delta.DeltaTable, keys, found: pa.Table) -> tuple[int, pa.Table]:
    """How many key values more than one row holds, and those rows (`_cdc_key`, `_cdc_order`), among the
    rows holding the values of `found`'s keys: `_cdc_key` is each row's key as its change was
    read, and a row whose key columns hold another row's key value is the same key twice. Looked
    up by the first key column's values (text, integers, booleans; other types are not looked up)."""
    first = keys[0] if keys else None
    none = (0, delta.arrow_schema(KEY_AND_ORDER).empty_table())
    if first is None or first not in found.column_names or not found.num_rows:
        return none
    values = pc.unique(found[first]).to_pylist()
    literals = sorted({v for v in (_sql_value(x) for x in values) if v is not None})
    if not literals or len(literals) > delta.IN_LIST_LIMIT:
        return none
    where = f"{_quoted(first)} IN ({', '.join(literals)})"
    kinds = {type(v) for v in values if v is not None}
    if kinds in ({int}, {str}):
        # the values' own range too: delta-rs skips the target files outside it by their statistics,
        # so the lookup reads the files of the batch's keys, not every file's first key column
        low, high = min(v for v in values if v is not None), max(v for v in values if v is not None)
        where += f" AND {_quoted(first)} >= {_sql_value(low)} AND {_quoted(first)} <= {_sql_value(high)}"
    rows = delta.select(dt, _with_key_columns(dt, keys), where)
    columns = [k for k in keys if k in rows.column_names]
    counts = rows.group_by(columns).aggregate([("_cdc_key", "count")])
    shared = counts.filter(pc.greater(counts["_cdc_key_count"], 1)).drop_columns(["_cdc_key_count"])
    if not shared.num_rows:
        return none
    return shared.num_rows, rows.join(shared, columns, join_type="inner").select([n for n, _ in KEY_AND_ORDER])


def _all_keys_unique_here(dt: delta.DeltaTable, rows: int, keys=()) -> KeyUniqueness:
    """Every key of the target's `rows` counted in this process: by `_cdc_key`, and by the key
    columns' values."""
    dupes = delta.query(dt, "SELECT _cdc_key FROM t GROUP BY _cdc_key HAVING count(*) > 1")
    sample = dupes["_cdc_key"].to_pylist()[:SAMPLE]
    found = delta.rows_with_keys(dt, KEY_AND_ORDER, [str(k) for k in sample]) if sample else None
    by_value = 0
    if keys and set(keys) <= set(_with_key_columns(dt, keys).names):
        listed = ", ".join(_quoted(k) for k in keys)
        shared = delta.query(dt, f"SELECT {listed} FROM t GROUP BY {listed} HAVING count(*) > 1")
        by_value = shared.num_rows
    return KeyUniqueness(rows=rows, keys_checked=rows, duplicate_keys=max(dupes.num_rows, by_value),
                         sample_duplicates=_origins(found, sample) if found is not None else ())


def _all_keys_unique(spark, dt, key_columns=()) -> KeyUniqueness:
    from pyspark.sql import functions as F

    files = dt.file_uris()
    if not files:
        return NO_KEYS
    if storage.is_remote(files[0]):
        keys = spark_files.read_files(spark, files, "_cdc_key string")
    else:
        keys = spark.read.parquet(*files).select("_cdc_key")
    # One group-by counts the rows and the duplicated keys; only when there are some is it run
    # again for a sample of them. The key columns' values are counted too (`_all_keys_unique_here`).
    by_value = 0
    in_files = {k: t for k, t in existing_columns(dt).items() if k in key_columns}
    if key_columns and len(in_files) == len(key_columns) and not set(key_columns) & set(dt.metadata().partition_columns):
        read = spark_files.read_files(spark, files, spark_columns(in_files)) if storage.is_remote(files[0]) \
            else spark.read.parquet(*files)
        by_value = read.groupBy(*[F.col(names.spark(k)) for k in key_columns]).count().where("count > 1").count()
    counts = keys.groupBy("_cdc_key").count()
    rows, n_dupes = counts.agg(F.sum("count"), F.sum(F.when(F.col("count") > 1, 1).otherwise(0))).first()
    rows, n_dupes = int(rows or 0), int(n_dupes or 0)
    sample = [r["_cdc_key"] for r in counts.where(F.col("count") > 1).limit(SAMPLE).collect()] if n_dupes else []
    found = delta.rows_with_keys(dt.table_uri, KEY_AND_ORDER, sample) if sample else None
    return KeyUniqueness(rows=rows, keys_checked=rows, duplicate_keys=max(n_dupes, by_value),
                         sample_duplicates=_origins(found, sample) if found is not None else ())


def _rows_of_batch(table_path: str | delta.DeltaTable, batch_seq: int) -> int:
    counted = delta.query(table_path, f"SELECT count(*) AS n FROM t WHERE _cdc_batch_seq = {int(batch_seq)}")
    return int(counted["n"][0].as_py()) if counted is not None else 0


@dataclass(frozen=True, kw_only=True)
class BatchAccounting(Figures):
    """The `batch_accounted` check's report: a batch's counts at each step, and whether they add up.
    An incomplete batch (not taken or not staged yet) has no counts."""
    records_read: int | None = None
    changes_new: int | None = None
    duplicates_skipped: int | None = None
    quarantined: int | None = None
    unchanged: int | None = None  # a snapshot batch's rows equal to the table's
    derived_deletes: int | None = None  # a snapshot batch's deletes of keys no row was read for
    staged: int | None = None
    superseded_in_batch: int | None = None
    counted_from_commits: tuple[str, ...] | None = None  # figures a trim took the rows of: as committed
    # inferred columns the batch widened to text (a value that is not a number): allowed, and said
    widened_to_text: tuple[str, ...] | None = None
    complete: bool
    adds_up: bool | None = None


def batch_accounting(cfg: Config, table: TableConfig, batch_seq: int) -> BatchAccounting:
    """Every record of a batch is a distinct change, a duplicate or quarantined; every
    distinct change is staged or superseded within the batch; the counts must add up.

    A batch that maintenance trimmed out of `changes` (or down to each key's latest in
    `staging`) no longer has its rows there: its figures are then those its ingest and staging
    commits recorded, and `counted_from_commits` says which."""
    table_dir = cfg.table_dir(table.name)
    # each table's log read once: the snapshot serves the commit, the trim and the count
    changes, staging = (delta.snapshot(path(table_dir, name)) for name in (CHANGES, STAGING))
    ingest = delta.step_commit(changes, CHANGES, batch_seq) if changes is not None else None
    staged = delta.step_commit(staging, STAGING, batch_seq) if staging is not None else None
    if changes is None or staging is None or ingest is None or staged is None:
        return BatchAccounting(complete=False)
    opened = {CHANGES: changes, STAGING: staging}
    n = {k: int(v) for k, v in ingest.items() if v.isdigit()}
    s = {k: int(v) for k, v in staged.items() if v.isdigit()}
    recorded: list[str] = []

    def rows(name: str, trim: str, figure: str, at_staging: int) -> int:
        """The batch's rows in `name`, or, once a trim took them, what staging recorded of them."""
        if delta.txn_version(opened[name], trim) >= batch_seq:
            recorded.append(figure)
            return at_staging
        return _rows_of_batch(opened[name], batch_seq)

    read, duplicates = n["records_read"], n["duplicates_skipped"]
    changes_new = rows(CHANGES, CHANGES_TRIM, "changes_new", s["changes"])
    quarantined = _rows_of_batch(path(table_dir, QUARANTINE), batch_seq) + replay.replay_quarantined_count(table_dir, batch_seq)
    # a snapshot batch's (engine/snapshot.py): rows equal to the table's, and deletes of keys no row was read for
    unchanged, derived_deletes = n.get("unchanged", 0), n.get("derived_deletes", 0)
    staged_rows = rows(STAGING, STAGING_TRIM, "staged", s["staged"])
    return BatchAccounting(
        records_read=read, changes_new=changes_new, duplicates_skipped=duplicates, quarantined=quarantined,
        unchanged=unchanged, derived_deletes=derived_deletes, staged=staged_rows,
        superseded_in_batch=s["superseded_in_batch"], counted_from_commits=tuple(recorded) or None,
        widened_to_text=tuple(json.loads(ingest["widened_to_text"])) if ingest.get("widened_to_text") else None,
        complete=True,
        adds_up=(read + derived_deletes == changes_new + duplicates + unchanged + quarantined
                 and changes_new == staged_rows + s["superseded_in_batch"]))


@dataclass(frozen=True, kw_only=True)
class BatchQuarantine(Figures):
    """The `quarantine_within_limit` check's report: what a batch sent to quarantine, against the
    table's `quarantine_limit`. Reasons name columns and kinds; the records' text stays in the
    quarantine table."""
    records_read: int
    quarantined: int
    limit: float | None  # the share at which the batch fails; None: the table accepts any
    within_limit: bool
    reasons: dict[str, int] = dataclasses.field(default_factory=dict)  # reason -> records (the most common)
    first: tuple[str, ...] = ()  # the first quarantined records: `file line N: reason`


FIRST_REASONS = 3
REASONS_COUNTED = 20


def over_limit(records_read: int, quarantined: int, limit: float | None) -> bool:
    """Whether a batch sent too much to quarantine: at least `limit` of its records (none when the
    table accepts any batch, or the batch read nothing)."""
    return limit is not None and quarantined > 0 and quarantined >= limit * records_read


def batch_quarantine(cfg: Config, table: TableConfig, batch_seq: int) -> BatchQuarantine:
    """What the batch sent to quarantine, its reasons counted, and whether that is within the
    table's `quarantine_limit`. A batch not taken yet has read nothing."""
    table_dir = cfg.table_dir(table.name)
    ingest = delta.step_commit(path(table_dir, CHANGES), CHANGES, batch_seq) or {}
    read = int(ingest.get("records_read", 0))
    if ingest.get("quarantined") == "0":  # as its ingest committed it: nothing to count
        return BatchQuarantine(records_read=read, quarantined=0, limit=table.quarantine_limit, within_limit=True)
    # a replay's records that failed again stay where they were quarantined first (engine/replay.py)
    again = replay.replay_quarantined_count(table_dir, batch_seq)
    where = f"_cdc_batch_seq = {int(batch_seq)}"
    q = path(table_dir, QUARANTINE)
    counted = delta.query(q, f"SELECT _cdc_reason AS reason, count(*) AS n FROM t WHERE {where} "
                             f"GROUP BY _cdc_reason ORDER BY n DESC, reason LIMIT {REASONS_COUNTED}")
    first = delta.query(q, f"SELECT _cdc_file, _cdc_line, _cdc_reason FROM t WHERE {where} "
                           f"ORDER BY _cdc_file, _cdc_line LIMIT {FIRST_REASONS}")
    reasons = {r["reason"]: int(r["n"]) for r in counted.to_pylist()} if counted is not None else {}
    quarantined = _rows_of_batch(q, batch_seq) + again
    firsts = first.to_pylist() if first is not None else []
    if again:
        firsts += replay.first_replay_reasons(table_dir, batch_seq, FIRST_REASONS)
        counted = delta.query(path(table_dir, REPLAYS), f"SELECT _cdc_reason AS reason, count(*) AS n FROM t WHERE "
                                                        f"replayed_in = {int(batch_seq)} AND _cdc_reason IS NOT NULL "
                                                        f"GROUP BY _cdc_reason LIMIT {REASONS_COUNTED}")
        reasons.update({r["reason"]: int(r["n"]) for r in counted.to_pylist()} if counted is not None else {})
    return BatchQuarantine(
        records_read=read, quarantined=quarantined, limit=table.quarantine_limit,
        within_limit=not over_limit(read, quarantined, table.quarantine_limit), reasons=reasons,
        first=tuple(f"{r['_cdc_file']} line {r['_cdc_line']}: {r['_cdc_reason']}" for r in firsts[:FIRST_REASONS]))


@dataclass(frozen=True)
class ExportRow:
    line: int
    row: dict


def read_export(export_path: str, keys, columns: dict | None = None, rename: dict | None = None) -> tuple[list, list]:
    """The export's rows (each with its `line` and `row`, columns under their target names: the
    table's `rename:`), and the lines that could not be read (reported, never skipped silently)."""
    if export_path.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        export = pq.read_table(export_path)
        if rename:
            export = export.rename_columns([rename.get(c, c) for c in export.column_names])
        return [ExportRow(n, r) for n, r in enumerate(export.to_pylist(), start=1)], []
    with open(export_path, "rb") as fh:
        data = fh.read()
    items = list(parse_snapshot(list(keys), os.path.basename(export_path), data, columns, rename))
    return [c for c in items if hasattr(c, "row")], [c for c in items if not hasattr(c, "row")]


def reconciliation(cfg: Config, table: TableConfig) -> reconcile.Report:
    if table.reconcile_with is None:
        raise ConfigError(f"table {table.name}: no export to reconcile with (reconcile_with: is not set)")
    target = delta.read_arrow(path(cfg.table_dir(table.name), TARGET))
    rows = target.to_pylist() if target is not None else []
    # the export holds the source's live rows: a row kept for a deleted key (rules.md#rule-12) is none of them
    rows = [r for r in rows if not r.get(DELETED)]
    source, unreadable = read_export(table.reconcile_with, table.keys, table.columns, table.rename)
    report = reconcile.compare(rows, [s.row for s in source], table.keys, [s.line for s in source])
    samples = tuple(f"line {r.line}: {r.reason}" for r in unreadable[:5])
    return dataclasses.replace(report, unreadable_source_rows=len(unreadable), sample_unreadable_source_rows=samples)



def live_reconciliation(cfg: Config, table: TableConfig) -> postgres_reconcile.LiveReconciliation:
    """A PostgreSQL source's target compared with the live source table, pending changes left out."""
    return postgres_reconcile.reconcile_live(table, cfg.table_dir(table.name))
