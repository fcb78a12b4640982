"""A table's maintenance as a Dagster job and a schedule (stopped until a user turns it on).

The job's op compacts, trims and vacuums (engine/maintenance.py) under the table lock and in the
table's concurrency pool, so it never runs beside an apply of the same table; what it did is an
observation of the target asset (files and bytes before and after), since it changes no row."""
from __future__ import annotations

import dagster as dg

from ..core.config import Config, TableConfig
from ..engine import maintenance
from ..engine.lock import table_lock
from ..engine.retry import on_conflict
from .table_assets import TableNames


def maintenance_job_name(table: TableConfig) -> str:
    return f"{table.name}_maintenance_job"


def maintenance_definitions(cfg: Config, table: TableConfig) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)

    @dg.op(name=f"{table.name}__maintenance", pool=names.pool,
           description=f"Compacts {table.name}'s target, trims old batches from changes, vacuums old files.")
    def maintain(context) -> None:
        with table_lock(table_dir):
            report = on_conflict(lambda: maintenance.maintain(cfg, table), f"{table.name}/maintenance",
                                 log=context.log.warning)
        context.log_event(dg.AssetObservation(asset_key=names.key("target"), metadata=metadata(report)))

    job = dg.JobDefinition(graph_def=dg.GraphDefinition(name=maintenance_job_name(table), node_defs=[maintain]),
                           description=f"Maintenance of {table.name}: compaction, trim, vacuum.")
    schedule = dg.ScheduleDefinition(name=f"{table.name}_maintenance_schedule", job=job,
                                     cron_schedule=table.maintenance.schedule,
                                     default_status=dg.DefaultScheduleStatus.STOPPED)
    return job, schedule


def metadata(report: maintenance.MaintenanceReport) -> dict:
    return {
        "files_before": report.target_before.count, "files_after": report.target_after.count,
        "bytes_before": report.target_before.bytes, "bytes_after": report.target_after.bytes,
        "compacted": report.compacted, "zordered_by": ", ".join(report.zordered_by) or "none",
        "changes_trimmed_through_batch": report.changes_trimmed_through if report.changes_trimmed_through is not None
        else "none", "changes_rows_trimmed": report.changes_rows_trimmed,
        "files_vacuumed": report.files_vacuumed, "retention_hours": report.retention_hours,
        "seconds": report.seconds,
    }
