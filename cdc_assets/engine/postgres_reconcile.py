"""The target of a `source: postgresql://...` table compared with the live source table, while
capture keeps running (the `matches_live_source` check).

What is compared. The source is read in one REPEATABLE READ transaction, snapshot S. The target is
read at the Delta version T opened before S is taken. Every change committed before S is then in
one of: T; the changes captured and not yet extracted (the changelog rows S sees; for `capture:
logical`, the slot's changes, peeked after S once the WAL is flushed past every commit S sees); or
the warehouse's extracts that T did not apply (listed after S: an extraction writes its extract
durably before it deletes the changelog rows or advances the slot, so a change S no longer sees
there is in an extract by then). And T holds no change committed after S: it applied only extracts
written before it was opened, each of changes committed before they were read. So a key that no
pending change touches (captured, extracted or staged, but not in T) has the same row in S and in
T, or the target is wrong; the keys pending changes touch are left out, counted as pending (a
pending truncate leaves out every key).

How, without holding either side. The source is streamed through a server-side cursor and the
target batch by batch; each row becomes its key's digest and its row's digest, values typed as the
target stores them (core/reconcile.py), summed per bucket of keys. Only the buckets whose sums
differ are read again, from the same snapshot and version, to count the keys that differ. No key
or value leaves this module: the result holds counts.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..core import pgoutput, postgres, reconcile
from ..core.config import TableConfig
from ..core.target import DELETED
from . import delta, postgres_logical
from . import postgres_source as ps
from .bigquery_source import extracts_dir
from .landing import registered
from .step_results import Figures
from .table_layout import TARGET, path


@dataclass(frozen=True, kw_only=True)
class LiveReconciliation(Figures):
    """The `matches_live_source` check's report: counts only, never a key or a value."""
    target_exists: bool
    rows_compared: int = 0  # source rows whose key no pending change touches
    pending_keys: int = 0  # keys captured, extracted or staged but not applied yet: left out
    truncate_pending: bool = False  # a truncate not applied yet: every key is pending
    missing_rows: int = 0  # keys in the source, not in the target
    extra_rows: int = 0  # keys in the target, not in the source
    differing_rows: int = 0  # keys whose rows differ
    mismatches: int = 0
    buckets_differing: int = 0

    @property
    def matches(self) -> bool:
        return self.mismatches == 0


@dataclass
class _Pending:
    keys: set[bytes]
    truncate: bool = False


def reconcile_live(table: TableConfig, table_dir: str) -> LiveReconciliation:
    """The target compared with the live source (module docstring: why it is exact with changes in flight)."""
    import psycopg

    where = ps.where_of(table)
    target = delta.open_table(path(table_dir, TARGET))  # T, before S
    if target is None:
        return LiveReconciliation(target_exists=False)
    applied = delta.txn_version(target, TARGET)
    source, conn = ps.connect(table)
    with conn:
        try:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cols = ps.columns(conn, source, where)  # the transaction's first query: S is taken here
            keys = tuple(table.keys)
            pending = _Pending(set())
            if table.capture == "logical":
                _slot_pending(conn, table, source, cols, keys, pending, where)
            else:
                _changelog_pending(conn, source, cols, keys, pending)
            _extracts_pending(table_dir, applied, cols, keys, pending)  # listed after S
            if pending.truncate:
                conn.commit()
                return LiveReconciliation(target_exists=True, truncate_pending=True,
                                          pending_keys=len(pending.keys))
            report = _compare(conn, source, cols, keys, target, table.rename, pending.keys)
            conn.commit()
        except psycopg.Error as e:
            raise ps.failure(where, e) from None
        except pgoutput.DecodeError as e:
            raise ps.SourceError(f"{where}: {e}") from None
    return report


def _types(cols: Sequence[postgres.PgColumn]) -> dict[str, str]:
    return {c.name: postgres.column_type(c) for c in cols}


def _key(values: Sequence[object], key_types: Sequence[str]) -> bytes:
    return reconcile.key_digest([reconcile.typed(v, t) for v, t in zip(values, key_types)])


def _changelog_pending(conn, source: postgres.PgSource, cols, keys: Sequence[str], pending: _Pending) -> None:
    """The keys of the changelog rows S sees (captured, not yet extracted)."""
    from psycopg import sql

    names = ps.objects_in_use(conn, source, f"source {source}")
    if not ps.changelog_exists(conn, names):
        raise ps.SourceError(f"source {source}: capture is not enabled: its changelog is gone")
    key_cols = [c for c in cols if c.name in keys]
    by_name = {c.name: c for c in key_cols}
    ordered = [by_name[k] for k in keys]
    # only the key columns are read back typed: a value of another column that no longer fits its
    # type never fails this read
    image = sql.SQL("jsonb_build_object({})").format(sql.SQL(", ").join(
        sql.SQL("{}, l.image -> {}").format(sql.Literal(k), sql.Literal(k)) for k in keys))
    rows = sql.SQL("{} l, LATERAL jsonb_populate_record(NULL::{}, {}) r").format(
        sql.Identifier(ps.SCHEMA, names.changelog), ps.table_ref(source), image)
    types = [postgres.column_type(c) for c in ordered]
    for page in ps.row_pages(conn, ps.select_query(ordered, rows, changes=True), ordered, changes=True):
        ops, values = page[0], page[3:]
        for i, op in enumerate(ops):
            if op == "TRUNCATE":
                pending.truncate = True
            else:
                pending.keys.add(_key([v[i] for v in values], types))


def _slot_pending(conn, table: TableConfig, source: postgres.PgSource, cols, keys: Sequence[str], pending: _Pending,
                  where: str) -> None:
    """The keys of the slot's changes, peeked once the WAL is flushed past every commit S sees.
    Decoding reads only flushed WAL, and with synchronous_commit off a commit is visible before its
    record is flushed: a transaction of its own, committed synchronously after S was taken, has its
    commit record after every commit S sees, and flushes the WAL up to it."""
    names = postgres_logical.slot_in_use(conn, source, where)
    if not postgres_logical.slot_exists(conn, names):
        raise ps.SourceError(f"{where}: capture is not enabled: its replication slot {names.slot} is gone")
    _, flusher = ps.connect(table)
    with flusher:
        flusher.execute("SET LOCAL synchronous_commit = on")
        flusher.execute("SELECT pg_current_xact_id()")  # an xid: the commit writes (and flushes) a record
        flusher.commit()
    by_name = {c.name: c for c in cols}
    types = [postgres.column_type(by_name[k]) for k in keys]
    for change in pgoutput.changes(postgres_logical.peek(conn, names, None), source.schema, source.table, keys):
        if change.op == "TRUNCATE":
            pending.truncate = True
        else:
            pending.keys.add(_key([pgoutput.typed(by_name[k], change.values.get(k)) for k in keys], types))


def _extracts_pending(table_dir: str, applied: int, cols, keys: Sequence[str], pending: _Pending) -> None:
    """The keys of the extracts the target version does not hold (staged or not, registered or not)."""
    import pyarrow.parquet as pq

    folder = extracts_dir(table_dir)
    names = ps.extract_names(folder)
    in_target = {f for b in registered(table_dir) if b.seq <= applied for f in b.files}
    by_name = {c.name: c for c in cols}
    types = [postgres.column_type(by_name[k]) for k in keys]
    for name in names:
        if name in in_target:
            continue
        for batch in pq.ParquetFile(os.path.join(folder, name)).iter_batches(columns=[postgres.OP_COLUMN, *keys]):
            data = batch.to_pydict()
            for i, op in enumerate(data[postgres.OP_COLUMN]):
                if op == "TRUNCATE":
                    pending.truncate = True
                else:
                    pending.keys.add(_key([data[k][i] for k in keys], types))


def _source_rows(conn, source: postgres.PgSource, cols) -> Iterator[list]:
    """The source's rows as S sees them, read as an extraction reads them."""
    from psycopg import sql

    query = ps.select_query(cols, sql.SQL("{} r").format(ps.table_ref(source)), changes=False)
    for page in ps.row_pages(conn, query, cols, changes=False):
        yield from zip(*page)


def _target_rows(target, names: Sequence[str]) -> Iterator[list]:
    """The target's live rows, the source's columns in order (a column it lacks: null), batch by batch."""
    present = {f.name for f in target.schema().fields}
    wanted = [n for n in names if n in present] + ([DELETED] if DELETED in present else [])
    for batch in target.to_pyarrow_dataset().to_batches(columns=wanted):
        data = batch.to_pydict()
        deleted = data.get(DELETED)
        for i in range(batch.num_rows):
            if deleted is not None and deleted[i]:
                continue  # a key kept for a soft delete: not a row of the source
            yield [data[n][i] if n in data else None for n in names]


def _digests(rows: Iterator[Sequence[object]], types: Sequence[str], key_at: Sequence[int],
             pending: set[bytes]) -> Iterator[tuple[bytes, int]]:
    for row in rows:
        values = [reconcile.typed(v, t) for v, t in zip(row, types)]
        key = reconcile.key_digest([values[i] for i in key_at])
        if key not in pending:
            yield key, reconcile.row_digest(key, values)


def _compare(conn, source, cols, keys: Sequence[str], target, rename: dict, pending: set[bytes]) -> LiveReconciliation:
    types = [postgres.column_type(c) for c in cols]
    order = [c.name for c in cols]
    key_at = [order.index(k) for k in keys]
    target_names = [rename.get(n, n) for n in order]
    ours, theirs = reconcile.BucketSums(), reconcile.BucketSums()
    for key, digest in _digests(_source_rows(conn, source, cols), types, key_at, pending):
        ours.add(key, digest)
    for key, digest in _digests(_target_rows(target, target_names), types, key_at, pending):
        theirs.add(key, digest)
    differing = ours.differing(theirs)
    found = reconcile.KeyDifferences(0, 0, 0)
    if differing:
        def within(pairs):
            return ((k, d) for k, d in pairs if reconcile.bucket_of(k, ours.buckets) in differing)

        found = reconcile.key_differences(
            list(within(_digests(_source_rows(conn, source, cols), types, key_at, pending))),
            within(_digests(_target_rows(target, target_names), types, key_at, pending)))
    return LiveReconciliation(target_exists=True, rows_compared=ours.rows, pending_keys=len(pending),
                              missing_rows=found.missing, extra_rows=found.extra, differing_rows=found.differing,
                              mismatches=found.total, buckets_differing=len(differing))
