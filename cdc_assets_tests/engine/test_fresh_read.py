"""A table whose merges wait (`apply: {min_changes, max_staleness}`) stages every batch; its fresh
read shows the staged changes laid over the target with the apply's own winners, and the apply,
when it comes, commits exactly what the fresh read showed."""
from __future__ import annotations

import datetime as dt

import pyarrow.parquet as pq
import pytest

from cdc_assets.cli.main import main
from cdc_assets.engine import fresh
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.steps import take, take_and_apply
from cdc_assets_tests.support.warehouse import canonical, target_rows, target_version, values

pytestmark = MARKS

TABLE = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["region"],
         "columns": {"amount": "decimal(12,2)"}}
FIRST = [mysql("INSERT", {"id": i, "region": "eu", "amount": f"{i}.10", "v": "a"}, 1, i) for i in (1, 2, 3, 4)] \
    + [mysql("DELETE", {"id": 4, "region": "eu", "amount": None, "v": None}, 1, 5)]
SECOND = [
    mysql("UPDATE", {"id": 1, "region": "us", "amount": "9.99", "v": "b", "note": "moved"}, 1, 10),  # new column
    mysql("DELETE", {"id": 2, "region": "eu", "amount": None, "v": None}, 1, 11),
    mysql("UPDATE", {"id": 3, "region": "eu", "amount": "0.00", "v": "stale"}, 1, 0),  # older than its row
    mysql("INSERT", {"id": 4, "region": "eu", "amount": "4.40", "v": "late"}, 1, 3),  # older than its tombstone
    mysql("INSERT", {"id": 5, "region": "us", "amount": "5.00", "v": "a"}, 1, 12),
    mysql("UPDATE", {"id": 5, "region": "us", "amount": "5.50", "v": "c"}, 1, 13),
]
EXPECTED = {1: "b", 3: "a", 5: "c"}


def test_a_waiting_merge_is_invisible_to_the_fresh_read(spark, workdir, capsys):
    cfg = write_config(workdir, [{**TABLE, "apply": {"min_changes": 50}}])
    table = cfg.table("ORDERS")
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl(FIRST)})
    run_ok(cfg, "ORDERS")  # the first build never waits: readers need a target
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a", 2: "a", 3: "a"}

    land(cfg, "ORDERS", "batch-2", {"p.jsonl": jsonl(SECOND)})
    version = target_version(cfg, "ORDERS")
    out = run_ok(cfg, "ORDERS")
    assert out.waiting == "merge waits: 5 changes pending; min_changes 50"
    assert target_version(cfg, "ORDERS") == version  # staged, not merged

    shown = fresh.fresh_table(cfg, table, with_metadata=True)
    assert values(shown.to_pylist(), "id", "v") == EXPECTED
    row = {r["id"]: r for r in shown.to_pylist()}
    assert str(row[1]["amount"]) == "9.99" and row[1]["note"] == "moved" and row[1]["region"] == "us"
    assert row[3]["note"] is None

    # the CLI: CSV on stdout, or a Parquet file
    capsys.readouterr()
    assert main(["read", "ORDERS", "--config", cfg.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(EXPECTED) and '"id"' in lines[0] and '"_cdc_key"' not in lines[0]
    parquet = str(workdir / "orders.parquet")
    assert main(["read", "ORDERS", "--config", cfg.path, "--out", parquet]) == 0
    assert values(pq.read_table(parquet).to_pylist(), "id", "v") == EXPECTED
    assert "3 rows to" in capsys.readouterr().err

    # the merge, when it runs, commits what the fresh read showed, bookkeeping columns included
    cfg = write_config(workdir, [TABLE])
    out = run_ok(cfg, "ORDERS")
    assert out.figures["target"]["applied_batch"] == 2 and out.waiting is None
    assert canonical(target_rows(cfg, "ORDERS", source_only=False)) == canonical(shown.to_pylist())
    # nothing pending: the fresh read is the target
    assert canonical(fresh.fresh_table(cfg, cfg.table("ORDERS"), with_metadata=True).to_pylist()) == \
        canonical(target_rows(cfg, "ORDERS", source_only=False))


def test_max_staleness_makes_the_merge_due_once_the_oldest_batch_waited_long_enough(spark, workdir):
    cfg = write_config(workdir, [{**TABLE, "apply": {"min_changes": 1000, "max_staleness": "15m"}}])
    table = cfg.table("ORDERS")
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl(FIRST)})
    run_ok(cfg, "ORDERS")
    land(cfg, "ORDERS", "batch-2", {"p.jsonl": jsonl(SECOND)})
    assert run_ok(cfg, "ORDERS").waiting.startswith("merge waits: 5 changes pending; min_changes 1000; oldest waited")

    decision, pending = fresh.decision(cfg, table)
    assert not decision.due and (pending.applied, pending.reached, pending.changes) == (1, 2, 5)
    later = pending.oldest_registered_at + dt.timedelta(minutes=15)
    decision, _ = fresh.decision(cfg, table, now=later)
    assert decision.due and decision.reason == "oldest pending batch waited 15m (max_staleness 15m)"


def test_a_fresh_read_needs_a_target(workdir, capsys):
    cfg = write_config(workdir, [TABLE])
    assert main(["read", "ORDERS", "--config", cfg.path]) == 1
    assert "table ORDERS: no target yet" in capsys.readouterr().err
    assert main(["read", "ORDERS", "--config", cfg.path, "--out", "x.txt"]) == 2
    with pytest.raises(fresh.FreshReadError):
        fresh.fresh_table(cfg, cfg.table("ORDERS"))


def test_a_fresh_read_holds_one_target_version_while_an_apply_commits(spark, workdir, monkeypatch):
    """An apply that commits while a fresh read is being made does not mix the two target versions:
    the read shows the pending changes laid over the version it opened, so it still shows them all."""
    cfg = write_config(workdir, [{**TABLE, "apply": {"min_changes": 50}}])
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl(FIRST)})
    take_and_apply(spark, cfg, "ORDERS")
    land(cfg, "ORDERS", "batch-2", {"p.jsonl": jsonl(SECOND)})
    take(spark, cfg, "ORDERS")  # batch 2 staged, its merge waits
    version = target_version(cfg, "ORDERS")

    real_pending = fresh.pending

    def apply_meanwhile(*args, **kwargs):
        monkeypatch.setattr(fresh, "pending", real_pending)  # once: the apply itself reads what is pending
        take_and_apply(spark, write_config(workdir, [TABLE]), "ORDERS")  # another process's apply lands now
        return real_pending(*args, **kwargs)

    monkeypatch.setattr(fresh, "pending", apply_meanwhile)
    shown = fresh.fresh_table(cfg, cfg.table("ORDERS"))
    assert target_version(cfg, "ORDERS") > version
    assert values(shown.to_pylist(), "id", "v") == EXPECTED
