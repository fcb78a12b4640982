"""Cycles on a schedule: `schedule: "*/15 * * * *"` on a table, or a group of tables
(`groups:` in cdc.yaml) on one schedule, besides the landing sensor.

A schedule targets one job, and Dagster's scheduler launches that job whatever job a RunRequest
names, so a tick cannot hand out the sensor's ingest and apply runs. The sensor also moves a table
one step per tick (the next batch's ingest, then, once nothing is left to stage, the apply): at a
15-minute cadence, with a batch landing every cycle, the apply would never come. So each
`<NAME>_cycle_schedule` targets `<NAME>_cycle_job`, and its tick:
- registers what landed as the sensor does (engine ledger, table lock not waited on for long,
  the batch partitions added), and decides, table by table, with the sensor's own rules
  (sensors.plan_requests, over the planner of core/plan.py), whether anything is due: a batch to
  ingest, an apply the `apply:` policy allows, a base import, a publish. A table whose apply waits,
  or with nothing new, is skipped with the sensor's reason;
- asks for one run of the cycle job for the tables with work, unless a run of it has not finished
  (that one takes what landed meanwhile). The run does for each table what `cdc-assets run` does
  (defs/run_loop.run_table): register, ingest each new batch in order, apply as the policy allows,
  publish; the batch, ingest and apply runs it executes in its process are the same jobs the sensor
  launches, and show in the UI as their own runs.

Nothing is applied twice when the sensor is on too: every step takes the table lock and checks the
ledger and the Delta versions, so a batch already staged or applied by the other is a no-op, and the
sensor asks for nothing the cycle already did (its requests follow the same versions).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from ..core.config import Config, TableConfig
from ..engine import gcs as gcs_landing
from ..engine.landing import Batch
from ..engine.progress import read_progress
from .run_loop import Build, run_in_processes, run_table, summary_line
from .sensors import TICK_LOCK_SECONDS, plan_requests, register_landed
from .table_assets import TableNames

# A group's tick waits this long for busy tables in all (each at most TICK_LOCK_SECONDS): Dagster
# ends a tick after 60 s. A table still busy is in the cycle run anyway, which registers its files.
GROUP_LOCK_SECONDS = 20.0
CYCLE_TAG = "cdc/cycle"
UNFINISHED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


@dataclass(frozen=True)
class Cycle:
    name: str  # the table's name, or the group's
    tables: tuple[TableConfig, ...]
    cron: str
    group: bool
    parallel: int = 1  # processes its tables run in side by side (`groups: {NAME: {parallel: N}}`)


def cycles(cfg: Config) -> list[Cycle]:
    """Every scheduled cycle of the configuration: a table's own, then each group's."""
    out = [Cycle(t.name, (t,), t.schedule, False) for t in cfg.tables if t.schedule]
    out += [Cycle(g.name, tuple(cfg.table(n) for n in g.tables), g.schedule, True, g.parallel) for g in cfg.groups]
    return out


def cycle_job_name(name: str) -> str:
    return f"{name}_cycle_job"


def cycle_schedule_name(name: str) -> str:
    return f"{name}_cycle_schedule"


def cycle_op_name(name: str) -> str:
    return f"{name}__cycle"


class CycleConfig(dg.Config):
    """The tables of the cycle to run (a schedule's tick names those with work); none: all of them."""
    tables: list[str] = []


def cycle_definitions(cfg: Config, definitions: Callable[[], dg.Definitions], build: Build) -> tuple[list, list]:
    """(jobs, schedules) of the configuration's scheduled cycles; `definitions()` gives the code
    location's definitions, whose ingest and apply jobs a cycle run executes, and `build` makes them
    in the worker processes of a group's `parallel`."""
    jobs, schedules = [], []
    for cycle in cycles(cfg):
        job = _cycle_job(cfg, cycle, definitions, build)
        jobs.append(job)
        schedules.append(_cycle_schedule(cfg, cycle, job))
    return jobs, schedules


def _what(cycle: Cycle) -> str:
    names = ", ".join(t.name for t in cycle.tables)
    return f"group {cycle.name} ({names})" if cycle.group else cycle.name


def _cycle_job(cfg: Config, cycle: Cycle, definitions: Callable[[], dg.Definitions], build: Build) -> dg.JobDefinition:
    names = [t.name for t in cycle.tables]

    # No pool: the ingest and apply runs it executes take the tables' pools, one step at a time.
    @dg.op(name=cycle_op_name(cycle.name),
           description=f"The cycle of {_what(cycle)}, as `cdc-assets run` does it: register what landed, ingest "
                       "each new batch, apply as the `apply:` policy allows, publish.")
    def cycle_op(context: dg.OpExecutionContext, config: CycleConfig) -> None:
        unknown = sorted(set(config.tables) - set(names))
        if unknown:
            raise dg.Failure(f"cycle {cycle.name}: {', '.join(unknown)} not in it (its tables: {', '.join(names)})")
        failed = []
        chosen = [t.name for t in cycle.tables if not config.tables or t.name in config.tables]
        if cycle.parallel > 1 and len(chosen) > 1:
            # the tables in processes side by side, as `cdc-assets run --parallel`
            ok = [f.ok for f in run_in_processes(cfg.path, chosen, cycle.parallel, as_json=False, build=build,
                                                 echo=context.log.info)]
            if not all(ok):
                raise dg.Failure(f"cycle {cycle.name}: {ok.count(False)} table(s) failed (see the lines above)")
            return
        for table in cycle.tables:
            if config.tables and table.name not in config.tables:
                continue
            before = read_progress(cfg, table).staged
            outcome = run_table(definitions(), context.instance, cfg, table, progress=context.log.info)
            after = read_progress(cfg, table).staged
            if outcome.new_batch is None and after > before:  # registered by the tick, taken by this run
                outcome.new_batch = ", ".join(Batch.id_for(seq) for seq in range(max(before, 0) + 1, after + 1))
            context.log.info(summary_line(outcome))
            if not outcome.ok:
                failed.append(f"{table.name}: {outcome.error or 'a check failed'}")
        if failed:  # one failing table never stops the others; the run fails once all were done
            raise dg.Failure(f"cycle {cycle.name}: {len(failed)} table(s) failed: " + "; ".join(failed))

    return dg.JobDefinition(graph_def=dg.GraphDefinition(name=cycle_job_name(cycle.name), node_defs=[cycle_op]),
                            description=f"The cycle of {_what(cycle)}: register, ingest, apply, publish.",
                            tags={CYCLE_TAG: cycle.name})


def _cycle_schedule(cfg: Config, cycle: Cycle, job: dg.JobDefinition) -> dg.ScheduleDefinition:
    on_gcs = {t.name: gcs_landing.is_gcs(cfg.landing_dir(t.name)) for t in cycle.tables}
    resource_keys = ({"gcs"} if any(on_gcs.values()) else set()) | (
        {"bigquery"} if any(t.reads_bigquery for t in cycle.tables) else set())

    @dg.schedule(name=cycle_schedule_name(cycle.name), cron_schedule=cycle.cron, job=job,
                 execution_timezone=cfg.timezone, default_status=dg.DefaultScheduleStatus.STOPPED,
                 required_resource_keys=resource_keys or None,
                 description=f"Runs the cycle of {_what(cycle)} at {cycle.cron}"
                             + (f" ({cfg.timezone})" if cfg.timezone else " (UTC)") + " when something landed.")
    def schedule(context: dg.ScheduleEvaluationContext):
        running = context.instance.get_runs(filters=dg.RunsFilter(job_name=job.name, statuses=UNFINISHED), limit=1)
        if running:
            return dg.SkipReason(f"cycle {cycle.name}: run {running[0].run_id} has not finished; it takes what "
                                 "landed meanwhile, or the next tick does")
        deadline = time.monotonic() + GROUP_LOCK_SECONDS
        work: list[str] = []
        reasons: list[str] = []
        for table in cycle.tables:
            # without a cursor: a gs:// landing is listed whole each tick; the ledger says what is new
            registered = register_landed(
                cfg, table, None, context.log, storage_client=context.resources.gcs if on_gcs[table.name] else None,
                bigquery=context.resources.bigquery if table.reads_bigquery else None,
                lock_seconds=min(TICK_LOCK_SECONDS, max(0.0, deadline - time.monotonic())))
            busy = registered.busy
            requests, missing, reason = plan_requests(context.instance, cfg, table, registered.batch, busy)
            if missing:  # the batch partitions, as the sensor's tick adds them
                context.instance.add_dynamic_partitions(TableNames(table.name).batches, missing)
            if requests or busy:  # a busy table's files are registered by the run, which waits for the lock
                work.append(table.name)
            elif reason is not None:  # plan_requests says why whenever it requests nothing
                reasons.append(reason)
        if not work:
            return dg.SkipReason("; ".join(reasons))
        return dg.RunRequest(run_config={"ops": {cycle_op_name(cycle.name): {"config": {"tables": work}}}},
                             tags={CYCLE_TAG: cycle.name})

    return schedule
