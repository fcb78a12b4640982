"""The Dagster instance settings that make the per-table pools take turns, and their upkeep.

Each table's writer assets are in the pool `cdc_<TABLE>` (defs/table_assets.py). A
pool only limits anything once the instance gives it a limit: a new DAGSTER_HOME
gets `default_limit: 1`, so one writer step per table runs at a time across the
sensor's, the UI's and `cdc-assets run`'s runs, and different tables side by side.
"""
from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the `ui` command imports this module and needs no Dagster in its own process
    import dagster as dg

SETTINGS = """telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
"""

PID_TAG = "cdc/process"  # host:pid of the `cdc-assets run` process executing the run in-process


def ensure_settings(home: str) -> None:
    """Write dagster.yaml into a new DAGSTER_HOME; an existing one is the user's and stays."""
    os.makedirs(home, exist_ok=True)
    settings = os.path.join(home, "dagster.yaml")
    if not os.path.exists(settings):
        with open(settings, "w") as fh:
            fh.write(SETTINGS)


def run_tags() -> dict:
    return {PID_TAG: f"{socket.gethostname()}:{os.getpid()}"}


def _gone(tag: str | None) -> bool:
    host, _, pid = (tag or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # not ours to judge: another machine's, or launched by the UI or the sensor
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def release_abandoned(instance: dg.DagsterInstance, pool: str) -> list[str]:
    """Free the pool's slots held by in-process runs whose process died (killed mid-step).

    Dagster frees a slot when its step ends; a killed process never ends it, and every
    later run of the table would wait for that slot forever. Returns the runs released."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    released = []
    for run_id in {s.run_id for s in storage.get_concurrency_info(pool).claimed_slots}:
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished and not _gone(run.tags.get(PID_TAG)):
            continue
        if run is not None and not run.is_finished:
            instance.report_run_failed(run, "its process ended without finishing it (killed?)")
        storage.free_concurrency_slots_for_run(run_id)
        released.append(run_id)
    return released
