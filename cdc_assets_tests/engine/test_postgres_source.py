"""A table captured from a live PostgreSQL (`source: postgresql://...`, `capture: changelog`), against
a throw-away cluster (cdc_assets_tests/postgres.py): `capture enable` takes the base and starts the
changelog, each run extracts what was captured into a batch, and the target equals `SELECT *` of the
source after every run, whatever the workload (inserts, updates that change keys, deletes, rollbacks,
sessions interleaving); a crash between the extract and the changelog's delete loses and doubles
nothing; `capture disable` removes what enable made."""
from __future__ import annotations

import datetime as dt
import decimal
import os
import random

import pytest

from cdc_assets.cli.main import main as cli_main
from cdc_assets_tests.helpers import run_table, target_rows, write_config

pytestmark = [pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
              pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]

SOURCE_DDL = ("CREATE TABLE public.orders (id integer, region text, amount numeric(12,2), placed timestamptz, "
              "due timestamp, day date, paid boolean, qty bigint, ratio double precision, note varchar(40), "
              "blob bytea, doc jsonb, tags integer[], PRIMARY KEY (region, id))")


@pytest.fixture
def orders(postgres_db, workdir):
    """(cluster, database, cfg) with public.orders created and a table ORDERS captured from it."""
    cluster, db = postgres_db
    with cluster.connect(db) as conn:
        conn.execute(SOURCE_DDL)
    cfg = write_config(workdir, [{"name": "ORDERS", "source": cluster.url(db, "public.orders")}])
    return cluster, db, cfg


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


def test_enable_then_runs_keep_the_target_equal_to_the_source_with_the_catalogs_types(orders):
    cluster, db, cfg = orders
    rng = random.Random(7)
    with cluster.connect(db) as conn:
        for i in range(5):
            insert(conn, i, "eu", rng)
    assert capture(cfg, "enable") == 0
    cfg = reload(cfg)
    assert cfg.table("ORDERS").keys == ("region", "id")  # the primary key
    with cluster.connect(db) as conn:
        insert(conn, 10, "us", rng)
        conn.execute("UPDATE public.orders SET amount = 1.5, note = 'x' WHERE id = 1")
        conn.execute("UPDATE public.orders SET region = 'us' WHERE id = 2")  # a key change
        conn.execute("DELETE FROM public.orders WHERE id = 3")
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
