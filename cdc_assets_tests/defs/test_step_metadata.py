"""The target step's figures as the UI shows them: each materialization of target carries the
apply's entries by name and Dagster type, the run loop reads them back into the step's result for
the summary line, and `run --json` prints the same entries. A small table: no Spark starts."""
from __future__ import annotations

import dagster as dg

from cdc_assets.defs.run_loop import summary_line
from cdc_assets.engine import bigquery_publish as publishing
from cdc_assets.engine import checks
from cdc_assets.engine.step_results import (
    ApplyResult,
    BaseResult,
    ChangesResult,
    PublishReconciliation,
    PublishResult,
)
from cdc_assets_tests.emulators import PROJECT
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import run_table

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


def check_metadata(instance: dg.DagsterInstance, asset: list[str], name: str) -> dict:
    """The metadata of the asset check's latest evaluation."""
    key = dg.AssetCheckKey(dg.AssetKey(asset), name)
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    assert record.event is not None and record.event.dagster_event is not None
    return dict(record.event.dagster_event.event_specific_data.metadata)


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

    # the changes step's entries, and its result read back for the summary line
    changes = instance.get_latest_materialization_event(dg.AssetKey(["ORDERS", "changes"])).asset_materialization
    taken = {k: v for k, v in changes.metadata.items() if not k.startswith("dagster/")}
    assert {k: type(v) for k, v in taken.items()} == {
        "files": dg.IntMetadataValue, "records_read": dg.IntMetadataValue, "changes_new": dg.IntMetadataValue,
        "duplicates_skipped": dg.IntMetadataValue, "quarantined": dg.IntMetadataValue,
        "compacted": dg.BoolMetadataValue, "delta_version": dg.IntMetadataValue, "seconds": dg.FloatMetadataValue}
    assert changes.metadata["dagster/partition_row_count"].value == 2
    assert second.taken == ChangesResult.from_metadata({k: v.value for k, v in taken.items()})
    assert (second.taken.files, second.taken.records_read, second.taken.changes_new,
            second.taken.duplicates_skipped, second.taken.quarantined) == (1, 2, 2, 0, 0)
    assert "2 records, 2 new changes, 0 duplicates, 0 quarantined" in summary_line(second)

    # the checks' reports: the batch's counts add up; the keys the apply touched are each in the target once
    accounted = check_metadata(instance, ["ORDERS", "staging"], "batch_accounted")
    assert {k: v.value for k, v in accounted.items()} == {
        "records_read": 2, "changes_new": 2, "duplicates_skipped": 0, "quarantined": 0, "unchanged": 0,
        "derived_deletes": 0, "staged": 2, "superseded_in_batch": 0, "complete": True, "adds_up": True}
    unique = check_metadata(instance, ["ORDERS", "target"], "keys_unique")
    assert {k: v.value for k, v in unique.items()} == {"keys_checked": 2, "duplicate_keys": 0,
                                                       "sample_duplicates": []}

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


def test_a_reconciliations_report_is_its_checks_metadata(workdir):
    export = workdir / "export.csv"
    export.write_text("id,status\n1,open\n2,paid\n3,open\n,open\n")  # the last row has no key
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json",
                                  "reconcile_with": str(export)}])
    land(cfg, "ORDERS", "b1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "status": "open"}, 1, 1), mysql("INSERT", {"id": 2, "status": "open"}, 1, 2),
        mysql("INSERT", {"id": 4, "status": "open"}, 1, 3)])})
    instance = dg.DagsterInstance.ephemeral()
    assert run_table(cfg, "ORDERS", instance).ok

    # by name, with these Dagster types: places in the export, never a value
    metadata = check_metadata(instance, ["ORDERS", "target"], "reconciles_with_source")
    assert {k: type(v) for k, v in metadata.items()} == {
        "source_rows": dg.IntMetadataValue, "target_rows": dg.IntMetadataValue, "missing_rows": dg.IntMetadataValue,
        "extra_rows": dg.IntMetadataValue, "differing_rows": dg.IntMetadataValue,
        "sample_missing_rows": dg.JsonMetadataValue, "sample_extra_rows": dg.JsonMetadataValue,
        "sample_differing_rows": dg.JsonMetadataValue, "duplicate_source_keys": dg.IntMetadataValue,
        "unreadable_source_rows": dg.IntMetadataValue, "sample_unreadable_source_rows": dg.JsonMetadataValue}
    values = {k: v.value for k, v in metadata.items()}
    assert values == checks.reconciliation(cfg, cfg.table("ORDERS")).to_metadata()  # the report's own entries
    unreadable = values.pop("sample_unreadable_source_rows")
    assert values == {"source_rows": 3, "target_rows": 3, "missing_rows": 1, "extra_rows": 1, "differing_rows": 1,
                      "sample_missing_rows": ["export line 4"], "sample_extra_rows": ["batch 1 file 1 line 3"],
                      "sample_differing_rows": ["export line 3: status"], "duplicate_source_keys": 0,
                      "unreadable_source_rows": 1}
    assert len(unreadable) == 1 and unreadable[0].startswith("line 5: ")


def test_a_step_result_has_an_entry_for_each_figure_it_holds():
    nothing = ApplyResult(nothing_new=True, applied_batch=4)
    assert nothing.to_metadata() == nothing.to_json() == {"nothing_new": True, "applied_batch": 4}
    rebuilt = ApplyResult(applied_batch=3, partitions_rewritten=("region=eu",), partitions=("region=eu",),
                          seconds=0.5)
    assert rebuilt.to_metadata() == {"applied_batch": 3, "partitions_rewritten": ["region=eu"],
                                     "partitions": ["region=eu"], "seconds": 0.5}
    # read back from its entries; the target's other entries are not the step's
    assert ApplyResult.from_metadata({**rebuilt.to_metadata(), "target_files": 2}) == rebuilt


def test_a_snapshot_batchs_and_a_base_imports_figures_are_their_metadata(workdir):
    export = workdir / "export.csv"
    export.write_text("id,v\n1,base\n2,base\n")
    cfg = write_config(workdir, [{"name": "SNAP", "keys": ["id"], "format": "snapshot", "base_snapshot": str(export)}])
    land(cfg, "SNAP", "b1", {"export.jsonl": jsonl([{"id": 1, "v": "base"}, {"id": 2, "v": "new"},
                                                    {"id": 3, "v": "new"}, {"id": 3, "v": "again"}])})
    instance = dg.DagsterInstance.ephemeral()
    out = run_table(cfg, "SNAP", instance)
    assert out.ok

    base = instance.get_latest_materialization_event(dg.AssetKey(["SNAP", "base"])).asset_materialization
    imported = {k: v.value for k, v in base.metadata.items() if not k.startswith("dagster/")}
    assert {k: type(base.metadata[k]) for k in imported} == {
        "rows_read": dg.IntMetadataValue, "rows": dg.IntMetadataValue, "quarantined": dg.IntMetadataValue,
        "files": dg.IntMetadataValue, "delta_version": dg.IntMetadataValue, "seconds": dg.FloatMetadataValue}
    assert BaseResult.from_metadata(imported) == BaseResult(rows_read=2, rows=2, quarantined=0, files=1,
                                                            delta_version=0, seconds=imported["seconds"])

    # a snapshot's derived changes, by kind, and why it derived no deletes are entries of their own
    changes = instance.get_latest_materialization_event(dg.AssetKey(["SNAP", "changes"])).asset_materialization
    taken = {k: v for k, v in changes.metadata.items() if not k.startswith("dagster/")}
    assert {k: type(v) for k, v in taken.items()} == {
        "files": dg.IntMetadataValue, "records_read": dg.IntMetadataValue, "changes_new": dg.IntMetadataValue,
        "inserts": dg.IntMetadataValue, "updates": dg.IntMetadataValue, "derived_deletes": dg.IntMetadataValue,
        "unchanged": dg.IntMetadataValue, "duplicates_skipped": dg.IntMetadataValue,
        "quarantined": dg.IntMetadataValue, "compacted": dg.BoolMetadataValue, "delta_version": dg.IntMetadataValue,
        "seconds": dg.FloatMetadataValue}
    assert out.taken == ChangesResult.from_metadata({k: v.value for k, v in taken.items()})
    assert (out.taken.records_read, out.taken.changes_new, out.taken.inserts, out.taken.updates,
            out.taken.derived_deletes, out.taken.unchanged, out.taken.duplicates_skipped) == (4, 2, 1, 1, 0, 1, 1)


def test_a_publishs_figures_are_its_metadata_and_its_summary(workdir, bigquery_emulator):
    dest = f"{PROJECT}.{bigquery_emulator.test_dataset}.orders"
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json",
                                  "publish": {"bigquery": dest}}])
    land(cfg, "ORDERS", "b1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "status": "open"}, 1, 1), mysql("INSERT", {"id": 2, "status": "open"}, 1, 2)])})
    instance = dg.DagsterInstance.ephemeral()
    out = run_table(cfg, "ORDERS", instance)
    assert out.ok

    key = dg.AssetKey(["ORDERS", "bigquery"])
    published = instance.get_latest_materialization_event(key).asset_materialization
    figures = {k: v for k, v in published.metadata.items() if not k.startswith("dagster/")}
    assert {k: type(v) for k, v in figures.items()} == {
        "mode": dg.TextMetadataValue, "reason": dg.TextMetadataValue, "batches": dg.TextMetadataValue,
        "published_batch": dg.IntMetadataValue, "target_version": dg.IntMetadataValue,
        "rows_sent": dg.IntMetadataValue, "deletes_sent": dg.IntMetadataValue, "rows_affected": dg.IntMetadataValue,
        "destination": dg.TextMetadataValue, "created": dg.BoolMetadataValue, "seconds": dg.FloatMetadataValue}
    sent = out.published
    assert sent == PublishResult.from_metadata({k: v.value for k, v in figures.items()})
    assert (sent.mode, sent.batches, sent.rows_sent, sent.deletes_sent, sent.destination, sent.created) == \
        ("all", "0..1", 2, 0, dest, True)
    assert f"published to BigQuery (all): 2 rows sent, 0 deletes, {sent.rows_affected} rows changed" \
        in summary_line(out)

    # the reconciliation check's report
    report = publishing.reconcile(bigquery_emulator, cfg, cfg.table("ORDERS"))
    assert report == PublishReconciliation(published=True, compared="all rows", target_version=0, rows_target=2,
                                           rows_bigquery=2, missing_in_bigquery=0, not_in_target=0,
                                           differing_rows=0, differing_columns=(), discrepancies=0)
    assert report.to_metadata()["differing_columns"] == []
    assert out.checks == {"batch_accounted": True, "quarantine_within_limit": True, "keys_unique": True,
                          "reconciles_with_target": True}
    assert {k: v.value for k, v in check_metadata(instance, ["ORDERS", "bigquery"], "reconciles_with_target")
            .items()} == report.to_metadata()

    # nothing new: a direct publish says so, and which batch the destination holds
    assert publishing.publish(bigquery_emulator, cfg, cfg.table("ORDERS")).to_metadata() == {
        "nothing_new": True, "reason": "published up to date", "published_batch": 1}
