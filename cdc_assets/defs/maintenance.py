"""A table's maintenance as a Dagster job and a schedule (stopped until a user turns it on), and
its restore as a job the UI launches with the version to put back.

The job's op compacts, trims and vacuums (engine/maintenance.py) under the table lock and in the
table's concurrency pool, so it never runs beside an apply of the same table; what it did is an
observation of the target asset (files and bytes before and after, the versions its log keeps),
since it changes no row."""

import dagster as dg

from ..core.config import Config, TableConfig
from ..engine import maintenance, status, target_versions
from ..engine.lock import table_lock
from ..engine.retry import on_conflict
from .table_assets import TableNames


def maintenance_job_name(table: TableConfig) -> str:
    return f"{table.name}_maintenance_job"


def maintenance_definitions(cfg: Config, table: TableConfig) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)

    @dg.op(name=f"{table.name}__maintenance", pool=names.pool,
           description=f"Compacts {table.name}'s target, trims old batches from changes and staging, vacuums old files.")
    def maintain(context) -> None:
        with table_lock(table_dir):
            report = on_conflict(lambda: maintenance.maintain(cfg, table), f"{table.name}/maintenance",
                                 log=context.log.warning)
        # the versions the target's log keeps change here (and by one with each apply), so they are said here
        context.log_event(dg.AssetObservation(asset_key=names.key("target"),
                                              metadata={**metadata(report), **status.versions_figures(table_dir)}))

    job = dg.JobDefinition(graph_def=dg.GraphDefinition(name=maintenance_job_name(table), node_defs=[maintain]),
                           description=f"Maintenance of {table.name}: compaction, trim, vacuum.")
    schedule = dg.ScheduleDefinition(name=f"{table.name}_maintenance_schedule", job=job,
                                     cron_schedule=table.maintenance.schedule,
                                     execution_timezone=cfg.timezone,  # `timezone:` (None: UTC)
                                     default_status=dg.DefaultScheduleStatus.STOPPED)
    return job, schedule


def metadata(report: maintenance.MaintenanceReport) -> dict:
    return {
        "files_before": report.target_before.count, "files_after": report.target_after.count,
        "bytes_before": report.target_before.bytes, "bytes_after": report.target_after.bytes,
        "compacted": report.compacted, "zordered_by": ", ".join(report.zordered_by) or "none",
        "changes_trimmed_through_batch": report.changes_trimmed_through if report.changes_trimmed_through is not None
        else "none", "changes_rows_trimmed": report.changes_rows_trimmed,
        "staging_trimmed_through_batch": report.staging_trimmed_through if report.staging_trimmed_through is not None
        else "none", "staging_rows_trimmed": report.staging_rows_trimmed,
        "files_vacuumed": report.files_vacuumed, "retention_hours": report.retention_hours,
        "seconds": report.seconds,
    }


def restore_job_name(table: TableConfig) -> str:
    return f"{table.name}_restore_job"


class RestoreConfig(dg.Config):
    """The target version to put back (see `cdc-assets history`), or the newest committed at or
    before `as_of` (ISO 8601 with a zone)."""
    version: int | None = None
    as_of: str | None = None


def restore_definition(cfg: Config, table: TableConfig) -> dg.JobDefinition:
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)

    @dg.op(name=f"{table.name}__restore", pool=names.pool,
           description=f"Puts {table.name}'s target back to an earlier version; the next apply re-applies the "
                       "later batches from staging.")
    def restore(context, config: RestoreConfig) -> None:
        import datetime as dt

        if (config.version is None) == (config.as_of is None):
            raise target_versions.RestoreError(f"table {table.name}: give the version or as_of, one of them")
        with table_lock(table_dir):
            if config.as_of is not None:
                version = target_versions.version_as_of(table.name, target_versions.versions(table_dir),
                                                        dt.datetime.fromisoformat(config.as_of))
            else:
                assert config.version is not None  # one of the two is given: checked above
                version = config.version
            done = target_versions.restore(table.name, table_dir, version)
        context.log_event(dg.AssetObservation(asset_key=names.key("target"), metadata={
            "restored_from_version": done.restored_from, "version": done.version,
            "batch": done.batch if done.batch is not None else "none",
            "files_removed": done.files_removed, "files_restored": done.files_restored}))

    return dg.JobDefinition(graph_def=dg.GraphDefinition(name=restore_job_name(table), node_defs=[restore]),
                            description=f"Restore {table.name}'s target to an earlier version.")
