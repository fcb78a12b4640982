"""`capture: logical`: a PostgreSQL source table captured through a publication and a logical
replication slot with the `pgoutput` plugin (engine/postgres_source.py is the changelog method, and
holds what both share: the catalog, the base's export, the extract's writing).

The replication protocol is used for what only it gives: the slot is created with
`CREATE_REPLICATION_SLOT ... LOGICAL pgoutput (SNAPSHOT 'export')` on a replication connection
(psycopg 3 runs such a command over the simple query protocol, which is all a replication
connection takes). Streaming (START_REPLICATION) needs COPY BOTH, which psycopg 3.3 does not speak,
so the slot is read over a normal connection with `pg_logical_slot_peek_binary_changes(slot,
upto_lsn, NULL, 'proto_version', '1', 'publication_names', pub)` and confirmed with
`pg_replication_slot_advance` once an extract is in the warehouse.

Enable. `wal_level` must be `logical` (the error says what to set). The table's replica identity
must give the old key of every update that changes it and of every delete: the default identity
when the key columns are the primary key's, an identity index holding them, or FULL; enable checks
it and changes nothing (a table in a publication without a usable identity would refuse its own
writers' updates and deletes), and says what to run otherwise. Then, in order: the publication
(before the slot, whose decoding reads it as of each change), the slot, whose creation exports the
snapshot of its consistent point C: every transaction committed before C is in that snapshot and
none after it is, and the slot decodes exactly the transactions committing after C. The base is
read in a REPEATABLE READ transaction that imports that snapshot (SET TRANSACTION SNAPSHOT) while
the replication connection still holds it, so the base and the slot meet at C: no change is missed
or taken twice between them. A crash before the base is in the warehouse leaves a slot and no base:
the next enable drops that slot and starts again.

Extraction, a batch. Each extraction first confirms the slot at the position the last extract (or
the base) recorded (a crash may have come between an extract and its confirmation), then notes the
flushed WAL position L and peeks the slot up to L: that gives every transaction whose commit record
starts before L (decoding stops at the first record reaching L; one that starts at or past L, which
a position inside a page header can let through, is left out here and comes again next time). Their changes of
the table, ordered by commit LSN then position in the transaction (core/pgoutput.py), become one
Parquet extract with L in its metadata; only once the extract is durable under its final name is
the slot advanced to L, which passes over exactly the transactions whose commit starts before L.
Changes committed while an extraction or an apply runs stay in the slot for the next one. With no
change of the table before L, the slot is advanced all the same, so a quiet table on a busy server
does not keep its WAL.

A crash therefore loses and doubles nothing: before the extract is under its final name the slot
has not moved; after, the extract's L says what it took, the next extraction confirms the slot
there first, and a change whose commit LSN is below L is never written again.

Disable drops the slot (freeing its WAL) and the publication. Status shows the WAL the slot retains
(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), the changes waiting and the oldest's age.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core import pgoutput, postgres
from ..core.config import TableConfig
from ..core.postgres import CaptureRecord, PgColumn, PgSource
from . import faults
from . import postgres_source as ps
from .bigquery_source import extracts_dir

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa

UPTO_KEY = b"cdc_assets.slot_upto"  # Parquet metadata: the LSN the slot is confirmed at once the file is in
PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Slot:
    """The objects `capture enable` makes for a logical-capture table: a slot (one per server, so
    its name holds the database) and a publication (in the source's database)."""
    slot: str
    publication: str


def slot_names(source: PgSource) -> Slot:
    """Names within a slot's rules (lower-case letters, digits, underscores; 63 bytes), distinct for
    distinct tables of one server: a stem of the database, schema and table (`ps.name_stem`)."""
    stem = ps.name_stem(source.database, source.schema, source.table)
    return Slot(f"cdc_assets_{stem}", f"cdc_assets_{stem}")


def legacy_slot_names(source: PgSource) -> Slot:
    """The names an earlier cdc_assets gave a table's slot and publication: `database_schema_table`
    (`shop`, `a_b`, `c` and `shop`, `a`, `b_c` shared them); a capture under them goes on (`slot_in_use`)."""
    identity = f"{source.database}_{source.schema}_{source.table}"
    stem = re.sub(r"[^a-z0-9_]", "_", identity.lower())
    if stem != identity or len(stem) > 40:
        stem = stem[:31] + "_" + hashlib.sha1(identity.encode()).hexdigest()[:8]
    return Slot(f"cdc_assets_{stem}", f"cdc_assets_{stem}")


def slot_in_use(conn: psycopg.Connection, source: PgSource, where: str, sharing_ok: bool = False) -> Slot:
    """The slot and publication of a source as they are on its server: under their names (`slot_names`),
    or, for a capture enabled by an earlier cdc_assets, under the names it gave (`legacy_slot_names`).
    A publication of those names that holds another table means two tables' captures shared them (the
    later enable made the slot anew, and its table's changes were never published): an error says to
    start both over (`sharing_ok`: disable, which removes them)."""
    names, legacy = slot_names(source), legacy_slot_names(source)
    if slot_exists(conn, names) or not slot_exists(conn, legacy):
        return names
    published = sorted(f"{r[0]}.{r[1]}" for r in conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (legacy.publication,)))
    if published != [source.qualified] and not sharing_ok:
        others = [p for p in published if p != source.qualified]
        raise ps.SourceError(f"{where}: its capture was enabled by an earlier cdc_assets, whose slot {legacy.slot} and "
                             f"publication {legacy.publication} it shares with the capture of {', '.join(others) or 'another table'}: "
                             "changes were lost. Start both over: `cdc-assets capture disable` each, remove their "
                             "warehouse folders, then `cdc-assets capture enable` each")
    return legacy


def _check_owner(conn: psycopg.Connection, source: PgSource, names: Slot, where: str, table_dir: str | None) -> None:
    """Refuse an enable (or a disable: `table_dir` None) whose publication or slot name anything but
    this source's own capture holds (an earlier enable of it that stopped half-way is its own: its
    publication, made first, says so)."""
    found = conn.execute("SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = %s",
                         (names.publication,)).fetchone()
    error = found is not None and ps.owner_error(where, source, table_dir, "publication", names.publication, found[0])
    if error:
        raise error
    if slot_exists(conn, names):
        database = ps.single_value(conn, "SELECT database FROM pg_replication_slots WHERE slot_name = %s", (names.slot,))
        if found is None or database != source.database:
            raise ps.owned_by_another(where, "replication slot", names.slot, None)


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _lsn_text(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


def slot_exists(conn: psycopg.Connection, names: Slot) -> bool:
    return bool(ps.single_value(conn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (names.slot,)))


def _check_server(conn: psycopg.Connection, where: str) -> None:
    level = ps.single_value(conn, "SELECT current_setting('wal_level')", ())
    if level != "logical":
        raise ps.SourceError(f"{where}: capture: logical needs the server's wal_level = logical (it is {level}): "
                             "run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL (max_replication_slots "
                             "and max_wal_senders must be at least 1), or use capture: changelog, which needs no "
                             "server setting")
    encoding = ps.single_value(conn, "SELECT current_setting('server_encoding')", ())
    if encoding != "UTF8":
        raise ps.SourceError(f"{where}: capture: logical reads the server's text as UTF-8, and its encoding is "
                             f"{encoding}: use capture: changelog")


def _check_identity(conn: psycopg.Connection, source: PgSource, keys: Sequence[str], where: str) -> str:
    """The replica identity, if it gives the old key of every update and delete (else an error saying
    what to run)."""
    identity = ps.single_value(conn, "SELECT relreplident FROM pg_class WHERE oid = to_regclass(%s)", (ps.regclass(source),))
    if identity == "f":
        return "full"
    if identity in ("d", "i"):
        flag = "indisprimary" if identity == "d" else "indisreplident"
        covered = {r[0] for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            f"AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.{flag}",
            (ps.regclass(source),)).fetchall()}
        if covered and set(keys) <= covered:
            return "default" if identity == "d" else "index"
    shown = {"d": "default (the primary key)", "i": "an index", "n": "nothing"}.get(str(identity), str(identity))
    raise ps.SourceError(f"{where}: capture: logical needs the old key of every update and delete, and the table's "
                         f"replica identity ({shown}) does not hold the key columns {', '.join(keys)}: run ALTER "
                         f"TABLE {source.qualified} REPLICA IDENTITY FULL (or USING INDEX a unique index of the key "
                         "columns), then enable capture")


def enable(table: TableConfig, table_dir: str) -> ps.Enabled:
    """Create the publication and the slot and take the base at the slot's start (module docstring)."""
    import psycopg
    from psycopg import sql

    where = ps.where_of(table)
    base = postgres.base_path(table_dir)
    source, conn = ps.connect(table)
    names = slot_names(source)
    with conn:
        try:
            _check_server(conn, where)
            if os.path.exists(base):
                if slot_exists(conn, slot_in_use(conn, source, where, sharing_ok=True)):
                    raise ps.SourceError(f"{where}: capture is already enabled (its base snapshot is {base})")
                raise ps.starts_over(where, table_dir, "capture was disabled after it started here")
            ps.check_starts_here(where, table_dir)
            _check_owner(conn, source, names, where, table_dir)
            cols = ps.columns(conn, source, where)
            keys = table.keys or ps.primary_key(conn, source)
            ps.check_columns(cols, keys, where)
            _check_identity(conn, source, keys, where)
            if slot_exists(conn, names):  # an enable that stopped before its base was in the warehouse: nothing was taken from it
                conn.execute("SELECT pg_drop_replication_slot(%s)", (names.slot,))
            if not ps.single_value(conn, "SELECT count(*) FROM pg_publication WHERE pubname = %s", (names.publication,)):
                conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(names.publication), ps.table_ref(source)))
                conn.execute(sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
                    sql.Identifier(names.publication), sql.Literal(ps.owner(source, table_dir))))
            conn.commit()
            os.makedirs(postgres.capture_dir(table_dir), exist_ok=True)
            ps.durable_write(postgres.record_path(table_dir),
                              postgres.record_json(CaptureRecord(str(source), "logical", keys)).encode())
            with psycopg.connect(**source.conninfo(), application_name="cdc_assets",  # type: ignore[arg-type]
                                 replication="database", autocommit=True) as replication:
                try:
                    created = replication.execute(sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT "
                                                          "'export')").format(sql.Identifier(names.slot))).fetchone()
                except psycopg.errors.ConfigurationLimitExceeded:
                    raise _slots_in_use(conn, where) from None
                assert created is not None
                start, snapshot = str(created[1]), str(created[2])
                faults.point("postgres.slot_created")  # a slot and no base: the next enable starts over
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
                rows = ps.write_parquet(
                    base, ps.row_pages(conn, ps.select_query(cols, sql.SQL("{} r").format(ps.table_ref(source)),
                                                     changes=False), cols, changes=False),
                    ps.extract_schema(cols, changes=False), _upto(_lsn(start)))
                conn.commit()
            faults.point("postgres.base_written")
        except psycopg.Error as e:
            raise ps.failure(where, e) from None
    return ps.Enabled(tuple(keys), rows, 0)


def _slots_in_use(conn: psycopg.Connection, where: str) -> ps.SourceError:
    """Every replication slot the server allows is taken: a configuration to change, not a server
    that is down, so a retry alone never gets past it."""
    allowed = ps.single_value(conn, "SELECT current_setting('max_replication_slots')", ())
    return ps.SourceError(f"{where}: capture: logical needs a replication slot of its own, and every one of the "
                          f"server's max_replication_slots (it is {allowed}) is in use: drop a slot nothing reads "
                          "(pg_replication_slots lists them; pg_drop_replication_slot drops one) or raise "
                          "max_replication_slots and restart PostgreSQL, then enable capture")


def _upto(lsn: int) -> dict[bytes, bytes]:
    return {UPTO_KEY: _lsn_text(lsn).encode()}


def _last_upto(folder: str, base: str) -> tuple[int, int]:
    """(how many extracts there are, the LSN the last one, or else the base, took the slot to)."""
    import pyarrow.parquet as pq

    names = ps.extract_names(folder)
    meta = pq.read_metadata(os.path.join(folder, names[-1]) if names else base).metadata or {}
    return len(names), _lsn(meta[UPTO_KEY].decode())


def _advance(conn: psycopg.Connection, names: Slot, upto: int) -> None:
    """Confirm the slot at `upto` (never back: a slot already past it stays)."""
    conn.execute("SELECT pg_replication_slot_advance(slot_name, greatest(%s::pg_lsn, confirmed_flush_lsn)) "
                 "FROM pg_replication_slots WHERE slot_name = %s", (_lsn_text(upto), names.slot))


def peek(conn: psycopg.Connection, names: Slot, upto: int | None) -> Iterator[bytes]:
    """The slot's messages (up to `upto`), a page at a time through a server-side cursor."""
    with conn.cursor(name="cdc_assets_slot") as cur:
        cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', '1', "
                    "'publication_names', %s)", (names.slot, None if upto is None else _lsn_text(upto),
                                                 names.publication))
        while True:
            rows = cur.fetchmany(ps.PAGE_ROWS)
            if not rows:
                return
            for (data,) in rows:
                yield bytes(data)


def _changes(conn: psycopg.Connection, names: Slot, source: PgSource, keys: Sequence[str], after: int,
             upto: int) -> Iterator[pgoutput.LogicalChange]:
    """The table's changes of the transactions whose commit starts at or after `after` (where the
    slot is confirmed) and before `upto`: decoding up to `upto` stops at the first record reaching
    it, which may be a commit starting at or past it (`upto` inside a page header): that one is
    left for the next extraction, as the slot advanced to `upto` gives it again."""
    return pgoutput.changes(peek(conn, names, upto), source.schema, source.table, keys, after=after, before=upto)


def _schema(cols: Sequence[PgColumn]) -> pa.Schema:
    import pyarrow as pa

    schema = ps.extract_schema(cols, changes=True)
    return schema.insert(2, pa.field(postgres.UNSET_COLUMN, pa.string()))


def _values(change: pgoutput.LogicalChange, cols: Sequence[PgColumn]) -> tuple[str | None, list]:
    """(why the change is quarantined, or None; its values typed as the columns' current types). A
    value that no longer fits (the column was altered since the change) is left out and named."""
    values, misfits = [], []
    for col in cols:
        try:
            values.append(pgoutput.typed(col, change.values.get(col.name)))
        except pgoutput.DecodeError:
            values.append(None)
            misfits.append(col.name)
    return (postgres.misfit_reason(misfits, {c.name: c.formatted for c in cols}) if misfits else None), values


def _rows(changes: Iterator[pgoutput.LogicalChange], cols: Sequence[PgColumn]) -> Iterator[list[list]]:
    """The changes as pages of columns: op, ordering key, unset columns, reason to be quarantined, the
    source's columns."""
    page: list[list] = []
    for c in changes:
        unset = json.dumps(sorted(c.unset)) if c.unset else None
        reject, values = _values(c, cols)
        page.append([c.op, c.sequence, unset, reject, *values])
        if len(page) == ps.PAGE_ROWS:
            yield [list(v) for v in zip(*page)]
            page = []
    if page:
        yield [list(v) for v in zip(*page)]


def extract_new_rows(table: TableConfig, table_dir: str) -> ps.Extract | None:
    """Write the table's changes in the slot as the next extract (None: none); then confirm the slot
    past them (module docstring: why nothing is lost or doubled)."""
    import psycopg

    where = ps.where_of(table)
    folder = extracts_dir(table_dir)
    base = postgres.base_path(table_dir)
    record = postgres.read_record(table_dir)
    if not os.path.exists(base) or record is None:
        raise ps.SourceError(f"{where}: capture is not enabled: run `cdc-assets capture enable {table.name}` first")
    count, last = _last_upto(folder, base)
    source, conn = ps.connect(table)
    names = slot_names(source)
    with conn:
        try:
            names = slot_in_use(conn, source, where)
            if not slot_exists(conn, names):
                raise ps.SourceError(f"{where}: capture is not enabled: its replication slot {names.slot} is gone "
                                     "(`cdc-assets capture disable` ran, or it was dropped)")
            cols = ps.columns(conn, source, where)
            _advance(conn, names, last)  # a crash may have come between the last extract and its confirmation
            conn.commit()
            upto = _lsn(str(ps.single_value(conn, "SELECT pg_current_wal_flush_lsn()::text", ())))
            pages = _rows(_changes(conn, names, source, record.keys, last, upto), cols)
            first = next(pages, None)
            if first is None:
                conn.commit()
                _advance(conn, names, upto)  # nothing of the table before upto: its WAL need not be kept
                conn.commit()
                return None
            name = f"extract-{count + 1:08d}.parquet"  # names sort in extraction order: arrival order
            rows = ps.write_parquet(os.path.join(folder, name), _chain(first, pages), _schema(cols), _upto(upto))
            conn.commit()
            faults.point("postgres.extracted")  # the extract is in the warehouse; the slot is not yet past it
            _advance(conn, names, upto)
            conn.commit()
        except psycopg.Error as e:
            raise ps.failure(where, e) from None
        except pgoutput.DecodeError as e:
            raise ps.SourceError(f"{where}: slot {names.slot}: {e}") from None
    return ps.Extract(name, rows)


def _chain(first: list[list], rest: Iterator[list[list]]) -> Iterator[list[list]]:
    yield first
    yield from rest


def disable(table: TableConfig) -> list[str]:
    """Drop the slot (its WAL is freed) and the publication."""
    import psycopg
    from psycopg import sql

    where = ps.where_of(table)
    source, conn = ps.connect(table)
    removed = []
    with conn:
        try:
            names = slot_in_use(conn, source, where, sharing_ok=True)
            if names == slot_names(source):
                _check_owner(conn, source, names, where, None)  # never another source's slot or publication
            if slot_exists(conn, names):
                conn.execute("SELECT pg_drop_replication_slot(%s)", (names.slot,))
                removed.append(f"replication slot {names.slot}")
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(names.publication)))
            removed.append(f"publication {names.publication}")
            conn.commit()
        except psycopg.Error as e:
            raise ps.failure(where, e) from None
    return removed


def retained_wal(table: TableConfig) -> int | None:
    """The bytes of WAL the slot keeps the server from removing (None: no slot). Reads only the
    catalog: cheap enough for a check on every evaluation."""
    import psycopg

    where = ps.where_of(table)
    source, conn = ps.connect(table)
    with conn:
        try:
            found = ps.single_value(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                                  "FROM pg_replication_slots WHERE slot_name = %s",
                                    (slot_in_use(conn, source, where).slot,))
        except psycopg.Error as e:
            raise ps.failure(where, e) from None
    return None if found is None else int(found)  # type: ignore[call-overload]


def status(table: TableConfig) -> ps.CaptureStatus:
    """The WAL the slot retains, the changes waiting in it and how long the oldest has waited."""
    import psycopg

    where = ps.where_of(table)
    source, conn = ps.connect(table)
    names = slot_names(source)
    with conn:
        try:
            names = slot_in_use(conn, source, where)
            found = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, clock_timestamp() "
                                 "FROM pg_replication_slots WHERE slot_name = %s", (names.slot,)).fetchone()
            if found is None:
                return ps.CaptureStatus(table.name, str(source), False, 0, None)
            retained, now = found
            waiting, oldest = 0, None
            for change in pgoutput.changes(peek(conn, names, None), source.schema, source.table, table.keys):
                waiting += 1
                oldest = change.commit_time if oldest is None else min(oldest, change.commit_time)
            conn.commit()
        except psycopg.Error as e:
            raise ps.failure(where, e) from None
        except pgoutput.DecodeError as e:
            raise ps.SourceError(f"{where}: slot {names.slot}: {e}") from None
    age = None if oldest is None else now - (PG_EPOCH + dt.timedelta(microseconds=oldest))
    return ps.CaptureStatus(table.name, str(source), True, waiting, age, int(retained))
