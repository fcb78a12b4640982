"""The asset graph materialized in-process through its Dagster jobs, on real Spark and
real Delta tables: the figures in the materialization metadata add up, the checks
pass, the target equals the source export, and a run with nothing new commits nothing."""
from __future__ import annotations

import csv
import glob
import json

import dagster as dg
import pytest

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.table_assets import APPLY_TAG, INCREMENTAL
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.expected import COLUMNS, KEY, TABLE, differences, read_export
from cdc_assets_tests.support.feeds import generate, lines_in, publish, uuids_in
from cdc_assets_tests.support.runs import check_results, execute, materialized, register_batch, run_table
from cdc_assets_tests.support.warehouse import delta_versions, target_rows, target_version

pytestmark = pytest.mark.spark

CHANGES_FIELDS = ("files", "records_read", "changes_new", "duplicates_skipped", "quarantined", "delta_version", "seconds")
STAGING_FIELDS = ("changes", "staged", "superseded_in_batch", "delta_version", "seconds")
TARGET_FIELDS = ("changes_pending", "keys_changed", "inserts", "updates", "deletes", "stale_skipped", "superseded",
                 "rows", "delta_version", "seconds")


def assert_has(meta: dict, fields, where: str):
    missing = [f for f in fields if f not in meta]
    assert not missing, f"{where}: metadata lacks {missing}: {meta}"
    for f in fields:
        assert isinstance(meta[f], (int, float)) and not isinstance(meta[f], bool), (where, f, meta[f])
        assert meta[f] >= 0, (where, f, meta[f])


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow(["" if r[c] is None else r[c] for c in COLUMNS])
    return path


def by_id(rows) -> dict:
    return {r[KEY]: r for r in rows}


def test_jobs_materialize_a_generated_feed_batch_by_batch(spark, tmp_path):
    feed = generate(tmp_path, changes=300, batches=3, files_per_batch=2, duplicates=4, delays=6, seed=11)
    export = read_export(feed["export"])
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json",
                                   "reconcile_with": feed["export"]}])
    defs = build_definitions(cfg)
    instance = dg.DagsterInstance.ephemeral()

    seen_uuids: set[str] = set()
    total_new = 0
    for n in range(1, feed["batches"] + 1):
        files = publish(feed, cfg, TABLE, n)
        batch_id = register_batch(cfg, TABLE, instance)
        assert batch_id == f"b{n:06d}"

        # ---- ingest: changes + staging for the batch partition ----------------------------------
        result = execute(defs, f"{TABLE}_ingest_job", instance, partition_key=batch_id)
        meta = materialized(result)
        assert set(meta) == {"changes", "staging"}
        ch, st = meta["changes"], meta["staging"]
        assert_has(ch, CHANGES_FIELDS, f"changes {batch_id}")
        assert_has(st, STAGING_FIELDS, f"staging {batch_id}")
        uuids = uuids_in(cfg, TABLE, files)
        assert ch["files"] == len(files)
        assert ch["records_read"] == lines_in(cfg, TABLE, files) == len(uuids)
        assert ch["quarantined"] == 0
        new_here = set(uuids) - seen_uuids  # duplicates within the batch and of earlier batches count once
        assert ch["changes_new"] == len(new_here)
        assert ch["duplicates_skipped"] == len(uuids) - len(new_here)
        assert ch["records_read"] == ch["changes_new"] + ch["duplicates_skipped"] + ch["quarantined"]
        assert ch["delta_version"] == n - 1 == delta_versions(cfg)["changes"]
        assert st["changes"] == ch["changes_new"]
        assert st["staged"] + st["superseded_in_batch"] == st["changes"]
        assert 0 < st["staged"] <= st["changes"]
        assert st["delta_version"] == n - 1 == delta_versions(cfg)["staging"]
        seen_uuids |= new_here
        total_new += ch["changes_new"]

        checks = check_results(result)
        assert checks == {"staging.batch_accounted": True, "staging.quarantine_within_limit": True}
        # the partitioned check ran for this batch partition
        evaluation = result.get_asset_check_evaluations()[0]
        assert evaluation.partition == batch_id
        assert evaluation.metadata["adds_up"].value is True
        assert evaluation.metadata["records_read"].value == ch["records_read"]

        # ---- apply: target, incrementally ---------------------------------------------------------
        before = by_id(target_rows(cfg, TABLE, source_only=False)) if n > 1 else {}
        result = execute(defs, f"{TABLE}_apply_job", instance, tags={APPLY_TAG: INCREMENTAL})
        tg = materialized(result)["target"]
        assert_has(tg, TARGET_FIELDS, f"target after {batch_id}")
        after = by_id(target_rows(cfg, TABLE, source_only=False))
        assert tg["applied_batch"] == n
        assert tg["rows"] == len(after)
        assert tg["delta_version"] == target_version(cfg, TABLE) == n - 1
        assert tg["changes_pending"] == st["staged"]
        assert tg["changes_pending"] == tg["keys_changed"] + tg["stale_skipped"] + tg["superseded"]
        # inserts/updates/deletes are what really happened to the table
        assert tg["inserts"] == len(set(after) - set(before))
        assert tg["deletes"] == len(set(before) - set(after))
        changed = {k for k in set(before) & set(after) if before[k]["_cdc_order"] != after[k]["_cdc_order"]}
        assert tg["updates"] == len(changed)
        assert tg["inserts"] + tg["updates"] + tg["deletes"] <= tg["keys_changed"]
        assert len(before) + tg["inserts"] - tg["deletes"] == len(after)

        checks = check_results(result)
        assert checks["target.keys_unique"] is True
        assert set(checks) == {"target.keys_unique", "target.reconciles_with_source"}
        if n == feed["batches"]:  # the export is the source's final state: only the last batch matches it
            assert checks["target.reconciles_with_source"] is True, result.get_asset_check_evaluations()

    assert total_new == feed["changes"] == len(seen_uuids)  # every distinct event counted once over the feed
    assert differences(target_rows(cfg, TABLE, source_only=False), export) == []
    assert len(target_rows(cfg, TABLE, source_only=False)) == feed["live_rows"]

    # ---- nothing new: no new Delta version anywhere, the apply says so --------------------------
    versions = delta_versions(cfg)
    result = execute(defs, f"{TABLE}_apply_job", instance, tags={APPLY_TAG: INCREMENTAL})
    assert materialized(result)["target"].get("nothing_new") is True
    assert all(check_results(result).values())
    outcome = run_table(cfg, TABLE, instance)  # the `run` command's path: nothing registered, no run
    assert outcome.ok and outcome.new_batch is None, outcome
    assert delta_versions(cfg) == versions
    # re-executing an ingest partition that is already in (a UI "re-materialize") changes nothing
    result = execute(defs, f"{TABLE}_ingest_job", instance, partition_key="b000002")
    assert materialized(result)["changes"].get("already_committed") is True
    assert all(check_results(result).values())
    assert delta_versions(cfg) == versions
    assert differences(target_rows(cfg, TABLE, source_only=False), export) == []


def test_run_table_with_base_snapshot_and_partitions(spark, tmp_path):
    """The `run` command's path through the same jobs: base import, then the feed landed at once."""
    feed = generate(tmp_path, changes=200, batches=2, files_per_batch=2, seed=23)
    export = read_export(feed["export"])
    # The source export the table starts from: keys 1..5 as they were (to be overridden by every
    # change, as base rows rank below changes) and keys 9001.. that no change touches.
    base = {k: {"id": k, "customer": "base", "amount": 1.0, "status": "old", "region": "emea"} for k in range(1, 6)}
    base.update({k: {"id": k, "customer": "base", "amount": 2.5, "status": None, "region": "apac"}
                 for k in range(9001, 9006)})
    base_csv = write_csv(tmp_path / "base.csv", base.values())
    touched = {json.loads(line)["payload"][KEY] for f in glob.glob(f"{feed['landing']}/*/*.jsonl")
               for line in open(f, encoding="utf-8")}
    assert set(range(1, 6)) <= touched
    expected = dict(export)
    expected.update({k: r for k, r in base.items() if k not in touched})
    reconcile_csv = write_csv(tmp_path / "expected.csv", expected.values())

    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json",
                                   "partition_by": ["region"], "base_snapshot": str(base_csv),
                                   "reconcile_with": str(reconcile_csv)}])
    instance = dg.DagsterInstance.ephemeral()
    for n in range(1, feed["batches"] + 1):
        publish(feed, cfg, TABLE, n)
    outcome = run_table(cfg, TABLE, instance)
    assert outcome.ok, outcome
    assert outcome.new_batch == "b000001"
    assert outcome.checks == {"batch_accounted": True, "quarantine_within_limit": True, "keys_unique": True,
                              "reconciles_with_source": True}
    assert outcome.figures["base"]["rows"] == len(base) and outcome.figures["base"]["quarantined"] == 0
    assert outcome.figures["changes"]["changes_new"] == feed["changes"]
    assert outcome.figures["target"]["rows"] == len(expected)
    assert differences(target_rows(cfg, TABLE, source_only=False), expected) == []
    assert sorted(instance.get_dynamic_partitions(f"{TABLE}__target_partitions")) == [
        "region=amer", "region=apac", "region=emea"]

    versions = delta_versions(cfg)
    again = run_table(cfg, TABLE, instance)
    assert again.ok and again.new_batch is None and again.figures == {}, again
    assert delta_versions(cfg) == versions
    # a fresh Dagster instance over the same warehouse knows what is done from the warehouse alone
    fresh = run_table(cfg, TABLE, dg.DagsterInstance.ephemeral())
    assert fresh.ok and fresh.new_batch is None, fresh
    assert delta_versions(cfg) == versions


def test_batch_partitions_materialized_out_of_order_fail_instead_of_losing_a_batch(spark, tmp_path):
    """From the UI a user can launch any batch partition, or several at once (separate runs that
    may start in any order): a later batch before an earlier one must fail, commit nothing,
    and leave the earlier batch to be taken in full."""
    feed = generate(tmp_path, changes=120, batches=2, files_per_batch=1, seed=29)
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": [KEY], "format": "datastream-json"}])
    defs = build_definitions(cfg)
    instance = dg.DagsterInstance.ephemeral()
    publish(feed, cfg, TABLE, 1)
    register_batch(cfg, TABLE, instance)
    publish(feed, cfg, TABLE, 2)
    register_batch(cfg, TABLE, instance)

    early = defs.resolve_job_def(f"{TABLE}_ingest_job").execute_in_process(
        instance=instance, partition_key="b000002", raise_on_error=False)
    assert not early.success
    error = next(e for e in early.all_events if e.is_step_failure).step_failure_data.error
    message = error.cause.message if error.cause else error.message
    assert TABLE in message and "b000002" in message and "b000001" in message, message
    assert delta_versions(cfg) == {"batches": 1}  # nothing committed

    for batch_id in ("b000001", "b000002"):
        execute(defs, f"{TABLE}_ingest_job", instance, partition_key=batch_id)
    result = execute(defs, f"{TABLE}_apply_job", instance, tags={APPLY_TAG: INCREMENTAL})
    assert materialized(result)["target"]["applied_batch"] == 2
    assert differences(target_rows(cfg, TABLE, source_only=False), read_export(feed["export"])) == []
