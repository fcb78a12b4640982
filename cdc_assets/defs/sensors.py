"""The landing sensor: each new set of complete files becomes a batch and its runs.

Per tick it registers new files as a batch in the warehouse ledger and asks for the
run of the next batch not yet staged, which also applies it to target when the apply
is due (a target without partitions; a partitioned one has an ingest run, and the
apply once all are staged and the base snapshot, if any, is imported). Run keys make
each request once per batch and warehouse. What follows target and
changes (history, the BigQuery copy) is Declarative Automation's (defs/automation.py).
"""

import hashlib
import json
import os
import time
from typing import NamedTuple

import dagster as dg

from ..core.config import Config, TableConfig
from ..core.errors import TransientError
from ..core.plan import Ingest
from ..engine import delta, faults, sources
from ..engine import gcs as gcs_landing
from ..engine.errors import root_cause_of_exception
from ..engine.landing import Batch, ListingCursor, batches_path, register_new_batch, scan_landing
from ..engine.lock import table_lock
from ..engine.retry import on_conflict
from ..engine.table_layout import BASE, TARGET, path
from .due import batch_run_unfinished, due_now, held_reason
from .pools import release_abandoned
from .table_assets import APPLY_TAG, INCREMENTAL, TableNames, batch_partitions, target_partitions

# How long a tick waits for the table before leaving registration to a later tick.
TICK_LOCK_SECONDS = 5.0

# The least time between two ticks. The sensor daemon looks at its sensors every 5 s (a fixed
# loop in dagster._daemon.sensor) and ticks those whose last tick is at least this long ago: below
# the loop's 5 s, every look is a tick, so a landed file waits 2.5 s for its tick on average.
TICK_SECONDS = 4


def apply_request_tags(instance, table: TableConfig) -> dict | None:
    """Tags for an incremental apply run: the whole target partition range when partitioned."""
    tags = {APPLY_TAG: INCREMENTAL}
    parts = target_partitions(table)
    if parts is None:
        return tags
    keys = instance.get_dynamic_partitions(parts.name)
    if not keys:
        return None
    tags.update({"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    return tags


def run_key_scope(table_dir: str, name: str = "batches") -> str:
    """What makes a run key this warehouse's: the identity of its Delta table `name` (the table id),
    or of the table folder before it exists. A run key of table and batch alone would let the daemon
    drop a second warehouse's requests (same table names, same Dagster instance) as already launched."""
    found = delta.table_id(batches_path(table_dir) if name == "batches" else path(table_dir, name))
    if found is not None:
        return found.replace("-", "")[:12]
    where = table_dir if "://" in table_dir else os.path.realpath(table_dir)
    return hashlib.sha1(where.encode("utf-8")).hexdigest()[:12]


class Registration(NamedTuple):
    """What a tick's registration did: the batch it registered, whether another run held the table
    (nothing registered then), the listing cursor to keep (a gs:// landing's; None otherwise), and
    why the table's source could not be read (a server that did not answer), if it could not."""
    batch: Batch | None
    busy: bool
    cursor: str | None
    unavailable: str | None = None


def register_landed(cfg: Config, table: TableConfig, cursor: str | None, log, storage_client=None, bigquery=None,
                    lock_seconds: float = TICK_LOCK_SECONDS) -> Registration:
    """What a tick (the sensor's, or a cycle schedule's) does before deciding: the complete files no
    batch took become the next batch in the warehouse ledger.

    Dagster ends a tick after 60 s: a run holding the table (an apply can take minutes) is not waited
    for; what landed is registered by a later tick, the cursor left where it was."""
    table_dir = cfg.table_dir(table.name)
    landing = cfg.landing_dir(table.name)
    on_gcs = gcs_landing.is_gcs(landing)
    new, busy, unavailable = None, False, None
    try:
        with table_lock(table_dir, timeout=lock_seconds):
            if table.source:  # the source's new rows become an extract, then a batch like a landed file
                try:
                    sources.extract_new_rows(table, table_dir, bigquery)
                except TransientError as e:
                    # a source that does not answer loses nothing (it keeps what no extract took): the
                    # tick goes on with what is in the warehouse, and a later tick extracts
                    unavailable = root_cause_of_exception(e)
                    log.warning(unavailable)
            scan = scan_landing(landing, ListingCursor.from_json(cursor), time.time(), storage_client)
            for note in scan.notes:
                log.warning(f"table {table.name}: {note}")
            # a registration that loses a commit race (an object store, no lock) is re-run, not failed
            new = on_conflict(lambda: register_new_batch(landing, table_dir, scan.found, table.format),
                              f"{table.name}/batches", log.warning)
            cursor = scan.cursor.to_json() if on_gcs else None
    except TimeoutError:
        busy = True
    if new is not None:
        faults.point("sensor.batch_registered")  # in the ledger; no partition, no run request yet
    return Registration(new, busy, cursor, unavailable)


def plan_requests(instance, cfg: Config, table: TableConfig, new, busy: bool,
                  unavailable: str | None = None) -> tuple[list, list, str | None]:
    """The runs the ledger and the Delta tables call for now, as the sensor asks for them: (run
    requests, batch partitions the instance does not know yet, the skip reason when no run is due).
    The base import and the next batch's run are asked for together (core/plan.py). A batch's run
    applies what it stages when the apply is due (a target without partitions: the batch job); an
    apply is asked for on its own when one is due that no batch run did (the `apply:` policy made
    it wait, a failed batch held it, a restore, a partitioned target), and never while a batch run
    is unfinished: that run applies it."""
    names = TableNames(table.name)
    table_dir = cfg.table_dir(table.name)
    state, steps = due_now(instance, cfg, table, Ingest.NEXT)
    known = set(instance.get_dynamic_partitions(names.batches))
    missing = [Batch.id_for(seq) for seq in state.registered if Batch.id_for(seq) not in known]
    requests: list[dg.RunRequest] = []
    if steps.base_import:
        requests.append(dg.RunRequest(run_key=f"{table.name}:{run_key_scope(table_dir, BASE)}:base",
                                      job_name=names.base_job))
    batch_job = names.ingest_job if table.partition_by else names.batch_job
    for seq in steps.ingest:
        requests.append(dg.RunRequest(run_key=f"{table.name}:{run_key_scope(table_dir)}:{Batch.id_for(seq)}:ingest",
                                      job_name=batch_job, partition_key=Batch.id_for(seq)))
    in_flight = steps.apply and not table.partition_by and batch_run_unfinished(instance, table)
    if steps.apply and not in_flight:
        tags = apply_request_tags(instance, table)
        if tags is not None:
            scope = run_key_scope(table_dir, "batches" if state.registered else BASE)
            # the target's version too: after a restore the same batch is applied again
            target_version = delta.table_version(path(table_dir, TARGET))
            requests.append(dg.RunRequest(run_key=f"{table.name}:{scope}:apply:{state.reached}:v{target_version}",
                                          job_name=names.apply_job, tags=tags))
    # The history and the BigQuery copy follow by Declarative Automation (defs/automation.py).
    waits = held_reason(steps)
    skip_reason = None if requests else (
        unavailable if unavailable
        else f"{table.name} is busy (another run holds it): new files are registered by a later tick" if busy
        else f"{table.name}: a batch run is unfinished; it applies what it stages" if in_flight
        else f"{table.name}: {waits}" if waits
        else f"nothing new for {table.name}" + (f" (registered {new.id})" if new else ""))
    return requests, missing, skip_reason


class TableTick(NamedTuple):
    """What one tick decided for one table: its run requests, the batch partitions the instance
    does not know yet, why nothing runs (None when something does), the listing cursor to keep, and
    whether the table was settled (nothing landed or pending since a full look: nothing opened)."""
    requests: list
    missing: list
    skip_reason: str | None
    cursor: str | None
    settled: bool = False


def tick_table(context: dg.SensorEvaluationContext, cfg: Config, table: TableConfig, cursor: str | None,
               lock_seconds: float = TICK_LOCK_SECONDS) -> TableTick:
    """One table's part of a tick: register what landed, then ask for what is due."""
    # Nothing landed and nothing pending since a full look: no Delta table opened, no instance query.
    from ..engine.landing import settled
    if not table.source and settled(cfg.table_dir(table.name), cfg.landing_dir(table.name), bool(table.base_snapshot)):
        return TableTick([], [], f"nothing new for {table.name}", cursor, settled=True)
    # A run killed while it held the table's pool would keep every later run of the table
    # waiting: each tick frees what dead runs hold there (pools.py says how they are judged).
    freed = release_abandoned(context.instance, TableNames(table.name).pool)
    if freed:
        context.log.warning(f"{table.name}: freed pool {TableNames(table.name).pool} of dead runs "
                            f"{', '.join(freed)}")
    # On a gs:// landing a tick lists from its cursor on (engine/landing.py), by the client of
    # the `gcs` resource (dagster_gcp's GCSResource).
    on_gcs = gcs_landing.is_gcs(cfg.landing_dir(table.name))
    registered = register_landed(
        cfg, table, cursor, context.log, storage_client=context.resources.gcs if on_gcs else None,
        bigquery=context.resources.bigquery if table.reads_bigquery else None, lock_seconds=lock_seconds)
    requests, missing, skip_reason = plan_requests(context.instance, cfg, table, registered.batch, registered.busy,
                                                   registered.unavailable)
    return TableTick(requests, missing, skip_reason, registered.cursor)


def _resource_keys(cfg: Config, tables) -> set:
    return ({"gcs"} if any(gcs_landing.is_gcs(cfg.landing_dir(t.name)) for t in tables) else set()) \
        | ({"bigquery"} if any(t.reads_bigquery for t in tables) else set())


def landing_sensor(cfg: Config, table: TableConfig, jobs: list) -> dg.SensorDefinition:
    @dg.sensor(name=f"{table.name}__landing_sensor", minimum_interval_seconds=TICK_SECONDS, jobs=jobs,
               default_status=dg.DefaultSensorStatus.STOPPED,
               required_resource_keys=_resource_keys(cfg, [table]) or None,
               description=f"Watches {cfg.landing_dir(table.name)} for complete change files of {table.name}.")
    def sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        tick = tick_table(context, cfg, table, context.cursor)
        if tick.settled:
            return dg.SkipReason(tick.skip_reason)
        faults.point("sensor.before_result")  # requests decided, not yet handed to the daemon
        return dg.SensorResult(
            run_requests=tick.requests,
            dynamic_partitions_requests=[batch_partitions(table).build_add_request(tick.missing)]
            if tick.missing else [],
            skip_reason=tick.skip_reason,
            cursor=tick.cursor,
        )

    return sensor


ALL_TABLES_SENSOR = "all_tables__landing_sensor"


def all_tables_landing_sensor(cfg: Config, jobs: list) -> dg.SensorDefinition:
    """One sensor for every table of the configuration: a tick looks at each table as that table's
    own sensor would, and asks for the runs of all of them. For many tables it costs the daemon and
    the code server one tick where the tables' own sensors cost one per table (65 tables: 65 ticks
    every few seconds, each with Dagster's own cost around it). A table that another run holds is
    passed over at once and looked at again at the next tick, so that one busy table never holds
    up the others. Its requests have the run keys of the tables' own sensors: with both on, a batch
    still gets one run."""
    tables = list(cfg.tables)

    @dg.sensor(name=ALL_TABLES_SENSOR, minimum_interval_seconds=TICK_SECONDS, jobs=jobs,
               default_status=dg.DefaultSensorStatus.STOPPED,
               required_resource_keys=_resource_keys(cfg, tables) or None,
               description=f"Watches the landing folders of all {len(tables)} tables for complete change files: "
                           "one tick for all, where each table's own sensor ticks on its own.")
    def sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        cursors = json.loads(context.cursor) if context.cursor else {}
        requests, partitions, skips = [], [], []
        for table in tables:
            tick = tick_table(context, cfg, table, cursors.get(table.name), lock_seconds=0.0)
            requests += tick.requests
            if tick.missing:
                partitions.append(batch_partitions(table).build_add_request(tick.missing))
            if tick.skip_reason and not tick.requests:
                skips.append(tick.skip_reason)
            if tick.cursor is not None:
                cursors[table.name] = tick.cursor
        cursor = json.dumps(cursors, sort_keys=True) if cursors else None
        if not requests and not partitions and cursor == context.cursor:
            return dg.SkipReason(_skips(skips))
        faults.point("sensor.before_result")
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partitions,
                               skip_reason=None if requests else _skips(skips), cursor=cursor)

    return sensor


def _skips(reasons: list[str]) -> str:
    quiet = sum(1 for r in reasons if r.startswith("nothing new for "))
    said = [r for r in reasons if not r.startswith("nothing new for ")]
    return "; ".join(said + ([f"nothing new for {quiet} table(s)"] if quiet else [])) or "no tables"
