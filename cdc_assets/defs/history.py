"""`history: true`: the `[TABLE, "history"]` asset (every version of each key, SCD type 2) and its
job. The work is engine/history.py's; this only wires it."""

import dagster as dg
from pydantic import Field

from ..core.config import Config, TableConfig
from ..engine import history
from ..engine.table_layout import HISTORY, path
from .automation import follows_upstream
from .metadata import as_metadata, delta_table_metadata
from .resources import CdcSparkResource, spark_session
from .table_assets import TableNames, _write


def history_job_name(table: TableConfig) -> str:
    return f"{table.name}_history_job"


class HistoryConfig(dg.Config):
    rebuild: bool = Field(
        default=False,
        description="Compute the whole history again from changes (and base) instead of taking the new batches.")


def history_definitions(cfg: Config, table: TableConfig) -> dg.Definitions:
    """The history of a table that keeps one (its asset and job); nothing for one that does not."""
    if not table.history:
        return dg.Definitions()
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)
    deps = [dg.AssetDep(names.key("changes"), partition_mapping=dg.AllPartitionMapping())]
    if table.base_snapshot:
        deps.append(dg.AssetDep(names.key("base")))
    standard = {"dagster/table_name": f"{table.name}.{HISTORY}", "dagster/storage_kind": "delta"}

    @dg.asset(key=names.key(HISTORY), deps=deps, group_name=table.name, kinds={"spark", "delta"}, pool=names.pool,
              tags={"format": table.format}, metadata=standard, automation_condition=follows_upstream(),
              description=f"Every version of each {table.name} key (SCD type 2) by the source's ordering: "
                          "_cdc_valid_from, _cdc_valid_to, _cdc_is_current, _cdc_operation. Its current rows "
                          "are target's; run config rebuild: true computes it again from changes.")
    def history_asset(context: dg.AssetExecutionContext, config: HistoryConfig,
                      pyspark: CdcSparkResource) -> dg.MaterializeResult:
        spark = lambda: spark_session(pyspark)  # noqa: E731 - an update of a few batches never starts Spark
        step = (lambda: history.rebuild(spark, cfg, table)) if config.rebuild else \
            (lambda: history.update(spark, cfg, table))
        figures = _write(context, table_dir, f"{table.name}/history", step)
        return dg.MaterializeResult(metadata={
            **as_metadata(figures.to_metadata()), **standard,
            **delta_table_metadata(path(table_dir, HISTORY), f"{table.name}.{HISTORY}", table.keys)})

    job = dg.define_asset_job(history_job_name(table), selection=[names.key(HISTORY)],
                              description=f"Take {table.name}'s new batches into its history "
                                          "(run config rebuild: true computes it again).")
    return dg.Definitions(assets=[history_asset], jobs=[job])

