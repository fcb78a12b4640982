"""Corrections to the Dagster this product pins, applied when the wiring is imported.

A step waiting for a pool slot asks the instance again after a back-off (1 s growing to 15 s), and
between two asks its executor sleeps for `interval_to_next_pending_claim_check()`. Dagster 1.13
computes that as `min(0, time left)`, never above zero, so a waiting run looped without sleeping
and kept a core busy for as long as it waited (dagster-io/dagster pull request 20367 found the same
and was closed unmerged). The correction returns the time left until the earliest ask.

The SQLite storages of an instance (runs, events, schedules) make a new SQLAlchemy engine for every
connection they open, and a run opens about a hundred and fifty: each new engine compiles every
statement anew (SQLAlchemy caches compiled statements per engine), and opening the instance reads
and parses every Alembic migration script twice to learn the head revision (a throw-away instance's
in-memory databases, stamped with that revision as they are made, ran every script too). Both were a
large part of a batch run's CPU (a sampled profile of forked runs: about a quarter). Here one engine serves
each database file: its pool stays `NullPool`, so it holds no connection, and a process forked
from one that made it (the run launcher's fork server) shares nothing open with its parent; and the
migration scripts are read once per process.

Each event a run writes is a transaction of its own, and in SQLite's default mode each commit waits
for the disk; so does the checkpoint SQLite makes when a process closes its last connection to a
database, which, connections not being pooled, follows most transactions here. A small batch's run
made 240 syncs (0.4 to 0.7 s on a busy disk). The databases are in write-ahead-log mode (Dagster
makes them so), where `synchronous=NORMAL` leaves the commits unsynced and syncs at checkpoints only
(192 syncs left): a killed process loses nothing it committed, and a power cut at most the last
events, never the database's consistency; what was applied is the warehouse's to say, not the
instance's.
"""
from __future__ import annotations

import functools
import sqlite3
import time

import sqlalchemy
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.storage import sql as dagster_sql
from dagster._core.storage.event_log import in_memory as in_memory_event_log
from dagster._core.storage.event_log.sqlite import consolidated_sqlite_event_log, sqlite_event_log
from dagster._core.storage.runs import in_memory as in_memory_runs
from dagster._core.storage.runs.sqlite import sqlite_run_storage
from dagster._core.storage.schedules.sqlite import sqlite_schedule_storage
from sqlalchemy.pool import NullPool


def _interval_to_next_pending_claim_check(self: InstanceConcurrencyContext) -> float:
    if not self._pending_claims or not self._pending_timeouts:
        return 0.0
    return max(0.0, min(self._pending_timeouts.values()) - time.time())


InstanceConcurrencyContext.interval_to_next_pending_claim_check = _interval_to_next_pending_claim_check  # type: ignore[method-assign]


@functools.lru_cache(maxsize=64)  # a home's few databases; a per-run event database per recent run
def _engine(url: str, connect_args: tuple) -> sqlalchemy.engine.Engine:
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=dict(connect_args))
    if engine.dialect.name == "sqlite":
        sqlalchemy.event.listen(engine, "connect", _sync_at_checkpoints)
    return engine


def _sync_at_checkpoints(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")  # per connection; see the module's docstring
    cursor.close()


def _create_engine(url, *args, **kwargs):
    """The one engine of `url` when it is asked for as the SQLite storages ask (NullPool, at most
    connect arguments); any other engine as SQLAlchemy makes it."""
    if args or kwargs.get("poolclass") is not NullPool or set(kwargs) - {"poolclass", "connect_args"}:
        return sqlalchemy.create_engine(url, *args, **kwargs)
    return _engine(str(url), tuple(sorted((kwargs.get("connect_args") or {}).items())))


for _module in (consolidated_sqlite_event_log, sqlite_event_log, sqlite_run_storage, sqlite_schedule_storage):
    _module.create_engine = _create_engine  # type: ignore[attr-defined]


_scripts: dict[tuple, ScriptDirectory] = {}


class _Scripts:
    """`ScriptDirectory` as `check_alembic_revision` uses it: each scripts folder read once. The run,
    event and schedule storages each have their own alembic.ini, with the same settings and one
    scripts folder: the settings, not the file's folder (`here`, already filled into any setting
    that uses it), say which scripts are read."""

    @staticmethod
    def from_config(config) -> ScriptDirectory:
        where = tuple(sorted((k, v) for k, v in config.get_section(config.config_ini_section, {}).items()
                             if k != "here"))
        if where not in _scripts:
            _scripts[where] = ScriptDirectory.from_config(config)
        return _scripts[where]


dagster_sql.ScriptDirectory = _Scripts  # type: ignore[assignment,misc]


def _stamp_alembic_rev(alembic_config, conn, rev: str = "head") -> None:
    """Stamp the version table as alembic's `stamp` command does, with the scripts read once: the
    command runs the migration environment, which loads every migration script again."""
    with dagster_sql._alembic_lock:
        try:
            MigrationContext.configure(conn).stamp(_Scripts.from_config(alembic_config), rev)
        except (sqlite3.DatabaseError, sqlalchemy.exc.DatabaseError) as e:
            # another process made the new database's version table first, as the command allows
            if "table alembic_version already exists" not in str(e):
                raise


# A throw-away instance (`DagsterInstance.ephemeral()`, as tests use) stamps its two in-memory databases.
for _module in (in_memory_event_log, in_memory_runs, consolidated_sqlite_event_log, sqlite_event_log,
                sqlite_run_storage, sqlite_schedule_storage):
    _module.stamp_alembic_rev = _stamp_alembic_rev  # type: ignore[attr-defined]
