"""All Dagster definitions for a `cdc.yaml`: one group of assets, checks, jobs, a sensor and a
maintenance schedule per table, a cycle job and schedule per scheduled table or group, and the
sensor of the assets Declarative Automation keeps current."""
from __future__ import annotations

import warnings

import dagster as dg

from ..core.config import Config, TableConfig
from ..engine.settings import settings, variable
from .automation import automation_sensor
from .checks import table_checks
from .history import history_definitions
from .maintenance import maintenance_definitions, restore_definition
from .publish import publish_definitions
from .resources import table_resources
from .schedules import cycle_definitions
from .sensors import all_tables_landing_sensor, landing_sensor
from .table_assets import SOURCE, TableNames, quarantine_spec, source_specs, table_assets, table_jobs

# Single-run backfills and partitioned checks are marked beta/preview; we rely on both knowingly.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def table_definitions(cfg: Config, table: TableConfig) -> dg.Definitions:
    """One table's assets, checks, jobs, landing sensor and maintenance schedule, with its BigQuery
    copy (`publish:`) and its history (`history: true`) when it has them."""
    own_jobs = table_jobs(table)  # the landing sensor's; the history and the copy follow by automation
    maintenance_job, maintenance_schedule = maintenance_definitions(cfg, table)
    own = dg.Definitions(
        assets=[*table_assets(cfg, table), *source_specs(table), quarantine_spec(table)],
        asset_checks=table_checks(cfg, table, TableNames(table.name).key("target"), TableNames(table.name).key(SOURCE)),
        jobs=[*own_jobs, maintenance_job, restore_definition(cfg, table)],
        sensors=[landing_sensor(cfg, table, own_jobs)],
        schedules=[maintenance_schedule])
    return dg.Definitions.merge(own, publish_definitions(cfg, table), history_definitions(cfg, table))


CONFIG_ENV = variable("config")  # the `cdc.yaml` the code location loads (cdc_assets/definitions.py)


def config_path() -> str:
    return settings().config or "./cdc.yaml"


_built: dict[str, dg.Definitions] = {}


def build_definitions(cfg: Config) -> dg.Definitions:
    """The definitions of `cfg`, built once per process and configuration: a run forked from the
    launcher's warm fork server (defs/warm.py) finds them built, with their repository and asset
    graph, when the configuration has not changed since; any change builds them anew."""
    key = repr(cfg)
    if key not in _built:
        _built.clear()
        _built[key] = _build(cfg)
    return _built[key]


def _build(cfg: Config) -> dg.Definitions:
    tables = dg.Definitions.merge(*(table_definitions(cfg, table) for table in cfg.tables))
    assets = list(tables.assets or [])
    # `schedule:` on a table and `groups:`: a cycle job and its schedule each (defs/schedules.py); a
    # cycle run executes the jobs above, so it is handed these definitions once they exist, and how to
    # make them again in the worker processes of a group's `parallel`.
    cycle_jobs, cycle_schedules = cycle_definitions(cfg, lambda: defs, build_definitions)
    automated = [key for a in assets if isinstance(a, dg.AssetsDefinition)
                 for key, condition in a.automation_conditions_by_key.items() if condition]
    # the history and BigQuery copies follow their upstream (defs/automation.py)
    sensors: list[dg.SensorDefinition] = [automation_sensor(automated)] if automated else []
    # one landing sensor for all tables, asking for the same jobs the tables' own sensors do
    landing_jobs = {j.name for t in cfg.tables for j in table_jobs(t)}
    sensors.append(all_tables_landing_sensor(cfg, [j for j in tables.jobs or [] if j.name in landing_jobs]))
    defs = dg.Definitions.merge(tables, dg.Definitions(
        jobs=cycle_jobs,
        sensors=sensors,
        schedules=cycle_schedules,
        resources=table_resources(cfg),
        # One process per run, so one Spark session per run, never one per step.
        executor=dg.in_process_executor,
    ))
    return defs
