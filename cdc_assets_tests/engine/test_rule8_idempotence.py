"""rules.md#rule-8: every run is idempotent and restartable. Steps applied again for a batch they
already committed do nothing; a run stopped between steps, then run again, ends where one
clean run ends."""
from __future__ import annotations

from cdc_assets.engine.apply import apply_pending
from cdc_assets.engine.base_import import import_base
from cdc_assets.engine.landing import register_new_batch, registered
from cdc_assets.engine.spark_ingest import ingest_batch
from cdc_assets.engine.stage import stage_batch
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, delta_version, target_rows, values

pytestmark = MARKS

NAMES = ("batches", "changes", "staging", "base", "target", "quarantine")


def versions(cfg, table):
    return {n: delta_version(cfg, table, n) for n in NAMES}


def test_steps_applied_again_do_nothing(spark, workdir):
    export = workdir / "export.csv"
    export.write_text("id,v\n1,base\n2,base\n")
    cfg = write_config(workdir, [{"name": "AGAIN", "keys": ["id"], "format": "datastream-json",
                                  "base_snapshot": str(export)}])
    table = cfg.table("AGAIN")
    table_dir = cfg.table_dir("AGAIN")
    land(cfg, "AGAIN", "batch-1", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "v": "changed"}, 1, 10),
        mysql("INSERT", {"id": 3, "v": "new"}, 1, 11),
    ]) + "not json\n"})
    take_and_apply(spark, cfg, "AGAIN")
    expected = {1: "changed", 2: "base", 3: "new"}
    assert values(target_rows(cfg, "AGAIN"), "id", "v") == expected
    before = versions(cfg, "AGAIN")
    full_target = target_rows(cfg, "AGAIN", source_only=False)

    [batch] = registered(table_dir)
    assert register_new_batch(cfg.landing_dir("AGAIN"), table_dir) is None
    assert import_base(spark, cfg, table).already_committed is True
    assert ingest_batch(spark, cfg, table, batch).already_committed is True
    assert stage_batch(cfg, table, batch).already_committed is True
    assert apply_pending(spark, cfg, table).nothing_new is True
    assert versions(cfg, "AGAIN") == before
    assert len(delta_rows(cfg, "AGAIN", "quarantine")) == 1
    assert target_rows(cfg, "AGAIN", source_only=False) == full_target

    # a full rebuild from staging and base gives the target the incremental apply built
    rebuild(spark, cfg, table, None)
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(target_rows(cfg, "AGAIN", source_only=False), key=key) == sorted(full_target, key=key)


def test_runs_stopped_between_steps_resume_to_the_clean_result(spark, workdir):
    cfg = write_config(workdir, [{"name": "RESUME", "keys": ["id"], "format": "datastream-json"}])
    table = cfg.table("RESUME")
    table_dir, landing = cfg.table_dir("RESUME"), cfg.landing_dir("RESUME")

    # batch 1: the run stopped after `changes` was committed, before `staging`
    land(cfg, "RESUME", "batch-1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "v": "a"}, 1, 1), mysql("INSERT", {"id": 2, "v": "a"}, 1, 2),
        mysql("UPDATE", {"id": 1, "v": "b"}, 1, 3)])})
    b1 = register_new_batch(landing, table_dir)
    ingest_batch(spark, cfg, table, b1)
    out = run_ok(cfg, "RESUME")
    assert out.new_batch is None   # nothing new landed: the run finished the batch it found
    assert values(target_rows(cfg, "RESUME"), "id", "v") == {1: "b", 2: "a"}

    # batch 2: the run stopped after `staging`, before `target`
    land(cfg, "RESUME", "batch-2", {"part-1.jsonl": jsonl([
        mysql("DELETE", {"id": 2, "v": None}, 1, 4), mysql("INSERT", {"id": 3, "v": "a"}, 1, 5)])})
    b2 = register_new_batch(landing, table_dir)
    ingest_batch(spark, cfg, table, b2)
    stage_batch(cfg, table, b2)
    run_ok(cfg, "RESUME")
    assert values(target_rows(cfg, "RESUME"), "id", "v") == {1: "b", 3: "a"}

    # and a run after that finds nothing to do
    before = versions(cfg, "RESUME")
    assert run_ok(cfg, "RESUME").figures == {}
    assert versions(cfg, "RESUME") == before

    # each change recorded once, each key staged once per batch
    changes = delta_rows(cfg, "RESUME", "changes")
    assert len(changes) == len({r["_cdc_event_id"] for r in changes}) == 5
    staging = delta_rows(cfg, "RESUME", "staging")
    assert sorted((r["_cdc_batch_seq"], r["_cdc_key"]) for r in staging) == [
        (1, '["1"]'), (1, '["2"]'), (2, '["2"]'), (2, '["3"]')]
