"""The target step's figures as the UI shows them: each materialization of target carries the
apply's entries by name and Dagster type, the run loop reads them back into the step's result for
the summary line, and `run --json` prints the same entries. A small table: no Spark starts."""
from __future__ import annotations

import dagster as dg

from cdc_assets.defs.run_loop import summary_line
from cdc_assets.engine.step_results import ApplyResult
from cdc_assets_tests.engine.records import mysql
from cdc_assets_tests.helpers import jsonl, land, run_table, write_config

# the apply's own entries (the target's size and what waits follow them; `dagster/...` are the catalog's)
INCREMENTAL = {
    "batches_applied": dg.TextMetadataValue, "applied_batch": dg.IntMetadataValue,
    "changes_pending": dg.IntMetadataValue, "keys_changed": dg.IntMetadataValue, "inserts": dg.IntMetadataValue,
    "updates": dg.IntMetadataValue, "deletes": dg.IntMetadataValue, "stale_skipped": dg.IntMetadataValue,
    "superseded": dg.IntMetadataValue, "files_added": dg.IntMetadataValue, "files_removed": dg.IntMetadataValue,
    "files_before": dg.IntMetadataValue, "partitions_rewritten": dg.JsonMetadataValue, "rows": dg.IntMetadataValue,
    "delta_version": dg.IntMetadataValue, "seconds": dg.FloatMetadataValue,
}
TARGET = {"pending_changes", "oldest_pending_age_seconds", "within_max_staleness", "target_files", "target_bytes"}


def test_an_applys_figures_are_the_targets_metadata_and_its_summary(workdir):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "ORDERS", "batch-0001", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "status": "open"}, 1, 1),
        mysql("INSERT", {"id": 2, "status": "open"}, 1, 2),
        mysql("INSERT", {"id": 3, "status": "open"}, 1, 3)])})
    instance = dg.DagsterInstance.ephemeral()
    first = run_table(cfg, "ORDERS", instance)
    assert first.ok and first.applied is not None
    assert (first.applied.rows_written, first.applied.inserts, first.applied.batches_applied) == (3, 3, "1..1")
    land(cfg, "ORDERS", "batch-0002", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "status": "paid"}, 1, 4),
        mysql("DELETE", {"id": 2, "status": "open"}, 1, 5)])})
    second = run_table(cfg, "ORDERS", instance)
    assert second.ok

    metadata = instance.get_latest_materialization_event(dg.AssetKey(["ORDERS", "target"])) \
        .asset_materialization.metadata
    own = {k: type(v) for k, v in metadata.items() if not k.startswith("dagster/")}
    # an incremental apply's entries, then the target's (an unknown one is no entry); a list is JSON
    assert {k: t for k, t in own.items() if k not in TARGET} == INCREMENTAL
    assert {k for k in own if k in TARGET} == TARGET - {"oldest_pending_age_seconds", "within_max_staleness"}
    values = {k: v.value for k, v in metadata.items() if k in INCREMENTAL and k != "seconds"}
    assert values == {"batches_applied": "2..2", "applied_batch": 2, "changes_pending": 2, "keys_changed": 2,
                      "inserts": 0, "updates": 1, "deletes": 1, "stale_skipped": 0, "superseded": 0,
                      "files_added": 1, "files_removed": 1, "files_before": 1, "partitions_rewritten": [],
                      "rows": 2, "delta_version": 1}

    # the staging step's entries, the same way
    staging = instance.get_latest_materialization_event(dg.AssetKey(["ORDERS", "staging"])).asset_materialization
    staged = {k: v for k, v in staging.metadata.items() if not k.startswith("dagster/")}
    assert {k: type(v) for k, v in staged.items()} == {
        "changes": dg.IntMetadataValue, "staged": dg.IntMetadataValue, "superseded_in_batch": dg.IntMetadataValue,
        "compacted": dg.BoolMetadataValue, "delta_version": dg.IntMetadataValue, "seconds": dg.FloatMetadataValue}
    assert (staged["changes"].value, staged["staged"].value, staged["superseded_in_batch"].value) == (2, 2, 0)
    assert staging.metadata["dagster/partition_row_count"].value == 2

    # read back into the step's result: the summary line and `run --json` say the same
    applied = second.applied
    assert applied == ApplyResult.from_metadata(second.figures["target"])
    assert (applied.inserts, applied.updates, applied.deletes, applied.partitions_rewritten) == (0, 1, 1, ())
    assert f"target 2 rows (+0 ~1 -1, 0 stale) v1 in {applied.seconds}s" in summary_line(second)
    assert second.to_json()["figures"]["target"] == {k: v.value for k, v in metadata.items()
                                                     if not k.startswith("dagster/")}

    # a run with nothing new: target not applied again, and the summary line says nothing of it
    third = run_table(cfg, "ORDERS", instance)
    assert third.ok and "target" not in third.figures and third.applied is None
    assert "target" not in summary_line(third)


def test_a_step_result_has_an_entry_for_each_figure_it_holds():
    nothing = ApplyResult(nothing_new=True, applied_batch=4)
    assert nothing.to_metadata() == nothing.to_json() == {"nothing_new": True, "applied_batch": 4}
    rebuilt = ApplyResult(applied_batch=3, partitions_rewritten=("region=eu",), partitions=("region=eu",),
                          seconds=0.5)
    assert rebuilt.to_metadata() == {"applied_batch": 3, "partitions_rewritten": ["region=eu"],
                                     "partitions": ["region=eu"], "seconds": 0.5}
    # read back from its entries; the target's other entries are not the step's
    assert ApplyResult.from_metadata({**rebuilt.to_metadata(), "target_files": 2}) == rebuilt
