"""The run launcher of the Dagster homes cdc-assets writes: each run in a process forked from a warm one.

Dagster's default launcher starts a new Python process per run (`dagster api execute_run`), which
imports Dagster, PyArrow, delta-rs and this package before the run's first step: 3-7 s on a small
machine, for a batch whose steps take about a second. This launcher starts, once per launching
process (the daemon's run queue), a multiprocessing fork server that has imported all that; each
run is then a process forked from it, executing the run as `dagster api execute_run` does. A run
still has a process of its own: its log capture, its signals and a crash stay its own, the UI shows
it as any run, `Terminate` interrupts it (SIGINT, as Dagster's run worker expects), and a dead
run's pool places are freed as before (defs/pools.py judges runs by the process they record).

The fork server imports modules, never the code location itself: each run loads the definitions
from the configuration as it is when the run starts, as a new process would. It also builds the
definitions of the configuration as it is when it starts (defs/warm.py), which a run then finds
made when the configuration has not changed: a run of one of 65 tables spent 0.5 CPU-s building
all 65 tables' definitions and their asset graph.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster._core.launcher import LaunchRunContext, RunLauncher
from dagster._serdes import ConfigurableClass, ConfigurableClassData

from . import dagster_fixes  # noqa: F401 - the daemon's and each run's storages: one engine per database

# What each run needs, imported once by the fork server (not the code location: see above): the
# engine and its libraries, Dagster's run worker, and the storages (SQLAlchemy, Alembic) an instance
# opens, which Dagster imports only when the first instance is made.
PRELOAD = ["pyarrow", "pyarrow.parquet", "deltalake", "cdc_assets.defs.definitions", "dagster._cli.api",
           "dagster._core.instance.factory", "dagster._core.storage.root", "dagster._core.storage.migration.utils",
           "dagster._core.storage.runs.sqlite", "dagster._core.storage.event_log.sqlite",
           "dagster._core.storage.schedules.sqlite", "dagster._core.storage.local_compute_log_manager",
           "alembic.command", "alembic.config", "alembic.runtime.migration", "alembic.script",
           "sqlalchemy.dialects.sqlite", "upath", "upath.core", "fsspec", "dagster._core.storage.legacy_storage",
           "dagster._utils.test", "deltalake.fs", "zstandard", "cdc_assets.defs.warm"]

PID_TAG = "cdc/run_worker_pid"  # the forked process executing the run, for Terminate

_server_lock = threading.Lock()
_context: list = []


def _fork_server():
    """The forkserver context of this process, its preload set before its server starts."""
    with _server_lock:
        if not _context:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _context.append(ctx)
        return _context[0]


def _execute(run_id: str, instance_ref) -> None:
    """In the forked process: the run, as `dagster api execute_run` executes it."""
    from dagster._cli.api import _execute_run_command_body

    signal.signal(signal.SIGINT, signal.default_int_handler)  # the fork server ignores it; Terminate sends it
    with dg.DagsterInstance.from_ref(instance_ref) as instance:
        _execute_run_command_body(run_id, instance, write_stream_fn=lambda _event: None,
                                  set_exit_code_on_failure=False)


class ForkedRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run in a process forked from a warm fork server (the module says why)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None):
        self._inst_data = inst_data
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]):
        return cls(inst_data=inst_data)

    def launch_run(self, context: LaunchRunContext) -> None:
        multiprocessing.active_children()  # reaps the processes of runs that have ended
        run = context.dagster_run
        proc = _fork_server().Process(target=_execute, args=(run.run_id, self._instance.get_ref()),
                                      name=f"dagster-run-{run.run_id}")
        proc.start()
        self._instance.add_run_tags(run.run_id, {PID_TAG: f"{proc.pid}"})

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        pid = (run.tags.get(PID_TAG) if run is not None else None) or ""
        if run is None or run.is_finished or not pid.isdigit():
            return False
        self._instance.report_run_canceling(run)
        try:
            os.kill(int(pid), signal.SIGINT)  # Dagster's run worker turns it into a canceled run
        except ProcessLookupError:
            return False
        return True

