"""Two runs of one table at once: a step whose Delta commit loses to another writer's is
re-run, and no batch is lost or applied twice.

The other run is played by calling a step directly at a fault point, between the run's
read and its commit. It takes no table lock: this is the case of an object-store
warehouse (or a second machine), where the file lock cannot work and only delta-rs's
conflict check stands between the two runs.
"""
from __future__ import annotations

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from cdc_assets.engine import faults, retry
from cdc_assets.engine.apply import apply_pending
from cdc_assets.engine.landing import complete_files, register_new_batch, registered
from cdc_assets.engine.retry import is_conflict
from cdc_assets.engine.stage import stage_batch
from cdc_assets.engine.table_layout import STAGING, TARGET, path
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok, run_table
from cdc_assets_tests.support.warehouse import delta_rows, target_rows, values

pytestmark = MARKS


class Race(list):
    """The commit failures the retry judged (as text), and arm(point, other): run `other` (the
    other run's step) the first time `point` is reached after arming."""

    def __init__(self):
        super().__init__()
        self.at, self.other = None, None

    def arm(self, at: str, other) -> None:
        self.clear()
        self.at, self.other = at, other


@pytest.fixture
def conflicts(monkeypatch) -> Race:
    race = Race()
    judge = retry.is_conflict

    def spy(e):
        race.append(f"{type(e).__name__}: {e}")
        return judge(e)

    real = faults.point

    def point(name):
        if race.at == name:
            other, race.at = race.other, None
            other()  # the other run commits here, between this run's read and its commit
        real(name)

    monkeypatch.setattr(retry, "is_conflict", spy)
    monkeypatch.setattr(retry, "BACKOFF", 0.05)
    monkeypatch.setattr(faults, "point", point)
    return race


@pytest.fixture(params=["local", "object_store"])
def warehouse(request, workdir) -> str:
    """Where the warehouse is: a local folder, or a bucket of an S3-compatible server, where no
    file lock exists and delta-rs's conditional writes decide which commit wins."""
    if request.param == "local":
        return str(workdir / "warehouse")
    return request.getfixturevalue("s3_warehouse")


def commits(cfg, table: str, name: str, step: str) -> list[int]:
    """The batch of every commit `step` made to the table, in order (a doubled batch shows twice)."""
    hist = DeltaTable(path(cfg.table_dir(table), name)).history()
    return sorted(int(h["cdc.batch_seq"]) for h in hist if h.get("cdc.step") == step)


def test_apply_that_loses_to_another_run_of_the_same_batch_becomes_a_no_op(spark, workdir, warehouse, conflicts):
    cfg = write_config(workdir, [{"name": "RACE", "keys": ["id"], "format": "datastream-json"}],
                       warehouse=warehouse)
    table = cfg.table("RACE")
    other_run = lambda: apply_pending(spark, cfg, table)  # noqa: E731

    # batch 1: the other run creates target first (the create path)
    land(cfg, "RACE", "batch-1", {"p.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "v": "a"}, 1, 1), mysql("INSERT", {"id": 2, "v": "a"}, 1, 2)])})
    conflicts.arm("target.computed", other_run)
    out = run_ok(cfg, "RACE")
    assert out.figures["target"]["nothing_new"] is True  # the re-run found batch 1 applied
    assert any("another writer created the table first" in c for c in conflicts)

    # batch 2: the other run MERGEs the same batch first (the MERGE path)
    land(cfg, "RACE", "batch-2", {"p.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "v": "b"}, 1, 3), mysql("DELETE", {"id": 2, "v": None}, 1, 4),
        mysql("INSERT", {"id": 3, "v": "a"}, 1, 5)])})
    conflicts.arm("target.computed", other_run)
    out = run_ok(cfg, "RACE")
    assert out.figures["target"]["nothing_new"] is True
    assert conflicts and all("CommitFailedError" in c for c in conflicts)

    assert values(target_rows(cfg, "RACE"), "id", "v") == {1: "b", 3: "a"}
    assert commits(cfg, "RACE", TARGET, TARGET) == [1, 2]  # each batch applied once


def test_apply_that_loses_to_a_rebuild_recomputes_and_commits(spark, workdir, warehouse, conflicts):
    """The other writer changes target without applying the batch: the re-run must apply it."""
    cfg = write_config(workdir, [{"name": "REBUILT", "keys": ["id"], "format": "datastream-json"}],
                       warehouse=warehouse)
    table = cfg.table("REBUILT")
    land(cfg, "REBUILT", "batch-1", {"p.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "v": "a"}, 1, 1), mysql("INSERT", {"id": 2, "v": "a"}, 1, 2)])})
    run_ok(cfg, "REBUILT")
    land(cfg, "REBUILT", "batch-2", {"p.jsonl": jsonl([
        mysql("UPDATE", {"id": 2, "v": "b"}, 1, 3), mysql("INSERT", {"id": 3, "v": "a"}, 1, 4)])})
    conflicts.arm("target.computed", lambda: rebuild(spark, cfg, table, None))
    out = run_ok(cfg, "REBUILT")

    assert len(conflicts) == 1 and "CommitFailedError" in conflicts[0]
    assert out.figures["target"]["applied_batch"] == 2 and not out.figures["target"].get("nothing_new")
    assert values(target_rows(cfg, "REBUILT"), "id", "v") == {1: "a", 2: "b", 3: "a"}
    assert commits(cfg, "REBUILT", TARGET, TARGET) == [1, 2]


def test_staging_append_that_loses_to_the_same_batch_is_not_doubled(spark, workdir, warehouse, conflicts):
    """An append does not conflict with another append in itself; committing through the snapshot
    the watermark was checked on makes delta-rs refuse a second commit of the same app id."""
    cfg = write_config(workdir, [{"name": "TWICE", "keys": ["id"], "format": "datastream-json"}],
                       warehouse=warehouse)
    table = cfg.table("TWICE")

    def other_run():
        stage_batch(cfg, table, registered(cfg.table_dir("TWICE"))[-1])

    land(cfg, "TWICE", "batch-1", {"p.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "v": "a"}, 1, 1), mysql("INSERT", {"id": 2, "v": "a"}, 1, 2)])})
    conflicts.arm("staging.before_commit", other_run)  # staging does not exist yet: the create path
    out = run_ok(cfg, "TWICE")
    assert out.figures["staging"] == {"already_committed": True}
    land(cfg, "TWICE", "batch-2", {"p.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "v": "b"}, 1, 3), mysql("INSERT", {"id": 3, "v": "a"}, 1, 4)])})
    conflicts.arm("staging.before_commit", other_run)  # staging exists: the app-id check
    out = run_ok(cfg, "TWICE")

    assert out.figures["staging"] == {"already_committed": True}
    assert len(conflicts) == 1 and "Concurrent transaction failed" in conflicts[0]
    staged = sorted((r["_cdc_batch_seq"], r["_cdc_key"]) for r in delta_rows(cfg, "TWICE", STAGING))
    assert staged == [(1, '["1"]'), (1, '["2"]'), (2, '["1"]'), (2, '["3"]')]
    assert commits(cfg, "TWICE", STAGING, STAGING) == [1, 2]
    assert values(target_rows(cfg, "TWICE"), "id", "v") == {1: "b", 2: "a", 3: "a"}


def test_registration_that_loses_to_another_run_takes_each_file_once(spark, workdir, warehouse, conflicts):
    """Two runs list the landing area at once: the one that commits its batch second re-lists,
    so a file lands in exactly one batch and the rest becomes the next batch."""
    cfg = write_config(workdir, [{"name": "LISTED", "keys": ["id"], "format": "datastream-json"}],
                       warehouse=warehouse)
    table_dir, landing = cfg.table_dir("LISTED"), cfg.landing_dir("LISTED")

    def other_run_registers(*names):
        return lambda: register_new_batch(landing, table_dir, {n: complete_files(landing)[n] for n in names})

    # batch 1: both runs saw the same file; the other run creates the ledger first
    land(cfg, "LISTED", "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": 1, "v": "a"}, 1, 1)])})
    conflicts.arm("register.before_commit", other_run_registers("batch-1/p.jsonl"))
    out = run_ok(cfg, "LISTED")
    assert out.new_batch is None  # the re-run found the file taken: nothing new to register
    assert any("another writer created the table first" in c for c in conflicts)

    # batch 2: this run saw two files, the other run took one of them first
    land(cfg, "LISTED", "batch-2", {"p.jsonl": jsonl([mysql("UPDATE", {"id": 1, "v": "b"}, 1, 2)])})
    land(cfg, "LISTED", "batch-3", {"p.jsonl": jsonl([mysql("INSERT", {"id": 2, "v": "c"}, 1, 3)])})
    conflicts.arm("register.before_commit", other_run_registers("batch-2/p.jsonl"))
    out = run_ok(cfg, "LISTED")
    assert conflicts and all("Concurrent transaction failed" in c for c in conflicts)
    assert out.new_batch == registered(table_dir)[-1].id

    assert [list(b.files) for b in registered(table_dir)] == [
        ["batch-1/p.jsonl"], ["batch-2/p.jsonl"], ["batch-3/p.jsonl"]]
    assert values(target_rows(cfg, "LISTED"), "id", "v") == {1: "b", 2: "c"}
    assert commits(cfg, "LISTED", STAGING, STAGING) == [1, 2, 3]


def test_without_the_retry_the_losing_run_fails_and_the_next_one_finishes(spark, workdir, conflicts, monkeypatch):
    """The race is real: judged no conflict (no re-run), the run fails on delta-rs's refusal."""
    refused = []
    monkeypatch.setattr(retry, "is_conflict", lambda e: bool(refused.append(e)))
    cfg = write_config(workdir, [{"name": "ONCE", "keys": ["id"], "format": "datastream-json"}])
    table = cfg.table("ONCE")
    land(cfg, "ONCE", "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": 1, "v": "a"}, 1, 1)])})
    run_ok(cfg, "ONCE")
    land(cfg, "ONCE", "batch-2", {"p.jsonl": jsonl([mysql("UPDATE", {"id": 1, "v": "b"}, 1, 2)])})
    conflicts.arm("staging.before_commit",
                  lambda: stage_batch(cfg, table, registered(cfg.table_dir("ONCE"))[-1]))
    failed = run_table(cfg, "ONCE")
    assert not failed.ok and "step ONCE__batch (staging)" in failed.error
    [e] = refused
    assert isinstance(e, CommitFailedError) and "Concurrent transaction failed" in str(e) and is_conflict(e)

    run_ok(cfg, "ONCE")  # the next run finds batch 2 staged by the other run and applies it
    assert commits(cfg, "ONCE", STAGING, STAGING) == [1, 2]
    assert values(target_rows(cfg, "ONCE"), "id", "v") == {1: "b"}


def test_only_conflicts_are_retried_a_bounded_number_of_times():
    lost = CommitFailedError("Failed to commit transaction: Commit failed: a concurrent transaction deleted data "
                             "this operation read.\nHelp: ...")
    calls, logged = [], []

    def step(fail_times, error):
        calls.append(1)
        if len(calls) <= fail_times:
            raise error
        return "done"

    assert retry.on_conflict(lambda: step(2, lost), "T/target", log=logged.append, backoff=0.001) == "done"
    assert len(calls) == 3 and len(logged) == 2 and "another writer committed first" in logged[0]

    calls.clear()
    with pytest.raises(CommitFailedError):
        retry.on_conflict(lambda: step(9, lost), "T/target", log=logged.append, attempts=3, backoff=0.001)
    assert len(calls) == 3

    calls.clear()
    unsupported = CommitFailedError("Failed to commit transaction: Unsupported table features required: [X]")
    with pytest.raises(CommitFailedError):
        retry.on_conflict(lambda: step(1, unsupported), "T/target", backoff=0.001)
    assert len(calls) == 1
    assert is_conflict(retry.CommitConflict("another writer created the table first"))
    assert is_conflict(CommitFailedError("Failed to commit transaction: 15"))  # delta-rs's own retries ran out
