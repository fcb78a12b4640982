"""Asset checks beside their assets: key uniqueness, batch accounting, reconciliation, freshness."""

import dagster as dg

from ..core.apply_policy import format_duration
from ..core.config import Config, TableConfig
from ..core.reconcile import discrepancies
from ..engine import checks, status
from ..engine.landing import Batch
from .metadata import as_metadata
from .resources import LazyPySparkResource, spark_session
from .table_assets import WITHIN_MAX_STALENESS, TableNames, batch_partitions


def table_checks(cfg: Config, table: TableConfig) -> list[dg.AssetChecksDefinition]:
    names = TableNames(table.name)

    @dg.asset_check(asset=names.key("target"), name="keys_unique", blocking=True,
                    description="Each key the last apply touched is in the target once (every key after a whole "
                                "build); blocking: downstream waits on it.")
    def keys_unique(pyspark: LazyPySparkResource) -> dg.AssetCheckResult:
        figures = checks.key_uniqueness(cfg, table, spark=lambda: spark_session(pyspark))
        return dg.AssetCheckResult(passed=figures["duplicate_keys"] == 0, metadata=as_metadata(figures))

    @dg.asset_check(asset=names.key("staging"), name="batch_accounted", partitions_def=batch_partitions(table),
                    description="Every record of the batch is applied-to-staging, superseded, a duplicate "
                                "or quarantined: the counts add up.")
    def batch_accounted(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        figures = checks.batch_accounting(cfg, table, Batch.seq_of(context.partition_key))
        return dg.AssetCheckResult(passed=bool(figures.get("adds_up")), metadata=as_metadata(figures))

    out = [keys_unique, batch_accounted]
    if table.reconcile_with:
        @dg.asset_check(asset=names.key("target"), name="reconciles_with_source",
                        description=f"Row counts and a row-by-row comparison with {table.reconcile_with}.")
        def reconciles_with_source() -> dg.AssetCheckResult:
            report = checks.reconciliation(cfg, table)
            # A warning, not an error: an export is a point in time, and the target only
            # matches it once the batches up to that point have been applied.
            return dg.AssetCheckResult(passed=discrepancies(report) == 0, metadata=as_metadata(report),
                                       severity=dg.AssetCheckSeverity.WARN)

        out.append(reconciles_with_source)
    if table.apply.max_staleness is not None:
        out.append(within_max_staleness_check(cfg, table))
    return out


def within_max_staleness_check(cfg: Config, table: TableConfig) -> dg.AssetChecksDefinition:
    limit = format_duration(table.apply.max_staleness)

    @dg.asset_check(asset=TableNames(table.name).key("target"), name=WITHIN_MAX_STALENESS,
                    description=f"No pending batch (staged, not merged) has waited {limit} (apply.max_staleness) "
                                "or longer; a warning: it never holds the apply.")
    def within_max_staleness() -> dg.AssetCheckResult:
        figures = status.freshness(cfg, table)
        # A warning, not an error: a late merge is stale, not wrong, and the fresh read shows
        # the pending changes meanwhile.
        return dg.AssetCheckResult(passed=bool(figures["within_max_staleness"]), severity=dg.AssetCheckSeverity.WARN,
                                   metadata=as_metadata({**figures, "max_staleness_seconds": table.apply.max_staleness}))

    return within_max_staleness
