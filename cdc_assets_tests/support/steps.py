"""A table's engine steps called directly, without Dagster: for an engine test whose subject is
what the steps do to the warehouse, not how Dagster runs them."""
from __future__ import annotations

import dataclasses

from cdc_assets.core.config import Config, TableConfig
from cdc_assets.core.formats import SNAPSHOT
from cdc_assets.engine.step_results import ApplyResult, BaseResult, ChangesResult, HistoryResult, PublishResult


def take_and_apply(spark, cfg: Config, table: str) -> ApplyResult:
    """What a run does for a table's newly landed files, step by step in the engine: the files
    registered as the next batch, the base export imported (a table that starts from one), each
    registered batch taken into `changes` and staged (a batch taken already is left as it is), the
    staged batches applied to `target`; the blocking checks must pass (each batch's counts add
    up, each key the apply touched is in the target once). `spark`: the test's session, or a
    function that starts one."""
    t = cfg.table(table)
    _take(spark, cfg, t)
    return _apply(spark, cfg, t)


def take(spark, cfg: Config, table: str) -> ChangesResult | None:
    """`take_and_apply` without the apply: what a run whose merge waits does (`apply:`), each
    batch staged; the newly landed batch's changes (None: nothing new landed)."""
    return _take(spark, cfg, cfg.table(table)).changes


@dataclasses.dataclass(frozen=True)
class TableSteps:
    """What `run_steps` did for a table, step by step."""
    new_batch: str | None  # the batch the newly landed files were registered as (None: nothing new landed)
    base: BaseResult | None  # the base export's import (None: the table starts from none)
    taken: ChangesResult | None  # the newly landed batch's changes (None: nothing new landed)
    applied: ApplyResult
    history: HistoryResult | None  # None: the table keeps no history, or it had nothing new
    published: PublishResult | None  # None: the table publishes nowhere, or nothing was new for it


def run_steps(spark, cfg: Config, table: str, bigquery=None) -> TableSteps:
    """`take_and_apply`, then the steps a run takes after the apply: the history updated (a table
    that keeps one, when `changes` holds batches it has not taken) and the target published (a
    table that publishes, when the target has news for its copy). `bigquery`: the BigQuery client
    the table's source is read from and its copy published with."""
    from cdc_assets.engine import bigquery_publish, history, sources

    t = cfg.table(table)
    if t.source:
        sources.extract_new_rows(t, cfg.table_dir(table), bigquery)
    taken = _take(spark, cfg, t)
    applied = _apply(spark, cfg, t)
    updated = history.update(spark, cfg, t) if t.history and history.pending(cfg, t) else None
    published = bigquery_publish.publish(bigquery, cfg, t) \
        if bigquery is not None and bigquery_publish.pending(cfg, t) else None
    return TableSteps(taken.new_batch, taken.base, taken.changes, applied, updated, published)


@dataclasses.dataclass(frozen=True)
class _Taken:
    new_batch: str | None
    base: BaseResult | None
    changes: ChangesResult | None


def _take(spark, cfg: Config, t: TableConfig) -> _Taken:
    """The landed files registered as the next batch, the base imported, each registered batch
    taken and staged, its counts adding up."""
    from cdc_assets.engine import base_import, checks, rekey, snapshot, spark_ingest, stage
    from cdc_assets.engine.landing import register_new_batch, registered

    table_dir = cfg.table_dir(t.name)
    base = None
    new = register_new_batch(cfg.landing_dir(t.name), table_dir, fmt=t.format)
    if t.base_snapshot:
        rekey.ensure_exact(cfg, t)  # as the steps do: keys an earlier release built stop the table first
        base = base_import.import_base(spark, cfg, t)
    take = snapshot.ingest_batch if t.format == SNAPSHOT else spark_ingest.ingest_batch
    taken = None
    for batch in registered(table_dir):
        rekey.ensure_exact(cfg, t)
        changes = take(spark, cfg, t, batch)
        stage.stage_batch(cfg, t, batch, spark)
        accounted = checks.batch_accounting(cfg, t, batch.seq)
        assert accounted.adds_up, (batch.id, accounted)
        if new is not None and batch.seq == new.seq:
            taken = changes
    return _Taken(new.id if new is not None else None, base, taken)


def _apply(spark, cfg: Config, t: TableConfig) -> ApplyResult:
    """The staged batches applied to `target`; each key the apply touched must be in it once."""
    from cdc_assets.engine import apply, checks

    applied = apply.apply_pending(spark, cfg, t)
    unique = checks.key_uniqueness(cfg, t, spark=spark if callable(spark) else lambda: spark)
    assert unique.duplicate_keys == 0, unique
    return applied


def apply_batches(spark, workdir, table: dict, batches: list, state) -> Config:
    """Land each of `batches` (change records, the state expected after them) as a JSON lines file
    and take it: after each but the last the target's `state` (rows -> comparable) is the batch's
    (it is applied); the last is staged only, as a run whose merge waits leaves it, the fresh read
    shows it, then it is applied. Returns the table's config."""
    from cdc_assets.engine import fresh

    from .config import write_config
    from .landing import jsonl, land
    from .warehouse import target_rows

    name = table["name"]
    cfg = write_config(workdir, [table])
    for n, (records, expected) in enumerate(batches):
        land(cfg, name, f"b{n}", {"c.jsonl": jsonl(records)})
        if n < len(batches) - 1:
            take_and_apply(spark, cfg, name)
            assert state(target_rows(cfg, name, source_only=False)) == expected, f"after batch {n}"
        else:
            take(spark, cfg, name)
    final = batches[-1][1]
    assert state(fresh.fresh_table(cfg, cfg.table(name)).to_pylist()) == final
    take_and_apply(spark, cfg, name)
    assert state(target_rows(cfg, name, source_only=False)) == final
    return cfg
