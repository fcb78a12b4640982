"""A PostgreSQL source table in the tests: public.orders of a test's own database (SOURCE_DDL), a table
ORDERS of cdc.yaml captured from it, its rows, DML workloads against it, and what its extracts took."""
from __future__ import annotations

import datetime as dt
import decimal
import os
import random
import subprocess

import pyarrow.parquet as pq
import pytest

from cdc_assets.cli.main import main as cli_main

from .config import write_config
from .runs import run_table
from .warehouse import target_rows

# Dagster marks the partitioned checks and single-run backfills these tests run beta or preview.
MARKS = [pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
         pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]

SOURCE_DDL = ("CREATE TABLE public.orders (id integer, region text, amount numeric(12,2), placed timestamptz, "
              "due timestamp, day date, paid boolean, qty bigint, ratio double precision, note varchar(40), "
              "blob bytea, doc jsonb, tags integer[], PRIMARY KEY (region, id))")


def orders_table(postgres_db, workdir, capture_method: str | None = None):
    """(cluster, database, cfg): public.orders created in the test's database, and a table ORDERS
    captured from it (`capture_method`: changelog, logical, or None for the default)."""
    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        conn.execute(SOURCE_DDL)
    table = {"name": "ORDERS", "source": cluster.url(db, "public.orders")}
    if capture_method is not None:
        table["capture"] = capture_method
    return cluster, db, write_config(workdir, [table])


def capture(cfg, action: str, *tables: str) -> int:
    return cli_main(["capture", action, *tables, "--config", cfg.path])


def reload(cfg):
    from cdc_assets.core.config import load_config

    return load_config(cfg.path)


def source_rows(cluster, db) -> dict:
    with cluster.connect(db) as conn:
        cur = conn.execute("SELECT * FROM public.orders")
        names = [d.name for d in cur.description]
        return {(r["region"], r["id"]): r for r in (dict(zip(names, row)) for row in cur.fetchall())}


def as_target(row: dict) -> dict:
    """A source row as the target holds it: jsonb and arrays as JSON text, times in UTC."""
    import json

    out = dict(row)
    out["doc"] = None if row["doc"] is None else json.dumps(row["doc"], separators=(", ", ": "))
    out["tags"] = None if row["tags"] is None else json.dumps(row["tags"])
    out["blob"] = None if row["blob"] is None else bytes(row["blob"])
    if row["placed"] is not None:
        out["placed"] = row["placed"].astimezone(dt.UTC)
    return out


def assert_target_equals_source(cluster, db, cfg) -> None:
    target = {(r["region"], r["id"]): r for r in target_rows(cfg, "ORDERS")}
    source = source_rows(cluster, db)
    assert sorted(target) == sorted(source)
    for key, row in source.items():
        expected = as_target(row)
        got = target[key]
        if got["placed"] is not None:
            got["placed"] = got["placed"].astimezone(dt.UTC)
        assert got == expected, key


def run_ok(cfg):
    outcome = run_table(cfg, "ORDERS")
    assert outcome.ok, outcome
    return outcome


def row_values(i: int, region: str, rng: random.Random) -> tuple:
    return (i, region, decimal.Decimal(rng.randint(-10**6, 10**6)) / 100,
            dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=rng.randint(0, 10**8)),
            dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 10**12)),
            dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 400)), rng.random() < 0.5,
            rng.randint(-2**62, 2**62), rng.random() * 1e6, rng.choice(["", "n", "ü", None]),
            rng.randbytes(rng.randint(0, 5)), None if rng.random() < 0.3 else {"a": rng.randint(0, 9), "b": [1, "x"]},
            None if rng.random() < 0.3 else [rng.randint(0, 9) for _ in range(rng.randint(0, 3))])


INSERT = "INSERT INTO public.orders VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def insert(conn, i: int, region: str, rng: random.Random) -> None:
    from psycopg.types.json import Jsonb

    values = list(row_values(i, region, rng))
    values[11] = None if values[11] is None else Jsonb(values[11])
    conn.execute(INSERT, values)


def enabled(orders, rows: int, rng: random.Random):
    """`rows` rows in the source, then `capture enable`; the configuration as it then reads."""
    cluster, db, cfg = orders
    with cluster.connect(db) as conn:
        for i in range(rows):
            insert(conn, i, "eu", rng)
    assert capture(cfg, "enable") == 0
    return reload(cfg)


def random_dml(conn, rng: random.Random, lo: int, n: int) -> None:
    """n random changes to keys lo..lo+999 in an open transaction: inserts, updates, updates that change
    the key (the region or the id), deletes."""
    for _ in range(n):
        present = [tuple(r) for r in conn.execute(
            "SELECT region, id FROM public.orders WHERE id BETWEEN %s AND %s", (lo, lo + 999)).fetchall()]
        choice = rng.random()
        if not present or choice < 0.35:
            taken = {i for _, i in present}
            insert(conn, rng.choice([i for i in range(lo, lo + 40) if i not in taken]), rng.choice(["eu", "us"]), rng)
            continue
        region, i = rng.choice(present)
        if choice < 0.6:
            conn.execute("UPDATE public.orders SET amount = %s, note = %s, doc = NULL WHERE region = %s AND id = %s",
                         (decimal.Decimal(rng.randint(0, 999)) / 10, rng.choice(["u", None]), region, i))
        elif choice < 0.8:
            taken = {k for k, _ in present}
            new_id = rng.choice([k for k in range(lo, lo + 40) if k not in {j for _, j in present}])
            if rng.random() < 0.5 and (("us" if region == "eu" else "eu"), i) not in present:
                conn.execute("UPDATE public.orders SET region = %s WHERE region = %s AND id = %s",
                             ("us" if region == "eu" else "eu", region, i))
            elif taken:
                conn.execute("UPDATE public.orders SET id = %s, qty = qty + 1 WHERE region = %s AND id = %s",
                             (new_id, region, i))
        else:
            conn.execute("DELETE FROM public.orders WHERE region = %s AND id = %s", (region, i))


def interleaved_rounds(cluster, db, cfg, rng: random.Random, rounds: int = 3) -> None:
    """Two sessions writing random changes, interleaved with runs, one of their transactions rolled
    back; the target equals the source after every run."""
    a, b = cluster.connect(db, autocommit=False), cluster.connect(db, autocommit=False)
    try:
        for round_ in range(rounds):
            # a changes rows first and commits after b and after a run: a capture that took its
            # changes in the order they were made, not committed, would lose or misorder them
            random_dml(a, rng, 0, 15)
            random_dml(b, rng, 1000, 15)
            b.commit()
            random_dml(a, rng, 0, 5)
            run_ok(cfg)
            assert_target_equals_source(cluster, db, cfg)
            random_dml(b, rng, 1000, 10)
            if round_ == 1:
                b.rollback()  # never seen: what it captured goes with it
            else:
                b.commit()
            a.commit()
            run_ok(cfg)
            assert_target_equals_source(cluster, db, cfg)
    finally:
        a.close()
        b.close()


def cli_run(cli, cfg, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CDC_ASSETS_CRASH_AT"}
    if crash_at:
        env["CDC_ASSETS_CRASH_AT"] = crash_at
    return subprocess.run([*cli, "run", "--config", cfg.path], env=env, capture_output=True, text=True, timeout=300)


def taken_sequences(cfg) -> list[int]:
    """The changelog sequence numbers in every extract, as the batches hold them."""
    return [int(s, 16) for s in extracted_sequences(cfg)]


def extracted_sequences(cfg) -> list[str]:
    """Every extracted change's ordering key (the changelog's sequence, or the LSN), as the batches hold it."""
    folder = cfg.landing_dir("ORDERS")
    return [s for f in sorted(os.listdir(folder)) if f.endswith(".parquet")
            for s in pq.read_table(os.path.join(folder, f)).column("_CHANGE_SEQUENCE_NUMBER").to_pylist()]


def answers(cluster) -> bool:
    import psycopg

    try:
        with cluster.connect():
            return True
    except psycopg.OperationalError:
        return False


# Two source tables whose `schema_table` read the same (`a_b_c`): a capture naming its objects by
# that text alone gave both one changelog, one publication, one slot.
LOOKALIKES = {"AB_C": ("a_b", "c"), "A_BC": ("a", "b_c")}


def lookalike_tables(postgres_db, workdir, capture_method: str):
    """(cluster, database, cfg): a_b.c and a.b_c (id integer PRIMARY KEY, v text), three rows each, and
    tables AB_C and A_BC of cdc.yaml captured from them by `capture_method`."""
    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        for schema, table in LOOKALIKES.values():
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            conn.execute(f"CREATE TABLE {schema}.{table} (id integer PRIMARY KEY, v text)")
            for i in range(3):
                conn.execute(f"INSERT INTO {schema}.{table} VALUES (%s, %s)", (i, f"{schema}.{table} {i}"))
    tables = [{"name": name, "source": cluster.url(db, f"{schema}.{table}"), "capture": capture_method}
              for name, (schema, table) in LOOKALIKES.items()]
    return cluster, db, write_config(workdir, tables)


def lookalike_rows(cluster, db, name: str) -> list[tuple]:
    schema, table = LOOKALIKES[name]
    with cluster.connect(db) as conn:
        return sorted(tuple(r) for r in conn.execute(f"SELECT id, v FROM {schema}.{table}").fetchall())


def lookalike_changes(cluster, db, name: str) -> None:
    """An insert, an update and a delete of the table, each value naming the table."""
    schema, table = LOOKALIKES[name]
    with cluster.connect(db) as conn:
        conn.execute(f"INSERT INTO {schema}.{table} VALUES (10, %s)", (f"{schema}.{table} new",))
        conn.execute(f"UPDATE {schema}.{table} SET v = %s WHERE id = 1", (f"{schema}.{table} updated",))
        conn.execute(f"DELETE FROM {schema}.{table} WHERE id = 2")
