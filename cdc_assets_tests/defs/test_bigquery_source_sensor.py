"""The landing sensor of a table read from and published to BigQuery: a tick extracts the
source's new rows through the `bigquery` resource (dagster_gcp's BigQueryResource) and registers
them as a batch; the runs it asks for apply them, then publish the target to its BigQuery copy,
which reconciles with it; a quiet source gives a skip and no batch."""
from __future__ import annotations

import dagster as dg
import pytest

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.engine import bigquery_publish as publishing
from cdc_assets.engine.landing import registered
from cdc_assets_tests.engine.test_bigquery_source import APPEND_SCHEMA, append, create, source_config
from cdc_assets_tests.support.warehouse import target_rows, values

from .test_sensor import Daemon

pytestmark = pytest.mark.spark


def test_sensor_ticks_extract_new_source_rows_apply_them_and_publish_the_target(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    source = create(client, "TABLE1", APPEND_SCHEMA)
    copy = f"{client.project}.{client.test_dataset}.TABLE1_CURRENT"
    cfg = source_config(workdir, "TABLE1", source, publish={"bigquery": copy})

    def row(key, value, csn, kind="INSERT"):
        return {"COL1": key, "COL2": value, "datastream_metadata": {
            "uuid": f"u{csn}", "source_timestamp": 1, "change_sequence_number": csn, "change_type": kind,
            "is_deleted": kind == "DELETE"}}

    with dg.instance_for_test() as instance:
        daemon = Daemon(build_definitions(cfg), instance, table="TABLE1")
        assert daemon.tick().run_requests == []  # an empty source: nothing to take
        assert daemon.settle() == 0  # nothing new, nothing asked
        append(client, source, [row("a", "1", 1), row("b", "1", 2)])
        daemon.settle()
        assert daemon.launched_jobs == ["TABLE1_batch_job", "TABLE1_publish_job"]
        append(client, source, [row("a", "2", 3, "UPDATE"), row("b", "1", 4, "DELETE")])
        daemon.settle()
        assert daemon.launched_jobs == ["TABLE1_batch_job", "TABLE1_publish_job"]
        assert [b.files for b in registered(cfg.table_dir("TABLE1"))] == [
            ("extract-00000001.parquet",), ("extract-00000002.parquet",)]
        assert values(target_rows(cfg, "TABLE1"), "COL1", "COL2") == {"a": "2"}
        assert [tuple(r.values()) for r in client.query(f"SELECT COL1, COL2 FROM `{copy}`").result()] == [("a", "2")]
        assert publishing.reconcile(client, cfg, cfg.table("TABLE1")).discrepancies == 0
