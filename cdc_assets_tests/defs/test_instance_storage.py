"""The instance's SQLite storages, as a batch run uses them: what each run pays to open and write them."""
from __future__ import annotations

import dagster as dg
import sqlalchemy
from alembic.script import ScriptDirectory

from cdc_assets.defs import dagster_fixes  # noqa: F401 - what every run's process imports
from cdc_assets.defs.pool_watch import ensure_settings


@dg.asset
def numbers() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"rows": 3})


def test_a_second_run_in_a_process_makes_no_new_database_engine_and_reads_no_migration_script(tmp_path, monkeypatch):
    home = str(tmp_path / "home")
    ensure_settings(home)
    monkeypatch.setenv("DAGSTER_HOME", home)
    made, read = [], []
    create_engine, from_config = sqlalchemy.create_engine, ScriptDirectory.from_config
    monkeypatch.setattr(sqlalchemy, "create_engine", lambda *a, **k: made.append(a[0]) or create_engine(*a, **k))
    monkeypatch.setattr(ScriptDirectory, "from_config",
                        classmethod(lambda cls, config: read.append(config) or from_config(config)))

    def one_run() -> None:
        with dg.DagsterInstance.get() as instance:
            assert dg.materialize([numbers], instance=instance).success
            assert instance.get_latest_materialization_event(numbers.key).asset_materialization.metadata["rows"].value == 3

    one_run()
    assert made, "the first run opens the home's databases"
    # the run, event and schedule storages share one scripts folder: it is read once (or was already)
    assert len(read) <= 1, read
    made.clear()
    read.clear()
    one_run()
    # every run writes a dozen events and opens its storages: each database's one engine serves them all
    assert made == []
    assert read == []


def test_a_throw_away_instance_is_stamped_at_the_head_revision_without_reading_the_migration_scripts(monkeypatch):
    """A throw-away instance (`DagsterInstance.ephemeral()`, as tests and `dg.materialize` use): its in-memory storages are
    stamped with the newest schema revision as they are made, which read and ran every migration
    script (about ninety files, twice a run) each time."""
    from dagster._core.storage.sql import check_alembic_revision, get_alembic_config

    with dg.DagsterInstance.ephemeral() as first:  # the scripts are read by the first instance of a process
        assert dg.materialize([numbers], instance=first).success
    read = []
    from_config = ScriptDirectory.from_config
    monkeypatch.setattr(ScriptDirectory, "from_config",
                        classmethod(lambda cls, config: read.append(config) or from_config(config)))
    with dg.DagsterInstance.ephemeral() as instance:
        assert dg.materialize([numbers], instance=instance).success
        storage = instance.event_log_storage
        with storage.index_connection() as conn:  # the schema's revision is the newest, as stamping gives it
            db_revision, head = check_alembic_revision(
                get_alembic_config(dg._core.storage.event_log.sql_event_log.__file__, "sqlite/alembic/alembic.ini"),
                conn)
        assert db_revision == head
    assert read == []


def test_the_home_databases_do_not_wait_for_the_disk_at_each_event(tmp_path, monkeypatch):
    """A run writes each of its events in a transaction of its own: in SQLite's default mode each
    commit waits for the disk. The home's databases keep the write-ahead log Dagster gives them and
    sync it at its checkpoints only: a killed process loses nothing it committed, and a power cut at
    most the last events; the warehouse, not the instance, says what was applied."""
    home = str(tmp_path / "home")
    ensure_settings(home)
    with dg.DagsterInstance.from_config(home) as instance:
        assert dg.materialize([numbers], instance=instance).success
        for connection in (instance.run_storage.connect, instance.event_log_storage.index_connection,
                           instance.schedule_storage.connect):
            with connection() as conn:
                assert conn.execute(sqlalchemy.text("PRAGMA journal_mode")).scalar() == "wal"
                assert conn.execute(sqlalchemy.text("PRAGMA synchronous")).scalar() == 1  # NORMAL
