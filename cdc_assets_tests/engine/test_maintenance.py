"""Maintenance (`cdc-assets maintain`, the `<TABLE>_maintenance_job`): compaction leaves the rows
and the batch watermark as they are with fewer files, the trim takes applied batches out of
`changes`, the vacuum removes what no version within the retention needs, and the next batches
apply as before."""
from __future__ import annotations

import datetime as dt
import glob
import json
import os

import dagster as dg
import pytest
from deltalake import DeltaTable

from cdc_assets.cli.main import main
from cdc_assets.defs.definitions import build_definitions
from cdc_assets.engine import checks, delta
from cdc_assets.engine.maintenance import maintain
from cdc_assets.engine.table_layout import CHANGES, TARGET, path
from cdc_assets.engine.target_versions import RestoreFailed, restore, versions
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import run_steps, take_and_apply
from cdc_assets_tests.support.warehouse import canonical, target_rows, values

pytestmark = MARKS

TABLE = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["region"],
         "maintenance": {"trim_changes_after": "1h"}}


def batch(n: int) -> list[dict]:
    """New keys in both regions: each apply adds a small file to each partition."""
    return [mysql("INSERT", {"id": 10 * n + i, "region": ("eu", "us")[i % 2], "v": "a"}, 1, 10 * n + i)
            for i in range(4)]


def test_maintenance_compacts_trims_and_vacuums_without_changing_a_row(spark, workdir, capsys):
    cfg = write_config(workdir, [TABLE])
    table = cfg.table("ORDERS")
    first = batch(1)
    for n in range(1, 6):
        land(cfg, "ORDERS", f"batch-{n}", {"p.jsonl": jsonl(first if n == 1 else batch(n))})
        take_and_apply(spark, cfg, "ORDERS")
    target_path = path(cfg.table_dir("ORDERS"), TARGET)
    before_rows = canonical(target_rows(cfg, "ORDERS", source_only=False))
    before = delta.load(target_path)
    files_before, watermark = len(before.file_uris()), delta.txn_version(before, TARGET)
    assert files_before >= 6 and watermark == 5
    # Spark's checksum files beside its first build's data files: no log entry names them
    checksums = len(glob.glob(os.path.join(target_path, "**", ".*.crc"), recursive=True))

    # two hours on: every batch is older than trim_changes_after; retention 0 vacuums every unreferenced file
    report = maintain(cfg, table, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2), retention=0)
    after = delta.load(target_path)
    assert canonical(target_rows(cfg, "ORDERS", source_only=False)) == before_rows
    assert delta.txn_version(after, TARGET) == watermark  # the next apply starts where it did
    assert len(after.file_uris()) == 2 == report.target_after.count  # one file per region
    assert report.target_before.count == files_before and report.compacted["numFilesRemoved"] == files_before
    assert report.changes_trimmed_through == 5 and report.changes_rows_trimmed == 20
    assert delta.read_arrow(path(cfg.table_dir("ORDERS"), CHANGES)).num_rows == 0
    for seq in range(1, 6):  # a trimmed batch still adds up, from what its commits recorded
        figures = checks.batch_accounting(cfg, table, seq)
        assert figures.adds_up and figures.counted_from_commits == ("changes_new",), (seq, figures)
    assert report.files_vacuumed[TARGET] == files_before + checksums  # the compacted-away files, and those
    assert {v.kind for v in versions(cfg.table_dir("ORDERS"))} >= {"compaction", "vacuum"}
    # a version from before the vacuum's retention is gone: a Delta reader finds its files missing,
    # and a restore to it fails, naming the version, and commits nothing
    with pytest.raises(FileNotFoundError):
        DeltaTable(target_path, version=1).to_pyarrow_table()
    with pytest.raises(RestoreFailed, match="restoring target version 1 failed"):
        restore("ORDERS", cfg.table_dir("ORDERS"), 1)
    assert delta.load(target_path).version() == after.version()

    # the next batches apply as before; a change re-delivered from a trimmed batch changes no value
    land(cfg, "ORDERS", "batch-6", {"p.jsonl": jsonl(batch(6) + [mysql("UPDATE", {"id": 10, "region": "eu", "v": "b"},
                                                                       1, 99)])})
    take_and_apply(spark, cfg, "ORDERS")
    land(cfg, "ORDERS", "batch-7", {"p.jsonl": jsonl(first[:1])})  # the same event, its uuid included
    assert run_steps(spark, cfg, "ORDERS").taken.duplicates_skipped == 1  # known from `seen`
    got = values(target_rows(cfg, "ORDERS"), "id", "v")
    assert len(got) == 24 and got[10] == "b" and got[11] == "a"

    # the command line and the Dagster job do the same, and say what they did
    capsys.readouterr()
    assert main(["maintain", "--config", cfg.path, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["table"] == "ORDERS" and printed["target_after"]["count"] == 2
    result = build_definitions(cfg).resolve_job_def("ORDERS_maintenance_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success
    [observation] = [e.event_specific_data.asset_observation for e in result.all_events
                     if e.event_type_value == "ASSET_OBSERVATION"]
    assert observation.asset_key == dg.AssetKey(["ORDERS", "target"])
    assert observation.metadata["files_after"].value == 2 and observation.metadata["bytes_after"].value > 0
    # the versions the log keeps, and the oldest readable after the vacuum, are said where they change
    target = DeltaTable(os.path.join(cfg.table_dir("ORDERS"), "target"))
    assert observation.metadata["versions_kept"].value == len(target.history())
    assert observation.metadata["oldest_readable_version"].value > 0  # the vacuum removed the first versions' files
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == got
