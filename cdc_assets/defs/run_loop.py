"""The run loop: a table's due steps executed as the Dagster jobs, in this process.

`cdc-assets run` and a cycle schedule's run drive it. The same jobs the UI and the sensor launch
are executed here in-process, so the one Spark session of this process serves every table and
batch; what is due comes from the planner the sensor uses too (core/plan.py).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import dagster as dg

from ..core.config import Config, TableConfig
from ..core.partition_text import derived_column
from ..core.plan import Ingest
from ..engine import bigquery_publish as publishing
from ..engine import faults, history, sources
from ..engine.errors import retryable, retryable_info, root_cause_of_exception, root_cause_of_info
from ..engine.landing import Batch, register_new_batch
from ..engine.lock import table_lock
from ..engine.retry import on_conflict
from ..engine.settings import settings
from ..engine.status import record_run
from ..engine.step_results import ApplyResult, ChangesResult, HistoryResult, PublishResult
from .checks import QUARANTINE_WITHIN_LIMIT, WITHIN_MAX_STALENESS
from .due import due_now
from .history import history_job_name
from .instance import open_instance
from .pool_watch import (
    POOL_WAIT_SECONDS,
    Executing,
    PoolWaitExpired,
    PoolWatch,
    run_tags,
    stop_on_signals,
)
from .pools import release_abandoned
from .publish import publish_job_name
from .sensors import apply_request_tags
from .table_assets import STEP_ASSETS, TableNames, sync_target_partitions

# What makes the Dagster definitions of a configuration (defs/definitions.build_definitions): handed
# in, since those definitions hold the cycle jobs that run this loop.
Build = Callable[[Config], dg.Definitions]

# Dagster's console logger at WARNING: the summary line says what a user needs.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _no_failure(record: logging.LogRecord) -> bool:
    event = getattr(record, "dagster_event", None)
    return not (event is not None and (event.is_step_failure or event.is_run_failure))


def _console_without_failures(init_context) -> logging.Logger:
    logger = dg.colored_console_logger.logger_fn(init_context)
    logger.addFilter(_no_failure)
    return logger


# The jobs' console logger in this loop: Dagster's, but for the events of a failed step or run, whose
# stacks and wrappers a user need not read: the loop says the failure's root cause itself, one line
# per table (CDC_ASSETS_DEBUG keeps Dagster's own logger, stacks included).
CONSOLE = dg.LoggerDefinition(_console_without_failures, config_schema=dg.colored_console_logger.config_schema,
                              description="Dagster's console logger without the events of failed steps and runs")


@dataclass
class TableOutcome:
    table: str
    ok: bool = True
    new_batch: str | None = None
    taken_as: str = ""  # how the new batch's files were found beyond new names ('1 file appended')
    ingested: list[str] = field(default_factory=list)  # the batches this run ingested (some registered before)
    figures: dict = field(default_factory=dict)  # asset -> last materialization metadata
    checks: dict = field(default_factory=dict)  # check name -> passed
    error: str | None = None
    retryable: bool = False  # it failed, and running it again may succeed (a server did not answer)
    seconds: float = 0.0
    warning: str | None = None  # said in the summary line; the table still succeeds
    waiting: str | None = None  # why the merge into target waits (apply: min_changes / max_staleness)
    # batches over their quarantine limit: said, and the table fails, once its cycle is done
    over_quarantine: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """What `run --json` prints for the table: the summary line's facts, and each step's figures."""
        return {"table": self.table, "ok": self.ok, "new_batch": self.new_batch, "taken_as": self.taken_as or None,
                "waiting": self.waiting,
                "warning": self.warning, "error": self.error, "checks": self.checks, "seconds": self.seconds,
                "figures": self.figures}

    @property
    def taken(self) -> ChangesResult | None:
        """The changes step's result, read back from its materialization (None: changes not materialized)."""
        found = self.figures.get("changes")
        return ChangesResult.from_metadata(found) if found else None

    @property
    def applied(self) -> ApplyResult | None:
        """The target step's result, read back from its materialization (None: target not materialized)."""
        found = self.figures.get("target")
        return ApplyResult.from_metadata(found) if found else None

    @property
    def history(self) -> HistoryResult | None:
        """The history step's result, read back from its materialization (None: history not materialized)."""
        found = self.figures.get("history")
        return HistoryResult.from_metadata(found) if found else None

    @property
    def published(self) -> PublishResult | None:
        """The BigQuery publish's result, read back from its materialization (None: not published)."""
        found = self.figures.get("bigquery")
        return PublishResult.from_metadata(found) if found else None


def _record(outcome: TableOutcome, result) -> None:
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        # the step's own figures; Dagster's standard `dagster/...` entries are for the UI's catalog
        outcome.figures[mat.asset_key.path[-1]] = {k: v.value for k, v in mat.metadata.items()
                                                   if not k.startswith("dagster/")}
    for evaluation in result.get_asset_check_evaluations():
        if evaluation.check_name == QUARANTINE_WITHIN_LIMIT:
            # Any batch of the run over its limit fails the table, but only once the cycle is done: the
            # batch's valid records and the batches after it are still applied.
            outcome.checks[evaluation.check_name] = evaluation.passed and outcome.checks.get(evaluation.check_name, True)
            if not evaluation.passed:
                outcome.over_quarantine.append(evaluation.description or "a batch is over its quarantine limit")
            continue
        outcome.checks[evaluation.check_name] = evaluation.passed
        if not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR:
            outcome.ok = False
    if not result.success:
        outcome.ok = False
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        if failure is not None and outcome.error is None:
            err = failure.step_failure_data.error
            # a step that computes two assets names the one it failed on: the first not materialized
            left = [a for a in STEP_ASSETS.get(failure.step_key.rsplit("__", 1)[-1], ()) if a not in outcome.figures]
            where = f" ({left[0]})" if left else ""
            outcome.error = f"step {failure.step_key}{where}: {root_cause_of_info(err) if err else 'failed'}"
            # judged by the step's own error, not Dagster's wrapper: a server that did not answer may next time
            outcome.retryable = retryable_info(err)


@dataclass
class _Jobs:
    """What each job run of one table's cycle shares: it executes in-process, watched in its pool."""
    defs: dg.Definitions
    instance: dg.DagsterInstance
    outcome: TableOutcome
    pool: str
    pool_wait: float
    progress: Callable[[str], None] | None = None

    def run(self, label: str, job_name: str, tags: dict, partition_key: str | None = None) -> None:
        t = time.time()
        run_id = str(uuid.uuid4())
        watch = PoolWatch(self.instance, self.outcome.table, self.pool, run_id, self.pool_wait,
                          self.progress or (lambda line: print(line, file=sys.stderr, flush=True)))
        result = None
        try:
            with Executing(self.instance, run_id), watch:
                job = self.defs.resolve_job_def(job_name)
                if not settings().debug:
                    job = job.with_logger_defs({"console": CONSOLE})
                result = job.execute_in_process(
                    instance=self.instance, run_id=run_id, partition_key=partition_key, tags=tags,
                    raise_on_error=False, run_config=QUIET)
        except PoolWaitExpired:
            pass  # raised from the step's ask for its pool by the watch; its message is the error
        if watch.expired is not None:
            self.outcome.ok = False
            self.outcome.error = f"{label}: {watch.expired}"
        elif result is not None:
            _record(self.outcome, result)
        if self.progress is not None:
            ok = result is not None and result.success and watch.expired is None
            self.progress(f"{self.outcome.table}: {label} {'done' if ok else 'FAILED'} in {time.time() - t:.1f}s")


def run_table(defs: dg.Definitions, inst: dg.DagsterInstance, cfg: Config, table: TableConfig,
              progress: Callable[[str], None] | None = None, pool_wait: float = POOL_WAIT_SECONDS) -> TableOutcome:
    """`progress(line)`: called after each job with its step and time (the CLI prints it on stderr).
    `pool_wait`: how long a step waits for the table's pool before the table fails saying who holds it."""
    t0 = time.time()
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)
    outcome = TableOutcome(table.name)
    tags = run_tags()
    jobs = _Jobs(defs, inst, outcome, names.pool, pool_wait, progress)
    try:
        release_abandoned(inst, names.pool)
        with table_lock(table_dir):
            if table.reads_bigquery:
                # build_definitions binds the bigquery resource for a table read from BigQuery
                with (defs.resources or {})["bigquery"].get_client() as client:
                    sources.extract_new_rows(table, table_dir, client)
            elif table.source:
                sources.extract_new_rows(table, table_dir)
            notes: list[str] = []
            batch = on_conflict(lambda: register_new_batch(cfg.landing_dir(table.name), table_dir, fmt=table.format,
                                                           notes=notes), f"{table.name}/batches")
        outcome.new_batch = batch.id if batch else None
        outcome.taken_as = batch.taken_as() if batch else ""
        outcome.warning = "; ".join(dict.fromkeys(notes)) or None  # (a registration run again notes again)
        landing = cfg.landing_dir(table.name)
        if batch is None and not table.source and "://" not in landing and not os.path.isdir(landing):
            # A table whose first files have not arrived is normal, so not a failure; a typo in
            # `landing` or in the table's name looks the same, so it is said, not hidden.
            outcome.warning = f"landing folder {landing} does not exist (nothing taken)"
        state, steps = due_now(inst, cfg, table, Ingest.ALL)
        known = set(inst.get_dynamic_partitions(names.batches))
        missing = [Batch.id_for(seq) for seq in state.registered if Batch.id_for(seq) not in known]
        if missing:
            inst.add_dynamic_partitions(names.batches, missing)
        if steps.base_import:
            jobs.run("base import", names.base_job, tags)
        for seq in steps.ingest:
            # The last batch's run also applies what is staged when the apply is due (the batch job, for
            # a target without partitions): one Dagster run where two were.
            label, job = ("batch", names.batch_job) if seq == steps.ingest[-1] and not table.partition_by \
                else ("ingest", names.ingest_job)
            if outcome.ok:
                outcome.ingested.append(Batch.id_for(seq))
                jobs.run(f"{label} {Batch.id_for(seq)}", job, tags, partition_key=Batch.id_for(seq))
        faults.point("run.staged")  # between runs: the batches staged; a partitioned target not yet applied
        if steps.base_import or steps.ingest:  # what they imported and staged (a failed one may have done nothing)
            state, steps = due_now(inst, cfg, table, Ingest.ALL)
        if outcome.ok and steps.held:  # as the sensor does: a batch that does not add up is not applied
            outcome.ok = False
            outcome.error = f"batch_accounted failed for {', '.join(steps.held)}: not applied (re-run its ingest)"
        elif outcome.ok and steps.waiting:
            outcome.waiting = steps.waiting  # staged; a fresh read shows it (cdc-assets read)
        if outcome.ok and steps.apply:
            sync_target_partitions(inst, cfg, table)  # staged by an earlier run, maybe on another instance
            apply_tags = apply_request_tags(inst, table)
            if apply_tags is not None:
                jobs.run("apply", names.apply_job, {**apply_tags, **tags})
        if state.apply_pending and table.apply.max_staleness is not None and WITHIN_MAX_STALENESS not in outcome.checks:
            # No apply evaluated the freshness check (the merge waits, is held or failed): it runs alone,
            # a warning that never fails the table.
            jobs.run("freshness check", names.freshness_job, tags)
        if outcome.ok and table.history and history.pending(cfg, table):  # whether or not the merge waits
            jobs.run("history", history_job_name(table), tags)
        if outcome.ok and publishing.pending(cfg, table):  # also catches up after a failed publish
            jobs.run("publish", publish_job_name(table), tags)
    except Exception as e:  # noqa: BLE001 - one failing table never stops the others
        outcome.ok = False
        outcome.error = root_cause_of_exception(e)
        outcome.retryable = retryable(e)
        if settings().debug:
            traceback.print_exc()
    if table.max_retained_wal_mb is not None:
        # whatever the run did or failed at: a capture that takes nothing is when its slot's WAL grows
        jobs.run("capture check", names.capture_check_job, tags)
    if outcome.over_quarantine:
        outcome.ok = False
        outcome.error = "; ".join(([outcome.error] if outcome.error else []) + outcome.over_quarantine)
    outcome.seconds = round(time.time() - t0, 1)
    record_run(cfg, table, outcome.ok, outcome.error)
    faults.point("run.table_done")
    return outcome


class Finished(NamedTuple):
    """How a table's cycle ended, as a worker process reports it."""
    ok: bool
    retryable: bool  # failed, and running it again may succeed


def run_in_processes(config_path: str, tables: list[str], processes: int, as_json: bool, build: Build, echo=None,
                     pool_wait: float = POOL_WAIT_SECONDS) -> list[Finished]:
    """The tables' cycles in `processes` worker processes, tables handed out one at a time as
    workers free up: each worker has its own Dagster definitions, instance (the configuration's one,
    defs/instance.py) and, when a step needs one, Spark session (or the configuration's Spark Connect server,
    which they then share). An incremental apply needs no Spark, so small batches of many tables
    proceed side by side. Lines go out (printed, or to `echo`) as each table finishes; returns how
    each ended. `build`: a module-level function (the workers are handed it by name) that makes the
    definitions of a configuration (defs/definitions.build_definitions)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: a fork would copy this process's JVM gateway and Dagster state into the workers
    with ProcessPoolExecutor(max_workers=min(processes, len(tables)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_run_one, config_path, name, as_json, build, pool_wait) for name in tables]
        results = []
        for future in as_completed(futures):
            lines, finished = future.result()
            for line in lines:
                print(line, flush=True) if echo is None else echo(line)
            results.append(finished)
        return results


def _run_one(config_path: str, table: str, as_json: bool, build: Build, pool_wait: float) -> tuple[list[str], Finished]:
    """One table's cycle in a worker process (run_in_processes): its output lines and how it ended."""
    from ..core.config import load_config

    stop_on_signals()  # a stopped worker also ends the run it executes and frees its pool
    from ..engine import spark

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    spark.announce = progress
    lines: list[str] = []
    outcomes = run_config(load_config(config_path), build, [table], echo=lines.append, as_json=as_json,
                          progress=progress, pool_wait=pool_wait)
    return lines, Finished(all(o.ok for o in outcomes), any(o.retryable for o in outcomes))


def run_config(cfg: Config, build: Build, only=None, echo=print, as_json=False, progress=None,
               pool_wait=POOL_WAIT_SECONDS) -> list[TableOutcome]:
    """`cdc-assets run` of the configuration's tables (those in `only`), one after another in this
    process: each table's line (or JSON object) goes to `echo` as it finishes."""
    from ..engine import spark

    defs = build(cfg)
    inst = open_instance(cfg.path)  # the UI's too: it shows these runs
    outcomes = []
    for table in cfg.tables:
        if only and table.name not in only:
            continue
        seen = len(spark.used)
        outcome = run_table(defs, inst, cfg, table, progress=progress, pool_wait=pool_wait)
        # Which Spark served the run, once, when a step first needed one.
        used = [f"spark: {d}" for d in spark.used[seen:]]
        if as_json:
            for line in used:
                print(line, file=sys.stderr, flush=True)
            lines = [json.dumps(outcome.to_json(), default=str)]
        else:
            lines = used + [summary_line(outcome)]
        for line in lines:
            echo(line, flush=True) if echo is print else echo(line)
        if outcome.warning and progress is not None:
            progress(f"{outcome.table}: warning: {outcome.warning}")
        if not outcome.ok and outcome.error and progress is not None:
            progress(f"{outcome.table}: FAILED: {outcome.error}")  # the cause also where errors go
        outcomes.append(outcome)
    return outcomes


def summary_line(o: TableOutcome) -> str:
    ch, tg = o.taken, o.applied
    parts = [f"{o.table}: {'ok' if o.ok else 'FAILED'}"]
    # a batch registered before (a replay of quarantined records, a batch a failed run left) is named too
    earlier = [b for b in o.ingested if b != o.new_batch]
    if o.new_batch:
        parts.append(f"new batch {o.new_batch}" + (f" ({o.taken_as})" if o.taken_as else ""))
    if o.warning:
        parts.append(f"warning: {o.warning}")
    elif not o.new_batch:
        parts.append(f"nothing new landed, batch {', '.join(earlier)} taken" if earlier else "nothing new landed")
    if ch:
        parts.append(f"{ch.records_read or 0} records, {ch.changes_new or 0} new changes, "
                     f"{ch.duplicates_skipped or 0} duplicates, {ch.quarantined or 0} quarantined")
        if ch.widened_to_text:  # allowed (rules.md#types), never silent: every reader now sees text there
            parts.append(f"warning: inferred column(s) {', '.join(map(repr, ch.widened_to_text))} widened to text "
                         f"(a value that is not a number; `widen_to_text: false` quarantines it instead)")
    if tg and not tg.nothing_new:
        parts.append(f"target {tg.rows} rows (+{tg.inserts} ~{tg.updates} -{tg.deletes}, {tg.stale_skipped} stale) "
                     f"v{tg.delta_version}" + (f" in {tg.seconds}s" if tg.seconds is not None else ""))
    if tg and tg.derived_partitions:  # a layout the user's partition pruning sees: said
        derived = ", ".join(repr(derived_column(c)) for c in tg.derived_partitions)
        parts.append(f"warning: partition column(s) {', '.join(map(repr, tg.derived_partitions))} received a value "
                     f"a Delta partition folder cannot stand for (an empty text, one too long for a folder name, "
                     f"or in a change-feed table one a folder name encodes): the target is partitioned by "
                     f"{derived} in their place now, the column(s) stored as data")
    if o.waiting:
        parts.append(o.waiting)
    hist = o.history
    if hist and not hist.nothing_new:
        parts.append(f"history {hist.rows} versions" + (
            f" (+{hist.versions_added})" if hist.versions_added is not None else f" ({hist.built})"))
    bq = o.published
    if bq and not bq.nothing_new:
        parts.append(f"published to BigQuery ({bq.mode}): {bq.rows_sent} rows sent, "
                     f"{bq.deletes_sent} deletes, {bq.rows_affected} rows changed")
    if o.checks:
        bad = [c for c, ok in o.checks.items() if not ok]
        parts.append(f"checks {len(o.checks) - len(bad)}/{len(o.checks)} passed" + (f" (failed: {', '.join(bad)})" if bad else ""))
    if o.error:
        parts.append(f"error: {o.error}")
    parts.append(f"{o.seconds}s")
    return "; ".join(parts)
