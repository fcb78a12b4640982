"""A live PostgreSQL table as a source, captured by cdc_assets itself (its changelog method, rules.md#postgresql).

Capture. `capture enable` creates, in schema `cdc_assets` of the source's database, a sequence, a
changelog table and a row-level AFTER trigger on the source table. The trigger writes one changelog
row per change: an insert or an update as an upsert of the new row, a delete as a delete of the old
row, and an update that changes the key as a delete of the old key followed by an upsert of the new;
each with the next sequence number, the transaction id and the time. Rows are kept as jsonb, so a
column added to the source later never breaks the source's own writes; they are read back typed
through the source's current row type (`jsonb_populate_record`). The trigger function is SECURITY
DEFINER: the source's writers need no privilege on `cdc_assets`. The objects' names hold a hash of
the source's schema and table (`name_stem`), so no two tables share one, and each object's comment
names the source and the warehouse table it is captured into (`owner`): enable refuses a name held
by anything else, and by a second capture of the same source, which would take the first one's rows.

Why the sequence orders a key's changes. A sequence number is drawn when the trigger fires, not when
the transaction commits, so numbers do not follow commit order across keys, and a reader can see
number 9 committed while 5 is not yet. Within one key they do: a transaction that changes a key
holds that row (or its unique index entry) until it ends, so the next change of the key waits for
it, and draws a greater number. The greatest number of a key is its latest change.

The base snapshot, consistent with where capture starts. The trigger is created and committed first
(CREATE TRIGGER waits for the transactions writing the table, and every later write fires it).
Then one REPEATABLE READ transaction, one snapshot S: it reads the sequence numbers of the changelog
rows S sees and exports the source's rows as S sees them into the base. A change committed before S
is in the base and its changelog row is in that set; a change not committed at S (still open, or
later) is not in the base and its row is not in the set, since S cannot see it. The set is written
into the base file's own metadata, the file is made durable under its final name, and only then
are those changelog rows deleted in the same transaction, which commits. No change is missed (every
change not in S stays in the changelog) or doubled (every change in S is left out of extraction:
deleted, or, after a crash before the delete commits, recognised by the set).

Extraction, a batch. Each extraction writes every changelog row it sees (committed rows only; a
rolled-back transaction's rows never become visible) into one Parquet extract in the table's
`extracts/` folder, ordered by sequence; the extract becomes a batch like any landed file (format
`postgresql`: `_CHANGE_TYPE` UPSERT or DELETE and `_CHANGE_SEQUENCE_NUMBER`, the sequence in
hexadecimal, beside the source's columns). Its identity is the set of sequence numbers it took, as
runs of consecutive numbers (a gap is never bridged: a missing number may be an open transaction's),
written in its metadata. The rows are deleted from the changelog only once the extract is durable
in the warehouse. Before reading, an extraction first deletes the rows the last extract (or the
base) took: after a crash between the write and the delete, they are recognised and never taken
twice; since every extraction does this first, only the last extract can have rows left behind.
Rows written while an extraction or an apply runs stay in the changelog for the next one. A row
whose value no longer fits its column's current type (the column was altered after the row was
written) becomes a change marked for quarantine, naming the column (`_write_changes`).

A crash anywhere therefore loses and doubles nothing: before the extract is under its final name,
the changelog still holds every row; after, the extract's set says which rows it took. So a server
that stops or cannot be reached is a retryable error (SourceUnavailable): the next run starts over.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core import postgres
from ..core.config import TableConfig
from ..core.errors import TerminalError, TransientError
from ..core.formats import DECLARED_TYPE
from ..core.postgres import CaptureRecord, PgColumn, PgSource, Ranges
from . import faults
from .bigquery_source import extracts_dir
from .table_layout import BASE, CHANGES, TARGET

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa

SCHEMA = "cdc_assets"
TRIGGER = "cdc_assets_capture"
TRUNCATE_TRIGGER = "cdc_assets_capture_truncate"
TAKEN_KEY = b"cdc_assets.changelog_taken"  # Parquet metadata: the changelog sequence numbers a file took
PAGE_ROWS = 10_000
CONFIGURATION_LIMIT_EXCEEDED = "53400"  # SQLSTATE: a limit the server's configuration sets was reached


class SourceError(TerminalError, RuntimeError):
    """The PostgreSQL source cannot be captured or read; the message names the table, the source and
    the cause (never a password: the source URL holds none, and libpq's messages show none)."""


class SourceUnavailable(TransientError, ConnectionError):
    """The PostgreSQL server cannot be reached or went away mid-way (stopped, restarting, out of
    connections): a later run tries again, and loses nothing (the changelog or the slot keeps every
    change the warehouse does not hold)."""


def failure(where: str, e: BaseException) -> SourceError | SourceUnavailable:
    """The error a psycopg error is: retryable when the server, not the request, failed."""
    if _unavailable(e):
        return SourceUnavailable(f"{where}: the server is unavailable ({_cause(e)}); nothing was lost: a later "
                                 "run takes the changes once it is back")
    return SourceError(f"{where}: {_cause(e)}")


def _unavailable(e: BaseException) -> bool:
    """A failure of the server or the connection (SQLSTATE classes 08, 53 and 57P, or no SQLSTATE at
    all: the connection was refused or lost), not of what was asked. A limit the server's configuration
    sets (53400, e.g. every replication slot in use) is not: it stays until the configuration changes."""
    import psycopg

    state = getattr(e, "sqlstate", None)
    if state is None:
        return isinstance(e, psycopg.OperationalError)
    return state.startswith(("08", "53", "57P")) and state != CONFIGURATION_LIMIT_EXCEEDED


@dataclass(frozen=True)
class Objects:
    """The objects `capture enable` makes for one source table, all in schema `cdc_assets`."""
    changelog: str
    sequence: str
    function: str


@dataclass(frozen=True)
class Enabled:
    keys: tuple[str, ...]
    base_rows: int
    skipped: int  # changelog rows the base already holds


@dataclass(frozen=True)
class Extract:
    file: str  # relative to the table's extracts folder
    rows: int


@dataclass(frozen=True)
class CaptureStatus:
    table: str
    source: str
    enabled: bool
    waiting: int  # changes no extract has taken
    oldest: dt.timedelta | None  # how long the oldest of them has waited
    retained_wal: int | None = None  # bytes of WAL a logical-capture table's slot keeps on the server


def name_stem(*parts: str) -> str:
    """The stem of a capture object's name, distinct for distinct parts: a readable prefix (lower-case
    letters, digits and underscores, which alone would make `a_b`+`c` and `a`+`b_c` alike) and a hash
    of the parts as a JSON list (which no two lists of parts share). 41 bytes: with a suffix, within a
    PostgreSQL name's 63 and a replication slot's rules."""
    readable = re.sub(r"[^a-z0-9]+", "_", "_".join(parts).lower()).strip("_")[:24]
    return f"{readable}_{hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()[:16]}"


def objects(source: PgSource) -> Objects:
    """Names of a source table's capture objects, in the source's database: a stem of its schema and
    table (`name_stem`), distinct for distinct tables."""
    stem = name_stem(source.schema, source.table)
    return Objects(f"{stem}_changelog", f"{stem}_seq", f"{stem}_capture")


OWNER_PREFIX = "cdc_assets capture of "


def owner(source: PgSource, table_dir: str) -> str:
    """The comment a capture object carries: the source table it captures (`schema.table`, which names
    one table: the URL's names hold no dot or space) and the warehouse table it captures into."""
    return f"{OWNER_PREFIX}{source.qualified} into {table_dir}"


def owner_error(where: str, source: PgSource, table_dir: str | None, kind: str, name: str,
                found: object) -> SourceError | None:
    """Why an object whose comment is `found` is not this capture's own (None: it is; `table_dir` None:
    any capture of this source is). A source table is captured into one table: a second capture of it
    would take the first one's changes."""
    mine = f"{OWNER_PREFIX}{source.qualified} into "
    if isinstance(found, str) and found.startswith(mine):
        into = found.removeprefix(mine)
        if table_dir is None or into == table_dir:
            return None
        return SourceError(f"{where}: {source.qualified} is already captured into {into} (its {kind} {name}): a "
                           "source table is captured into one table, or the two would take each other's changes; "
                           "nothing was made for this table: `capture disable` that table first, then enable "
                           "capture here")
    return owned_by_another(where, kind, name, found)


def owned_by_another(where: str, kind: str, name: str, found: object) -> SourceError:
    """The error of an enable whose object's name another source's capture (or something else) holds."""
    holder = (f"the capture of {found.removeprefix(OWNER_PREFIX)}" if isinstance(found, str)
              and found.startswith(OWNER_PREFIX) else "an object cdc_assets did not make")
    return SourceError(f"{where}: the {kind} {name} this capture needs belongs to another source ({holder}); "
                       "nothing was made for this table: drop or rename that object if nothing uses it, then "
                       "enable capture")


def check_owner(conn: psycopg.Connection, source: PgSource, names: Objects, where: str,
                table_dir: str | None) -> None:
    """Refuse an enable (or a disable: `table_dir` None) whose changelog, sequence or function name is
    held by anything but this source's own capture (an earlier enable of it that stopped half-way is
    its own)."""
    from psycopg import sql

    for kind, name, lookup, catalog in (("table", names.changelog, "to_regclass", "pg_class"),
                                        ("sequence", names.sequence, "to_regclass", "pg_class"),
                                        ("function", names.function, "to_regprocedure", "pg_proc")):
        qualified = sql.Identifier(SCHEMA, name).as_string(conn) + ("()" if kind == "function" else "")
        row = conn.execute(f"SELECT {lookup}(%s) IS NOT NULL, obj_description({lookup}(%s), %s)",  # type: ignore[arg-type]
                           (qualified, qualified, catalog)).fetchone()
        error = row is not None and row[0] and owner_error(where, source, table_dir, kind, f"{SCHEMA}.{name}", row[1])
        if error:
            raise error


def legacy_objects(source: PgSource) -> Objects:
    """The names an earlier cdc_assets gave a source's capture objects: `schema_table`, cut and hashed
    past 40 bytes. `a_b.c` and `a.b_c` shared them; a capture under them goes on (`objects_in_use`)."""
    stem = f"{source.schema}_{source.table}"
    if len(stem.encode()) > 40:
        stem = stem.encode()[:31].decode(errors="ignore") + "_" + hashlib.sha1(source.qualified.encode()).hexdigest()[:8]
    return Objects(f"{stem}_changelog", f"{stem}_seq", f"{stem}_capture")


def objects_in_use(conn: psycopg.Connection, source: PgSource, where: str, sharing_ok: bool = False) -> Objects:
    """The capture objects of a source as they are in its database: under their names (`objects`), or,
    for a capture enabled by an earlier cdc_assets, under the names it gave (`legacy_objects`). Those
    another table's trigger also writes to mixed the two tables' changes: an error says to start both
    over (`sharing_ok`: disable, which removes this table's part of them)."""
    names = objects(source)
    legacy = legacy_objects(source)
    if changelog_exists(conn, names) or not changelog_exists(conn, legacy):
        return names
    sharing = shared_with(conn, source, legacy)
    if sharing and not sharing_ok:
        raise SourceError(f"{where}: its capture was enabled by an earlier cdc_assets, whose changelog "
                          f"{SCHEMA}.{legacy.changelog} is also written by the capture of {', '.join(sharing)}: the "
                          "two tables' changes were mixed. Start both over: `cdc-assets capture disable` each, "
                          "remove their warehouse folders, then `cdc-assets capture enable` each")
    return legacy


def shared_with(conn: psycopg.Connection, source: PgSource, names: Objects) -> list[str]:
    """The other tables whose triggers call the capture function `names.function`."""
    from psycopg import sql

    function = sql.Identifier(SCHEMA, names.function).as_string(conn) + "()"
    return sorted({str(r[0]) for r in conn.execute(
        "SELECT DISTINCT tgrelid::regclass::text FROM pg_trigger WHERE NOT tgisinternal AND tgfoid = "
        "to_regprocedure(%s) AND tgrelid <> to_regclass(%s)", (function, regclass(source))).fetchall()})


def where_of(table: TableConfig) -> str:
    """How a message names a table and its source: the source as `postgres.redacted` shows it."""
    return f"table {table.name}: source {postgres.redacted(table.source or '')}"


def connect(table: TableConfig) -> tuple[PgSource, psycopg.Connection]:
    import psycopg

    source = _source(table)
    try:
        # dates and times read as text come in ISO form and in UTC, whatever the server's or role's settings
        return source, psycopg.connect(**source.conninfo(), application_name="cdc_assets",  # type: ignore[arg-type]
                                       options="-c TimeZone=UTC -c DateStyle=ISO,YMD")
    except psycopg.Error as e:
        raise failure(f"table {table.name}: source {source}: cannot connect", e) from None


def _source(table: TableConfig) -> PgSource:
    if table.source is None or not postgres.is_postgresql(table.source):
        raise SourceError(f"table {table.name}: no postgresql:// source")
    return postgres.parse_source(table.source)


def _cause(e: BaseException) -> str:
    """PostgreSQL's message, but for a data error, whose message may quote a row's value."""
    import psycopg

    if isinstance(e, psycopg.errors.DataError):
        return (f"{type(e).__name__} (SQLSTATE {e.sqlstate}): a captured value does not fit the source's current "
                "column type (was a column's type changed?)")
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


# ---- the catalog --------------------------------------------------------------------------

def columns(conn: psycopg.Connection, source: PgSource, where: str) -> list[PgColumn]:
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory, t.typname "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (regclass(source),)).fetchall()
    if not rows:
        raise SourceError(f"{where}: no table {source.qualified} in database {source.database}")
    return [PgColumn(r[0], r[1], r[2], r[3]) for r in rows]


def primary_key(conn: psycopg.Connection, source: PgSource) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY k.n", (regclass(source),)).fetchall()
    return tuple(r[0] for r in rows)


def regclass(source: PgSource) -> str:
    from psycopg import sql

    return sql.SQL(".").join([sql.Identifier(source.schema), sql.Identifier(source.table)]).as_string()


# ---- capture enable / disable / status -----------------------------------------------------

def enable(table: TableConfig, table_dir: str) -> Enabled:
    """Create the capture objects and take the base snapshot (module docstring: why they agree)."""
    from psycopg import sql

    where = where_of(table)
    base = postgres.base_path(table_dir)
    source, conn = connect(table)
    with conn:
        try:
            if os.path.exists(base):
                if changelog_exists(conn, objects_in_use(conn, source, where, sharing_ok=True)):
                    raise SourceError(f"{where}: capture is already enabled (its base snapshot is {base})")
                raise starts_over(where, table_dir, "capture was disabled after it started here")
            check_starts_here(where, table_dir)
            cols = columns(conn, source, where)
            keys = table.keys or primary_key(conn, source)
            check_columns(cols, keys, where)
            names = objects(source)
            check_owner(conn, source, names, where, table_dir)
            _create_waiting_for_writers(conn, source, names, keys, where, table_dir)
            os.makedirs(postgres.capture_dir(table_dir), exist_ok=True)
            durable_write(postgres.record_path(table_dir),
                           postgres.record_json(CaptureRecord(str(source), table.capture or "changelog", keys)).encode())
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            changelog = sql.Identifier(SCHEMA, names.changelog)
            seen = postgres.ranges(r[0] for r in conn.execute(sql.SQL("SELECT seq FROM {}").format(changelog)))
            query = select_query(cols, sql.SQL("{} r").format(table_ref(source)), changes=False)
            rows = write_parquet(base, row_pages(conn, query, cols, changes=False), extract_schema(cols, changes=False),
                                 _taken(seen))
            faults.point("postgres.base_written")
            _delete_taken(conn, names, seen)
            conn.commit()
        except _psycopg_error() as e:
            raise failure(where, e) from None
    return Enabled(keys, rows, sum(b - a + 1 for a, b in seen))


def starts_over(where: str, table_dir: str, why: str) -> SourceError:
    """The error of an enable over an earlier capture's warehouse: what happened between the two was
    never captured, so the table starts over."""
    return SourceError(f"{where}: {why}: changes made since were not captured, so the table starts over: remove "
                       f"{table_dir} (or name the table anew), then enable capture")


def check_starts_here(where: str, table_dir: str) -> None:
    """Refuse a capture's start (no base snapshot yet) where the warehouse already holds a table's
    extracts or Delta tables: an earlier capture whose base snapshot was removed since. The changes
    made between the two were never captured, the new base snapshot is never imported over the
    earlier one, and a new changelog's sequence starts again, ranking every new change below the
    earlier ones: the target would silently stay behind the source."""
    if extract_names(extracts_dir(table_dir)) or any(os.path.isdir(os.path.join(table_dir, name))
                                                      for name in (BASE, CHANGES, TARGET)):
        raise starts_over(where, table_dir, f"{table_dir} holds an earlier capture's batches or target, and not its "
                                            "base snapshot")


def disable(table: TableConfig) -> list[str]:
    """Remove every object `capture enable` made (the changelog and what it still holds, the sequence,
    the trigger, the function; the schema when nothing else is in it). The warehouse keeps its data."""
    from psycopg import sql

    where = where_of(table)
    source, conn = connect(table)
    removed = []
    with conn:
        try:
            names = objects_in_use(conn, source, where, sharing_ok=True)
            if names == objects(source):
                check_owner(conn, source, names, where, None)  # never another source's objects
            if single_value(conn, "SELECT to_regclass(%s)", (regclass(source),)) is not None:
                for trigger in (TRIGGER, TRUNCATE_TRIGGER):
                    conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(trigger),
                                                                                   table_ref(source)))
                    removed.append(f"trigger {trigger} on {source.qualified}")
            sharing = shared_with(conn, source, names)
            if sharing:  # an earlier cdc_assets' objects, which another table's capture still writes to
                removed.append(f"(kept {SCHEMA}.{names.changelog}, its sequence and function: the capture of "
                               f"{', '.join(sharing)} still writes to them)")
            else:
                conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(sql.Identifier(SCHEMA, names.function)))
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, names.changelog)))
                conn.execute(sql.SQL("DROP SEQUENCE IF EXISTS {}").format(sql.Identifier(SCHEMA, names.sequence)))
                removed += [f"function {SCHEMA}.{names.function}", f"table {SCHEMA}.{names.changelog}",
                            f"sequence {SCHEMA}.{names.sequence}"]
            conn.commit()
            empty = single_value(conn, "SELECT NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = "
                               "c.relnamespace WHERE n.nspname = %s) AND NOT EXISTS (SELECT 1 FROM pg_proc p "
                               "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s)",
                         (SCHEMA, SCHEMA))
            if empty:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {}").format(sql.Identifier(SCHEMA)))
                removed.append(f"schema {SCHEMA}")
            conn.commit()
        except _psycopg_error() as e:
            raise failure(where, e) from None
    return removed


def status(table: TableConfig) -> CaptureStatus:
    from psycopg import sql

    where = where_of(table)
    source, conn = connect(table)
    with conn:
        try:
            names = objects_in_use(conn, source, where)
            if not changelog_exists(conn, names):
                return CaptureStatus(table.name, str(source), False, 0, None)
            found = conn.execute(sql.SQL("SELECT count(*), clock_timestamp() - min(captured_at) FROM {}")
                                 .format(sql.Identifier(SCHEMA, names.changelog))).fetchone()
            waiting, oldest = found if found is not None else (0, None)
        except _psycopg_error() as e:
            raise failure(where, e) from None
    return CaptureStatus(table.name, str(source), True, int(waiting), oldest)


def changelog_exists(conn: psycopg.Connection, names: Objects) -> bool:
    from psycopg import sql

    qualified = sql.Identifier(SCHEMA, names.changelog).as_string(conn)
    return single_value(conn, "SELECT to_regclass(%s)", (qualified,)) is not None


def single_value(conn: psycopg.Connection, query: str, params: tuple) -> object:
    """The single value a query returns."""
    row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]  # a constant query, parameters apart
    return None if row is None else row[0]


def check_columns(cols: Sequence[PgColumn], keys: Sequence[str], where: str) -> None:
    names = [c.name for c in cols]
    if not keys:
        raise SourceError(f"{where}: the table has no primary key: list its key columns in 'keys'")
    missing = [k for k in keys if k not in names]
    if missing:
        raise SourceError(f"{where}: key column {missing[0]!r} is not a column of the table "
                          f"(columns: {', '.join(names)})")
    taken = [n for n in names if n in postgres.PSEUDO_COLUMNS]
    if taken:
        raise SourceError(f"{where}: column {taken[0]!r} has the name the captured changes' own column has")


LOCK_TRIES, LOCK_WAIT = 12, "5s"


def _create_waiting_for_writers(conn: psycopg.Connection, source: PgSource, names: Objects, keys: Sequence[str],
                                where: str, table_dir: str) -> None:
    """Create the capture objects. CREATE TRIGGER waits for the transactions writing the table, and
    while it waits, every new writer queues behind it: it waits a few seconds at a time, then lets
    the writers through and tries again."""
    import psycopg

    for attempt in range(LOCK_TRIES):
        try:
            conn.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
            _create(conn, source, names, keys, table_dir)
            conn.commit()
            return
        except psycopg.errors.LockNotAvailable:
            conn.rollback()
            if attempt == LOCK_TRIES - 1:
                raise SourceError(f"{where}: a transaction writing the table stayed open for "
                                  f"{LOCK_TRIES} tries of {LOCK_WAIT}: the trigger cannot be created until "
                                  "it ends; try again") from None


def _create(conn: psycopg.Connection, source: PgSource, names: Objects, keys: Sequence[str], table_dir: str) -> None:
    from psycopg import sql

    changelog, sequence = sql.Identifier(SCHEMA, names.changelog), sql.Identifier(SCHEMA, names.sequence)
    function = sql.Identifier(SCHEMA, names.function)

    def row(alias: str) -> sql.Composable:
        return sql.SQL("ROW({})").format(sql.SQL(", ").join(sql.SQL(alias + ".") + sql.Identifier(k) for k in keys))

    body = sql.SQL(
        "BEGIN\n"
        "  IF TG_OP = 'TRUNCATE' THEN\n"  # the statement trigger: the whole table, no row
        "    INSERT INTO {log} (op, image) VALUES ('T', '{{}}'::jsonb);\n"
        "    RETURN NULL;\n"
        "  END IF;\n"
        "  IF TG_OP = 'UPDATE' AND {old} IS NOT DISTINCT FROM {new} THEN\n"
        "    INSERT INTO {log} (op, image) VALUES ('U', to_jsonb(NEW));\n"
        "  ELSIF TG_OP = 'INSERT' THEN\n"
        "    INSERT INTO {log} (op, image) VALUES ('U', to_jsonb(NEW));\n"
        "  ELSE\n"  # a delete, or an update that changes the key: the old key goes, the new one comes
        "    INSERT INTO {log} (op, image) VALUES ('D', to_jsonb(OLD));\n"
        "    IF TG_OP = 'UPDATE' THEN\n"
        "      INSERT INTO {log} (op, image) VALUES ('U', to_jsonb(NEW));\n"
        "    END IF;\n"
        "  END IF;\n"
        "  RETURN NULL;\n"
        "END").format(old=row("OLD"), new=row("NEW"), log=changelog).as_string(conn)
    for statement in (
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)),
        sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(sequence),
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (seq bigint PRIMARY KEY DEFAULT nextval({}), "
                "xid xid8 NOT NULL DEFAULT pg_current_xact_id(), "
                "captured_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                "op \"char\" NOT NULL, image jsonb NOT NULL)").format(
            changelog, sql.Literal(f"{SCHEMA}.{names.sequence}")),
        sql.SQL("ALTER SEQUENCE {} OWNED BY {}.seq").format(sequence, changelog),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(changelog, sql.Literal(owner(source, table_dir))),
        sql.SQL("COMMENT ON SEQUENCE {} IS {}").format(sequence, sql.Literal(owner(source, table_dir))),
        # SECURITY DEFINER: the source's writers need no privilege on the changelog
        sql.SQL("CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER "
                "SET search_path = pg_catalog, pg_temp AS {}").format(function, sql.Literal(body)),
        sql.SQL("COMMENT ON FUNCTION {}() IS {}").format(function, sql.Literal(owner(source, table_dir))),
        sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(TRIGGER), table_ref(source)),
        sql.SQL("CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
            sql.Identifier(TRIGGER), table_ref(source), function),
        # a TRUNCATE fires no row trigger: a statement trigger records it
        sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(TRUNCATE_TRIGGER), table_ref(source)),
        sql.SQL("CREATE TRIGGER {} AFTER TRUNCATE ON {} FOR EACH STATEMENT EXECUTE FUNCTION {}()").format(
            sql.Identifier(TRUNCATE_TRIGGER), table_ref(source), function),
    ):
        conn.execute(statement)


def table_ref(source: PgSource):
    from psycopg import sql

    return sql.Identifier(source.schema, source.table)


def _psycopg_error() -> type[BaseException]:
    import psycopg

    return psycopg.Error


# ---- extraction -------------------------------------------------------------------------

def extract_new_rows(table: TableConfig, table_dir: str) -> Extract | None:
    """Write the changelog rows no earlier extract took as the next extract (None: no new rows);
    then delete them from the changelog (module docstring: why nothing is lost or doubled)."""
    from psycopg import sql

    where = where_of(table)
    folder = extracts_dir(table_dir)
    base = postgres.base_path(table_dir)
    if not os.path.exists(base):
        raise SourceError(f"{where}: capture is not enabled: run `cdc-assets capture enable {table.name}` first")
    count, last = _last_taken(folder, base)
    source, conn = connect(table)
    with conn:
        try:
            names = objects_in_use(conn, source, where)
            if not changelog_exists(conn, names):
                raise SourceError(f"{where}: capture is not enabled: its changelog is gone (`cdc-assets capture "
                                  "disable` ran, or it was dropped)")
            cols = columns(conn, source, where)
            _delete_taken(conn, names, last)  # rows a crash left behind after the extract that took them
            conn.commit()
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            changelog = sql.Identifier(SCHEMA, names.changelog)
            taken = postgres.ranges(r[0] for r in conn.execute(sql.SQL("SELECT seq FROM {}").format(changelog)))
            if not taken:
                conn.commit()
                return None
            name = f"extract-{count + 1:08d}.parquet"  # names sort in extraction order: arrival order
            rows = _write_changes(conn, source, names, cols, os.path.join(folder, name), _taken(taken))
            faults.point("postgres.extracted")  # the extract is in the warehouse; the changelog still holds its rows
            _delete_taken(conn, names, taken)
            conn.commit()
        except _psycopg_error() as e:
            raise failure(where, e) from None
    return Extract(name, rows)


def _write_changes(conn: psycopg.Connection, source: PgSource, names: Objects, cols: Sequence[PgColumn], path: str,
                   metadata: dict[bytes, bytes]) -> int:
    """The changelog's rows as the extract `path`, read through the source's current row type. A
    value that no longer fits its column's type (the column was altered since) fails that read: the
    rows are then read again with each row's misfits found and left out (a subtransaction per row,
    so only then), and the changes holding them are marked for quarantine (postgres.REJECT_COLUMN)."""
    import psycopg
    from psycopg import sql

    changelog = sql.Identifier(SCHEMA, names.changelog)
    try:
        with conn.transaction():  # a savepoint: the transaction's snapshot, and what it took, stay
            return write_parquet(path, row_pages(conn, select_query(cols, sql.SQL(
                "{} l, LATERAL jsonb_populate_record(NULL::{}, l.image) r").format(changelog, table_ref(source)),
                changes=True), cols, changes=True), extract_schema(cols, changes=True), metadata)
    except psycopg.errors.DataError:
        pass
    conn.execute(sql.SQL(
        "CREATE OR REPLACE FUNCTION pg_temp.cdc_assets_misfits(image jsonb) RETURNS text[] LANGUAGE plpgsql AS {}")
        .format(sql.Literal(sql.SQL(
            "DECLARE bad text[] := '{{}}'; c text;\n"
            "BEGIN\n"
            "  BEGIN\n"
            "    PERFORM jsonb_populate_record(NULL::{t}, image);\n"
            "    RETURN bad;\n"
            "  EXCEPTION WHEN data_exception THEN NULL;\n"
            "  END;\n"
            "  FOR c IN SELECT jsonb_object_keys(image) LOOP\n"
            "    BEGIN\n"
            "      PERFORM jsonb_populate_record(NULL::{t}, jsonb_build_object(c, image -> c));\n"
            "    EXCEPTION WHEN data_exception THEN bad := bad || c;\n"
            "    END;\n"
            "  END LOOP;\n"
            "  RETURN bad;\n"
            "END").format(t=table_ref(source)).as_string(conn))))
    rows = sql.SQL("{} l, LATERAL (SELECT pg_temp.cdc_assets_misfits(l.image) AS bad) m, "
                   "LATERAL jsonb_populate_record(NULL::{}, l.image - m.bad) r").format(changelog, table_ref(source))
    query = select_query(cols, rows, changes=True, misfits=sql.SQL("m.bad"))
    return write_parquet(path, row_pages(conn, query, cols, changes=True), extract_schema(cols, changes=True), metadata)


def _last_taken(folder: str, base: str) -> tuple[int, Ranges]:
    """(how many extracts there are, the sequence numbers the last one, or else the base, took)."""
    import pyarrow.parquet as pq

    names = extract_names(folder)
    meta = pq.read_metadata(os.path.join(folder, names[-1]) if names else base).metadata or {}
    return len(names), postgres.decode_ranges(json.loads(meta.get(TAKEN_KEY, b"[]")))


def _taken(taken: Ranges) -> dict[bytes, bytes]:
    return {TAKEN_KEY: json.dumps(postgres.encode_ranges(taken)).encode()}


def extract_names(folder: str) -> list[str]:
    """The extracts written so far, in the order they were written."""
    return sorted(n for n in os.listdir(folder) if n.endswith(".parquet") and not n.startswith((".", "_"))) \
        if os.path.isdir(folder) else []


def _delete_taken(conn: psycopg.Connection, names: Objects, taken: Ranges) -> None:
    from psycopg import sql

    if taken:
        conn.execute(sql.SQL("DELETE FROM {} l USING unnest(%s::bigint[], %s::bigint[]) t(lo, hi) "
                             "WHERE l.seq BETWEEN t.lo AND t.hi").format(sql.Identifier(SCHEMA, names.changelog)),
                     ([a for a, _ in taken], [b for _, b in taken]))


def select_query(cols: Sequence[PgColumn], source, changes: bool, misfits=None):
    """The query of a base's rows (`r` the source) or of changelog rows (`l`, with `r` the row they
    hold, and `misfits` the names of the columns whose values do not fit, if found)."""
    from psycopg import sql

    exprs = []
    for c in cols:
        ref = sql.SQL("r.") + sql.Identifier(c.name)
        if postgres.as_json(c):
            ref = sql.SQL("to_jsonb({})::text").format(ref)
        elif postgres.as_text(c) or _read_as_text(c):
            ref = sql.SQL("{}::text").format(ref)
        exprs.append(ref)
    head = [sql.SQL("l.seq"), sql.SQL("l.op"), misfits or sql.SQL("NULL::text[]")] if changes else []
    order = sql.SQL(" ORDER BY l.seq") if changes else sql.SQL("")
    return sql.SQL("SELECT {} FROM {}{}").format(sql.SQL(", ").join(head + exprs), source, order)


def _read_as_text(column: PgColumn) -> bool:
    """Numbers, dates and times of a type PostgreSQL holds values of that no target type can (numeric
    NaN, dates and timestamps at ±infinity, years past 9999 or before 1) are read as their text (ISO,
    in UTC: see connect) and typed by the extract's reader, which sends a change whose value does not
    fit to quarantine naming its column; a typed read would fail the whole extraction at that row,
    every time."""
    type_ = postgres.column_type(column)
    return type_.startswith("decimal(") or type_ in ("date", "timestamp", "timestamp_ntz")


def _field(column: PgColumn) -> pa.Field:
    import pyarrow as pa

    type_ = postgres.column_type(column)
    if _read_as_text(column):
        return pa.field(column.name, pa.string(), metadata={DECLARED_TYPE: type_.encode()})
    return pa.field(column.name, {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                                  "double": pa.float64(), "binary": pa.binary()}.get(type_, pa.string()))


def extract_schema(cols: Sequence[PgColumn], changes: bool) -> pa.Schema:
    import pyarrow as pa

    head = [pa.field(postgres.OP_COLUMN, pa.string()), pa.field(postgres.SEQUENCE_COLUMN, pa.string()),
            pa.field(postgres.REJECT_COLUMN, pa.string())] if changes else []
    return pa.schema(head + [_field(c) for c in cols])


def row_pages(conn: psycopg.Connection, query, cols: Sequence[PgColumn], changes: bool) -> Iterator[list[list]]:
    """The query's rows, a page at a time, as columns; a change's op, sequence and reason to be
    quarantined first."""
    ops = {"U": "UPSERT", "D": "DELETE", "T": "TRUNCATE"}
    types = {c.name: c.formatted for c in cols}
    with conn.cursor(name="cdc_assets_read") as cur:  # server-side: a long history is never held whole
        cur.itersize = PAGE_ROWS
        cur.execute(query)
        while True:
            rows = cur.fetchmany(PAGE_ROWS)
            if not rows:
                return
            if changes:
                rows = [(ops[r[1]], format(r[0], "x"), postgres.misfit_reason(r[2], types) if r[2] else None, *r[3:])
                        for r in rows]
            yield [list(c) for c in zip(*rows)]


def write_parquet(final: str, pages: Iterable[list[list]], schema: pa.Schema, metadata: dict[bytes, bytes]) -> int:
    """The pages as one Parquet file under `final`, complete and durable or not there at all, with
    `metadata` (what it took from the source) in its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = os.path.dirname(final)
    os.makedirs(folder, exist_ok=True)
    schema = schema.with_metadata(metadata)
    partial = os.path.join(folder, f".{os.path.basename(final)}.partial")
    written = 0
    with pq.ParquetWriter(partial, schema) as writer:
        for page in pages:
            writer.write_batch(pa.record_batch([pa.array(v, f.type) for v, f in zip(page, schema)], schema=schema))
            written += len(page[0])
    _fsync(partial)
    os.replace(partial, final)
    _fsync(folder)
    return written


def durable_write(path: str, data: bytes) -> None:
    partial = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.partial")
    with open(partial, "wb") as fh:
        fh.write(data)
    _fsync(partial)
    os.replace(partial, path)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
