"""A table's run through the Dagster jobs in this process, and what a job run materialized."""
from __future__ import annotations

import dagster as dg
import pytest

from cdc_assets.core.config import Config
from cdc_assets.engine.landing import register_new_batch
from cdc_assets.engine.lock import table_lock

from .config import write_config
from .landing import jsonl, land
from .warehouse import target_rows

# Dagster marks single-run backfills and partitioned checks beta/preview; the product relies on both knowingly.
MARKS = [pytest.mark.spark,
         pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
         pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]


def run_table(cfg: Config, table: str, instance: dg.DagsterInstance | None = None):
    """One `cdc-assets run` of one table, in this process (shares the test's Spark session)."""
    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets.defs.run_loop import run_table as _run

    inst = instance or dg.DagsterInstance.ephemeral()
    return _run(build_definitions(cfg), inst, cfg, cfg.table(table))


def run_ok(cfg, table: str):
    """One run of one table through the Dagster jobs; it must succeed with its checks passing."""
    outcome = run_table(cfg, table)
    assert outcome.ok, outcome
    return outcome


def run_batches(workdir, table: dict, batches: list, state) -> object:
    """Land each of `batches` (change records, the state expected after them) as a JSON lines file
    and run the table: after each but the last the target's `state` (rows -> comparable) is the
    batch's; the last waits (`apply.min_changes`), the fresh read shows it, then it is applied.
    Returns the table's config."""
    from cdc_assets.engine import fresh

    name = table["name"]
    cfg = write_config(workdir, [table])
    for n, (records, expected) in enumerate(batches):
        if n == len(batches) - 1:
            cfg = write_config(workdir, [{**table, "apply": {"min_changes": 10**9}}])
        land(cfg, name, f"b{n}", {"c.jsonl": jsonl(records)})
        run_ok(cfg, name)
        if n < len(batches) - 1:
            assert state(target_rows(cfg, name, source_only=False)) == expected, f"after batch {n}"
    final = batches[-1][1]
    assert state(fresh.fresh_table(cfg, cfg.table(name)).to_pylist()) == final
    cfg = write_config(workdir, [table])
    run_ok(cfg, name)
    assert state(target_rows(cfg, name, source_only=False)) == final
    return cfg


def register_batch(cfg, table: str, instance: dg.DagsterInstance) -> str:
    """What the sensor and the run command do first: ledger entry + Dagster partition."""
    with table_lock(cfg.table_dir(table)):
        batch = register_new_batch(cfg.landing_dir(table), cfg.table_dir(table))
    assert batch is not None, "nothing new to register"
    instance.add_dynamic_partitions(f"{table}__batches", [batch.id])
    return batch.id


def execute(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, *, partition_key: str | None = None,
            tags: dict | None = None) -> dg.ExecuteInProcessResult:
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, partition_key=partition_key, tags=tags or {}, raise_on_error=True)
    assert result.success
    return result


def materialized(result) -> dict[str, dict]:
    """asset name -> metadata (plain values) of its materialization in this run."""
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        out[mat.asset_key.path[-1]] = {k: v.value for k, v in mat.metadata.items()}
    return out


def check_results(result) -> dict[str, bool]:
    return {f"{e.asset_key.path[-1]}.{e.check_name}": e.passed for e in result.get_asset_check_evaluations()}
