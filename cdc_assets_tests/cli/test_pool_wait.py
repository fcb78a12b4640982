"""`cdc-assets run` in a DAGSTER_HOME with the product's pool settings (limit 1 per table) never
waits forever: what a killed process left in the table's pool is freed by the next run; a live
run holding the pool is waited for, said on stderr with the run that holds it, and given up after
`--pool-wait` seconds (that table fails, the others go on); SIGTERM stops a waiting run at once,
and the next run finishes the batch. Each run has a generous timeout so that a hang fails the test
instead of blocking it."""
from __future__ import annotations

import os
import signal
import subprocess
import threading

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRunStatus

from cdc_assets.defs.pool_watch import ensure_settings
from cdc_assets_tests.cli.test_pools import Holder
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.warehouse import target_rows

HANG = 900  # seconds: far above what these runs take on a loaded machine, so only a hang reaches it


def _setup(tmp_path, tables=("T",)):
    (tmp_path / "landing").mkdir()
    cfg = write_config(tmp_path, [{"name": t, "keys": ["id"], "format": "datastream-json"} for t in tables])
    for t in tables:
        land(cfg, t, "batch-0001", {"part-0001.jsonl": jsonl(
            [mysql("INSERT", {"id": i, "v": f"value-{i}"}, 1, 100 + i) for i in range(3)])})
    home = str(tmp_path / "dagster_home")
    ensure_settings(home)
    env = dict(os.environ, DAGSTER_HOME=home)
    env.pop("CDC_ASSETS_CRASH_AT", None)
    return cfg, home, env


def _held(home: str, pool: str = "cdc_T") -> set:
    info = dg.DagsterInstance.from_config(home).event_log_storage.get_concurrency_info(pool)
    return {s.run_id for s in info.claimed_slots} | {p.run_id for p in info.pending_steps}


def test_a_run_after_killed_ones_takes_the_pool_they_left(tmp_path, cli):
    cfg, home, env = _setup(tmp_path)
    running, waiting = Holder(home, "T__changes"), Holder(home, "T__staging")
    running.kill()  # killed inside its step: a claimed slot and its pending step
    waiting.kill()  # killed while waiting for the slot: a pending step
    proc = subprocess.run(cli + ["run", "--config", cfg.path], env=env, capture_output=True, text=True,
                          timeout=HANG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(target_rows(cfg, "T")) == 3
    assert _held(home) == set()
    instance = dg.DagsterInstance.from_config(home)
    assert {instance.get_run_by_id(h.run_id).status for h in (running, waiting)} == {DagsterRunStatus.FAILURE}


def test_a_run_waiting_for_a_live_run_says_who_holds_the_pool_and_gives_up(tmp_path, cli):
    cfg, home, env = _setup(tmp_path, ("T", "U"))
    live = Holder(home, "T__target")
    try:
        proc = subprocess.run(cli + ["run", "--config", cfg.path, "--pool-wait", "3"], env=env,
                              capture_output=True, text=True, timeout=HANG)
        assert live.proc.poll() is None
        assert proc.returncode == 1
        assert f"T: waiting for pool cdc_T, held by run {live.run_id} (running step T__target" in proc.stderr
        (t_line,) = [line for line in proc.stdout.splitlines() if line.startswith("T:")]
        assert "FAILED" in t_line and f"gave up after waiting 3 s for pool cdc_T, held by run {live.run_id}" in t_line
        (u_line,) = [line for line in proc.stdout.splitlines() if line.startswith("U:")]
        assert u_line.startswith("U: ok")  # the other table goes on
        assert len(target_rows(cfg, "U")) == 3
        assert "value-" not in proc.stdout + proc.stderr  # no row value in what is said
        assert _held(home) == {live.run_id}  # the live run keeps its slot; the given-up run left nothing
    finally:
        live.end()
    # the holder is gone now: the next run frees its slot and applies the batch
    proc = subprocess.run(cli + ["run", "--config", cfg.path], env=env, capture_output=True, text=True, timeout=HANG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(target_rows(cfg, "T")) == 3


class Lines:
    """The lines a process writes on a pipe, read as they come by a thread of their own."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.came = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self.came:
                self.lines.append(line)
                self.came.notify_all()

    def wait_for(self, text: str, seconds: float) -> None:
        with self.came:
            if not self.came.wait_for(lambda: any(text in line for line in self.lines), timeout=seconds):
                raise AssertionError(f"no {text!r} on stderr; it said:\n{''.join(self.lines)}")

    def text(self) -> str:
        self.thread.join(timeout=HANG)
        return "".join(self.lines)


def test_sigterm_stops_a_run_waiting_for_its_pool_and_the_next_run_finishes(tmp_path, cli):
    cfg, home, env = _setup(tmp_path)
    live = Holder(home, "T__changes")
    try:
        proc = subprocess.Popen(cli + ["run", "--config", cfg.path], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            said = Lines(proc.stderr)
            said.wait_for("waiting for pool cdc_T", HANG)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=HANG) == 128 + signal.SIGTERM
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert "stopped by SIGTERM" in said.text()
        assert _held(home) == {live.run_id}  # the stopped run left nothing in the pool
        instance = dg.DagsterInstance.from_config(home)
        mine = [r for r in instance.get_runs() if r.run_id != live.run_id]
        assert mine and all(r.is_finished for r in mine)  # its Dagster run ended (canceled), not left started
    finally:
        live.end()
    proc = subprocess.run(cli + ["run", "--config", cfg.path], env=env, capture_output=True, text=True, timeout=HANG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(target_rows(cfg, "T")) == 3


def test_a_sensor_tick_frees_what_a_killed_run_left_in_the_pool(tmp_path):
    from cdc_assets.defs.definitions import build_definitions

    cfg, home, _ = _setup(tmp_path)
    running, waiting = Holder(home, "T__changes"), Holder(home, "T__staging")
    live = Holder(home, "T__target")
    try:
        running.kill()
        waiting.kill()
        instance = dg.DagsterInstance.from_config(home)
        defs = build_definitions(cfg)
        sensor = defs.resolve_sensor_def("T__landing_sensor")
        sensor.evaluate_tick(dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(),
                                                     definitions=defs))
        assert _held(home) == {live.run_id}  # the dead runs' places are free, the live one's kept
    finally:
        live.end()


def test_sigterm_inside_a_step_stops_the_run_and_the_next_run_finishes(tmp_path, cli):
    cfg, home, env = _setup(tmp_path)
    # SIGTERM arrives inside the ingest step, just after it committed the batch's changes
    stopping = {**env, "CDC_ASSETS_CRASH_AT": "changes.committed:TERM"}
    proc = subprocess.run(cli + ["run", "--config", cfg.path], env=stopping, capture_output=True, text=True,
                          timeout=HANG)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-2000:]
    assert "stopped by SIGTERM" in proc.stderr
    assert _held(home) == set()
    assert all(r.is_finished for r in dg.DagsterInstance.from_config(home).get_runs())
    proc = subprocess.run(cli + ["run", "--config", cfg.path], env=env, capture_output=True, text=True, timeout=HANG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(target_rows(cfg, "T")) == 3
