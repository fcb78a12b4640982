"""The Dagster instance settings that make the per-table pools take turns, and their upkeep.

Each table's writer assets are in the pool `cdc_<TABLE>` (defs/table_assets.py). A
pool only limits anything once the instance gives it a limit: a new DAGSTER_HOME
gets `default_limit: 1`, so one writer step per table runs at a time across the
sensor's, the UI's and `cdc-assets run`'s runs, and different tables side by side. The run queue
is looked at every second, and each run it launches is a process forked from a warm one
(defs/launcher.py), not a new interpreter; the sensors of many tables tick side by side.

A run this process executes waits for its table's pool in Dagster's executor; PoolWatch frees
what dead runs hold there, says who the run waits for, and bounds the wait. SIGTERM and SIGINT
end the process wherever it is (stop_on_signals): the steps are made to survive a kill at any
point, so a stop is a kill that also hands back the pool and ends its Dagster run.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from ..core.errors import TransientError

if TYPE_CHECKING:  # the `ui` command imports this module and needs no Dagster in its own process
    import dagster as dg

SETTINGS = """telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
run_launcher:
  module: cdc_assets.defs.launcher
  class: ForkedRunLauncher
sensors:
  use_threads: true
  num_workers: 4
"""

# The event log in one database beside the run storage's (history/event_log.db): Dagster's default
# creates and migrates a database per run, which costs each run a tenth of a second and more. The
# path is the home's own, written out: the setting is read without DAGSTER_HOME set too.
EVENT_LOG = """event_log_storage:
  module: dagster.core.storage.event_log
  class: ConsolidatedSqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""


def ensure_settings(home: str) -> None:
    """Write dagster.yaml into a new DAGSTER_HOME; an existing one is the user's and stays."""
    os.makedirs(home, exist_ok=True)
    settings = os.path.join(home, "dagster.yaml")
    if not os.path.exists(settings):
        # written whole under another name, then renamed: a process opening the home at the same
        # moment never reads half a file
        part = f"{settings}.{os.getpid()}.tmp"
        with open(part, "w") as fh:
            fh.write(SETTINGS + EVENT_LOG.format(base_dir=json.dumps(os.path.join(os.path.abspath(home), "history"))))
        os.replace(part, settings)


def run_tags() -> dict:
    """The tags of a run this process executes in-process: the process, so a later run can tell
    whether it died holding the table's pool (defs/pools.py)."""
    from .pools import PID_TAG, process_tag

    return {PID_TAG: process_tag()}


POOL_WAIT_SECONDS = 600.0  # `run --pool-wait`: how long a step waits for its table's pool


class PoolWaitExpired(TransientError):
    """Raised where the run's step asks for its pool once it has waited past the bound."""


class PoolWatch:
    """While a run of `table` executes in this process: each time its step is refused a slot in
    `pool`, frees what dead runs hold there, says once who the run waits for (`say`) and, once it
    has waited `limit` seconds, raises PoolWaitExpired from that ask. The raise comes out of
    Dagster's own call into the instance, in the executing thread, before the step has begun, so
    nothing of the run is done and no lock or connection is left half-way; `expired` holds the
    message for the table's line. Dagster asks again after a back-off of 1 s growing to 15 s, so
    the run gives up at most that much after the bound."""

    def __init__(self, instance: dg.DagsterInstance, table: str, pool: str, run_id: str, limit: float, say):
        self.instance, self.table, self.pool, self.run_id = instance, table, pool, run_id
        self.limit, self.say = limit, say
        self.expired: str | None = None
        self._since: float | None = None
        self._said = False
        self._storage = instance.event_log_storage

    def __enter__(self) -> PoolWatch:
        claim = self._storage.claim_concurrency_slot

        def watched_claim(concurrency_key, run_id, step_key, *args, **kwargs):
            status = claim(concurrency_key, run_id, step_key, *args, **kwargs)
            if run_id == self.run_id and concurrency_key == self.pool:
                if status.is_claimed:
                    self._since = None  # a step runs: a later step's wait is counted from its own first ask
                else:
                    self._refused()
            return status

        # The storage's own attribute, for this run only: the instance is this process's, and each
        # run of the process is watched in turn.
        self._storage.claim_concurrency_slot = watched_claim  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc) -> None:
        del self._storage.claim_concurrency_slot  # the class's method again
        if self.expired is not None:
            run = self.instance.get_run_by_id(self.run_id)
            if run is not None and not run.is_finished:
                self.instance.report_run_failed(run, self.expired)
            self.instance.event_log_storage.free_concurrency_slots_for_run(self.run_id)

    def _refused(self) -> None:
        from .pools import holders, release_abandoned

        now = time.monotonic()
        self._since = now if self._since is None else self._since
        try:
            release_abandoned(self.instance, self.pool)  # the next ask gets what a dead run held
            others = sorted((h for h in holders(self.instance, self.pool) if h.run_id != self.run_id),
                            key=lambda h: not h.claimed)
        except Exception as e:  # noqa: BLE001 - a failed look at the pool must not end the run
            self.say(f"{self.table}: could not read pool {self.pool}: {type(e).__name__}: {e}")
            return
        h = others[0] if others else None
        who = (f"run {h.run_id} ({'running' if h.claimed else 'waiting for'} step {h.step_key}, "
               f"process {h.process or 'not recorded'})") if h else "a run that has just ended"
        if not self._said and h is not None:
            self._said = True
            self.say(f"{self.table}: waiting for pool {self.pool}, held by {who}; "
                     f"giving up after {self.limit:g} s (run --pool-wait)")
        if now - self._since >= self.limit:
            self.expired = (f"gave up after waiting {self.limit:g} s for pool {self.pool}, held by {who}; "
                            "nothing of this run was done. A run whose process died is freed by the "
                            "next run; a live one frees the pool when it ends")
            raise PoolWaitExpired(self.expired)


_executing: list = []  # (instance, run_id) of the Dagster run this process executes now


class Executing:
    """Marks the Dagster run this process executes, so that a stop can end it and free its pool."""

    def __init__(self, instance: dg.DagsterInstance, run_id: str):
        self.entry = (instance, run_id)

    def __enter__(self) -> None:
        _executing.append(self.entry)

    def __exit__(self, *exc) -> None:
        _executing.remove(self.entry)


def _end_executing_runs(reason: str) -> None:
    for instance, run_id in list(_executing):
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            instance.report_run_canceled(run, reason)
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)


_stopping: list = []


def stop_on_signals() -> None:
    """SIGTERM and SIGINT end this process promptly wherever it is: waiting for a pool, inside a
    step (a Spark job, a Delta write) or between tables. Every step survives a kill at any point
    (the next run finishes what it began), so a stop is a kill that also cancels the Dagster run
    it was executing, frees that run's place in its pool and ends `--parallel`'s workers; the exit
    status is 128 + the signal's number.

    A thread of its own acts on the signal, woken by the byte the interpreter writes for it
    (signal.set_wakeup_fd): Dagster's executor replaces the handlers during a run and only notes a
    signal until a step begins, so a run waiting for its pool never stopped. (Blocking the signals
    instead would pass the block on to child processes, which Dagster stops by SIGINT.)"""
    if _stopping or threading.current_thread() is not threading.main_thread():
        return
    wanted = {signal.SIGINT, signal.SIGTERM}
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
    for signo in wanted:
        signal.signal(signo, lambda *_: None)  # the thread below acts; a handler makes the wake-up byte

    def wait() -> None:
        signo = 0
        while signo not in wanted:
            signo = os.read(wake, 1)[0]
        name = signal.Signals(signo).name
        print(f"cdc-assets: stopped by {name}; the next run finishes what this one began", file=sys.stderr,
              flush=True)
        try:
            import multiprocessing

            for child in multiprocessing.active_children():
                child.terminate()
            _end_executing_runs(f"stopped by {name}")
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signo)

    thread = threading.Thread(target=wait, name="cdc-stop", daemon=True)
    thread.start()
    _stopping.append(thread)
