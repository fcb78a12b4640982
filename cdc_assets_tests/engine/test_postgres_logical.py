"""A table captured from a live PostgreSQL through a logical replication slot (`capture: logical`),
against the throw-away cluster (cdc_assets_tests/postgres.py): `capture enable` checks the server and
the table's replica identity, makes a publication and a slot and takes the base at the slot's start;
each run extracts the slot's changes into a batch and only then confirms the slot; the target equals
`SELECT *` of the source after every run, whatever the workload; a crash between the extract and the
slot's confirmation loses and doubles nothing; `capture disable` drops the slot and the publication."""
from __future__ import annotations

import json
import os
import random
import secrets
import subprocess

import pytest

from cdc_assets.engine import postgres_logical, postgres_source, sources
from cdc_assets_tests import postgres as pg
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.postgres_source import (
    MARKS,
    assert_target_equals_source,
    capture,
    enabled,
    extracted_sequences,
    insert,
    interleaved_rounds,
    orders_table,
    reload,
    run_ok,
)
from cdc_assets_tests.support.runs import run_table
from cdc_assets_tests.support.warehouse import target_rows

pytestmark = MARKS


@pytest.fixture
def orders(postgres_db, workdir):
    """(cluster, database, cfg) with public.orders created and a table ORDERS captured from it through a slot."""
    return orders_table(postgres_db, workdir, "logical")


def test_runs_keep_the_target_equal_to_the_source_through_key_changes_toasted_values_new_columns_and_truncates(orders, capsys):
    cluster, db, cfg = orders
    rng = random.Random(7)
    cfg = enabled(orders, 5, rng)
    assert cfg.table("ORDERS").keys == ("region", "id")
    big = secrets.token_hex(20_000)  # incompressible: stored out of line (TOAST)
    with cluster.connect(db) as conn:
        insert(conn, 10, "us", rng)
        conn.execute("UPDATE public.orders SET note = 'x', doc = jsonb_build_object('big', %s::text) WHERE id = 1",
                     (big,))
        conn.execute("UPDATE public.orders SET region = 'us' WHERE id = 2")  # a key change
        conn.execute("DELETE FROM public.orders WHERE id = 3")
    capsys.readouterr()
    assert capture(cfg, "status") == 0
    out = capsys.readouterr().out
    # an insert, an update, a key change (a delete and an insert), a delete
    assert out.startswith("ORDERS: 5 changes waiting, oldest ") and "of WAL retained by the slot" in out
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    with cluster.connect(db) as conn:  # the toasted doc is left unchanged: pgoutput does not send it
        conn.execute("UPDATE public.orders SET note = 'y' WHERE id = 1")
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    assert next(r for r in target_rows(cfg, "ORDERS") if r["id"] == 1)["doc"] == json.dumps({"big": big})
    assert run_ok(cfg).new_batch is None
    with cluster.connect(db) as conn:  # a column added, then a truncate between changes
        conn.execute("ALTER TABLE public.orders ADD COLUMN extra text")
        conn.execute("UPDATE public.orders SET extra = 'e' WHERE id = 4")
        conn.execute("TRUNCATE public.orders")
        insert(conn, 20, "eu", rng)
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    assert len(target_rows(cfg, "ORDERS")) == 1
    assert sources.status(cfg.table("ORDERS")).waiting == 0


def test_random_workloads_of_two_interleaved_sessions_a_rollback_and_a_large_transaction(orders, monkeypatch):
    cluster, db, cfg = orders
    monkeypatch.setattr(postgres_source, "PAGE_ROWS", 100)
    rng = random.Random(2026)
    cfg = enabled(orders, 8, rng)
    interleaved_rounds(cluster, db, cfg, rng)
    with cluster.connect(db, autocommit=False) as big:  # one large transaction, extracted page by page
        for i in range(2000, 2400):
            insert(big, i, rng.choice(["eu", "us"]), rng)
        big.execute("UPDATE public.orders SET qty = 0 WHERE id % 3 = 0")
        big.execute("DELETE FROM public.orders WHERE id % 7 = 0")
        big.commit()
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    assert sources.status(cfg.table("ORDERS")).waiting == 0


def test_enable_killed_after_creating_the_slot_and_before_the_base_starts_over_and_takes_every_change_once(orders,
                                                                                                          cli):
    cluster, db, cfg = orders
    rng = random.Random(3)
    with cluster.connect(db) as conn:
        for i in range(4):
            insert(conn, i, "eu", rng)
    env = {**os.environ, "CDC_ASSETS_CRASH_AT": "postgres.slot_created"}
    killed = subprocess.run([*cli, "capture", "enable", "--config", cfg.path], env=env, capture_output=True,
                            text=True)
    assert killed.returncode == -9, killed.stderr
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.orders SET note = 'after' WHERE id = 3")
    assert capture(cfg, "enable") == 0  # no base: it drops the slot left behind and starts over
    cfg = reload(cfg)
    with cluster.connect(db) as conn:
        conn.execute("DELETE FROM public.orders WHERE id = 0")
    run_ok(cfg)
    assert_target_equals_source(cluster, db, cfg)
    with cluster.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = %s", (db,)).fetchone()[0] == 1


def test_enable_says_what_a_table_without_a_usable_replica_identity_needs_and_full_identity_works(postgres_db,
                                                                                                  workdir):
    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE public.events (id integer NOT NULL, kind text, note text)")
        conn.execute("INSERT INTO public.events VALUES (1, 'a', 'x'), (2, 'b', 'y')")
    cfg = write_config(workdir, [{"name": "EVENTS", "source": cluster.url(db, "public.events"), "capture": "logical",
                                  "keys": ["id"]}])
    with pytest.raises(postgres_source.SourceError, match="REPLICA IDENTITY FULL") as e:
        sources.enable(cfg.table("EVENTS"), cfg.table_dir("EVENTS"))
    assert "table EVENTS" in str(e.value) and "key columns id" in str(e.value)
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.events SET note = 'z' WHERE id = 1")  # the source's writers are untouched
        conn.execute("ALTER TABLE public.events REPLICA IDENTITY FULL")
    assert capture(cfg, "enable") == 0
    cfg = reload(cfg)
    with cluster.connect(db) as conn:
        conn.execute("UPDATE public.events SET id = 3 WHERE id = 1")  # a key change, seen in the whole old row
        conn.execute("DELETE FROM public.events WHERE id = 2")
    outcome = run_table(cfg, "EVENTS")
    assert outcome.ok, outcome
    assert sorted((r["id"], r["kind"], r["note"]) for r in target_rows(cfg, "EVENTS")) == [(3, "a", "z")]


def test_disable_drops_the_slot_and_the_publication(orders):
    cluster, db, cfg = orders

    def objects() -> list:
        with cluster.connect(db) as conn:
            return conn.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s UNION ALL "
                                "SELECT pubname FROM pg_publication", (db,)).fetchall()

    assert capture(cfg, "enable") == 0
    assert len(objects()) == 2
    assert capture(cfg, "disable") == 0
    assert objects() == []
    outcome = run_table(cfg, "ORDERS")
    assert not outcome.ok and "replication slot" in outcome.error and "capture disable" in outcome.error


def test_enable_on_a_server_without_wal_level_logical_says_what_to_set(workdir):
    with pg.cluster(wal_level="replica") as cluster:
        with cluster.connect() as conn:
            conn.execute("CREATE TABLE public.orders (id integer PRIMARY KEY)")
        cfg = write_config(workdir, [{"name": "ORDERS", "source": cluster.url("postgres", "public.orders"),
                                      "capture": "logical"}])
        with pytest.raises(postgres_source.SourceError, match="wal_level = logical") as e:
            sources.enable(cfg.table("ORDERS"), cfg.table_dir("ORDERS"))
        assert "(it is replica)" in str(e.value) and "capture: changelog" in str(e.value)


def test_enable_when_every_replication_slot_is_taken_names_the_setting_and_fails_as_a_configuration_does(
        workdir, capsys):
    """A server whose replication slots are all in use refuses a new one until a slot is dropped or
    max_replication_slots is raised: enable fails as for wal_level (exit 1), naming the table and the
    setting, and does not call it a server that is down, which a retry would outlast."""
    with pg.cluster(max_replication_slots="1") as cluster:
        with cluster.connect() as conn:
            conn.execute("CREATE TABLE public.orders (id integer PRIMARY KEY)")
            conn.execute("SELECT pg_create_logical_replication_slot('another_reader', 'pgoutput')")
        cfg = write_config(workdir, [{"name": "ORDERS", "source": cluster.url("postgres", "public.orders"),
                                      "capture": "logical"}])
        capsys.readouterr()
        assert capture(cfg, "enable") == 1
        err = capsys.readouterr().err
        assert err.startswith("ORDERS: FAILED; error: SourceError: table ORDERS: "), err
        assert "max_replication_slots" in err and "(it is 1)" in err, err
        assert "unavailable" not in err and "later run" not in err, err
        with pytest.raises(postgres_source.SourceError, match="max_replication_slots") as e:
            sources.enable(cfg.table("ORDERS"), cfg.table_dir("ORDERS"))
        assert not e.value.retryable


def test_slot_names_are_a_slots_own_and_distinct_per_database():
    from cdc_assets.core.postgres import parse_source

    a = postgres_logical.slot_names(parse_source("postgresql://u@h:5432/shop/public.orders"))
    b = postgres_logical.slot_names(parse_source("postgresql://u@h:5432/shop2/public.orders"))
    c = postgres_logical.slot_names(parse_source("postgresql://u@h:5432/Shop/public.Orders$"))
    d = postgres_logical.slot_names(parse_source("postgresql://u@h:5432/shop/a_b.c"))
    e = postgres_logical.slot_names(parse_source("postgresql://u@h:5432/shop_a/b.c"))
    long = postgres_logical.slot_names(parse_source(f"postgresql://u@h:5432/{'d' * 63}/{'s' * 63}.{'t' * 63}"))
    assert a.slot.startswith("cdc_assets_shop_public_orders_") and len({a.slot, b.slot, c.slot, d.slot, e.slot}) == 5
    for names in (a, c, long):
        assert all(ch.islower() or ch.isdigit() or ch == "_" for ch in names.slot) and len(names.slot) <= 63


def test_the_slot_retained_wal_check_warns_when_the_slot_keeps_more_wal_than_the_tables_limit(postgres_db, workdir):
    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        conn.execute("CREATE TABLE public.orders (id integer PRIMARY KEY, note text)")
        conn.execute("CREATE TABLE public.filler (note text)")  # not captured: its WAL is the server's
    cfg = write_config(workdir, [{"name": "ORDERS", "source": cluster.url(db, "public.orders"), "capture": "logical",
                                  "max_retained_wal_mb": 1}])
    assert capture(cfg, "enable") == 0
    cfg = reload(cfg)
    outcome = run_table(cfg, "ORDERS")
    assert outcome.ok and outcome.checks["slot_retained_wal"] is True
    # a transaction left open holds the slot's restart position: the WAL after it is kept
    idle = cluster.connect(db, autocommit=False)
    try:
        idle.execute("INSERT INTO public.orders VALUES (1, 'open')")
        with cluster.connect(db) as conn:
            conn.execute("INSERT INTO public.filler SELECT md5(i::text) || md5((i + 1)::text) "
                         "FROM generate_series(1, 40000) i")
        outcome = run_table(cfg, "ORDERS")
        assert outcome.ok, outcome  # a warning: it never fails the run
        assert outcome.checks["slot_retained_wal"] is False
    finally:
        idle.rollback()
        idle.close()


def test_a_captured_value_the_altered_source_column_cannot_hold_goes_to_quarantine_and_extraction_goes_on(orders):
    from cdc_assets_tests.engine.test_postgres_source import (
        assert_narrowed_qty_quarantined_and_the_rest_applied,
        narrowed_qty,
        target_rows_by_id,
    )

    cfg = narrowed_qty(orders, random.Random(29))
    assert_narrowed_qty_quarantined_and_the_rest_applied(orders, cfg, target_rows_by_id(cfg))


def test_the_landing_sensor_extracts_what_the_slot_holds_and_its_runs_apply_it(orders):
    from cdc_assets_tests.engine.test_postgres_source import sensor_rounds

    sensor_rounds(orders)


def test_the_database_killed_during_an_extraction_fails_the_run_retryably_and_a_later_run_loses_and_doubles_nothing(
        orders, monkeypatch):
    from cdc_assets_tests.engine.test_postgres_source import killed_database_rounds

    killed_database_rounds(orders, monkeypatch, (postgres_logical, "peek"), extracted_sequences)
