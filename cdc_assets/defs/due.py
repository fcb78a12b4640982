"""What is due for a table now, as the sensor, a cycle, `run` and a batch's own run ask it: the
table's progress (engine/progress.py) through the planner (core/plan.py), with the `apply:` policy
and the failed accounting this Dagster instance recorded."""
from __future__ import annotations

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from ..core.apply_policy import Decision
from ..core.config import Config, TableConfig
from ..core.plan import Ingest, Progress, Steps, due_steps
from ..engine import fresh
from ..engine.landing import Batch
from ..engine.progress import read_progress
from .names import TableNames

UNFINISHED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def failed_accounting(instance, table: TableConfig, applied: int, reached: int) -> list[str]:
    """The pending batches whose latest `batch_accounted` evaluation failed."""
    key = dg.AssetCheckKey(TableNames(table.name).key("staging"), "batch_accounted")
    wanted = {Batch.id_for(seq) for seq in range(applied + 1, reached + 1)}
    latest: dict[str, bool] = {}
    for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=max(50, 4 * len(wanted))):
        if record.partition in wanted and record.partition not in latest:  # newest first
            latest[record.partition] = record.status == AssetCheckExecutionRecordStatus.FAILED
    return sorted(p for p, failed in latest.items() if failed)


def due_now(instance, cfg: Config, table: TableConfig, ingest: Ingest) -> tuple[Progress, Steps]:
    """Where the table stands, and the steps due from there. Without an `apply:` policy every
    pending batch is due, so what is pending is not counted (a query over staging and the ledger)."""
    state = read_progress(cfg, table)

    def decision() -> Decision:
        return fresh.decision(cfg, table)[0] if table.apply.waits else Decision(True, "applies every batch")

    return state, due_steps(state, ingest, decision,
                            lambda: failed_accounting(instance, table, state.applied, state.reached))


def held_reason(steps: Steps) -> str | None:
    """Why the apply waits, as the sensor's skip and a batch run's log say it."""
    if steps.held:
        return (f"apply waits: batch_accounted failed for {', '.join(steps.held)} "
                "(re-run its ingest once the cause is fixed)")
    return steps.waiting


def batch_run_unfinished(instance, table: TableConfig) -> bool:
    """Whether a batch run (or a base import's run) of the table is queued or running: it applies
    what it stages (imports) when due."""
    names = TableNames(table.name)
    jobs = [names.batch_job] + ([names.base_job] if table.base_snapshot else [])
    return any(instance.get_runs(dg.RunsFilter(job_name=job, statuses=UNFINISHED), limit=1) for job in jobs)
