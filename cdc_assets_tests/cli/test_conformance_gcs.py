"""Shared conformance scenarios with the landing area in Cloud Storage (the GCS emulator): the
same steps as ../shared/conformance/run_conformance.py -- land batch N, `cdc-assets run`, compare
the target with expected.jsonl after the last batch, one more run that changes nothing -- except
that each batch is uploaded as objects under gs://<bucket>/<prefix>/<TABLE>/batch-N/ and cdc.yaml
says `landing: gs://<bucket>/<prefix>`. The warehouse stays a local folder. The comparison is the
suite's own (its functions, imported from the file), not a copy. About 2-3 minutes (4 CLI runs)."""
from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable

from cdc_assets_tests.cli.conformance import Conformance
from cdc_assets_tests.emulators import GCS_BUCKET, put

PREFIX = "datastream"
# Two formats, one config (as the suite does): a Datastream feed of 3 batches, and a CSV change
# set over a base export. Each CLI run applies both, so the second scenario costs no extra run.
SCENARIOS = ["datastream_mysql_orders", "seed002_changeset"]


@pytest.mark.spark
def test_conformance_scenarios_pass_with_a_gcs_landing(cli, shared_dir, tmp_path, gcs_bucket):
    # the suite's tables, base snapshots included, with the landing area in the bucket
    conformance = Conformance(cli, shared_dir, str(tmp_path), SCENARIOS, landing=f"gs://{GCS_BUCKET}/{PREFIX}")
    assert conformance.env.get("STORAGE_EMULATOR_HOST")

    landed: dict[str, dict[str, int]] = {s["table"]["name"]: {} for s in conformance.scenarios}  # object -> batch

    def upload(s: dict, batch: str) -> None:
        table = s["table"]["name"]
        for root, _dirs, files in os.walk(os.path.join(s["dir"], batch)):
            for f in sorted(files):
                relative = os.path.relpath(os.path.join(root, f), s["dir"]).replace(os.sep, "/")
                with open(os.path.join(root, f), "rb") as fh:
                    put(gcs_bucket, f"{PREFIX}/{table}/{relative}", fh.read())
                landed[table][relative] = s["batches"].index(batch) + 1

    conformance.land_and_run_every_batch(upload)
    conformance.assert_targets_expected_then_rerun_changes_nothing()

    # The warehouse's batch ledger names the objects relative to <prefix>/<TABLE>/, batch N's in ledger batch N.
    for table, objects in landed.items():
        ledger = DeltaTable(os.path.join(conformance.cfg["warehouse"], table, "batches")).to_pyarrow_table()
        files = [r["file"] for r in ledger.to_pylist()]
        assert sorted(files) == sorted(objects), (table, files)
        assert {r["file"]: r["batch_seq"] for r in ledger.to_pylist()} == objects
    # nothing was read from, or written to, a local landing folder (nor a gs: URL taken as a local path)
    work = str(tmp_path)
    assert not os.path.exists(os.path.join(work, "landing")) and not os.path.exists(os.path.join(work, "gs:"))
