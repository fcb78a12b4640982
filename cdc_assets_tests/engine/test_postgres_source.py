"""A table captured from a live PostgreSQL (`source: postgresql://...`, `capture: changelog`), against
a throw-away cluster (cdc_assets_tests/postgres.py): `capture enable` takes the base and starts the
changelog, each run extracts what was captured into a batch, and the target equals `SELECT *` of the
source after every run, whatever the workload (inserts, updates that change keys, deletes, truncates,
rollbacks, sessions interleaving); a crash between the extract and the changelog's delete loses and doubles
nothing; `capture disable` removes what enable made."""
from __future__ import annotations

import decimal
import os
import random
import subprocess
import uuid
from pathlib import Path

import dagster as dg
import pytest

from cdc_assets.engine import postgres_source, sources
from cdc_assets.engine.landing import registered
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.postgres_source import (
    LOOKALIKES,
    MARKS,
    SOURCE_DDL,
    answers,
    assert_target_equals_source,
    capture,
    cli_run,
    enabled,
    extracted_sequences,
    insert,
    interleaved_rounds,
    lookalike_changes,
    lookalike_rows,
    lookalike_tables,
    orders_table,
    reload,
    run_ok,
    taken_sequences,
)
from cdc_assets_tests.support.runs import run_table
from cdc_assets_tests.support.warehouse import target_rows

pytestmark = MARKS


@pytest.fixture
def orders(postgres_db, workdir):
    """(cluster, database, cfg) with public.orders created and a table ORDERS captured from it."""
    return orders_table(postgres_db, workdir)


def test_enable_then_runs_keep_the_target_equal_to_the_source_with_the_catalogs_types(orders, capsys):
    cluster, db, cfg = orders
    rng = random.Random(7)
    cfg = enabled(orders, 5, rng)
    assert cfg.table("ORDERS").keys == ("region", "id")  # the primary key
    with cluster.connect(db) as conn:
        insert(conn, 10, "us", rng)
        conn.execute("UPDATE public.orders SET amount = 1.5, note = 'x' WHERE id = 1")
        conn.execute("UPDATE public.orders SET region = 'us' WHERE id = 2")  # a key change
        conn.execute("DELETE FROM public.orders WHERE id = 3")
    capsys.readouterr()
    assert capture(cfg, "status") == 0
    # an insert, an update, a key change (a delete and an insert), a delete
    assert capsys.readouterr().out.startswith("ORDERS: 5 changes waiting, oldest ")
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    from deltalake import DeltaTable
    types = {f.name: str(f.type) for f in DeltaTable(os.path.join(cfg.table_dir("ORDERS"), "target")).schema().fields}
    assert {k: types[k] for k in ("id", "amount", "placed", "due", "day", "paid", "qty", "ratio", "blob", "doc")} \
        == {"id": "PrimitiveType(\"integer\")", "amount": "PrimitiveType(\"decimal(12,2)\")",
            "placed": "PrimitiveType(\"timestamp\")", "due": "PrimitiveType(\"timestamp_ntz\")",
            "day": "PrimitiveType(\"date\")", "paid": "PrimitiveType(\"boolean\")", "qty": "PrimitiveType(\"long\")",
            "ratio": "PrimitiveType(\"double\")", "blob": "PrimitiveType(\"binary\")",
            "doc": "PrimitiveType(\"string\")"}
    # nothing new: no batch
    assert run_ok(cfg).new_batch is None


def test_random_workloads_of_two_interleaved_sessions_with_a_rollback_leave_the_target_equal_to_the_source(orders):
    cluster, db, cfg = orders
    rng = random.Random(2026)
    cfg = enabled(orders, 8, rng)
    interleaved_rounds(cluster, db, cfg, rng)
    assert postgres_source.status(cfg.table("ORDERS")).waiting == 0


def test_a_run_killed_between_the_extract_and_the_sources_release_loses_and_doubles_nothing(orders_by_method, cli):
    """Killed once the extract is in the warehouse and before the changelog's delete (or the slot's
    confirmation): the source still holds the changes, and the next run takes each exactly once."""
    cluster, db, cfg = orders_by_method
    rng = random.Random(5)
    cfg = enabled(orders_by_method, 0, rng)
    with cluster.connect(db) as conn:
        for i in range(6):
            insert(conn, i, "eu", rng)
        conn.execute("UPDATE public.orders SET id = 100 WHERE id = 0")
    killed = cli_run(cli, cfg, crash_at="postgres.extracted")
    assert killed.returncode == -9, killed.stderr
    # the extract is in the warehouse, and the source still holds its changes (the changelog's rows, or
    # the slot, which status reads from its confirmed position)
    assert sources.status(cfg.table("ORDERS")).waiting == 8
    with cluster.connect(db) as conn:
        conn.execute("DELETE FROM public.orders WHERE id = 1")
        conn.execute("UPDATE public.orders SET amount = 7 WHERE id = 2")
    done = cli_run(cli, cfg)
    assert done.returncode == 0, done.stderr
    assert_target_equals_source(cluster, db, cfg)
    # each captured change is in exactly one extract: the changes left behind were recognised, not taken again
    taken = extracted_sequences(cfg)
    assert len(taken) == len(set(taken)) == 10
    assert [len(b.files) for b in registered(cfg.table_dir("ORDERS"))] == [2]
    assert sources.status(cfg.table("ORDERS")).waiting == 0


def test_enable_killed_after_the_base_is_written_is_finished_by_the_next_extraction(orders, cli):
    cluster, db, cfg = orders
    rng = random.Random(3)
    with cluster.connect(db) as conn:
        for i in range(4):
            insert(conn, i, "eu", rng)
    env = {**os.environ, "CDC_ASSETS_CRASH_AT": "postgres.base_written"}
    killed = subprocess.run([*cli, "capture", "enable", "--config", cfg.path], env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    cfg = reload(cfg)
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET note = 'after' WHERE id = 3")
    assert cli_run(cli, cfg).returncode == 0
    assert_target_equals_source(cluster, db, cfg)
    assert capture(cfg, "enable") == 1  # already enabled: it says so, and changes nothing


def test_disable_removes_every_object_enable_made(orders):
    cluster, db, cfg = orders

    def objects() -> list:
        with cluster.connect(db) as conn:
            return conn.execute(
                "SELECT 'schema' FROM pg_namespace WHERE nspname = 'cdc_assets' UNION ALL "
                "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'cdc_assets%%' UNION ALL "
                "SELECT 'function' FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'cdc_assets' UNION ALL "
                "SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'cdc_assets'").fetchall()

    before = objects()
    assert capture(cfg, "enable") == 0
    assert sorted(r[0] for r in objects()) == ["S", "cdc_assets_capture", "cdc_assets_capture_truncate",
                                                  "function", "i", "r", "schema"]
    assert capture(cfg, "disable") == 0
    assert objects() == before == []
    with cluster.connect(db) as conn:  # the source's writes no longer fire anything
        insert(conn, 1, "eu", random.Random(1))


def test_enable_while_a_writer_holds_the_table_says_so_instead_of_blocking_every_writer(orders, monkeypatch):
    cluster, db, cfg = orders
    monkeypatch.setattr(postgres_source, "LOCK_TRIES", 2)
    monkeypatch.setattr(postgres_source, "LOCK_WAIT", "100ms")
    writer = cluster.connect(db, autocommit=False)
    insert(writer, 1, "eu", random.Random(1))
    with pytest.raises(postgres_source.SourceError, match="a transaction writing the table stayed open"):
        postgres_source.enable(cfg.table("ORDERS"), cfg.table_dir("ORDERS"))
    writer.commit()  # the writer was never failed
    writer.close()
    assert capture(cfg, "enable") == 0
    cfg = reload(cfg)
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)


def test_a_run_before_capture_enable_fails_naming_the_command(orders):
    cluster, db, cfg = orders
    outcome = run_table(cfg, "ORDERS")
    assert not outcome.ok
    assert "run `cdc-assets capture enable ORDERS` first" in outcome.error


def test_the_landing_sensor_extracts_what_was_captured_and_its_runs_apply_it(orders):
    sensor_rounds(orders)


def sensor_rounds(orders) -> None:
    """The landing sensor's ticks extract what was captured and their runs apply it, round after
    round; with nothing captured, nothing runs."""
    import dagster as dg

    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets_tests.defs.test_sensor import Daemon

    cluster, db, cfg = orders
    rng = random.Random(11)
    cfg = enabled(orders, 4, rng)
    defs = build_definitions(cfg)
    # the source shows in the asset graph, upstream of changes
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey(["ORDERS", "changes"])).parent_keys == {dg.AssetKey(["ORDERS", "source"])}
    with dg.instance_for_test() as instance:
        daemon = Daemon(defs, instance, table="ORDERS")
        for round_ in range(2):
            with cluster.connect(db) as conn:
                insert(conn, 50 + round_, "us", rng)
                conn.execute("UPDATE public.orders SET id = id + 100 WHERE id = %s", (round_,))
                conn.execute("DELETE FROM public.orders WHERE id = %s", (2 + round_,))
            assert daemon.settle() > 0
            assert_target_equals_source(cluster, db, cfg)
        assert daemon.settle() == 0  # nothing captured: nothing runs


def test_a_truncate_of_the_source_is_captured_and_ranks_between_the_changes_around_it(orders):
    cluster, db, cfg = orders
    rng = random.Random(13)
    cfg = enabled(orders, 3, rng)
    with cluster.connect(db) as conn:
        insert(conn, 7, "us", rng)
        conn.execute("UPDATE public.orders SET note = 'before' WHERE id = 1")
        conn.execute("TRUNCATE public.orders")
        insert(conn, 1, "eu", rng)  # after the truncate: it stays
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    assert len(target_rows(cfg, "ORDERS")) == 1


def test_a_column_added_to_the_source_is_added_to_the_target(orders):
    cluster, db, cfg = orders
    rng = random.Random(17)
    cfg = enabled(orders, 2, rng)
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET note = 'before' WHERE id = 0")  # captured without the column
        conn.execute("ALTER TABLE public.orders ADD COLUMN extra text")
        conn.execute("UPDATE public.orders SET extra = 'x' WHERE id = 1")
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)


def test_after_disable_a_run_and_a_second_enable_say_what_happened(orders, capsys):
    cluster, db, cfg = orders
    cfg = enabled(orders, 2, random.Random(19))
    assert capture(cfg, "disable") == 0
    outcome = run_table(cfg, "ORDERS")
    assert not outcome.ok and "capture is not enabled" in outcome.error and "capture disable" in outcome.error
    capsys.readouterr()
    assert capture(cfg, "enable") == 1
    assert "was disabled" in capsys.readouterr().err


def test_enable_over_an_earlier_capture_whose_base_snapshot_was_removed_says_the_table_starts_over(
        orders_by_method, capsys):
    """The warehouse still holds an earlier capture's batches and target, and not its base snapshot (its
    capture folder was removed, not the table's): a new capture there would never import its base over
    the earlier one, and a new changelog would rank its changes below the earlier ones', so the target
    would silently stay behind. Enable refuses, makes nothing and says to remove the table's folder;
    done so, the table starts over equal to the source."""
    import shutil

    from cdc_assets.core.postgres import capture_dir

    cluster, db, cfg = orders_by_method
    rng = random.Random(71)
    cfg = enabled(orders_by_method, 2, rng)
    with cluster.connect(db) as conn:
        insert(conn, 5, "us", rng)
    run_ok(cfg)
    assert capture(cfg, "disable") == 0
    with cluster.connect(db) as conn:  # not captured: capture is disabled
        conn.execute("DELETE FROM public.orders WHERE id = 0")
    table_dir = cfg.table_dir("ORDERS")
    shutil.rmtree(capture_dir(table_dir))
    capsys.readouterr()
    assert capture(cfg, "enable") == 1
    err = capsys.readouterr().err
    assert "the table starts over" in err and f"remove {table_dir}" in err, err
    assert not sources.status(cfg.table("ORDERS")).enabled
    shutil.rmtree(table_dir)
    assert capture(cfg, "enable") == 0
    run_ok(reload(cfg))
    assert_target_equals_source(cluster, db, cfg)


def test_a_large_transaction_is_extracted_page_by_page_into_one_batch(orders, monkeypatch):
    cluster, db, cfg = orders
    monkeypatch.setattr(postgres_source, "PAGE_ROWS", 100)
    rng = random.Random(23)
    cfg = enabled(orders, 0, rng)
    with cluster.connect(db, autocommit=False) as conn:
        for i in range(450):
            insert(conn, i, rng.choice(["eu", "us"]), rng)
        conn.execute("UPDATE public.orders SET qty = 0 WHERE id % 3 = 0")
        conn.execute("DELETE FROM public.orders WHERE id % 7 = 0")
        conn.commit()
    assert run_ok(cfg).new_batch == "b000001"
    assert_target_equals_source(cluster, db, cfg)
    # every change in the one extract, in the changelog's order
    assert taken_sequences(cfg) == sorted(taken_sequences(cfg)) and len(taken_sequences(cfg)) == 450 + 150 + 65


def test_values_the_target_cannot_hold_go_to_quarantine_and_the_rest_applies(orders):
    """PostgreSQL holds values no target type can: numeric NaN, timestamps and dates at ±infinity.
    A change holding one goes to quarantine naming its column; the changes around it apply, and the
    next batch is taken as usual (the table never stops)."""
    from deltalake import DeltaTable

    cluster, db, cfg = orders
    rng = random.Random(11)
    cfg = enabled(orders, 3, rng)
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET amount = 'NaN' WHERE id = 0")
        conn.execute("UPDATE public.orders SET placed = 'infinity' WHERE id = 1")
        conn.execute("UPDATE public.orders SET day = '-infinity' WHERE id = 2")
        insert(conn, 7, "us", rng)
    before = {r["id"]: r for r in target_rows(cfg, "ORDERS")} if os.path.exists(
        os.path.join(cfg.table_dir("ORDERS"), "target")) else {}
    outcome = run_table(cfg, "ORDERS")
    assert outcome.ok, outcome
    quarantine = DeltaTable(os.path.join(cfg.table_dir("ORDERS"), "quarantine")).to_pyarrow_table().to_pylist()
    reasons = sorted(r["_cdc_reason"] for r in quarantine)
    assert len(reasons) == 3 and all("does not fit" in r for r in reasons), reasons
    assert {c for c in ("amount", "placed", "day") if any(repr(c) in r for r in reasons)} == {"amount", "placed", "day"}
    target = {r["id"]: r for r in target_rows(cfg, "ORDERS")}
    assert set(target) == {0, 1, 2, 7}  # the valid change of the same batch applied; the others keep their rows
    for i in (0, 1, 2):
        if before:
            assert target[i] == before[i]
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET amount = 2.5 WHERE id = 0")
    run_ok(cfg)
    assert target_rows_by_id(cfg)[0]["amount"] == decimal.Decimal("2.50")


def target_rows_by_id(cfg) -> dict:
    return {r["id"]: r for r in target_rows(cfg, "ORDERS")}


def narrowed_qty(orders, rng: random.Random):
    """Three rows captured, then a change whose `qty` (bigint) is captured at 2**40 before the source
    narrows `qty` to integer, which cannot hold it; then a valid change. The configuration as it then
    reads."""
    cluster, db, cfg = orders
    cfg = enabled(orders, 3, rng)
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET qty = id")  # values an integer holds
    run_ok(cfg)
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET qty = 2 ^ 40 WHERE id = 0")
        conn.execute("UPDATE public.orders SET note = 'kept' WHERE id = 1")
        conn.execute("ALTER TABLE public.orders ALTER COLUMN qty TYPE integer USING (qty % 1000)::integer")
        conn.execute("INSERT INTO public.orders (id, region, qty) VALUES (7, 'us', 3)")
    return cfg


def assert_narrowed_qty_quarantined_and_the_rest_applied(orders, cfg, before: dict) -> None:
    """The change that no longer fits is in quarantine, naming the table, its extract, its row and
    the column; the valid changes around it applied; the next run takes the next changes."""
    from deltalake import DeltaTable

    cluster, db, _ = orders
    outcome = run_table(cfg, "ORDERS")
    assert outcome.ok, outcome
    quarantine = DeltaTable(os.path.join(cfg.table_dir("ORDERS"), "quarantine")).to_pyarrow_table().to_pylist()
    assert len(quarantine) == 1, quarantine
    bad = quarantine[0]
    assert bad["table"] == "ORDERS" and bad["_cdc_file"].startswith("extract-") and bad["_cdc_line"] == 1
    assert "'qty'" in bad["_cdc_reason"] and "integer" in bad["_cdc_reason"], bad["_cdc_reason"]
    assert str(2 ** 40) not in bad["_cdc_reason"]  # a row's value is never in a reason (reasons are logged)
    target = target_rows_by_id(cfg)
    assert set(target) == {0, 1, 2, 7}
    assert target[0] == before[0]  # the change that does not fit did not apply
    assert target[1]["note"] == "kept"
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET qty = 5 WHERE id = 0")
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)


def test_a_captured_value_the_altered_source_column_cannot_hold_goes_to_quarantine_and_extraction_goes_on(orders):
    cfg = narrowed_qty(orders, random.Random(29))
    assert_narrowed_qty_quarantined_and_the_rest_applied(orders, cfg, target_rows_by_id(cfg))


def test_a_truncate_of_the_source_closes_the_open_versions_of_the_history(orders, workdir):
    from cdc_assets_tests.engine.test_history import history_rows

    cluster, db, cfg = orders
    cfg = write_config(workdir, [{"name": "ORDERS", "source": cluster.url(db, "public.orders"),
                                                    "history": True}])
    cfg = enabled((cluster, db, cfg), 2, random.Random(31))
    run_ok(cfg)
    with cluster.connect(db) as conn:
        conn.execute("TRUNCATE public.orders")
        insert(conn, 5, "us", random.Random(32))
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    rows = history_rows(cfg, "ORDERS")
    current = sorted((r["region"], r["id"]) for r in rows if r["_cdc_is_current"] and r["_cdc_operation"] != "delete")
    assert current == [("us", 5)]
    for i in (0, 1):  # each row the truncate removed: its version closed, then a delete version at the truncate
        versions = [(r["_cdc_operation"], r["_cdc_is_current"], r["_cdc_valid_to"] is None)
                    for r in rows if r["id"] == i]
        assert versions == [("snapshot", False, False), ("delete", False, True)], versions


def killed_database_rounds(orders, monkeypatch, reader, taken) -> None:
    """The database stops at once (`pg_ctl stop -m immediate`) at two points of an extraction: as it
    reads the captured changes (`reader`, a function of the method's module, is called), before the
    extract is in the warehouse; and once the extract is, before the source lets go of its changes.
    That run, and a run while the server is down, fail with a retryable error naming the table; once
    the server is back a run takes every change exactly once (`taken`: every change's number in the
    extracts), and the target equals the source."""
    from cdc_assets.engine import faults

    cluster, db, cfg = orders
    rng = random.Random(37)
    cfg = enabled(orders, 3, rng)
    module, name = reader
    real_reader, real_point = getattr(module, name), faults.point
    crash: list[str] = []

    def kill_once() -> None:
        if crash:
            crash.pop()
            cluster.kill()

    def reading(*args, **kwargs):
        if crash == ["reading"]:
            kill_once()
        return real_reader(*args, **kwargs)

    def point(point_name: str) -> None:
        if point_name == "postgres.extracted" and crash == ["extracted"]:
            kill_once()
        real_point(point_name)

    monkeypatch.setattr(module, name, reading)
    monkeypatch.setattr(faults, "point", point)
    try:
        for round_, where in enumerate(("reading", "extracted")):
            with cluster.connect(db) as conn:
                insert(conn, 10 + round_, "us", rng)
                conn.execute("UPDATE public.orders SET id = id + 100 WHERE id = %s", (round_,))
                conn.execute("UPDATE public.orders SET note = 'changed' WHERE id = 2")
            crash.append(where)
            for _ in range(2):  # the run the server stops under, then a run while it is down
                outcome = run_table(cfg, "ORDERS")
                assert not outcome.ok and not crash
                assert "ORDERS" in outcome.error and "unavailable" in outcome.error, outcome.error
                assert "Traceback" not in outcome.error and "SourceUnavailable" in outcome.error, outcome.error
            cluster.start()
            run_ok(cfg)
            assert_target_equals_source(cluster, db, cfg)
            assert len(taken(cfg)) == len(set(taken(cfg)))
    finally:
        if crash or not answers(cluster):
            cluster.start()


def test_the_database_killed_during_an_extraction_fails_the_run_retryably_and_a_later_run_loses_and_doubles_nothing(
        orders, monkeypatch):
    killed_database_rounds(orders, monkeypatch, (postgres_source, "row_pages"), taken_sequences)


def test_the_database_going_down_during_a_sensor_tick_skips_the_tick_and_a_later_tick_catches_up(orders_by_method,
                                                                                                monkeypatch):
    """The server stops at once as a tick of the table's landing sensor reads the captured changes: that
    tick, and a tick while it is down, end as skips naming the table and the cause (the daemon goes on,
    nothing is marked failed); once the server is back, the next ticks extract and apply every change
    exactly once."""
    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets.engine import postgres_logical
    from cdc_assets_tests.defs.test_sensor import Daemon

    cluster, db, cfg = orders_by_method
    rng = random.Random(53)
    cfg = enabled(orders_by_method, 4, rng)
    module, name = (postgres_logical, "peek") if cfg.table("ORDERS").capture == "logical" \
        else (postgres_source, "row_pages")
    real_reader, armed = getattr(module, name), []

    def reading(*args, **kwargs):
        if armed:
            armed.pop()
            cluster.kill()
        return real_reader(*args, **kwargs)

    monkeypatch.setattr(module, name, reading)
    defs = build_definitions(cfg)
    try:
        with dg.instance_for_test() as instance:
            daemon = Daemon(defs, instance, table="ORDERS")
            assert daemon.settle() > 0  # the base applied
            with cluster.connect(db) as conn:
                insert(conn, 50, "us", rng)
                conn.execute("UPDATE public.orders SET id = id + 100 WHERE id = 0")  # a key change
                conn.execute("DELETE FROM public.orders WHERE id = 1")
            armed.append(True)
            for _ in range(2):  # the tick the server stops under, then a tick while it is down
                data = daemon.tick()
                assert not data.run_requests
                assert "ORDERS" in data.skip_message and "unavailable" in data.skip_message, data.skip_message
            assert not armed
            cluster.start()
            assert daemon.settle() > 0
            assert_target_equals_source(cluster, db, cfg)
            taken = extracted_sequences(cfg)
            assert len(taken) == len(set(taken)) == 4  # an insert, a key change (a delete and an insert), a delete
            assert daemon.settle() == 0
    finally:
        if armed or not answers(cluster):
            cluster.start()


@pytest.mark.parametrize("capture_method", ["changelog", "logical"])
def test_run_against_a_stopped_database_exits_75_naming_the_table_and_the_cause_and_no_password(
        postgres_db, workdir, cli, capture_method):
    """A server that is down is a transient failure: `run` exits 75 (EX_TEMPFAIL: docs/command-line.md),
    so a scheduler retries it, and stderr says which table and why, never the password libpq was given."""
    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        conn.execute(SOURCE_DDL)
    cfg = write_config(workdir, [{"name": "ORDERS", "source": cluster.url(db, "public.orders"),
                                  "capture": capture_method}])
    password = "pw-" + uuid.uuid4().hex
    cfg = enabled((cluster, db, cfg), 2, random.Random(59))
    cluster.kill()
    try:
        done = subprocess.run([*cli, "run", "--config", cfg.path], env={**os.environ, "PGPASSWORD": password},
                              capture_output=True, text=True, timeout=300)
    finally:
        cluster.start()
    assert done.returncode == 75, (done.returncode, done.stdout, done.stderr)
    assert "ORDERS" in done.stderr and "the server is unavailable" in done.stderr, done.stderr
    assert "Connection refused" in done.stderr or "connection failed" in done.stderr, done.stderr
    assert password not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr and 'File "' not in done.stderr, done.stderr  # causes, not stacks


# `cdc-assets run` as its console script runs it, with the apply's step reading the source table: the
# server is stopped (argv[1]: the command that stops it) as the step reads it, or, for a failure that
# stays, the capture's objects are gone when the step reads what it captured.
IN_STEP_PROGRAM = """
import json, subprocess, sys
from cdc_assets.cli.main import main
from cdc_assets.core.config import load_config
from cdc_assets.engine import apply, sources

stop, how, config = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
table = load_config(config).table("ORDERS")

def apply_reading_the_source(*args, **kwargs):
    if how == "stopped":
        subprocess.run(stop, check=True, capture_output=True)
        sources.status(table)
    else:
        sources.disable(table)
        sources.extract_new_rows(table, load_config(config).table_dir("ORDERS"))

apply.apply_pending = apply_reading_the_source
sys.argv = ["cdc-assets", "run", "--config", config]
main()
"""


@pytest.mark.parametrize("how, status", [("stopped", 75), ("disabled", 1)])
def test_a_source_failing_inside_a_step_of_the_run_exits_by_its_kind_naming_the_table_and_the_cause(
        orders, workdir, how, status):
    """The source fails while a step of the Dagster run reads it, not before the run: a server that
    stopped is retryable, so `run` exits 75 as when it is down before the run; capture objects that are
    gone fail the same way every time: exit 1. Either way stderr names the table and the root cause,
    not Dagster's wrapper, and shows no stack."""
    import json
    import sys

    cluster, db, cfg = orders
    cfg = enabled(orders, 2, random.Random(67))
    try:
        done = subprocess.run([sys.executable, "-c", IN_STEP_PROGRAM, json.dumps(list(cluster.stop_command)), how,
                               cfg.path], capture_output=True, text=True, timeout=300, cwd=workdir)
    finally:
        if not answers(cluster):
            cluster.start()
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    cause = "the server is unavailable" if how == "stopped" else "capture is not enabled"
    failed = [line for line in done.stderr.splitlines() if line.startswith("ORDERS: FAILED: ")]
    assert len(failed) == 1 and cause in failed[0] and "table ORDERS" in failed[0], done.stderr
    assert "DagsterExecutionStepExecutionError" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and 'File "' not in done.stderr, done.stderr  # causes, not stacks


def test_one_sensor_for_all_tables_goes_on_with_the_other_tables_while_a_postgresql_source_is_down(postgres_db,
                                                                                                  workdir):
    """A source that does not answer is one table's trouble: the tick of the sensor for all tables still
    asks for the run of a table whose files landed."""
    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets.defs.sensors import ALL_TABLES_SENSOR
    from cdc_assets_tests.defs.test_sensor import Daemon
    from cdc_assets_tests.support.expected import KEY
    from cdc_assets_tests.support.feeds import generate, publish

    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        conn.execute(SOURCE_DDL)
    feed = generate(workdir, table="SHIPMENTS", changes=50, batches=1, files_per_batch=1, seed=61)
    cfg = write_config(workdir, [{"name": "ORDERS", "source": cluster.url(db, "public.orders")},
                                 {"name": "SHIPMENTS", "keys": [KEY], "format": "datastream-json"}])
    cfg = enabled((cluster, db, cfg), 2, random.Random(61))
    publish(feed, cfg, "SHIPMENTS", 1)
    cluster.kill()
    try:
        with dg.instance_for_test() as instance:
            data = Daemon(build_definitions(cfg), instance, sensor=ALL_TABLES_SENSOR).tick()
    finally:
        cluster.start()
    assert "SHIPMENTS_batch_job" in [r.job_name for r in data.run_requests]


@pytest.mark.parametrize("method", ["changelog", "logical"])
def test_two_sources_whose_schema_and_table_join_alike_are_captured_apart(postgres_db, workdir, cli, capsys, method):
    """a_b.c and a.b_c both read `a_b_c` once their schema and table are joined by `_`: each still gets
    capture objects of its own, so each target receives its own table's changes and no other's."""
    cluster, db, cfg = lookalike_tables(postgres_db, workdir, method)
    assert capture(cfg, "enable") == 0
    cfg = reload(cfg)
    for name in LOOKALIKES:
        lookalike_changes(cluster, db, name)
    capsys.readouterr()
    assert capture(cfg, "status") == 0
    out = capsys.readouterr().out
    assert "AB_C: 3 changes waiting" in out and "A_BC: 3 changes waiting" in out, out  # an insert, an update, a delete
    done = cli_run(cli, cfg)
    assert done.returncode == 0, (done.stdout, done.stderr)
    for name in LOOKALIKES:
        assert sorted((r["id"], r["v"]) for r in target_rows(cfg, name)) == lookalike_rows(cluster, db, name), name
    assert all(sources.status(cfg.table(name)).waiting == 0 for name in LOOKALIKES)


@pytest.mark.parametrize("method", ["changelog", "logical"])
def test_enable_refuses_capture_objects_another_source_owns_and_makes_nothing(postgres_db, workdir, capsys,
                                                                               monkeypatch, method):
    """The names A_BC's capture would take are made AB_C's (as names cut to PostgreSQL's 63 bytes
    could be): its enable fails as a configuration error does (exit 1), naming the object and the source
    that owns it; nothing is made for it, and AB_C's capture goes on untouched."""
    from cdc_assets.core.postgres import capture_dir, parse_source
    from cdc_assets.engine import postgres_logical

    cluster, db, cfg = lookalike_tables(postgres_db, workdir, method)
    owner = parse_source(cfg.table("AB_C").source)
    assert capture(cfg, "enable", "AB_C") == 0
    if method == "changelog":
        own_names = postgres_source.objects
        monkeypatch.setattr(postgres_source, "objects", lambda source: own_names(owner))
    else:
        own_slot = postgres_logical.slot_names
        monkeypatch.setattr(postgres_logical, "slot_names", lambda source: own_slot(owner))
    capsys.readouterr()
    assert capture(cfg, "enable", "A_BC") == 1
    err = capsys.readouterr().err
    assert err.startswith("A_BC: FAILED; error: SourceError: table A_BC: "), err
    assert "a_b.c" in err and "another source" in err, err
    assert not os.path.exists(capture_dir(cfg.table_dir("A_BC")))
    with cluster.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'a.b_c'::regclass").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pg_publication_tables WHERE schemaname = 'a'").fetchone()[0] == 0
    cfg = reload(cfg)
    lookalike_changes(cluster, db, "AB_C")
    assert run_table(cfg, "AB_C").ok
    assert sorted((r["id"], r["v"]) for r in target_rows(cfg, "AB_C")) == lookalike_rows(cluster, db, "AB_C")


def test_a_capture_enabled_under_the_earlier_names_goes_on_and_disable_removes_it(orders_by_method, monkeypatch,
                                                                                    capsys):
    """A capture an earlier cdc_assets enabled has its objects under the names it gave them (with no
    comment naming their source): runs, status and disable find them there."""
    from cdc_assets.engine import postgres_logical

    cluster, db, cfg = orders_by_method
    with monkeypatch.context() as earlier:
        earlier.setattr(postgres_source, "objects", postgres_source.legacy_objects)
        earlier.setattr(postgres_logical, "slot_names", postgres_logical.legacy_slot_names)
        cfg = enabled(orders_by_method, 3, random.Random(83))
    with cluster.connect(db) as conn:  # as an earlier cdc_assets left them: no comment
        for kind, name in conn.execute("SELECT 'TABLE', relname FROM pg_class c JOIN pg_namespace n ON "
                                       "n.oid = c.relnamespace WHERE nspname = 'cdc_assets' AND relkind = 'r' "
                                       "UNION ALL SELECT 'PUBLICATION', pubname FROM pg_publication").fetchall():
            conn.execute(f'COMMENT ON {kind} {"cdc_assets." if kind == "TABLE" else ""}"{name}" IS NULL')
        insert(conn, 7, "us", random.Random(84))
        conn.execute("DELETE FROM public.orders WHERE id = 1")
    capsys.readouterr()
    assert capture(cfg, "status") == 0
    assert capsys.readouterr().out.startswith("ORDERS: 2 changes waiting")
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    assert capture(cfg, "disable") == 0
    with cluster.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE nspname = 'cdc_assets'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = %s", (db,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone()[0] == 0


@pytest.mark.parametrize("method", ["changelog", "logical"])
def test_captures_that_shared_the_earlier_names_say_to_start_both_over_and_then_capture_apart(
        postgres_db, workdir, cli, monkeypatch, method):
    """a_b.c and a.b_c enabled by an earlier cdc_assets shared one changelog (or publication and slot),
    which mixed (or lost) their changes: a run says so for the table whose changes went astray, naming
    the other, and what to do; done so, each target equals its own source."""
    import shutil

    from cdc_assets.engine import postgres_logical

    cluster, db, cfg = lookalike_tables(postgres_db, workdir, method)
    with monkeypatch.context() as earlier:  # as an earlier cdc_assets named its objects, and checked no owner
        earlier.setattr(postgres_source, "objects", postgres_source.legacy_objects)
        earlier.setattr(postgres_source, "check_owner", lambda *args: None)
        earlier.setattr(postgres_logical, "slot_names", postgres_logical.legacy_slot_names)
        earlier.setattr(postgres_logical, "_check_owner", lambda *args: None)
        assert capture(cfg, "enable") == 0
    cfg = reload(cfg)
    done = cli_run(cli, cfg)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "A_BC" in done.stderr and "a_b.c" in done.stderr and "Start both over" in done.stderr, done.stderr
    for name in LOOKALIKES:
        assert capture(cfg, "disable", name) == 0
        shutil.rmtree(cfg.table_dir(name), ignore_errors=True)
    assert capture(cfg, "enable") == 0
    cfg = reload(cfg)
    for name in LOOKALIKES:
        lookalike_changes(cluster, db, name)
    done = cli_run(cli, cfg)
    assert done.returncode == 0, (done.stdout, done.stderr)
    for name in LOOKALIKES:
        assert sorted((r["id"], r["v"]) for r in target_rows(cfg, name)) == lookalike_rows(cluster, db, name), name


def test_enable_refuses_a_second_table_capturing_the_same_source_and_the_first_goes_on(orders_by_method, capsys):
    """Two tables of cdc.yaml with one source: their captures would share the source's capture objects
    and take each other's changes. The second enable fails (exit 1) naming the table the source is
    captured into, and makes nothing; once that one is disabled, the second enables."""
    from cdc_assets.core.postgres import capture_dir

    cluster, db, cfg = orders_by_method
    table = {"name": "ORDERS", "source": cfg.table("ORDERS").source, "capture": cfg.table("ORDERS").capture}
    enabled(orders_by_method, 3, random.Random(89))
    cfg = write_config(Path(cfg.path).parent, [table, {**table, "name": "ORDERS_AGAIN"}])
    capsys.readouterr()
    assert capture(cfg, "enable", "ORDERS_AGAIN") == 1
    err = capsys.readouterr().err
    assert err.startswith("ORDERS_AGAIN: FAILED; error: SourceError: table ORDERS_AGAIN: "), err
    assert f"already captured into {cfg.table_dir('ORDERS')}" in err and "capture disable" in err, err
    assert not os.path.exists(capture_dir(cfg.table_dir("ORDERS_AGAIN")))
    with cluster.connect(db) as conn:
        insert(conn, 8, "us", random.Random(90))
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    assert capture(cfg, "disable", "ORDERS") == 0
    assert capture(cfg, "enable", "ORDERS_AGAIN") == 0
