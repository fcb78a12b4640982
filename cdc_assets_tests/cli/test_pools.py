"""The instance settings that make a table's pool take turns, and the release of a slot
that a killed `cdc-assets run` left claimed (else the table's later runs wait forever)."""
from __future__ import annotations

import subprocess
import sys

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from cdc_assets.cli.pools import PID_TAG, ensure_settings, release_abandoned, run_tags

POOL = "cdc_T"


def _run(instance, tags: dict, status=DagsterRunStatus.STARTED) -> str:
    run = instance.add_run(DagsterRun(job_name="T_apply_job", status=status, tags=tags))
    assert instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, "T__target").is_claimed
    return run.run_id


def test_a_new_home_gets_the_pool_limit_and_an_existing_one_is_left_alone(tmp_path):
    ensure_settings(str(tmp_path / "new"))
    assert "default_limit: 1" in (tmp_path / "new" / "dagster.yaml").read_text()
    instance = dg.DagsterInstance.from_config(str(tmp_path / "new"))
    assert instance.global_op_concurrency_default_limit == 1

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    ensure_settings(str(tmp_path / "mine"))
    assert (tmp_path / "mine" / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def test_only_slots_of_dead_or_finished_runs_are_released(tmp_path):
    ensure_settings(str(tmp_path))
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    instance.event_log_storage.set_concurrency_slots(POOL, 4)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = run_tags()[PID_TAG].rpartition(":")[0]

    killed = _run(instance, {PID_TAG: f"{host}:{gone.stdout.strip()}"})
    finished = _run(instance, {}, status=DagsterRunStatus.FAILURE)
    alive = _run(instance, run_tags())  # this process: still running
    launched = _run(instance, {})  # by the UI or the sensor: the daemon's to judge

    assert sorted(release_abandoned(instance, POOL)) == sorted([killed, finished])
    held = {s.run_id for s in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots}
    assert held == {alive, launched}
    assert instance.get_run_by_id(killed).status == DagsterRunStatus.FAILURE
