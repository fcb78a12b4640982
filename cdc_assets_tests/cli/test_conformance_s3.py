"""Shared conformance scenarios with the warehouse in an object store: the same steps as
../shared/conformance/run_conformance.py (land batch N, `cdc-assets run`, compare the target
with expected.jsonl after the last batch, one more run that changes nothing), with
`warehouse: s3://...` in an S3-compatible server (moto) and a local landing area. Every Delta
table, the Spark-written builds (base import, first apply) and the runs' notes live in the
bucket; nothing is written to a local folder named after the URL. The comparison is the suite's
own (its functions, imported from the file). About 2-3 minutes (4 CLI runs)."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from deltalake import DeltaTable

from cdc_assets.engine import storage
from cdc_assets_tests.cli.conformance import Conformance

SCENARIOS = ["datastream_mysql_orders", "seed002_changeset"]


@pytest.mark.spark
def test_conformance_scenarios_pass_with_the_warehouse_in_an_object_store(cli, shared_dir, tmp_path, s3_warehouse):
    conformance = Conformance(cli, shared_dir, str(tmp_path), SCENARIOS, warehouse=s3_warehouse)
    assert conformance.env.get("AWS_ENDPOINT_URL")

    def copy(s: dict, batch: str) -> None:
        shutil.copytree(os.path.join(s["dir"], batch), os.path.join(str(tmp_path), "landing", s["table"]["name"], batch))

    conformance.land_and_run_every_batch(copy)
    conformance.assert_targets_expected_then_rerun_changes_nothing()

    for s in conformance.scenarios:
        table_dir = f"{s3_warehouse}/{s['table']['name']}"
        # the first apply's files were written by Spark's Python workers into the bucket
        target = DeltaTable(f"{table_dir}/target", storage_options=storage.delta_options(table_dir))
        assert target.file_uris() and all(u.startswith(table_dir + "/target/") for u in target.file_uris())
        # each run's note is in the bucket, beside the table's Delta tables
        assert json.loads(storage.read_bytes(f"{table_dir}/_cdc_last_run.json"))["ok"] is True
    # a warehouse URL never became a local folder
    assert not os.path.exists(os.path.join(str(tmp_path), "s3:")) and not os.path.exists("s3:")
