"""The landing sensor: each new set of complete files becomes a batch and its runs.

Per tick it registers new files as a batch in the warehouse ledger, asks for the
ingest run of every batch not yet staged, and once all are staged, for the
incremental apply of target. Run keys make each request once per batch.
"""

import dagster as dg

from ..core.config import Config, TableConfig
from ..engine import delta
from ..engine.landing import register_new_batch, registered
from ..engine.lock import table_lock
from ..engine.tables import BASE, STAGING, TARGET, path
from .table_assets import APPLY_TAG, INCREMENTAL, TableNames, batch_partitions, target_partitions


def apply_request_tags(instance, table: TableConfig) -> dict | None:
    """Tags for an incremental apply run: the whole target partition range when partitioned."""
    tags = {APPLY_TAG: INCREMENTAL}
    parts = target_partitions(table)
    if parts is None:
        return tags
    keys = instance.get_dynamic_partitions(parts.name)
    if not keys:
        return None
    tags.update({"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    return tags


def landing_sensor(cfg: Config, table: TableConfig, jobs: list) -> dg.SensorDefinition:
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)

    @dg.sensor(name=f"{table.name}__landing_sensor", minimum_interval_seconds=30, jobs=jobs,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Watches {cfg.landing_dir(table.name)} for complete change files of {table.name}.")
    def sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        with table_lock(table_dir):
            new = register_new_batch(cfg.landing_dir(table.name), table_dir)
        batches = registered(table_dir)
        known = set(context.instance.get_dynamic_partitions(names.batches))
        missing = [b.id for b in batches if b.id not in known]
        requests: list[dg.RunRequest] = []
        if table.base_snapshot and delta.step_version(path(table_dir, BASE), BASE) < 0:
            requests.append(dg.RunRequest(run_key=f"{table.name}:base", job_name=names.base_job))
        staged = delta.step_version(path(table_dir, STAGING), STAGING)
        for b in batches:
            if b.seq > staged:
                requests.append(dg.RunRequest(run_key=f"{table.name}:{b.id}:ingest", job_name=names.ingest_job,
                                              partition_key=b.id))
        applied = delta.step_version(path(table_dir, TARGET), TARGET)
        if batches and staged == batches[-1].seq and applied < staged:
            tags = apply_request_tags(context.instance, table)
            if tags is not None:
                requests.append(dg.RunRequest(run_key=f"{table.name}:apply:{staged}", job_name=names.apply_job,
                                              tags=tags))
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[batch_partitions(table).build_add_request(missing)] if missing else [],
            skip_reason=None if requests else f"nothing new for {table.name}" + (f" (registered {new.id})" if new else ""),
        )

    return sensor
