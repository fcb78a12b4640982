"""`cdc-assets status` per table: the changes staged but not merged and the oldest one's wait,
whether the table is within its max_staleness, the apply policy, the last apply and maintenance,
the target's rows, files and bytes and the versions its log keeps (the oldest still readable).
The same figures are on target's materializations, and the `within_max_staleness` check (a
warning) passes or fails through real Dagster runs."""
from __future__ import annotations

import datetime as dt
import json
import os
import time

import dagster as dg
import pytest
from deltalake import CommitProperties, DeltaTable

from cdc_assets.cli.main import main
from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.table_assets import TableNames
from cdc_assets.engine.status import table_status
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok, run_table

pytestmark = MARKS

TABLE = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}
FIRST = [mysql("INSERT", {"id": i, "v": "a"}, 1, i) for i in (1, 2, 3)]
SECOND = [mysql("UPDATE", {"id": i, "v": "b"}, 1, 10 + i) for i in (1, 2, 3)] \
    + [mysql("INSERT", {"id": i, "v": "a"}, 1, 10 + i) for i in (4, 5)]
CHECK = dg.AssetCheckKey(dg.AssetKey(["ORDERS", "target"]), "within_max_staleness")


def status_json(cfg, capsys) -> dict:
    capsys.readouterr()
    assert main(["status", "--config", cfg.path, "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return row


def latest_target(instance) -> dict:
    mat = instance.get_latest_materialization_event(dg.AssetKey(["ORDERS", "target"])).asset_materialization
    return {k: v.value for k, v in mat.metadata.items()}


def test_pending_changes_their_wait_and_the_freshness_check(spark, workdir, capsys):
    cfg = write_config(workdir, [{**TABLE, "apply": {"min_changes": 50, "max_staleness": "15m"}}])
    instance = dg.DagsterInstance.ephemeral()
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl(FIRST)})
    first = run_table(cfg, "ORDERS", instance)
    assert first.ok and first.checks[CHECK.name] is True  # evaluated in the apply job, after the first build
    figures = latest_target(instance)
    assert (figures["pending_changes"], figures["target_files"]) == (0, 1) and figures["target_bytes"] > 0
    # counting the versions reads every commit of the log: `status` and maintenance say them, not each apply
    assert "versions_kept" not in figures and "oldest_readable_version" not in figures
    assert "oldest_pending_age_seconds" not in figures  # nothing waits

    land(cfg, "ORDERS", "batch-2", {"p.jsonl": jsonl(SECOND)})
    waiting = run_table(cfg, "ORDERS", instance)
    assert waiting.ok and waiting.waiting.startswith("merge waits: 5 changes pending")
    assert waiting.checks == {"batch_accounted": True, "quarantine_within_limit": True, CHECK.name: True}  # no apply ran: the check ran alone

    row = status_json(cfg, capsys)
    assert (row["pending_changes"], row["pending_batches"], row["applied_through"]) == (5, 1, 1)
    assert 0 <= row["oldest_pending_age_seconds"] < 600 and row["within_max_staleness"] is True
    assert row["apply_decision"].startswith("merge waits: 5 changes pending; min_changes 50; oldest waited")
    assert (row["apply_policy"], row["min_changes"], row["max_staleness_seconds"]) == \
        ("min_changes 50, max_staleness 15m", 50, 900.0)
    assert (row["last_apply_batch"], row["last_maintenance_at"]) == (1, None)

    # asked for as of 16 minutes after the batch was registered: the oldest batch waited too long
    registered = dt.datetime.fromisoformat(row["oldest_pending_at"])
    later = table_status(cfg, cfg.table("ORDERS"), now=registered + dt.timedelta(minutes=16))
    assert later.within_max_staleness is False and later.oldest_pending_age_seconds == 960.0
    assert later.pending_changes == 5 and later.apply_decision is not None
    assert later.apply_decision.startswith("oldest pending batch waited 16m")

    capsys.readouterr()
    assert main(["status", "--config", cfg.path]) == 0
    header, line = capsys.readouterr().out.splitlines()
    for title in ("pending changes", "apply", "within max_staleness", "files (size)", "versions", "retention"):
        assert title in header
    assert "5, oldest " in line and "min 50, max 15m" in line and " yes " in line and "1 (from v0)" in line
    assert " 7d " in line  # maintenance.retention's default; no trim set

    # max_staleness 1s and a batch that waited longer: the check alone, through a Dagster run, warns
    cfg = write_config(workdir, [{**TABLE, "apply": {"min_changes": 50, "max_staleness": "1s"}}])
    time.sleep(max(0.0, 1.1 - (dt.datetime.now(dt.UTC) - registered).total_seconds()))
    defs = build_definitions(cfg)
    result = defs.resolve_job_def(TableNames("ORDERS").freshness_job).execute_in_process(instance=instance)
    assert result.success  # a warning never fails the run
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == CHECK.name and not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN
    metadata = {k: v.value for k, v in evaluation.metadata.items()}
    assert metadata["pending_changes"] == 5 and metadata["oldest_pending_age_seconds"] >= 1.0
    assert metadata["max_staleness_seconds"] == 1.0 and metadata["within_max_staleness"] is False

    # the next run merges (the wait is over), and the check in the apply job passes again
    merged = run_table(cfg, "ORDERS", instance)
    assert merged.ok and merged.waiting is None and merged.checks[CHECK.name] is True
    assert merged.figures["target"]["applied_batch"] == 2
    row = status_json(cfg, capsys)
    assert (row["pending_changes"], row["pending_batches"], row["oldest_pending_age_seconds"]) == (0, 0, None)
    assert row["within_max_staleness"] is True and row["apply_decision"] is None
    assert (row["last_apply_batch"], row["versions_kept"]) == (2, 2)
    assert latest_target(instance)["pending_changes"] == 0


def test_target_size_and_versions_come_from_the_delta_log(spark, workdir, capsys):
    cfg = write_config(workdir, [TABLE])
    batches = [FIRST, [mysql("INSERT", {"id": i, "v": "a"}, 1, 10 + i) for i in (4, 5)],
               [mysql("INSERT", {"id": 6, "v": "a"}, 1, 20)]]  # new keys only: each apply adds a file
    for n, batch in enumerate(batches, 1):
        land(cfg, "ORDERS", f"batch-{n}", {"p.jsonl": jsonl(batch)})
        assert CHECK.name not in run_ok(cfg, "ORDERS").checks  # defined only with apply.max_staleness
    target_path = os.path.join(cfg.table_dir("ORDERS"), "target")
    target = DeltaTable(target_path)

    row = status_json(cfg, capsys)
    files = target.file_uris()
    assert row["rows"] == target.to_pyarrow_table().num_rows == 6  # rows read, against the log's statistics
    assert row["target_files"] == len(files) == 3
    assert row["target_bytes"] == sum(os.path.getsize(f.removeprefix("file://")) for f in files)
    assert (row["versions_kept"], row["oldest_readable_version"], row["target_version"]) == (3, 0, 2)
    assert (row["apply_policy"], row["min_changes"], row["max_staleness_seconds"]) == ("every batch", None, None)
    assert (row["pending_changes"], row["within_max_staleness"], row["last_maintenance_at"]) == (0, None, None)
    assert row["last_apply_batch"] == 3
    assert row["last_apply_at"] == dt.datetime.fromtimestamp(target.history(1)[0]["timestamp"] / 1000,
                                                             dt.UTC).isoformat(timespec="seconds")

    # maintenance: a compaction recorded as cdc_assets records it, then delta-rs' own vacuum
    target.optimize.compact(commit_properties=CommitProperties(custom_metadata={"cdc.step": "compaction"}))
    compacted = DeltaTable(target_path).version()
    DeltaTable(target_path).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    target = DeltaTable(target_path)
    row = status_json(cfg, capsys)
    assert row["last_maintenance_at"] == dt.datetime.fromtimestamp(target.history(1)[0]["timestamp"] / 1000,
                                                                   dt.UTC).isoformat(timespec="seconds")
    assert row["last_apply_batch"] == 3 and row["rows"] == 6
    assert row["target_files"] == len(target.file_uris()) == 1
    assert (row["versions_kept"], row["oldest_readable_version"]) == (target.version() + 1, compacted)
    for version in range(target.version() + 1):  # what it says is readable is, and the versions before are not
        if version < compacted:
            with pytest.raises(FileNotFoundError):  # a vacuumed file, as any Delta reader finds
                DeltaTable(target_path, version=version).to_pyarrow_table()
            capsys.readouterr()  # nor can it be restored: the restore says which version, and commits nothing
            assert main(["restore", "ORDERS", "--config", cfg.path, "--version", str(version)]) == 1
            assert f"restoring target version {version} failed" in capsys.readouterr().err
            assert DeltaTable(target_path).version() == target.version()
        else:
            assert DeltaTable(target_path, version=version).to_pyarrow_table().num_rows == 6
