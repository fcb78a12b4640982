"""`publish: {bigquery: ...}`: the `[TABLE, "bigquery"]` asset downstream of `target`, its
reconciliation check and its job. The work is engine/bigquery_publish.py's; this only wires it."""

import dagster as dg

from ..core.config import Config, TableConfig
from ..engine import bigquery_publish as publishing
from .automation import follows_checked_upstream
from .metadata import as_metadata
from .table_assets import TableNames, _write


def publish_job_name(table: TableConfig) -> str:
    return f"{table.name}_publish_job"


def publish_definitions(cfg: Config, table: TableConfig) -> dg.Definitions:
    """The BigQuery copy of a table that publishes (its asset, check and job); nothing for one that does not."""
    dest = publishing.destination(table)
    if dest is None:
        return dg.Definitions()
    # Imported here: dagster_gcp costs about a second, paid only by configurations that use it.
    from .gcp_resources import CdcBigQueryResource

    names = TableNames(table.name)
    key = names.key("bigquery")
    table_dir = cfg.table_dir(table.name)

    standard = {"dagster/table_name": dest, "dagster/storage_kind": "bigquery", "dagster/uri": f"bigquery://{dest}"}

    @dg.asset(key=key, deps=[names.key("target")], group_name=table.name, kinds={"bigquery"}, pool=names.pool,
              tags={"format": table.format}, metadata=standard, automation_condition=follows_checked_upstream(),
              description=f"{dest}: a copy of {table.name}'s target, brought up to it by one MERGE of the keys "
                          "the batches since the last publish changed.")
    def published(context: dg.AssetExecutionContext, bigquery: CdcBigQueryResource) -> dg.MaterializeResult:
        with bigquery.get_client() as client:
            figures = _write(context, table_dir, f"{table.name}/bigquery",
                             lambda: publishing.publish(client, cfg, table))
        return dg.MaterializeResult(metadata={**as_metadata(figures.to_metadata()), **standard})

    @dg.asset_check(asset=key, name="reconciles_with_target",
                    description="Row counts, and every row (or a sample of a large table) column by column, "
                                "of the BigQuery table against the target snapshot the last publish sent.")
    def reconciles_with_target(bigquery: CdcBigQueryResource) -> dg.AssetCheckResult:
        with bigquery.get_client() as client:
            report = publishing.reconcile(client, cfg, table)
        return dg.AssetCheckResult(passed=report.discrepancies == 0, metadata=as_metadata(report.to_metadata()))

    job = dg.define_asset_job(publish_job_name(table), selection=[key],
                              description=f"Publish {table.name}'s target to BigQuery {dest}.")
    return dg.Definitions(assets=[published], asset_checks=[reconciles_with_target], jobs=[job])
