"""The instance settings that make a table's pool take turns, and the freeing of what a killed
process left in the pool: a step it was running (a claimed slot) and a step it was waiting with
(a pending step). Else every later run of the table waits forever."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from cdc_assets.defs.pool_watch import ensure_settings, run_tags
from cdc_assets.defs.pools import release_abandoned

POOL = "cdc_T"

# A process that starts a run of its own (tagged as `cdc-assets run` tags its runs), asks the
# pool (at the instance's default limit) for a slot for each step named, says what it got, and waits to be killed.
HOLDER = """
import json, sys, time
import dagster as dg
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from cdc_assets.defs.pool_watch import run_tags
instance = dg.DagsterInstance.from_config(sys.argv[1])
run = instance.add_run(DagsterRun(job_name="T_ingest_job", status=DagsterRunStatus.STARTED, tags=run_tags()))
instance.event_log_storage.initialize_concurrency_limit_to_default(sys.argv[2])  # as Dagster's executor does
got = {step: instance.event_log_storage.claim_concurrency_slot(sys.argv[2], run.run_id, step).is_claimed
       for step in sys.argv[3:]}
print(json.dumps({"run_id": run.run_id, "claimed": got}), flush=True)
time.sleep(3600)
"""


class Holder:
    """A real process holding the pool: killed (SIGKILL, no cleanup) or left alive."""

    def __init__(self, home: str, *steps: str, pool: str = POOL):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, home, pool, *steps], stdout=subprocess.PIPE,
                                     text=True)
        said = json.loads(self.proc.stdout.readline())
        self.run_id, self.claimed = said["run_id"], said["claimed"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def end(self) -> None:
        if self.proc.poll() is None:
            self.kill()


def _held(instance) -> tuple[set, set]:
    info = instance.event_log_storage.get_concurrency_info(POOL)
    return {s.run_id for s in info.claimed_slots}, {p.run_id for p in info.pending_steps}


def test_a_new_home_gets_the_pool_limit_and_an_existing_one_is_left_alone(tmp_path):
    ensure_settings(str(tmp_path / "new"))
    assert "default_limit: 1" in (tmp_path / "new" / "dagster.yaml").read_text()
    instance = dg.DagsterInstance.from_config(str(tmp_path / "new"))
    assert instance.global_op_concurrency_default_limit == 1

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    ensure_settings(str(tmp_path / "mine"))
    assert (tmp_path / "mine" / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def test_a_new_home_keeps_every_runs_events_in_one_database(tmp_path):
    """Dagster's default keeps each run's events in a database of its own, created and migrated by
    the run: a tenth of a second and more of every run's time. A new home gets one database for all."""
    home = tmp_path / "home"
    ensure_settings(str(home))
    instance = dg.DagsterInstance.from_config(str(home))

    @dg.asset(pool=POOL)
    def a() -> None:
        pass

    job = dg.Definitions(assets=[a], jobs=[dg.define_asset_job("j", selection=[a])]).resolve_job_def("j")
    runs = [job.execute_in_process(instance=instance).run_id for _ in range(2)]
    assert all(instance.all_logs(run_id) for run_id in runs)
    assert instance.get_latest_materialization_event(dg.AssetKey("a")).run_id == runs[-1]
    assert instance.event_log_storage.supports_global_concurrency_limits  # the pools still take turns
    created = {p.name for p in home.rglob("*.db")}
    assert not any(run_id in name for run_id in runs for name in created), created


def test_what_killed_processes_hold_is_freed_and_what_live_runs_hold_is_kept(tmp_path):
    home = str(tmp_path)
    ensure_settings(home)
    instance = dg.DagsterInstance.from_config(home)
    holders = []
    try:
        # pool limit 1 (the product's setting): the first takes the slot, the others wait in the queue
        running = Holder(home, "T__changes")  # killed inside its step: a claimed slot
        waiting = Holder(home, "T__staging")  # killed while it waited: a pending step
        alive = Holder(home, "T__target")  # a live run waiting behind them
        holders += [running, waiting, alive]
        assert (running.claimed, waiting.claimed, alive.claimed) == ({"T__changes": True}, {"T__staging": False},
                                                                     {"T__target": False})
        finished = instance.add_run(DagsterRun(job_name="T_apply_job", status=DagsterRunStatus.FAILURE))
        instance.event_log_storage.claim_concurrency_slot(POOL, finished.run_id, "T__target")  # queued as well
        launched = instance.add_run(DagsterRun(job_name="T_apply_job", status=DagsterRunStatus.STARTED))
        instance.event_log_storage.claim_concurrency_slot(POOL, launched.run_id, "T__target")  # no process record
        running.kill()
        waiting.kill()

        freed = release_abandoned(instance, POOL)

        assert sorted(freed) == sorted([running.run_id, waiting.run_id, finished.run_id])
        claimed, pending = _held(instance)
        assert claimed | pending == {alive.run_id, launched.run_id}  # a live run's place is never taken
        for dead in (running, waiting):
            assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == DagsterRunStatus.STARTED

        # the queue moves on: the slot the killed run held is handed to one of the live waiters
        info = instance.event_log_storage.get_concurrency_info(POOL)
        assert [p.run_id for p in info.pending_steps if p.assigned_timestamp] in ([alive.run_id], [launched.run_id])
    finally:
        for h in holders:
            h.end()


def test_a_reused_process_id_does_not_pass_for_the_dead_run(tmp_path):
    """A run's record names its process by host, pid and start time: another process that got the
    same pid later is not the run's."""
    from cdc_assets.defs.pools import PID_TAG, process_gone, process_tag

    host, pid, start = process_tag().split(":")
    assert not process_gone(process_tag())
    assert process_gone(f"{host}:{pid}:{int(start) + 1}")  # this pid, but a process started at another time
    assert not process_gone(f"another-{host}:{pid}:{start}")  # another machine's: not ours to judge
    assert not process_gone(None)
    assert run_tags() == {PID_TAG: process_tag()}
    assert os.getpid() == int(pid)


def test_a_run_waiting_for_its_pool_sleeps_between_looks(tmp_path):
    """A step waiting for its table's pool asks again after a back-off; in between its run sleeps.
    Dagster 1.13's executor computes that back-off as never above zero, so a waiting run turned a
    core in a loop: on a 2-core machine, half the machine for a run doing nothing."""
    import threading
    import time

    import cdc_assets.defs.table_assets  # noqa: F401 - what every process running the product's steps loads

    home = str(tmp_path)
    ensure_settings(home)
    instance = dg.DagsterInstance.from_config(home)

    @dg.asset(pool=POOL)
    def waits() -> None:
        pass

    job = dg.Definitions(assets=[waits], jobs=[dg.define_asset_job("j", selection=[waits])]).resolve_job_def("j")
    holder = Holder(home, "T__target")

    def end_holder() -> None:
        time.sleep(5)
        holder.kill()
        release_abandoned(instance, POOL)

    ender = threading.Thread(target=end_holder)
    try:
        wall, cpu = time.monotonic(), time.thread_time()
        ender.start()
        result = job.execute_in_process(instance=instance)
        wall, cpu = time.monotonic() - wall, time.thread_time() - cpu
    finally:
        ender.join()
        holder.end()
    assert result.success
    assert wall >= 5  # it did wait for the holder
    assert cpu < wall / 4, f"{cpu:.1f} CPU-s in {wall:.1f} s of waiting"


def test_a_later_steps_wait_for_the_pool_is_counted_from_its_own_first_ask(tmp_path):
    """`run --pool-wait` bounds each step's wait: a step that waited, got the slot and ran does not
    make the next step of the run give up at its first refused ask."""
    import time

    from cdc_assets.defs.pool_watch import PoolWatch

    home = str(tmp_path)
    ensure_settings(home)
    instance = dg.DagsterInstance.from_config(home)
    run = instance.add_run(DagsterRun(job_name="T_batch_job", status=DagsterRunStatus.STARTED, tags=run_tags()))
    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default(POOL)
    said: list[str] = []
    first = Holder(home, "T__target")
    second = None
    try:
        with PoolWatch(instance, "T", POOL, run.run_id, 1.0, said.append):
            assert not storage.claim_concurrency_slot(POOL, run.run_id, "T__changes").is_claimed
            time.sleep(1.5)  # the first step waits longer than the bound, which its next ask would end
            first.kill()
            release_abandoned(instance, POOL)
            assert storage.claim_concurrency_slot(POOL, run.run_id, "T__changes").is_claimed  # it runs
            storage.free_concurrency_slot_for_step(run.run_id, "T__changes")
            second = Holder(home, "T__target")  # another run takes the slot before the next step asks
            assert second.claimed == {"T__target": True}
            assert not storage.claim_concurrency_slot(POOL, run.run_id, "T__staging").is_claimed  # waits, not gives up
    finally:
        first.end()
        if second is not None:
            second.end()
    assert any("waiting for pool cdc_T" in line for line in said)
