"""A landing area in Cloud Storage (`landing: gs://bucket/prefix`), against the GCS emulator
(gcp-storage-emulator, in this process): Datastream's own layout at any depth, objects complete
once they exist, bad records quarantined by object and line, files read by the run itself or by
Spark's Python workers, and an unreachable landing area named in the failure."""
from __future__ import annotations

import pytest

from cdc_assets.engine import spark_ingest
from cdc_assets_tests.emulators import GCS_BUCKET as BUCKET
from cdc_assets_tests.emulators import put
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_table
from cdc_assets_tests.support.steps import run_steps
from cdc_assets_tests.support.warehouse import delta_rows, target_rows, values

pytestmark = MARKS


def gcs_config(workdir, name: str):
    return write_config(workdir, [{"name": name, "keys": ["id"], "format": "datastream-json"}],
                        landing=f"gs://{BUCKET}/datastream")


@pytest.mark.parametrize("by_spark", [False, True], ids=["read-by-the-run", "read-by-spark-workers"])
def test_a_gcs_landing_takes_datastream_objects_at_any_depth(spark, workdir, gcs_bucket, monkeypatch, by_spark):
    if by_spark:
        settings_of(monkeypatch, spark_ingest, local_parse_bytes=0)  # every batch parsed by Spark tasks
    cfg = gcs_config(workdir, "ORDERS")
    folder = "datastream/ORDERS/2024/01/01/10/00"
    put(gcs_bucket, f"{folder}/part-1.jsonl", jsonl([
        mysql("INSERT", {"id": 1, "v": "a"}, 1, 1), mysql("INSERT", {"id": 2, "v": "a"}, 1, 2)]) + "not json\n")
    put(gcs_bucket, f"{folder}/_SUCCESS", "")  # a marker, not a change file
    put(gcs_bucket, "datastream/OTHER/2024/01/01/10/00/part-1.jsonl", jsonl([mysql("INSERT", {"id": 9}, 1, 1)]))
    out = run_steps(spark, cfg, "ORDERS")
    assert out.new_batch == "b000001"
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "a", 2: "a"}
    (q,) = delta_rows(cfg, "ORDERS", "quarantine")
    assert (q["_cdc_file"], q["_cdc_line"], q["_cdc_raw"]) == ("2024/01/01/10/00/part-1.jsonl", 3, "not json")

    assert run_steps(spark, cfg, "ORDERS").new_batch is None  # nothing new: no object is taken twice
    put(gcs_bucket, "datastream/ORDERS/2024/01/01/10/01/part-1.jsonl", jsonl([
        mysql("UPDATE", {"id": 1, "v": "b"}, 1, 3), mysql("DELETE", {"id": 2, "v": "a"}, 1, 4)]))
    assert run_steps(spark, cfg, "ORDERS").new_batch == "b000002"
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "b"}


def test_a_landing_bucket_that_does_not_exist_fails_the_run_naming_it(spark, workdir, gcs_bucket):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}],
                       landing="gs://no-such-bucket/datastream")
    outcome = run_table(cfg, "ORDERS")
    assert not outcome.ok
    assert "gs://no-such-bucket/datastream/ORDERS" in outcome.error


def test_an_object_written_again_under_its_name_is_taken_again_only_when_its_content_changed(spark, workdir,
                                                                                            gcs_bucket):
    from cdc_assets.defs.run_loop import summary_line

    cfg = gcs_config(workdir, "ORDERS")
    name = "datastream/ORDERS/2024/01/01/10/00/part-1.jsonl"
    first = jsonl([mysql("INSERT", {"id": 1, "v": "a"}, 1, 1), mysql("INSERT", {"id": 2, "v": "a"}, 1, 2)])
    put(gcs_bucket, name, first)
    assert run_table(cfg, "ORDERS").new_batch == "b000001"
    put(gcs_bucket, name, first)  # a new generation of the same bytes: nothing new
    assert run_table(cfg, "ORDERS").new_batch is None
    put(gcs_bucket, name, first + jsonl([mysql("UPDATE", {"id": 1, "v": "b"}, 1, 3)]))  # an object is written whole
    outcome = run_table(cfg, "ORDERS")
    assert outcome.ok and "new batch b000002 (1 file replaced)" in summary_line(outcome)
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "b", 2: "a"}
    assert run_table(cfg, "ORDERS").new_batch is None


def test_a_landing_prefix_without_objects_is_a_warning_naming_it(spark, workdir, gcs_bucket):
    from cdc_assets.defs.run_loop import summary_line

    put(gcs_bucket, "datastream/ORDERS/2024/01/01/10/00/part-1.jsonl", jsonl([mysql("INSERT", {"id": 1}, 1, 1)]))
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}],
                       landing=f"gs://{BUCKET}/datastraem")  # a typo
    outcome = run_table(cfg, "ORDERS")
    assert outcome.ok  # the first objects may not have arrived yet
    assert (f"ok; warning: landing folder gs://{BUCKET}/datastraem/ORDERS holds no objects (nothing taken)"
            in summary_line(outcome))
