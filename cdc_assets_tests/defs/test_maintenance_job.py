"""The maintenance job, run by Dagster: its observation of the target reports what the table's
maintenance did (here: a staging trim that found nothing old enough)."""
from __future__ import annotations

import dagster as dg

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.engine.table_layout import STAGING
from cdc_assets_tests.engine.test_staging_trim import BATCHES, TABLE
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows

pytestmark = MARKS


def test_the_maintenance_job_reports_the_staging_trim(workdir, spark_when_needed):
    cfg = write_config(workdir, [TABLE])
    for n, changes in enumerate(BATCHES[:2], start=1):
        land(cfg, "ORDERS", f"batch-{n}", {"p.jsonl": jsonl(changes)})
        take_and_apply(spark_when_needed, cfg, "ORDERS")
    # a retention of an hour: nothing registered minutes ago is old enough yet
    result = build_definitions(cfg).resolve_job_def("ORDERS_maintenance_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success
    [observation] = [e.event_specific_data.asset_observation for e in result.all_events
                     if e.event_type_value == "ASSET_OBSERVATION"]
    assert observation.metadata["staging_trimmed_through_batch"].value == "none"
    assert observation.metadata["staging_rows_trimmed"].value == 0
    assert len(delta_rows(cfg, "ORDERS", STAGING)) == 6 + 3
