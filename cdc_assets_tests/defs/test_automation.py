"""Declarative Automation (defs/automation.py): a table's history follows its changes, and its
BigQuery copy follows its target once target's blocking check passed; what `cdc-assets run`
materialized itself is not asked for again, nor is it held by batches a new Dagster instance
never saw materialized."""
from __future__ import annotations

import dagster as dg
import pytest

from cdc_assets.defs.automation import AUTOMATION_SENSOR
from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.table_assets import TableNames
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import run_table

NAMES = TableNames("ORDERS")
TARGET, COPY, HISTORY = NAMES.key("target"), NAMES.key("bigquery"), NAMES.key("history")
KEYS_UNIQUE = dg.AssetCheckKey(TARGET, "keys_unique")


class Automation:
    """Successive evaluations of the definitions' automation conditions, as the sensor's ticks."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance):
        self.defs, self.instance, self.cursor = defs, instance, None

    def requested(self) -> set[dg.AssetKey]:
        result = dg.evaluate_automation_conditions(defs=self.defs, instance=self.instance, cursor=self.cursor)
        self.cursor = result.cursor
        return {key for key in (TARGET, COPY, HISTORY) if result.get_num_requested(key)}


def test_the_copy_follows_the_target_only_once_its_blocking_check_passed(workdir):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json",
                                  "publish": {"bigquery": "p.d.orders"}}])
    defs = build_definitions(cfg)
    sensor = defs.resolve_sensor_def(AUTOMATION_SENSOR)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    with dg.instance_for_test() as instance:
        automation = Automation(defs, instance)
        assert automation.requested() == set()  # nothing materialized: nothing follows yet

        # an apply whose keys_unique failed: the copy waits
        instance.report_runless_asset_event(dg.AssetMaterialization(TARGET))
        instance.report_runless_asset_event(dg.AssetCheckEvaluation(
            asset_key=TARGET, check_name="keys_unique", passed=False))
        assert automation.requested() == set()
        assert automation.requested() == set()

        # the next apply passes it: the copy is asked for, once
        instance.report_runless_asset_event(dg.AssetMaterialization(TARGET))
        instance.report_runless_asset_event(dg.AssetCheckEvaluation(
            asset_key=TARGET, check_name="keys_unique", passed=True))
        assert automation.requested() == {COPY}
        assert automation.requested() == set()


@pytest.mark.spark
def test_history_follows_changes_and_a_run_that_kept_it_current_is_not_repeated(spark, workdir):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "history": True}])
    defs = build_definitions(cfg)
    with dg.instance_for_test() as instance:
        automation = Automation(defs, instance)
        assert automation.requested() == set()

        # `cdc-assets run` materializes the history in its own run: nothing is left to ask for
        land(cfg, "ORDERS", "b1", {"a.jsonl": jsonl([mysql("INSERT", {"id": 1, "v": "a"}, 1, 10)])})
        assert run_table(cfg, "ORDERS", instance).ok
        assert automation.requested() == set()

        # changes materialized without the history (the landing sensor's run of the batch): it follows
        land(cfg, "ORDERS", "b2", {"a.jsonl": jsonl([mysql("UPDATE", {"id": 1, "v": "b"}, 1, 20)])})
        from cdc_assets_tests.defs.test_sensor import Daemon

        daemon = Daemon(defs, instance, table="ORDERS")
        data = daemon.tick()
        [ingest] = [r for r in data.run_requests if r.job_name == NAMES.batch_job]
        daemon.launch(ingest)
        assert automation.requested() == {HISTORY}
        assert automation.requested() == set()

    # a new Dagster instance (the warehouse says what is done, rules.md#tables): the batches taken before it
    # were never materialized in it, and the history still follows the next ingest
    land(cfg, "ORDERS", "b3", {"a.jsonl": jsonl([mysql("UPDATE", {"id": 1, "v": "c"}, 1, 30)])})
    with dg.instance_for_test() as instance:
        automation = Automation(defs, instance)
        assert automation.requested() == set()
        daemon = Daemon(defs, instance, table="ORDERS")
        data = daemon.tick()
        assert [r.partition_key for r in data.run_requests if r.job_name == NAMES.batch_job] == ["b000003"]
        daemon.launch(data.run_requests[0])
        assert automation.requested() == {HISTORY}
