"""Per configured table: `changes`, `staging`, `base` and `target` assets and their jobs.

`changes` and `staging` have one dynamic partition per landed batch. `target`
has one partition per target partition value when the table sets
`partition_by` (so any of them can be backfilled from staging), and none
otherwise. A run tagged `cdc/apply=incremental` applies the pending batches,
rewriting only the partitions they touch; any other run of `target` rebuilds
the partitions it names from staging.

A table's writer assets share one concurrency pool (`cdc_<TABLE>`): with a pool
limit of 1 on the instance, runs of one table take turns while other tables run
side by side. Each step is re-run when its Delta commit loses to another writer's.
"""

import contextlib
from collections.abc import Callable
from typing import TypeVar

import dagster as dg

from ..core.config import Config, TableConfig
from ..core.plan import Ingest
from ..core.postgres import is_postgresql, parse_source
from ..engine import apply, gcs, rekey, replay, snapshot, spark_ingest, stage, status, target_build
from ..engine.landing import Batch, registered
from ..engine.lock import table_lock
from ..engine.partitions import staged_partition_keys
from ..engine.retry import on_conflict
from ..engine.table_layout import path
from . import dagster_fixes  # noqa: F401 - a waiting step sleeps; the storages reuse their engines
from .checks import (
    MATCHES_LIVE_SOURCE,
    SLOT_RETAINED_WAL,
    WITHIN_MAX_STALENESS,
    batch_accounted,
    quarantine_within_limit,
    staging_check_specs,
    target_check_specs,
    target_checks,
)
from .due import due_now, held_reason
from .metadata import as_metadata, delta_table_metadata
from .names import TableNames
from .resources import CdcSparkResource, spark_session

_Result = TypeVar("_Result")

APPLY_TAG = "cdc/apply"
INCREMENTAL = "incremental"


def batch_partitions(table: TableConfig) -> dg.DynamicPartitionsDefinition:
    return dg.DynamicPartitionsDefinition(name=TableNames(table.name).batches)


# The assets a step computes, by the step's name after the table's: a batch's one step takes its files
# into `changes` and stages them.
BATCH_STEP = "batch"
STEP_ASSETS = {BATCH_STEP: ("changes", "staging")}


def target_partitions(table: TableConfig) -> dg.DynamicPartitionsDefinition | None:
    if not table.partition_by:
        return None
    return dg.DynamicPartitionsDefinition(name=TableNames(table.name).target_partitions)


def _batch(cfg: Config, table: TableConfig, partition_key: str) -> Batch:
    seq = Batch.seq_of(partition_key)
    for b in registered(cfg.table_dir(table.name)):
        if b.seq == seq:
            return b
    raise dg.Failure(f"table {table.name}: batch {partition_key} is not in the warehouse's batch ledger")


def sync_target_partitions(instance: dg.DagsterInstance, cfg: Config, table: TableConfig) -> None:
    """Make the instance know every target partition the warehouse holds (a new instance knows none)."""
    parts = target_partitions(table)
    if parts is None or parts.name is None:
        return
    known = set(instance.get_dynamic_partitions(parts.name))
    new = [k for k in staged_partition_keys(cfg, table) if k not in known]
    if new:
        instance.add_dynamic_partitions(parts.name, new)


def _register_target_partitions(context, cfg: Config, table: TableConfig) -> None:
    sync_target_partitions(context.instance, cfg, table)


def _write(context, table_dir: str, what: str, step: Callable[[], _Result]) -> _Result:
    """A writer step under the table lock, re-run when its Delta commit loses to another writer's."""
    with table_lock(table_dir):
        return on_conflict(step, what, log=context.log.warning)


SOURCE = "source"


def source_specs(table: TableConfig) -> list[dg.AssetSpec]:
    """A PostgreSQL source table, upstream of `changes` in the asset graph: cdc_assets captures it, but
    does not materialize it. Its metadata names the table, never a connection's secrets."""
    if table.source is None or not is_postgresql(table.source):
        return []
    source = parse_source(table.source)
    return [dg.AssetSpec(TableNames(table.name).key(SOURCE), group_name=table.name, kinds={"postgres"},
                         metadata={"dagster/table_name": f"{source.database}.{source.qualified}"},
                         description=f"The PostgreSQL table {source.qualified} in database {source.database}, "
                                     f"captured by cdc_assets ({table.capture}): `cdc-assets capture enable "
                                     f"{table.name}` starts it, each run or sensor tick extracts what it captured.")]


QUARANTINE = "quarantine"


def quarantine_spec(table: TableConfig) -> dg.AssetSpec:
    """The table's quarantine, beside its `changes`: each batch that sends records there (or a replay
    that takes them) reports it, with the records in it now and their reasons counted."""
    names = TableNames(table.name)
    return dg.AssetSpec(names.key(QUARANTINE), group_name=table.name, kinds={"delta"}, deps=[names.key("changes")],
                        metadata={"dagster/table_name": f"{table.name}.{QUARANTINE}", "dagster/storage_kind": "delta"},
                        description=f"The records of {table.name} that could not be taken, with file, line and reason "
                                    f"(`cdc-assets quarantine {table.name}` lists them; `cdc-assets quarantine replay "
                                    f"{table.name}` takes them once cdc.yaml is fixed). Never materialized: nothing "
                                    "was ever quarantined.")


def quarantine_reported(cfg: Config, table: TableConfig) -> dg.AssetMaterialization:
    """What the quarantine holds now, as the batch step that changed it reports it: counts and
    reasons, never a record's values."""
    now = replay.figures(cfg, table)
    return dg.AssetMaterialization(
        TableNames(table.name).key(QUARANTINE),
        metadata={**as_metadata(now.to_metadata()), "dagster/row_count": dg.MetadataValue.int(now.records),
                  "dagster/table_name": dg.MetadataValue.text(f"{table.name}.{QUARANTINE}")})


def table_assets(cfg: Config, table: TableConfig) -> list[dg.AssetsDefinition]:
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)
    batches = batch_partitions(table)
    tags = {"format": table.format}

    def table_metadata(step: str, partition_rows=None) -> dict:
        return delta_table_metadata(path(table_dir, step), f"{table.name}.{step}", table.keys, partition_rows)

    def named(step: str) -> dict:
        """Definition metadata: the catalog names each table before its first materialization."""
        return {"dagster/table_name": f"{table.name}.{step}", "dagster/storage_kind": "delta"}

    def take_batch(context: dg.AssetExecutionContext, batch: Batch, pyspark: CdcSparkResource,
                   storage_client=None) -> dg.MaterializeResult:
        spark = lambda: spark_session(pyspark)  # noqa: E731 - a small batch never starts Spark
        again = replay.spec_of(table_dir, batch)  # quarantined records taken again (`quarantine replay`)
        # on a gs:// landing, the GCSResource's client reads the objects this run takes
        with gcs.provided(storage_client) if storage_client is not None else contextlib.nullcontext():
            def ingest_exact():
                rekey.ensure_exact(cfg, table)  # a warehouse keyed by an earlier release says so first
                if again is not None:
                    return replay.ingest_replay(cfg, table, batch, again, spark, log=context.log.warning)
                take = snapshot.ingest_batch if table.spec.whole_exports else spark_ingest.ingest_batch
                return take(spark, cfg, table, batch, log=context.log.warning)

            figures = _write(context, table_dir, f"{table.name}/changes {batch.id}", ingest_exact)
        if figures.quarantined or again is not None:
            context.log_event(quarantine_reported(cfg, table))  # what the quarantine holds changed
        metadata = {**as_metadata(figures.to_metadata()), **table_metadata("changes", figures.changes_new)}
        return dg.MaterializeResult(asset_key=names.key("changes"), metadata=metadata)

    def stage_batch(context: dg.AssetExecutionContext, batch: Batch, pyspark: CdcSparkResource):
        spark = lambda: spark_session(pyspark)  # noqa: E731 - a small batch never starts Spark
        figures = _write(context, table_dir, f"{table.name}/staging {batch.id}",
                         lambda: stage.stage_batch(cfg, table, batch, spark))
        _register_target_partitions(context, cfg, table)
        metadata = {**as_metadata(figures.to_metadata()), **table_metadata("staging", figures.staged)}
        # the materialization first: a check that cannot be evaluated fails the step, not the batch's record
        yield dg.MaterializeResult(asset_key=names.key("staging"), metadata=metadata)
        yield batch_accounted(cfg, table, context.partition_key, names.key("staging"))
        yield quarantine_within_limit(cfg, table, context.partition_key, names.key("staging"))

    def take_and_stage(context: dg.AssetExecutionContext, pyspark: CdcSparkResource, storage_client=None):
        # One step for both assets: a batch's run pays Dagster's cost of a step (its events, its
        # pool claim, its inputs' versions) once for the two; each asset is still materialized,
        # checked and selectable on its own.
        batch = _batch(cfg, table, context.partition_key)
        if names.key("changes") in context.selected_asset_keys:
            yield take_batch(context, batch, pyspark, storage_client)
        if names.key("staging") in context.selected_asset_keys:
            yield from stage_batch(context, batch, pyspark)

    batch_assets = dg.multi_asset(
        name=names.key(BATCH_STEP).to_python_identifier(), partitions_def=batches, pool=names.pool,
        can_subset=True,
        specs=[
            dg.AssetSpec(names.key("changes"), group_name=table.name, kinds={"spark", "delta"}, tags=tags,
                         metadata=named("changes"), skippable=True,
                         deps=[names.key(SOURCE)] if is_postgresql(table.source) else [],
                         description=f"Every distinct change record of {table.name}, one partition per landed "
                                     "batch; rejected records go to quarantine."),
            dg.AssetSpec(names.key("staging"), group_name=table.name, kinds={"spark", "delta"}, tags=tags,
                         metadata=named("staging"), deps=[names.key("changes")], skippable=True,
                         description=f"The consolidated change history of {table.name}: per key, each batch's "
                                     "latest change (deletes included, as tombstones); rebuilds and backfills "
                                     "read it."),
        ],
        check_specs=staging_check_specs(names.key("staging"), batches))
    if gcs.is_gcs(cfg.landing):
        from dagster_gcp import GCSResource  # imported only where used: it costs about a second

        @batch_assets
        def batch_step(context: dg.AssetExecutionContext, pyspark: CdcSparkResource, gcs: GCSResource):
            yield from take_and_stage(context, pyspark, gcs.get_client())
    else:
        @batch_assets
        def batch_step(context: dg.AssetExecutionContext, pyspark: CdcSparkResource):
            yield from take_and_stage(context, pyspark)

    out = [batch_step]
    target_deps = [dg.AssetDep(names.key("staging"), partition_mapping=dg.AllPartitionMapping())]

    if table.base_snapshot:
        @dg.asset(key=names.key("base"), group_name=table.name, kinds={"spark", "delta"}, tags=tags,
                  metadata=named("base"),
                  pool=names.pool,
                  description=f"The source export {table.name} starts from; its rows rank below every change.")
        def base_snapshot(context: dg.AssetExecutionContext, pyspark: CdcSparkResource) -> dg.MaterializeResult:
            from ..engine import base_import  # imported where used: it loads PySpark, which a small batch never needs

            spark = lambda: spark_session(pyspark)  # noqa: E731 - a small export is imported without Spark

            def import_exact():
                rekey.ensure_exact(cfg, table)  # a table that starts here stores exact keys from the start
                return base_import.import_base(spark, cfg, table, log=context.log.warning)

            figures = _write(context, table_dir, f"{table.name}/base", import_exact)
            _register_target_partitions(context, cfg, table)
            return dg.MaterializeResult(metadata={**as_metadata(figures.to_metadata()),
                                                  **table_metadata("base", None)})

        out.append(base_snapshot)
        target_deps.append(dg.AssetDep(base_snapshot))

    # A multi_asset only for `can_subset`: it makes target's materialization and its checks optional
    # outputs, so a batch's run whose apply is not due leaves target as it was, shown as not materialized.
    @dg.multi_asset(
        name=names.key("target").to_python_identifier(),
        specs=[dg.AssetSpec(names.key("target"), group_name=table.name, metadata=named("target"),
                            kinds={"spark", "delta"}, deps=target_deps, tags=tags, skippable=True,
                            description=f"The current state of {table.name}: one row per live key"
                                        + (f", partitioned by {', '.join(table.partition_by)}." if table.partition_by
                                           else "."))],
        partitions_def=target_partitions(table), pool=names.pool,
        check_specs=target_check_specs(table, names.key("target")), can_subset=True,
        backfill_policy=dg.BackfillPolicy.single_run())
    def target(context: dg.AssetExecutionContext, pyspark: CdcSparkResource):
        if context.run.job_name in (names.batch_job, names.base_job):
            # A batch's run (or the import's) applies when the planner says the apply is due: every
            # registered batch staged, the base imported, no failed batch, the `apply:` policy.
            # Otherwise target is not materialized in this run (nothing yielded), and the sensor
            # asks for the apply once due.
            _, steps = due_now(context.instance, cfg, table, Ingest.NEXT)
            if not steps.apply:
                context.log.info(f"{table.name}: not applied in this run: " + (
                    "a later batch is registered and not staged yet" if steps.ingest
                    else "the base snapshot is not imported yet" if steps.base_import
                    else held_reason(steps) or "nothing pending"))
                return
        spark = lambda: spark_session(pyspark)  # noqa: E731 - an incremental apply never starts Spark
        selected = {k.name for k in context.selected_asset_check_keys if k.asset_key == names.key("target")}
        checks = (c for c in target_checks(cfg, table, spark)  # those the run selected (all, unless a user chose)
                  if c.check_name in selected)
        if names.key("target") not in context.selected_asset_keys:  # its checks alone, on the target as it is
            yield from checks
            return
        incremental = context.run.tags.get(APPLY_TAG) == INCREMENTAL or not table.partition_by
        if incremental:
            step = lambda: apply.apply_pending(spark, cfg, table)  # noqa: E731
        else:
            keys = list(context.partition_keys)
            step = lambda: target_build.rebuild(spark, cfg, table, keys)  # noqa: E731
        figures = _write(context, table_dir, f"{table.name}/target", step)
        # what still waits, the files, bytes and versions: from Delta logs, so every apply affords them
        yield dg.MaterializeResult(metadata={**as_metadata(figures.to_metadata()),
                                             **as_metadata(status.target_metadata(cfg, table).to_metadata()),
                                             **table_metadata("target", None)})
        # then its checks; a failed blocking one fails this step, after the materialization it judges
        yield from checks

    out.append(target)
    return out


def _with_target(table: TableConfig, *keys: dg.AssetKey) -> dg.AssetSelection:
    """Assets with their checks, but for the comparison with a live source: it reads the source table
    and the target whole, so its own job runs it, never a batch's or an apply's run."""
    selection = dg.AssetSelection.assets(*keys)
    if not is_postgresql(table.source):
        return selection
    return selection - dg.AssetSelection.checks(dg.AssetCheckKey(TableNames(table.name).key("target"),
                                                                  MATCHES_LIVE_SOURCE))


def table_jobs(table: TableConfig) -> list:
    names = TableNames(table.name)
    jobs = [
        dg.define_asset_job(names.ingest_job, selection=[names.key("changes"), names.key("staging")],
                            partitions_def=batch_partitions(table),
                            description=f"Take one landed batch of {table.name} into changes and staging."),
        dg.define_asset_job(names.apply_job, selection=_with_target(table, names.key("target")),
                            partitions_def=target_partitions(table),
                            description=f"Apply {table.name}'s staged batches to target (tag cdc/apply=incremental), "
                                        "or rebuild the partitions a run names."),
    ]
    if not table.partition_by:
        # One run per batch: an unpartitioned target shares the batches' job (a partitioned one has
        # partitions of its own, which Dagster does not mix with the batches' in one job).
        jobs.append(dg.define_asset_job(
            names.batch_job, selection=_with_target(table, names.key("changes"), names.key("staging"), names.key("target")),
            partitions_def=batch_partitions(table),
            description=f"Take one landed batch of {table.name} into changes and staging, and apply the staged "
                        "batches to target when the apply is due (the `apply:` policy; every batch staged)."))
    if table.apply.max_staleness is not None:
        # The check alone: `run` evaluates it when no apply ran (the merge waits, or is held), and a
        # user can launch or schedule it from the UI.
        jobs.append(dg.define_asset_job(
            names.freshness_job, selection=dg.AssetSelection.checks(dg.AssetCheckKey(names.key("target"),
                                                                                     WITHIN_MAX_STALENESS)),
            description=f"Evaluate {table.name}'s {WITHIN_MAX_STALENESS} check without applying anything."))
    if table.max_retained_wal_mb is not None:
        # The slot's check alone: `run` evaluates it each time, and a user can launch or schedule it.
        jobs.append(dg.define_asset_job(
            names.capture_check_job, selection=dg.AssetSelection.checks(dg.AssetCheckKey(names.key(SOURCE),
                                                                                         SLOT_RETAINED_WAL)),
            description=f"Evaluate {table.name}'s {SLOT_RETAINED_WAL} check: the WAL its replication slot keeps."))
    if is_postgresql(table.source):
        # The comparison with the live source alone: it reads both tables whole, so a user launches
        # or schedules it (or `cdc-assets capture check`), not every run.
        jobs.append(dg.define_asset_job(
            names.live_source_job, selection=dg.AssetSelection.checks(dg.AssetCheckKey(names.key("target"),
                                                                                        MATCHES_LIVE_SOURCE)),
            description=f"Evaluate {table.name}'s {MATCHES_LIVE_SOURCE} check: target against the live source."))
    if table.base_snapshot and table.partition_by:
        jobs.append(dg.define_asset_job(names.base_job, selection=[names.key("base")],
                                        description=f"Import {table.name}'s base snapshot."))
    elif table.base_snapshot:
        # The import's run also builds target from it when the apply is then due (no batch waits
        # to be staged), as a batch's run applies what it stages: one Dagster run where two were.
        jobs.append(dg.define_asset_job(names.base_job, selection=_with_target(table, names.key("base"), names.key("target")),
                                        description=f"Import {table.name}'s base snapshot, and build target from "
                                                    "it when the apply is due."))
    return jobs
