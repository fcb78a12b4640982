"""A table's engine steps called directly, without Dagster: for an engine test whose subject is
what the steps do to the warehouse, not how Dagster runs them."""
from __future__ import annotations

from cdc_assets.core.config import Config
from cdc_assets.core.formats import SNAPSHOT
from cdc_assets.engine.step_results import ApplyResult


def take_and_apply(spark, cfg: Config, table: str) -> ApplyResult:
    """What a run does for a table's newly landed files, step by step in the engine: the files
    registered as the next batch, the base export imported (a table that starts from one), each
    registered batch taken into `changes` and staged (a batch taken already is left as it is), the
    staged batches applied to `target`; the blocking checks must pass (each batch's counts add
    up, each key the apply touched is in the target once). `spark`: the test's session, or a
    function that starts one."""
    from cdc_assets.engine import apply, base_import, checks, snapshot, spark_ingest, stage
    from cdc_assets.engine.landing import register_new_batch, registered

    t = cfg.table(table)
    table_dir = cfg.table_dir(table)
    register_new_batch(cfg.landing_dir(table), table_dir)
    if t.base_snapshot:
        base_import.import_base(spark, cfg, t)
    take = snapshot.ingest_batch if t.format == SNAPSHOT else spark_ingest.ingest_batch
    for batch in registered(table_dir):
        take(spark, cfg, t, batch)
        stage.stage_batch(cfg, t, batch, spark)
        accounted = checks.batch_accounting(cfg, t, batch.seq)
        assert accounted.adds_up, (batch.id, accounted)
    applied = apply.apply_pending(spark, cfg, t)
    unique = checks.key_uniqueness(cfg, t, spark=spark if callable(spark) else lambda: spark)
    assert unique.duplicate_keys == 0, unique
    return applied
