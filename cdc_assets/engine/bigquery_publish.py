"""`target` -> BigQuery: `publish: {bigquery: project.dataset.table}` keeps a BigQuery table equal to
the target, one MERGE per publish.

A publish costs what its batches cost. The keys to send are those `staging` holds for the
batches applied since the last publish; their current rows are read from the target (delta-rs
skips the files whose `_cdc_key` range holds none of them), and a key the target no longer holds
is a delete. The rows go to a staging table beside the destination (`<table>__cdc_publish_staging`,
replaced each time) by Parquet load jobs, then one MERGE deletes, updates the rows whose values
differ and inserts the new ones; a MERGE of rows already there changes nothing.

How far publish got is the `published` Delta table in the warehouse (one row per publish, its
commit marked with the batch it reached, as the other steps mark theirs). It is written after
the MERGE, so a crash in between re-sends those keys, which the MERGE absorbs. A first publish,
a new destination, a destination table created by this publish, and a target rewritten outside
an apply since (a partition rebuild or a type widening) send the whole target, in chunks, and
the MERGE also deletes the destination rows the target does not hold.

The destination holds the target's source columns under their own names, with BigQuery types
that keep their values (`bigquery_type`); the `_cdc_*` bookkeeping columns stay in the warehouse:
the key and ordering texts repeat the key columns in an encoded form, and batch and event id
describe how a row arrived, not the row. It is clustered by the key columns BigQuery can cluster
by (the first four) and partitioned by day on the target's partition column when that is a
single date or timestamp column; any other partitioning stays the target's own.

Functions take a google.cloud.bigquery Client; nothing here knows Dagster.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import io
import math
import random
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from ..core import names
from ..core import target as shape
from ..core.changes import TRUNCATE
from ..core.config import Config, TableConfig
from ..core.errors import TerminalError
from ..core.values import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMP_NTZ,
    decimal_parts,
    decode_row,
)
from . import delta, faults, storage
from .partition_layout import RELAYOUT
from .records import read_records
from .stage import latest_of_batch
from .step_results import PublishReconciliation, PublishResult
from .table_layout import STAGING, TARGET, path

PUBLISHED = "published"  # the ledger table, and the step name its commits carry
STAGING_SUFFIX = "__cdc_publish_staging"
DELETED = "_cdc_deleted"  # the staging table's flag: the key is to be deleted
CHUNK_ROWS = 500_000  # rows per load job when the whole target is sent
SMALL_TABLE = 50_000  # the check compares every row up to this many, else a sample
SAMPLE_ROWS = 1_000
TIMEOUT = 600.0  # seconds any one BigQuery call may take, retries included
MAX_CLUSTERING = 4  # BigQuery clusters by at most four columns
_UNCLUSTERABLE = (DOUBLE, BINARY)  # FLOAT64 and BYTES columns cannot cluster a table
_SCAN_KEYS = 100_000  # past this many keys, one scan of the target beats per-chunk lookups

_TYPES = {BOOLEAN: "BOOL", INT: "INT64", LONG: "INT64", DOUBLE: "FLOAT64", STRING: "STRING", DATE: "DATE",
          TIMESTAMP: "TIMESTAMP", TIMESTAMP_NTZ: "DATETIME", BINARY: "BYTES"}
# Legacy names the API may report for a column's type.
_ALIASES = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL", "BIGDECIMAL": "BIGNUMERIC"}
LEDGER_FIELDS = (("batch_seq", "long"), ("target_version", "long"), ("destination", "string"), ("mode", "string"),
                 ("rows_sent", "long"), ("deletes_sent", "long"), ("rows_affected", "long"),
                 ("published_at", "string"))


class BigQueryPublishError(TerminalError, RuntimeError):
    """A BigQuery call of a publish (or of its check) failed: the message names the table, the
    destination, the statement and BigQuery's own reason, on one line."""

    def __init__(self, table: str, destination: str, statement: str, cause: str):
        super().__init__(f"table {table}: BigQuery {destination}: {statement} failed: {cause}")
        self.table, self.destination, self.statement, self.cause = table, destination, statement, cause


def destination(table: TableConfig) -> str | None:
    return (table.publish or {}).get("bigquery")


def staging_table(dest: str) -> str:
    return dest + STAGING_SUFFIX


# ---- types and shape -------------------------------------------------------------------

def bigquery_type(type_: str) -> tuple[str, int | None, int | None]:
    """(BigQuery type, precision, scale) for a target column type. A decimal is NUMERIC when
    NUMERIC(p,s) can hold it (scale at most 9, at most 29 integer digits), else BIGNUMERIC(p,s);
    both keep the exact precision, so BigQuery refuses a value the target could not hold either."""
    parts = decimal_parts(type_)
    if parts:
        p, s = parts
        return ("NUMERIC" if s <= 9 and p - s <= 29 else "BIGNUMERIC"), p, s
    return _TYPES.get(type_, "STRING"), None, None


def published_columns(dt_: DeltaTable) -> dict[str, str]:
    """The target's source columns and their types: everything but the `_cdc_*` bookkeeping."""
    return {f.name: shape.column_type(f.type) for f in pa.schema(dt_.schema()) if not f.name.startswith("_cdc_")}


def soft_deletes(dt_: DeltaTable) -> bool:
    """Whether the target keeps deleted keys' rows, flagged `_cdc_deleted` (rules.md#rule-12): the copy
    holds the live rows only, so a flagged row is sent as a delete (the staging table's flag is
    the same column)."""
    return any(f.name == DELETED for f in dt_.schema().fields)


def bigquery_schema(columns: dict[str, str], keys=(), nullable_keys: bool = False) -> list:
    from google.cloud import bigquery

    out = []
    for c, t in columns.items():
        type_, precision, scale = bigquery_type(t)
        mode = "REQUIRED" if c in keys and not nullable_keys else "NULLABLE"
        if precision is None or scale is None:  # the library's default leaves them unset
            out.append(bigquery.SchemaField(c, type_, mode=mode))
        else:
            out.append(bigquery.SchemaField(c, type_, mode=mode, precision=precision, scale=scale))
    return out


def layout(table: TableConfig, columns: dict[str, str]) -> dict:
    """Clustering and partitioning of the destination table (see the module's text)."""
    clustering = [k for k in table.keys if columns.get(k) not in _UNCLUSTERABLE][:MAX_CLUSTERING]
    partition = None
    if len(table.partition_by) == 1 and columns.get(table.partition_by[0]) in (DATE, TIMESTAMP, TIMESTAMP_NTZ):
        partition = table.partition_by[0]
    return {"clustering": clustering, "partition_by_day": partition}


def _arrow_schema(columns: dict[str, str], with_deleted: bool = False) -> pa.Schema:
    fields = [pa.field(c, shape.arrow_type(t)) for c, t in columns.items()]
    return pa.schema(fields + ([pa.field(DELETED, pa.bool_())] if with_deleted else []))


def _quote(name: str) -> str:
    return names.bigquery(name)


def _delta_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def merge_statement(dest: str, columns: dict[str, str], keys, delete_others: bool) -> str:
    """One MERGE from the staging table: deletes, updates of rows whose values differ (so a
    re-run affects no row), inserts; with `delete_others` (the whole target was sent), the
    destination rows the target does not hold are deleted too."""
    on = " AND ".join(f"T.{_quote(k)} = S.{_quote(k)}" for k in keys)
    values = [c for c in columns if c not in keys]
    names = ", ".join(_quote(c) for c in columns)
    sql = [f"MERGE {_quote(dest)} T", f"USING {_quote(staging_table(dest))} S", f"ON {on}",
           f"WHEN MATCHED AND S.{DELETED} THEN DELETE"]
    if values:
        differ = " OR ".join(f"T.{_quote(c)} IS DISTINCT FROM S.{_quote(c)}" for c in values)
        sets = ", ".join(f"{_quote(c)} = S.{_quote(c)}" for c in values)
        sql.append(f"WHEN MATCHED AND ({differ}) THEN UPDATE SET {sets}")
    sql.append(f"WHEN NOT MATCHED AND NOT S.{DELETED} THEN INSERT ({names}) "
               f"VALUES ({', '.join('S.' + _quote(c) for c in columns)})")
    if delete_others:
        sql.append("WHEN NOT MATCHED BY SOURCE THEN DELETE")
    return "\n".join(sql)


# ---- the ledger and what is pending --------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    mode: str  # "nothing", "changes" (the keys of batches after `from_batch`) or "all"
    reached: int  # the batch the target reached
    target_version: int  # the target snapshot this publish reads
    from_batch: int  # the batch the last publish reached (-1: none)
    reason: str


def ledger_path(cfg: Config, table: TableConfig) -> str:
    return path(cfg.table_dir(table.name), PUBLISHED)


def last_publish(cfg: Config, table: TableConfig) -> dict | None:
    """The newest publish's figures (batch_seq, target_version, destination, mode), or None."""
    return delta.step_commit(ledger_path(cfg, table), PUBLISHED)


# ... and a target laid out again (engine/partition_layout.py) holds the same rows.
ROWLESS_STEPS = {"properties", "compaction", "zorder", "vacuum", RELAYOUT}


def plan(cfg: Config, table: TableConfig) -> Plan:
    """What the next publish sends. Reads Delta only: cheap enough for `run` to ask each time."""
    target = delta.open_table(path(cfg.table_dir(table.name), TARGET))
    if target is None:
        return Plan("nothing", -1, -1, -1, "the target does not exist yet")
    reached, version = delta.txn_version(target, TARGET), target.version()
    last = last_publish(cfg, table)
    if last is None or last.get("destination") != destination(table):
        return Plan("all", reached, version, -1, "first publish to this destination")
    done_batch, done_version = int(last["batch_seq"]), int(last["target_version"])
    if version <= done_version:
        return Plan("nothing", reached, version, done_batch, "published up to date")
    # Commits since the last publish: an apply's commits say which batches changed which keys;
    # any other commit (a rebuild, a widening) may have changed any row.
    # A change of table properties (the change data feed switched) and maintenance change no row.
    since = target.history(version - done_version)
    steps = {h.get("cdc.step") for h in since} - ROWLESS_STEPS
    if steps - {TARGET}:
        other = ", ".join(sorted(map(str, steps - {TARGET})))
        return Plan("all", reached, version, done_batch, f"target rewritten since ({other})")
    if any(h.get("cdc.truncate") == "true" for h in since):
        # a truncate's deletes are not keys staging lists
        return Plan("all", reached, version, done_batch, "a truncate applied since")
    if reached <= done_batch:
        return Plan("nothing", reached, version, done_batch, "no batch applied since")
    return Plan("changes", reached, version, done_batch, f"batches {done_batch + 1}..{reached}")


def pending(cfg: Config, table: TableConfig) -> bool:
    return destination(table) is not None and plan(cfg, table).mode != "nothing"


def _record(cfg: Config, table: TableConfig, p: Plan, mode: str, sent: PublishResult) -> None:
    row = {"batch_seq": p.reached, "target_version": p.target_version, "destination": destination(table),
           "mode": mode, "rows_sent": sent.rows_sent, "deletes_sent": sent.deletes_sent,
           "rows_affected": sent.rows_affected,
           "published_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    data = pa.Table.from_pylist([row], schema=delta.arrow_schema(LEDGER_FIELDS))
    props = delta.commit_props(PUBLISHED, p.reached, {"target_version": p.target_version,
                                                      "destination": destination(table), "mode": mode})
    ledger = ledger_path(cfg, table)
    if delta.open_table(ledger) is None:
        delta.create(ledger, data, commit_properties=props)
    else:
        # A whole-target publish after a rebuild records the batch it had reached already.
        write_deltalake(ledger, data, mode="append", commit_properties=props,
                        storage_options=storage.delta_options(ledger))
    delta.compact_if_fragmented(ledger)  # one small file per publish would slow every later read


# ---- rows to send ---------------------------------------------------------------------

def _rows_with_keys(dt_: DeltaTable, columns: dict[str, str], keys: list[str]) -> pa.Table:
    """The target rows (of the planned snapshot) whose `_cdc_key` is in `keys`, with `_cdc_key`.
    Keys go in sorted chunks, each with its range: target files are sorted by key, so delta-rs
    rules out by statistics every file whose `_cdc_key` range misses the chunk."""
    import pyarrow.dataset as ds
    from deltalake.query import QueryBuilder

    schema = pa.schema(list(_arrow_schema(columns)) + [pa.field("_cdc_key", pa.string())])
    names = ", ".join(_delta_quote(n) for n in schema.names)
    if not keys:
        return schema.empty_table()
    if len(keys) > _SCAN_KEYS:
        wanted = pa.array(keys, pa.string())
        fs, paths = storage.arrow_paths(dt_.file_uris())
        dataset = ds.dataset(paths, format="parquet", schema=schema, filesystem=fs)
        return dataset.to_table(columns=schema.names, filter=pc.is_in(ds.field("_cdc_key"), value_set=wanted))
    keys = sorted(keys)
    parts = []
    qb = QueryBuilder().register("t", dt_)
    for i in range(0, len(keys), delta.IN_LIST_LIMIT):
        chunk = keys[i:i + delta.IN_LIST_LIMIT]
        where = (f"_cdc_key >= {delta.sql_text(chunk[0])} AND _cdc_key <= {delta.sql_text(chunk[-1])} "
                 f"AND _cdc_key IN ({', '.join(delta.sql_text(k) for k in chunk)})")
        parts.append(pa.table(qb.execute(f"SELECT {names} FROM t WHERE {where}")).cast(schema))
    return pa.concat_tables(parts)


def _key_values(records: pa.Table, columns: dict[str, str], keys) -> pa.Table:
    """Typed key columns of staged changes, converted as apply converts a change into a target
    row: a delete's key values, as the destination holds them, come from its own change."""
    from .target_typing import cast_typed, target_rows

    key_columns = {k: columns[k] for k in keys}
    imaged = pc.is_valid(records["_cdc_row"])
    image_rows = records.filter(imaged).to_pylist()
    typed = [target_rows(image_rows, key_columns, [decode_row(r["_cdc_row"]) for r in image_rows])]
    plain = records.filter(pc.invert(imaged))
    if plain.num_rows:
        typed.append(cast_typed(plain, key_columns))
    return pa.concat_tables([t.select(list(key_columns)).cast(_arrow_schema(key_columns)) for t in typed])


def changed_rows(cfg: Config, table: TableConfig, dt_: DeltaTable, columns: dict[str, str], p: Plan) -> pa.Table:
    """Rows to send for the batches after the last publish: each changed key's current row,
    or its key values flagged deleted when the target no longer holds it."""
    table_dir = cfg.table_dir(table.name)
    staged = read_records(path(table_dir, STAGING),
                          f"_cdc_batch_seq > {p.from_batch} AND _cdc_batch_seq <= {p.reached}")
    latest = latest_of_batch(staged)
    latest = latest.filter(pc.not_equal(latest["_cdc_op"], TRUNCATE))  # no key (`plan` sends all after one)
    keys = latest["_cdc_key"].to_pylist()
    soft = soft_deletes(dt_)
    current = _rows_with_keys(dt_, {**columns, DELETED: "boolean"} if soft else columns, keys)
    gone = latest.filter(pc.invert(pc.is_in(latest["_cdc_key"], value_set=current["_cdc_key"].combine_chunks())))
    live = current.drop_columns(["_cdc_key"])
    live = _flagged(live) if soft else _live(live)
    deleted = _key_values(gone, columns, table.keys) if gone.num_rows else None
    if deleted is None or deleted.num_rows == 0:
        return live
    arrays = [deleted[c] if c in table.keys else pa.nulls(deleted.num_rows, shape.arrow_type(t))
              for c, t in columns.items()]
    arrays.append(pa.array([True] * deleted.num_rows, pa.bool_()))
    return pa.concat_tables([live, pa.Table.from_arrays(arrays, schema=_arrow_schema(columns, with_deleted=True))])


def _whole_target(dt_: DeltaTable, columns: dict[str, str]):
    """The target's rows in chunks of at most CHUNK_ROWS, each flagged live (or, soft-deleted, not)."""
    soft = soft_deletes(dt_)
    schema = _arrow_schema({**columns, DELETED: "boolean"} if soft else columns)
    flag = _flagged if soft else _live
    pending_batches, n = [], 0
    for batch in dt_.to_pyarrow_dataset().to_batches(columns=schema.names, batch_size=CHUNK_ROWS):
        pending_batches.append(batch)
        n += batch.num_rows
        if n >= CHUNK_ROWS:
            yield flag(pa.Table.from_batches(pending_batches).cast(schema))
            pending_batches, n = [], 0
    if pending_batches:
        yield flag(pa.Table.from_batches(pending_batches).cast(schema))


def _live(rows: pa.Table) -> pa.Table:
    return rows.append_column(DELETED, pa.array([False] * rows.num_rows, pa.bool_()))


def _flagged(rows: pa.Table) -> pa.Table:
    """A soft-delete target's rows (DELETED last): a soft-deleted row is a delete to the copy."""
    return rows.set_column(rows.schema.get_field_index(DELETED), DELETED, pc.fill_null(rows[DELETED], False))


# ---- BigQuery calls ---------------------------------------------------------------------

class _Calls:
    """Each BigQuery call of one publish, with one deadline and one way of failing."""

    def __init__(self, client, table: TableConfig, dest: str, timeout: float):
        from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

        self.client, self.table, self.dest, self.timeout = client, table, dest, timeout
        self.retry = DEFAULT_RETRY.with_deadline(timeout)
        self.job_retry = DEFAULT_JOB_RETRY.with_deadline(timeout)

    def __call__(self, statement: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except BigQueryPublishError:
            raise
        except Exception as e:  # noqa: BLE001 - every failure is reported as this publish's
            cause = " ".join(f"{type(e).__name__}: {e}".split())
            raise BigQueryPublishError(self.table.name, self.dest, statement, cause[:2000]) from None

    def query(self, statement: str, sql: str, job_config=None):
        def run():
            job = self.client.query(sql, job_config=job_config, retry=self.retry, job_retry=self.job_retry,
                                    timeout=self.timeout)
            job.result(retry=self.retry, timeout=self.timeout)
            return job
        return self(statement, run)

    def rows(self, statement: str, sql: str, job_config=None) -> list[dict]:
        job = self.query(statement, sql, job_config)
        return self(statement, lambda: [dict(r.items()) for r in job.result(retry=self.retry, timeout=self.timeout)])


def _base_type(field) -> str:
    t = (field.field_type or "").upper()
    return _ALIASES.get(t, t)


def ensure_table(calls: _Calls, table: TableConfig, columns: dict[str, str]) -> bool:
    """Create the destination when it is missing (True), else add the target's new columns to it.
    A column whose BigQuery type differs from the target's fails the publish, naming it."""
    from google.api_core.exceptions import NotFound
    from google.cloud import bigquery

    client, dest = calls.client, calls.dest
    def get():
        try:
            return client.get_table(dest, retry=calls.retry, timeout=calls.timeout)
        except NotFound:
            return None
    existing = calls(f"get table {dest}", get)
    if existing is None:
        new = bigquery.Table(dest, schema=bigquery_schema(columns, table.keys))
        shape_ = layout(table, columns)
        if shape_["clustering"]:
            new.clustering_fields = shape_["clustering"]
        if shape_["partition_by_day"]:
            new.time_partitioning = bigquery.TimePartitioning(type_=bigquery.TimePartitioningType.DAY,
                                                              field=shape_["partition_by_day"])
        calls(f"create table {dest}", client.create_table, new, retry=calls.retry, timeout=calls.timeout)
        return True
    have = {f.name: f for f in existing.schema}
    for c, t in columns.items():
        if c in have and _base_type(have[c]) != bigquery_type(t)[0]:
            raise BigQueryPublishError(table.name, dest, "schema check",
                                       f"column {c} is {_base_type(have[c])} in BigQuery but {bigquery_type(t)[0]} "
                                       f"in the target ({t}); drop the BigQuery table to publish it again whole")
    for c, t in columns.items():
        if c not in have:
            # DDL rather than a schema patch: the emulator's tables.patch leaves its storage as it was.
            calls.query(f"add column {c} to {dest}",
                        f"ALTER TABLE {_quote(dest)} ADD COLUMN IF NOT EXISTS {_quote(c)} {_ddl_type(t)}")
    return False


def _ddl_type(type_: str) -> str:
    name, precision, scale = bigquery_type(type_)
    return f"{name}({precision},{scale})" if precision is not None else name


def load_staging(calls: _Calls, table: TableConfig, columns: dict[str, str], chunks) -> tuple[int, int]:
    """Replace the staging table with `chunks` of rows, one Parquet load job each: (rows, deletes)."""
    from google.cloud import bigquery

    client, stage = calls.client, staging_table(calls.dest)
    schema = bigquery_schema(columns, nullable_keys=True) + [bigquery.SchemaField(DELETED, "BOOL")]
    calls(f"drop table {stage}", client.delete_table, stage, not_found_ok=True, retry=calls.retry,
          timeout=calls.timeout)
    fresh = bigquery.Table(stage, schema=schema)
    # A staging table a crash leaves behind removes itself.
    fresh.expires = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    calls(f"create table {stage}", client.create_table, fresh, retry=calls.retry, timeout=calls.timeout)
    job_config = bigquery.LoadJobConfig(source_format=bigquery.SourceFormat.PARQUET, schema=schema,
                                        write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
                                        decimal_target_types=["NUMERIC", "BIGNUMERIC"])
    rows = deletes = 0
    for chunk in chunks:
        if chunk.num_rows == 0:
            continue
        buf = io.BytesIO()
        pq.write_table(chunk, buf)
        buf.seek(0)

        def load(data=buf):
            job = client.load_table_from_file(data, stage, job_config=job_config, timeout=calls.timeout)
            job.result(retry=calls.retry, timeout=calls.timeout)
        calls(f"load job into {stage}", load)
        rows += chunk.num_rows
        deletes += pc.sum(chunk[DELETED]).as_py() or 0
    return rows, deletes


def publish(client, cfg: Config, table: TableConfig, timeout: float = TIMEOUT) -> PublishResult:
    """Bring the destination up to the target: the changed keys, or the whole target (see `plan`)."""
    t0 = time.time()
    dest = destination(table)
    if dest is None:
        return PublishResult(not_published=True)
    p = plan(cfg, table)
    if p.mode == "nothing":
        return PublishResult(nothing_new=True, published_batch=p.from_batch, reason=p.reason)
    calls = _Calls(client, table, dest, timeout)
    dt_ = delta.load(path(cfg.table_dir(table.name), TARGET), version=p.target_version)
    columns = published_columns(dt_)
    missing = [k for k in table.keys if k not in columns]
    if missing:
        raise BigQueryPublishError(table.name, dest, "schema check", f"key columns {missing} are not in the target")
    bq, as_published = _bigquery_names(table, dest, columns)
    created = ensure_table(calls, as_published, {bq[c]: t for c, t in columns.items()})
    mode = "all" if created else p.mode
    reason = "the BigQuery table was created" if created and p.mode != "all" else p.reason
    chunks = _whole_target(dt_, columns) if mode == "all" else [changed_rows(cfg, table, dt_, columns, p)]
    sent, deletes = load_staging(calls, as_published, {bq[c]: t for c, t in columns.items()},
                                 (chunk.rename_columns([bq.get(n, n) for n in chunk.column_names]) for chunk in chunks))
    faults.point("publish.loaded")
    affected = 0
    sql = merge_statement(dest, {bq[c]: t for c, t in columns.items()}, as_published.keys,
                          delete_others=(mode == "all"))
    if sent or mode == "all":
        job = calls.query(f"MERGE into {dest}", sql)
        affected = int(job.num_dml_affected_rows or 0)
    faults.point("publish.merged")  # a crash here re-sends these keys next time: the MERGE absorbs them
    done = PublishResult(mode=mode, reason=reason, batches=f"{p.from_batch + 1}..{p.reached}",
                         published_batch=p.reached, target_version=p.target_version, rows_sent=sent,
                         deletes_sent=deletes, rows_affected=affected, destination=dest, created=created)
    _record(cfg, table, p, mode, done)
    return dataclasses.replace(done, seconds=round(time.time() - t0, 2))


def _bigquery_names(table: TableConfig, dest: str, columns: dict[str, str]) -> tuple[dict[str, str], TableConfig]:
    """Each target column's BigQuery name (core/names.bigquery_name), and the table's keys and
    partition columns under those names; two columns sharing one fail the publish, naming them."""
    try:
        bq = names.bigquery_names(columns, table.name)
    except ValueError as e:
        raise BigQueryPublishError(table.name, dest, "schema check", str(e)) from None
    return bq, dataclasses.replace(table, keys=tuple(bq[k] for k in table.keys),
                                   partition_by=tuple(bq.get(c, c) for c in table.partition_by))


# ---- the reconciliation check -----------------------------------------------------------

def _as_published(rows: pa.Table, bq: dict[str, str]) -> pa.Table:
    return rows.rename_columns([bq.get(n, n) for n in rows.column_names])


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def reconcile(client, cfg: Config, table: TableConfig, sample: int = SAMPLE_ROWS, small: int = SMALL_TABLE,
              timeout: float = TIMEOUT) -> PublishReconciliation:
    """The destination against the target snapshot the last publish sent: row counts, and every
    row (up to `small` rows) or `sample` rows at random, column by column. `discrepancies` is 0
    when they agree."""
    dest = destination(table)
    last = last_publish(cfg, table)
    if dest is None or last is None or last.get("destination") != dest:
        exists = delta.open_table(path(cfg.table_dir(table.name), TARGET)) is not None
        return PublishReconciliation(published=False, discrepancies=1 if exists else 0)
    calls = _Calls(client, table, dest, timeout)
    dt_ = delta.load(path(cfg.table_dir(table.name), TARGET), version=int(last["target_version"]))
    delta_columns = published_columns(dt_)
    bq, as_published = _bigquery_names(table, dest, delta_columns)
    columns = {bq[c]: t for c, t in delta_columns.items()}
    keys = list(as_published.keys)
    # the copy holds the live rows: a soft-deleted row is none of them
    live_only = pc.invert(pc.coalesce(pc.field(DELETED), pa.scalar(False))) if soft_deletes(dt_) else None
    n_target = dt_.count() if live_only is None else \
        dt_.to_pyarrow_dataset().count_rows(filter=live_only)
    n_bq = calls.rows(f"count rows of {dest}", f"SELECT COUNT(*) AS n FROM {_quote(dest)}")[0]["n"]
    select = ", ".join(_quote(c) for c in columns)
    if n_target <= small:
        expected = _as_published(dt_.to_pyarrow_dataset().to_table(columns=list(delta_columns), filter=live_only),
                                 bq).to_pylist()
        found = calls.rows(f"read {dest}", f"SELECT {select} FROM {_quote(dest)}")
        how = "all rows"
    else:
        key_rows = dt_.to_pyarrow_dataset().to_table(columns=["_cdc_key"], filter=live_only)
        picks = sorted(random.sample(range(key_rows.num_rows), sample))
        wanted = key_rows.take(picks)["_cdc_key"].to_pylist()
        expected = _as_published(_rows_with_keys(dt_, delta_columns, wanted).drop_columns(["_cdc_key"]), bq).to_pylist()
        first = keys[0]
        from google.cloud import bigquery
        param = bigquery.ArrayQueryParameter("k", bigquery_type(columns[first])[0],
                                             sorted({r[first] for r in expected}))
        found = calls.rows(f"read a sample of {dest}",
                           f"SELECT {select} FROM {_quote(dest)} WHERE {_quote(first)} IN UNNEST(@k)",
                           bigquery.QueryJobConfig(query_parameters=[param]))
        how = f"sample of {len(expected)}"
    mine = {tuple(r[k] for k in keys): r for r in expected}
    theirs = {tuple(r[k] for k in keys): r for r in found}
    missing = [k for k in mine if k not in theirs]
    extra = [k for k in theirs if k not in mine] if how == "all rows" else []
    differing, differing_columns = [], set()
    for k, row in mine.items():
        other = theirs.get(k)
        if other is None:
            continue
        cols = [c for c in columns if not _same(row[c], other.get(c))]
        if cols:
            differing.append(k)
            differing_columns.update(cols)
    count_diff = abs(n_target - n_bq)
    return PublishReconciliation(
        published=True, compared=how, target_version=int(last["target_version"]), rows_target=n_target,
        rows_bigquery=n_bq, missing_in_bigquery=len(missing), not_in_target=len(extra),
        differing_rows=len(differing), differing_columns=tuple(sorted(differing_columns)),
        discrepancies=count_diff + len(missing) + len(extra) + len(differing))
