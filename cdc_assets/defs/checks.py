"""Asset checks beside their assets: key uniqueness, batch accounting, reconciliation, freshness,
and the WAL a `capture: logical` source's replication slot retains.

A table with a PostgreSQL source also has `matches_live_source` on target, a check of its own
(its own job runs it, launched from the UI or a schedule; `cdc-assets capture check` makes the same
comparison): it reads the whole source table and the whole target, too much for every run.

Key uniqueness and reconciliation are evaluated by target's own step, batch accounting by
staging's (their specs and results are here, table_assets.py yields them): a check of its own
would be a step of its own, and a step costs a run about a tenth of a second outside its work.
Each still shows in the UI as an evaluation of its asset, under its name, and a failed blocking
check fails the step after its materialization, so downstream waits as before. The freshness
check stays a check of its own: a job evaluates it alone when no apply ran. So does the slot's,
on the source asset: each run evaluates it, whatever else the run did or failed to do, since a
capture that stopped taking changes is when the slot's WAL grows.
"""

from collections.abc import Iterator

import dagster as dg

from ..core.apply_policy import format_duration
from ..core.config import Config, TableConfig
from ..core.errors import TransientError
from ..core.postgres import is_postgresql
from ..core.reconcile import discrepancies
from ..engine import checks, postgres_logical, status
from ..engine.errors import root_cause_of_exception
from ..engine.landing import Batch
from .metadata import as_metadata

KEYS_UNIQUE = "keys_unique"
BATCH_ACCOUNTED = "batch_accounted"
QUARANTINE_WITHIN_LIMIT = "quarantine_within_limit"
RECONCILES_WITH_SOURCE = "reconciles_with_source"
WITHIN_MAX_STALENESS = "within_max_staleness"
SLOT_RETAINED_WAL = "slot_retained_wal"
MATCHES_LIVE_SOURCE = "matches_live_source"


def staging_check_specs(staging: dg.AssetKey, batches: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(BATCH_ACCOUNTED, asset=staging, partitions_def=batches,
                              description="Every record of the batch is applied-to-staging, superseded, a duplicate "
                                          "or quarantined: the counts add up."),
            dg.AssetCheckSpec(QUARANTINE_WITHIN_LIMIT, asset=staging, partitions_def=batches,
                              description="The batch sent less than the table's quarantine_limit of its records to "
                                          "quarantine (default: not every one); counts its quarantined records by "
                                          "reason. An error: the run fails with the first reasons, the batch's "
                                          "valid records are still applied.")]


def batch_accounted(cfg: Config, table: TableConfig, partition_key: str, staging: dg.AssetKey) -> dg.AssetCheckResult:
    figures = checks.batch_accounting(cfg, table, Batch.seq_of(partition_key))
    return dg.AssetCheckResult(asset_key=staging, check_name=BATCH_ACCOUNTED, passed=bool(figures.adds_up),
                               metadata=as_metadata(figures.to_metadata()))


def quarantine_within_limit(cfg: Config, table: TableConfig, partition_key: str,
                            staging: dg.AssetKey) -> dg.AssetCheckResult:
    figures = checks.batch_quarantine(cfg, table, Batch.seq_of(partition_key))
    said = None if figures.within_limit else quarantine_failure(partition_key, figures)
    # An error that blocks nothing: the batch's valid records are applied, the next batch runs.
    return dg.AssetCheckResult(asset_key=staging, check_name=QUARANTINE_WITHIN_LIMIT, passed=figures.within_limit,
                               severity=dg.AssetCheckSeverity.ERROR, description=said,
                               metadata=as_metadata(figures.to_metadata()))


def quarantine_failure(batch_id: str, figures: checks.BatchQuarantine) -> str:
    """What a run says of a batch over its quarantine limit: how many, and the first reasons."""
    limit = "every record" if figures.limit == 1 else f"quarantine_limit {figures.limit:g}"
    return (f"batch {batch_id}: {figures.quarantined} of {figures.records_read} records quarantined ({limit}; "
            f"`cdc-assets quarantine` lists them, `quarantine replay` takes them once cdc.yaml is fixed): "
            + "; ".join(figures.first))


def target_check_specs(table: TableConfig, target: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    specs = [dg.AssetCheckSpec(KEYS_UNIQUE, asset=target, blocking=True,
                               description="Each key the last apply touched is in the target once, by its `_cdc_key` "
                                           "and by its key columns' values (every key after a whole build); "
                                           "blocking: downstream waits on it.")]
    if table.reconcile_with:
        specs.append(dg.AssetCheckSpec(RECONCILES_WITH_SOURCE, asset=target,
                                       description=f"Row counts and a row-by-row comparison with {table.reconcile_with}."))
    return specs


def target_checks(cfg: Config, table: TableConfig, spark) -> Iterator[dg.AssetCheckResult]:
    """The results of target's checks (target_check_specs), each as soon as it is known.
    `spark`: a function returning the run's session, for a count over a whole build."""
    figures = checks.key_uniqueness(cfg, table, spark=spark)
    yield dg.AssetCheckResult(check_name=KEYS_UNIQUE, passed=figures.duplicate_keys == 0,
                              metadata=as_metadata(figures.to_metadata()))
    if table.reconcile_with:
        report = checks.reconciliation(cfg, table)
        # A warning, not an error: an export is a point in time, and the target only
        # matches it once the batches up to that point have been applied.
        yield dg.AssetCheckResult(check_name=RECONCILES_WITH_SOURCE, passed=discrepancies(report) == 0,
                                  metadata=as_metadata(report.to_metadata()), severity=dg.AssetCheckSeverity.WARN)


def table_checks(cfg: Config, table: TableConfig, target: dg.AssetKey,
                 source: dg.AssetKey) -> list[dg.AssetChecksDefinition]:
    """The checks of their own (the others are evaluated by their asset's step)."""
    max_staleness = table.apply.max_staleness
    own = [within_max_staleness_check(cfg, table, target, max_staleness)] if max_staleness is not None else []
    if table.max_retained_wal_mb is not None:
        own.append(slot_retained_wal_check(table, source, table.max_retained_wal_mb))
    if is_postgresql(table.source):
        own.append(matches_live_source_check(cfg, table, target))
    return own


def matches_live_source_check(cfg: Config, table: TableConfig, target: dg.AssetKey) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=target, name=MATCHES_LIVE_SOURCE,
                    description="Every key of the live PostgreSQL table that no pending change touches (captured, "
                                "extracted or staged, not applied yet) has the same row in target, compared at one "
                                "consistent point while capture runs; an error on any difference.")
    def matches_live_source() -> dg.AssetCheckResult:
        figures = checks.live_reconciliation(cfg, table)
        # An error, not a warning: the changes in flight are left out, so a difference is a wrong row.
        return dg.AssetCheckResult(passed=figures.matches, severity=dg.AssetCheckSeverity.ERROR,
                                   metadata=as_metadata(figures.to_metadata()))

    return matches_live_source


def slot_retained_wal_check(table: TableConfig, source: dg.AssetKey, limit_mb: int) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=source, name=SLOT_RETAINED_WAL,
                    description=f"The replication slot keeps at most {limit_mb} MiB of WAL on the PostgreSQL server "
                                "(max_retained_wal_mb); a warning: a slot nobody reads keeps every WAL file "
                                "from its position on, until the server's disk fills.")
    def slot_retained_wal() -> dg.AssetCheckResult:
        try:
            retained = postgres_logical.retained_wal(table)
        except TransientError as e:
            # The server did not answer: the WAL cannot be measured now. Said as the check's outcome,
            # with its cause, rather than as a failed step's stack; the run's own error says the same.
            return dg.AssetCheckResult(
                passed=False, severity=dg.AssetCheckSeverity.WARN, description=root_cause_of_exception(e),
                metadata=as_metadata({"server_answered": False, "max_retained_wal_mb": limit_mb}))
        # A warning, not an error: the capture is still exact, but the source's disk is filling.
        return dg.AssetCheckResult(
            passed=retained is not None and retained <= limit_mb * 2**20, severity=dg.AssetCheckSeverity.WARN,
            metadata=as_metadata({"slot_found": retained is not None, "retained_wal_bytes": retained or 0,
                                  "max_retained_wal_mb": limit_mb}))

    return slot_retained_wal


def within_max_staleness_check(cfg: Config, table: TableConfig, target: dg.AssetKey,
                               max_staleness: float) -> dg.AssetChecksDefinition:
    limit = format_duration(max_staleness)

    @dg.asset_check(asset=target, name=WITHIN_MAX_STALENESS,
                    description=f"No pending batch (staged, not merged) has waited {limit} (apply.max_staleness) "
                                "or longer; a warning: it never holds the apply.")
    def within_max_staleness() -> dg.AssetCheckResult:
        figures = status.freshness(cfg, table)
        # A warning, not an error: a late merge is stale, not wrong, and the fresh read shows
        # the pending changes meanwhile.
        return dg.AssetCheckResult(passed=bool(figures.within_max_staleness), severity=dg.AssetCheckSeverity.WARN,
                                   metadata=as_metadata({**figures.to_metadata(), "max_staleness_seconds": max_staleness}))

    return within_max_staleness
