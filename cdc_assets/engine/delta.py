"""Delta tables through delta-rs, and their snapshots as Spark DataFrames."""
from __future__ import annotations

import os
import threading
from typing import overload

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from ..core import names
from ..core.errors import TransientError
from . import faults, storage

APP = "cdc_assets"

_ARROW = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_(), "double": pa.float64(), "binary": pa.binary()}


def arrow_schema(fields) -> pa.Schema:
    """(name, type) pairs as an Arrow schema; a schema given is that schema."""
    if isinstance(fields, pa.Schema):
        return fields
    return pa.schema([(name, _ARROW[t]) for name, t in fields])


def spark_schema(fields) -> str:
    return ", ".join(f"{names.spark(name)} {t}" for name, t in fields)


class CommitConflict(TransientError):
    """Another writer committed to the table first: the step must re-run from its idempotence check."""


def load(path: str, version: int | None = None) -> DeltaTable:
    """The table at `path` (a folder or an object-store URL), with its store's options."""
    return DeltaTable(path, version=version, storage_options=storage.delta_options(path))


def add_columns(path: str, dt: DeltaTable, columns: pa.Schema, step: str | None = None) -> DeltaTable:
    """The table with every field of `columns` it lacks added (nullable, at the end, as a schema
    merge adds them), in a version of its own without rows (marked as `step`'s when given); the
    table as it is then. delta-rs commits written files only under the table's own schema."""
    from deltalake.schema import Field

    have = set(dt.schema().to_arrow().names)
    new = [Field.from_arrow(f.with_nullable(True)) for f in columns if f.name not in have]
    if not new:
        return dt
    dt.alter.add_columns(new, commit_properties=CommitProperties(custom_metadata={"cdc.step": step}) if step else None)
    return load(path)


def open_table(path: str | DeltaTable) -> DeltaTable | None:
    """The table at `path`, or None without one; a DeltaTable given is that snapshot, as it is."""
    if isinstance(path, DeltaTable):
        return path
    try:
        return load(path)
    except TableNotFoundError:
        return None


# This thread's read-only snapshots of local tables (snapshot): the log's stamp each was read at.
_snapshots = threading.local()
SNAPSHOTS_KEPT = 64  # per thread: a table's state is small next to opening it again


def snapshot(path: str | DeltaTable) -> DeltaTable | None:
    """The table's current version for reading only (None without a table): one object serves every
    read of this thread until the table's log has a new commit, so a step reading a table in several
    places opens it once. Never write through it (a write moves the object to its new version under
    its other readers): writers use open_table. A DeltaTable given is that snapshot; an object
    store's table is opened each time (its log's stamp would cost a listing)."""
    if isinstance(path, DeltaTable):
        return path
    stamp = log_stamp(path)
    if stamp is None:
        return open_table(path)
    if stamp[0] < 0:
        return None
    kept = getattr(_snapshots, "tables", None)
    if kept is None or _snapshots.pid != os.getpid():  # a forked child never uses its parent's objects
        kept = _snapshots.tables = {}
        _snapshots.pid = os.getpid()
    seen = kept.get(path)
    if seen is not None and seen[0] == stamp:
        return seen[1]
    try:
        dt = load(path, version=stamp[0])
    except (DeltaError, TableNotFoundError):  # replaced since the look: read as it is now, not kept
        return open_table(path)
    kept.pop(path, None)
    if len(kept) >= SNAPSHOTS_KEPT:
        kept.pop(next(iter(kept)))  # the least recently opened
    kept[path] = (stamp, dt)
    return dt


def txn_version(dt: DeltaTable | None, step: str) -> int:
    """The last batch `step` committed as of this snapshot, recorded atomically with its data."""
    v = dt.transaction_version(f"{APP}.{step}") if dt is not None else None
    return -1 if v is None else int(v)


def step_version(path: str, step: str) -> int:
    return txn_version(snapshot(path), step)


# The newest commit seen of each local table: where the next look at its log starts.
_newest: dict[str, int] = {}
# Per (table, what was read of it): the log's stamp it was read at, and what it read.
_read_at: dict[tuple[str, str], tuple[tuple, object]] = {}


def log_stamp(path: str) -> tuple | None:
    """What identifies a local table's current version from its log's file names alone, no table
    opened: (version, inode and modification time of that commit file), (-1,) without a table; None
    on an object store, where this would cost a listing. A commit appears under its final name in
    one step (delta-rs renames it there), so a later look sees either the old stamp or the new one."""
    if storage.is_remote(path):
        return None
    log = os.path.join(path, "_delta_log")
    version = _newest.get(path)
    if version is None or not os.path.exists(_commit_file(log, version)):
        try:
            names = os.listdir(log)
        except FileNotFoundError:
            _newest.pop(path, None)
            return (-1,)
        found = [int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
        if not found:
            return (-1,)
        version = max(found)
    while os.path.exists(_commit_file(log, version + 1)):
        version += 1
    try:
        st = os.stat(_commit_file(log, version))
    except FileNotFoundError:  # the table was replaced meanwhile: the next look lists its log again
        _newest.pop(path, None)
        return log_stamp(path)
    _newest[path] = version
    return version, st.st_ino, st.st_mtime_ns


def _commit_file(log: str, version: int) -> str:
    return os.path.join(log, f"{version:020d}.json")


def _as_of_log(path: str, what: str, read):
    """`read(table)` (None without a table), read again only when the table's log has a commit
    this process has not read it at (an object store's table is read each time)."""
    stamp = log_stamp(path)
    if stamp is None:
        return read(open_table(path))
    if stamp[0] < 0:
        return read(None)
    seen = _read_at.get((path, what))
    if seen is not None and seen[0] == stamp:
        return seen[1]
    dt = snapshot(path)
    if dt is None or dt.version() != stamp[0]:  # replaced or moved on since the look: read, not kept
        return read(dt)
    value = read(dt)
    _read_at[(path, what)] = (stamp, value)
    return value


def step_version_cached(path: str, step: str) -> int:
    """`step_version`, reading the table only when its log has a commit this process has not read."""
    return _as_of_log(path, f"step {step}", lambda dt: txn_version(dt, step))


def table_version(path: str) -> int:
    """The table's latest version (-1 when there is no table); a local table's from its log's file names."""
    stamp = log_stamp(path)
    if stamp is not None:
        return stamp[0]
    dt = open_table(path)
    return -1 if dt is None else dt.version()


def table_id(path: str) -> str | None:
    """The table's id (a UUID, as text), None without a table; a local table is opened only when its
    log has a commit this process has not read (a new table at the same path has a new id)."""
    # delta-rs annotates the id as an int; it is the table's UUID
    return _as_of_log(path, "id", lambda dt: None if dt is None else str(dt.metadata().id))


def file_stats(dt: DeltaTable | None) -> tuple[int, int, int]:
    """The files, bytes and rows of the table's current version, summed over its log's add actions
    (rows from their statistics): no data file is read, so it costs the same at any size."""
    if dt is None:
        return 0, 0, 0
    actions = pa.table(dt.get_add_actions(flatten=True))
    if not actions.num_rows:
        return 0, 0, 0
    return (actions.num_rows, int(pc.sum(actions.column("size_bytes")).as_py() or 0),
            int(pc.sum(actions.column("num_records")).as_py() or 0))


def commit_props(step: str, batch_seq: int, metadata: dict | None = None) -> CommitProperties:
    meta = {f"cdc.{k}": str(v) for k, v in (metadata or {}).items()}
    meta["cdc.step"] = step
    meta["cdc.batch_seq"] = str(batch_seq)
    return CommitProperties(app_transactions=[Transaction(f"{APP}.{step}", batch_seq)], custom_metadata=meta)


# A checkpoint every 10 commits (delta-rs' default is 100): opening a table replays the JSON
# commits since the last checkpoint, and a run opens its tables a few dozen times.
TABLE_CONFIGURATION = {"delta.checkpointInterval": "10"}
CHANGE_FEED = "delta.enableChangeDataFeed"


def target_configuration(change_feed: bool) -> dict:
    """A new target's table properties: with the change data feed, a MERGE also writes each
    changed row's before and after image, which readers get with `load_cdf`."""
    return {**TABLE_CONFIGURATION, CHANGE_FEED: "true"} if change_feed else dict(TABLE_CONFIGURATION)


def records_change_feed(dt: DeltaTable) -> bool:
    """Whether the table's change data feed is on (its MERGEs write change files)."""
    return (dt.metadata().configuration or {}).get(CHANGE_FEED, "false").lower() == "true"


def keep_change_feed(path: str, dt: DeltaTable, change_feed: bool) -> DeltaTable:
    """Switch the table's change data feed on or off as configured (one metadata commit when it
    differs); the table as it is then."""
    if records_change_feed(dt) == change_feed:
        return dt
    dt.alter.set_table_properties({CHANGE_FEED: "true" if change_feed else "false"},
                                  commit_properties=CommitProperties(custom_metadata={"cdc.step": "properties"}))
    return load(path)


def create(path: str, data: pa.Table, **kw) -> None:
    """Write a table's first version; the table appearing meanwhile is a commit conflict."""
    try:
        write_deltalake(path, data, mode="error", configuration=TABLE_CONFIGURATION,
                        storage_options=storage.delta_options(path), **kw)
    except DeltaError as e:
        if "already exists" not in str(e):
            raise
        raise CommitConflict(f"{path}: another writer created the table first") from e


def append(path: str, data: pa.Table, step: str, batch_seq: int, metadata: dict | None = None) -> int:
    """Append rows (possibly none) and mark `step` done for `batch_seq`, in one commit.

    The commit goes through the snapshot the watermark was checked on: a writer that commits
    the same batch meanwhile makes delta-rs refuse ours (same app id), so it is never doubled."""
    dt = open_table(path)
    if txn_version(dt, step) >= batch_seq:
        raise CommitConflict(f"{path}: another writer committed {step} batch {batch_seq} first")
    faults.point(f"{step}.before_commit")
    props = commit_props(step, batch_seq, metadata)
    if dt is None:
        create(path, data, schema_mode="merge", commit_properties=props)
        dt = load(path)
    else:
        write_deltalake(dt, data, mode="append", schema_mode="merge", commit_properties=props)
    faults.point(f"{step}.committed")
    return dt.version()


def compact_if_fragmented(path: str, max_files: int = 16) -> bool:
    """Compaction of the append-only history tables: one small file per batch would make every
    later batch open more files; past `max_files` they are rewritten into few (same rows, one commit)."""
    dt = open_table(path)
    if dt is None or len(dt.file_uris()) <= max_files:
        return False
    faults.point("compaction.before_commit")
    dt.optimize.compact(commit_properties=CommitProperties(custom_metadata={"cdc.step": "compaction"}))
    return True


def read_arrow(path: str, columns=None, filters=None) -> pa.Table | None:
    dt = snapshot(path)
    if dt is None:
        return None
    return dt.to_pyarrow_table(columns=columns, filters=filters)


@overload
def query(path: DeltaTable, sql: str) -> pa.Table: ...
@overload
def query(path: str | DeltaTable, sql: str) -> pa.Table | None: ...
def query(path: str | DeltaTable, sql: str) -> pa.Table | None:
    """An SQL query over the table, named `t`, through delta-rs' query engine, which skips files
    whose statistics (or partition values) rule its conditions out; None without the table."""
    from deltalake.query import QueryBuilder

    dt = snapshot(path)
    if dt is None:
        return None
    return pa.table(QueryBuilder().register("t", dt).execute(sql))


@overload
def select(path: DeltaTable, fields, where: str) -> pa.Table: ...
@overload
def select(path: str | DeltaTable, fields, where: str) -> pa.Table | None: ...
def select(path: str | DeltaTable, fields, where: str) -> pa.Table | None:
    """The rows of a table matching an SQL condition (see `query`); `fields`: (name, type) pairs or
    an Arrow schema."""
    names = ", ".join('"' + n.replace('"', '""') + '"' for n in arrow_schema(fields).names)
    data = query(path, f"SELECT {names} FROM t WHERE {where}")
    return data.cast(arrow_schema(fields)) if data is not None else None


IN_LIST_LIMIT = 2000  # keys per SQL IN list: far longer lists overflow the SQL parser's stack


@overload
def rows_with_keys(path: DeltaTable, fields, keys: list[str], also: str | None = None) -> pa.Table: ...
@overload
def rows_with_keys(path: str | DeltaTable, fields, keys: list[str],
                   also: str | None = None) -> pa.Table | None: ...
def rows_with_keys(path: str | DeltaTable, fields, keys: list[str], also: str | None = None) -> pa.Table | None:
    """The rows whose `_cdc_key` is one of `keys`. A batch's worth goes to delta-rs' query
    engine, which skips files by their statistics (`also`: a further SQL condition, such as
    the batch's key range, that lets it skip more); more keys than that are matched in one
    scan of the files' `fields` columns."""
    import pyarrow.dataset as ds

    dt = snapshot(path)
    if dt is None:
        return None
    files = dt.file_uris()
    names = arrow_schema(fields).names
    if not files or not keys:
        return arrow_schema(fields).empty_table()
    if len(keys) <= IN_LIST_LIMIT:
        where = f"_cdc_key IN ({', '.join(sql_text(k) for k in keys)})" + (f" AND {also}" if also else "")
        return select(dt, fields, where)
    # The schema is given and the keys are matched batch by batch: delta-rs writes strings as
    # string_view, Spark as string, and Arrow's scan filters cannot compare the two.
    wanted = pa.array(keys, pa.string())
    fs, paths = storage.arrow_paths(files)
    dataset = ds.dataset(paths, format="parquet", schema=arrow_schema(fields), filesystem=fs)
    found = [b.filter(pc.is_in(b.column("_cdc_key"), value_set=wanted))
             for b in dataset.to_batches(columns=names)]
    return pa.Table.from_batches(found, schema=arrow_schema(fields))


def sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def last_commit(path: str | DeltaTable) -> dict:
    dt = snapshot(path)
    if dt is None:
        return {}
    hist = dt.history(1)
    return hist[0] if hist else {}


def step_commit(path: str | DeltaTable, step: str, batch_seq: int | None = None) -> dict | None:
    """The custom metadata of the commit in which `step` took that batch, or of its newest
    commit when `batch_seq` is None (None when there is none).

    The newest commits are read first: callers ask about a recent batch, and reading the
    whole history would cost more with every batch."""
    dt = snapshot(path)
    if dt is None:
        return None
    for limit in (16, None):
        for h in dt.history(limit):
            if h.get("cdc.step") == step and (batch_seq is None or h.get("cdc.batch_seq") == str(batch_seq)):
                return {k[4:]: v for k, v in h.items() if k.startswith("cdc.")}
    return None
