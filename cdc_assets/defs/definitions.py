"""All Dagster definitions for a `cdc.yaml`: one group of assets, checks, jobs, a sensor and a
maintenance schedule per table, a cycle job and schedule per scheduled table or group, and the
sensor of the assets Declarative Automation keeps current."""
from __future__ import annotations

import warnings

import dagster as dg

from ..core.config import Config
from .automation import automation_sensor
from .checks import table_checks
from .history import history_definitions
from .maintenance import maintenance_definitions, restore_definition
from .publish import publish_definitions
from .resources import table_resources
from .schedules import cycle_definitions
from .sensors import landing_sensor
from .table_assets import TableNames, table_assets, table_jobs

# Single-run backfills and partitioned checks are marked beta/preview; we rely on both knowingly.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def build_definitions(cfg: Config) -> dg.Definitions:
    assets, checks, jobs, sensors, schedules = [], [], [], [], []
    for table in cfg.tables:
        assets += table_assets(cfg, table)
        checks += table_checks(cfg, table, TableNames(table.name).key("target"))
        published = publish_definitions(cfg, table)  # `publish: {bigquery: ...}`; nothing otherwise
        assets, checks = assets + published[0], checks + published[1]
        kept = history_definitions(cfg, table)  # `history: true`; nothing otherwise
        assets += kept[0]
        own_jobs = table_jobs(table)  # the landing sensor's; the other two follow by automation
        jobs += own_jobs + published[2] + kept[1]
        sensors.append(landing_sensor(cfg, table, own_jobs))
        maintenance_job, maintenance_schedule = maintenance_definitions(cfg, table)
        jobs += [maintenance_job, restore_definition(cfg, table)]
        schedules.append(maintenance_schedule)
    # `schedule:` on a table and `groups:`: a cycle job and its schedule each (defs/schedules.py); a
    # cycle run executes the jobs above, so it is handed these definitions once they exist, and how to
    # make them again in the worker processes of a group's `parallel`.
    cycle_jobs, cycle_schedules = cycle_definitions(cfg, lambda: defs, build_definitions)
    automated = [key for a in assets for key, condition in a.automation_conditions_by_key.items() if condition]
    if automated:  # the history and BigQuery copies follow their upstream (defs/automation.py)
        sensors.append(automation_sensor(automated))
    defs = dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs + cycle_jobs,
        sensors=sensors,
        schedules=schedules + cycle_schedules,
        resources=table_resources(cfg),
        # One process per run, so one Spark session per run, never one per step.
        executor=dg.in_process_executor,
    )
    return defs
