"""What a table's Dagster pool holds, and the reclaiming of what dead runs hold in it.

Each table's writer assets are in the pool `cdc_<TABLE>` (table_assets.py). A step enters the
pool's pending steps when it asks for a slot and holds a claimed slot while it runs; Dagster
removes both when the step ends. A process killed mid-run never ends its step, and with a pool
limit of 1 every later run of the table would wait for it forever. So each run records the
process executing it (`cdc/process`: host, pid and the process's start time, which tells a
reused pid apart), and a run that is not finished but whose process is gone from this host is
judged dead: the next run or sensor tick marks it failed and frees its pending and claimed
entries. A run whose process lives, or runs on another host, or carries no record, is left
alone: its slot is never taken from a live run.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import dagster as dg

PID_TAG = "cdc/process"  # host:pid:start of the process executing the run


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def process_tag() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or ''}"


def process_gone(tag: str | None) -> bool:
    """Whether the process a run's tag names is certainly gone (False when it cannot be judged here)."""
    host, pid, start = ((tag or "").split(":") + ["", "", ""])[:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's, or a run without the record: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process of that pid: compare the start times below
    return bool(start) and _start_time(int(pid)) not in (None, start)  # the pid now names another process


def mark_process(instance: dg.DagsterInstance, run_id: str) -> None:
    """Record this process as the one executing the run (the UI's and the sensor's runs record it
    when their run worker initializes its resources)."""
    run = instance.get_run_by_id(run_id)
    tag = process_tag()
    if run is not None and run.tags.get(PID_TAG) != tag:
        instance.add_run_tags(run_id, {PID_TAG: tag})


@dataclass(frozen=True)
class Holder:
    """A run with a step in the pool: running it (claimed) or waiting for a slot."""
    run_id: str
    step_key: str
    claimed: bool
    process: str | None  # the run's `cdc/process` record


def holders(instance: dg.DagsterInstance, pool: str) -> list[Holder]:
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    info = storage.get_concurrency_info(pool)
    claimed = {(s.run_id, s.step_key) for s in info.claimed_slots}
    entries = claimed | {(p.run_id, p.step_key) for p in info.pending_steps}
    runs = {r.run_id: r for r in instance.get_runs(dg.RunsFilter(run_ids=sorted({r for r, _ in entries})))} \
        if entries else {}
    return [Holder(run_id, step, (run_id, step) in claimed,
                   runs[run_id].tags.get(PID_TAG) if run_id in runs else None)
            for run_id, step in sorted(entries)]


def release_abandoned(instance: dg.DagsterInstance, pool: str) -> list[str]:
    """Free what finished runs and runs whose process died hold in the pool, pending steps and
    claimed slots alike, marking a dead run that is not finished as failed. Returns the runs freed."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    info = storage.get_concurrency_info(pool)
    released = []
    for run_id in sorted({s.run_id for s in info.claimed_slots} | {p.run_id for p in info.pending_steps}):
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            if not process_gone(run.tags.get(PID_TAG)):
                continue
            instance.report_run_failed(run, f"its process ({run.tags.get(PID_TAG)}) ended without finishing "
                                            f"it (killed?); its place in pool {pool} is freed")
        storage.free_concurrency_slots_for_run(run_id)
        released.append(run_id)
    return released
