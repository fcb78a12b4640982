"""The runs of `cdc-assets ui`: with a table's landing sensor on, a landed file reaches the target
through the daemon, each run executed in a process forked from a warm one (not a new interpreter),
shown in the UI's run history with its materializations and checks; Terminate stops such a run.
The runs of `cdc-assets run` show in the UI too: both use the configuration's one instance."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from cdc_assets.defs.launcher import PID_TAG, ForkedRunLauncher
from cdc_assets.defs.pool_watch import ensure_settings
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.ports import free_port, listeners
from cdc_assets_tests.support.warehouse import target_rows

TABLE = "ORDERS"
RECORDS = [{"id": i, "status": "new", "_CHANGE_TYPE": "UPSERT", "_CHANGE_SEQUENCE_NUMBER": str(i)} for i in range(3)]


def _wait(what: str, ready, proc: subprocess.Popen, seconds: float = 300.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        assert proc.poll() is None, "cdc-assets ui exited"
        value = ready()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {seconds:g} s")


def _target_ids(cfg) -> set:
    try:
        return {r["id"] for r in target_rows(cfg, TABLE)}
    except Exception:  # noqa: BLE001 - no target yet
        return set()


def test_a_landed_file_reaches_the_target_through_the_ui_in_forked_runs_the_ui_shows(tmp_path, cli):
    cfg = write_config(tmp_path, [{"name": TABLE, "keys": ["id"], "format": "bigquery-cdc"}])
    home = str(tmp_path / "dagster_home")
    env = dict(os.environ, DAGSTER_HOME=home, CDC_ASSETS_CONFIG=cfg.path)
    port = free_port()
    proc = subprocess.Popen([*cli, "ui", "--config", cfg.path, "--port", str(port), "--no-spark"], cwd=tmp_path,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait("the UI listening", lambda: listeners(port), proc)
        dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
        subprocess.run([dagster, "sensor", "start", f"{TABLE}__landing_sensor", "-m", "cdc_assets.definitions"],
                       env=env, cwd=tmp_path, check=True, capture_output=True)
        land(cfg, TABLE, "batch-0001", {"part-0.jsonl": jsonl(RECORDS)})
        _wait("the landed rows in the target", lambda: _target_ids(cfg) == {0, 1, 2}, proc)
        instance = dg.DagsterInstance.from_config(home)
        runs = _wait("the batch's runs finished",
                     lambda: [r for r in instance.get_runs() if r.is_finished] if all(
                         r.is_finished for r in instance.get_runs()) else None, proc)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(120)
    # one run for the landed file: its changes, staging and target
    assert [r.job_name for r in runs] == [f"{TABLE}_batch_job"]
    for run in runs:
        assert run.status == DagsterRunStatus.SUCCESS, run.job_name
        # the process that executed the run is the one the launcher forked (its pid recorded at launch)
        started = [e.message for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
                   if e.message and e.message.startswith("Started process for run")]
        assert [re.search(r"pid: (\d+)", m).group(1) for m in started] == [run.tags[PID_TAG]], started
    events = [e for r in runs for e in instance.all_logs(r.run_id)]
    materialized = {e.dagster_event.asset_key.to_user_string() for e in events
                    if e.dagster_event_type == dg.DagsterEventType.ASSET_MATERIALIZATION}
    assert {f"{TABLE}/changes", f"{TABLE}/staging", f"{TABLE}/target"} <= materialized, materialized
    checks = [e for e in events if e.dagster_event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION]
    assert checks and all(e.dagster_event.event_specific_data.passed for e in checks)


def test_terminate_interrupts_the_forked_process_of_a_run(tmp_path):
    home = str(tmp_path)
    ensure_settings(home)
    instance = dg.DagsterInstance.from_config(home)
    assert isinstance(instance.run_launcher, ForkedRunLauncher)
    # a stand-in for a run's forked process: it reports the interrupt Dagster's run worker gets
    worker = subprocess.Popen([sys.executable, "-c", "import time\nprint('ready', flush=True)\ntry:\n"
                               "    time.sleep(600)\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)"],
                              stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "ready"
    run = instance.add_run(DagsterRun(job_name=f"{TABLE}_apply_job", status=DagsterRunStatus.STARTED,
                                      tags={PID_TAG: str(worker.pid)}))
    assert instance.run_launcher.terminate(run.run_id)
    assert worker.stdout.readline().strip() == "interrupted"
    worker.wait(60)
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELING
    assert not instance.run_launcher.terminate(run.run_id)  # its process is gone


RUNS = "{ runsOrError { ... on Runs { results { runId jobName status } } } }"
ASSET = """query($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { ... on AssetNode {
  assetMaterializations(limit: 1) { runId }
  assetChecksOrError { ... on AssetChecks { checks { name
    executionForLatestMaterialization { runId status evaluation { success } } } } } } } }"""


def _graphql(port: int, query: str, **variables) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", method="POST",
                                     data=json.dumps({"query": query, "variables": variables}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())["data"]


def _target(port: int) -> dict | None:
    """The target's node in the UI, once its code location has loaded (None before)."""
    try:
        node = _graphql(port, ASSET, path=[TABLE, "target"])["assetNodeOrError"]
    except OSError:  # the webserver not answering yet
        return None
    return node if node and "assetMaterializations" in node else None


def test_the_ui_started_elsewhere_shows_the_runs_of_cdc_assets_run_with_materializations_and_checks(tmp_path, cli):
    """Neither command is told an instance: `run` from one folder and `ui` from another, each given
    cdc.yaml by a relative path, meet in the configuration's instance."""
    project, here, there = tmp_path / "project", tmp_path / "here", tmp_path / "there"
    for folder in (project, here, there):
        folder.mkdir()
    cfg = write_config(project, [{"name": TABLE, "keys": ["id"], "format": "bigquery-cdc"}])
    land(cfg, TABLE, "batch-0001", {"part-0.jsonl": jsonl(RECORDS)})
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "CDC_ASSETS_CONFIG")}
    ran = subprocess.run([*cli, "run", "--config", "../project/cdc.yaml"], cwd=here, env=env,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.startswith(f"{TABLE}: ok; new batch"), ran.stdout

    port = free_port()
    proc = subprocess.Popen([*cli, "ui", "--config", "../project/cdc.yaml", "--port", str(port), "--no-spark"],
                            cwd=there, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        first = _wait("the target's asset in the UI", lambda: _target(port), proc)
        first_runs = _graphql(port, RUNS)["runsOrError"]["results"]
        # a second batch, run while the UI and its daemon have the instance open
        land(cfg, TABLE, "batch-0002", {"part-0.jsonl": jsonl(RECORDS)})
        ran = subprocess.run([*cli, "run", "--config", "../project/cdc.yaml"], cwd=here, env=env,
                             capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        second = _target(port)
        second_runs = _graphql(port, RUNS)["runsOrError"]["results"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(120)
    # the batch's one run, as `run` executed it
    assert [(r["jobName"], r["status"]) for r in first_runs] == [(f"{TABLE}_batch_job", "SUCCESS")]
    _shows_the_run(first, {first_runs[0]["runId"]})
    # the UI lists the newest runs first: the second `run`'s, then the first's
    assert second_runs[-1] == first_runs[0]
    added = second_runs[:-1]
    assert added and all(r["status"] == "SUCCESS" for r in added), added
    _shows_the_run(second, {r["runId"] for r in added})


def _shows_the_run(target: dict, run_ids: set[str]) -> None:
    """The target's latest materialization is by one of `run_ids`, each of its checks' results by the same run."""
    (run_id,) = [m["runId"] for m in target["assetMaterializations"]]
    assert run_id in run_ids
    checks = target["assetChecksOrError"]["checks"]
    assert checks, "the target has checks"
    for check in checks:
        execution = check["executionForLatestMaterialization"]
        assert execution is not None, f"{check['name']}: no result in the UI"
        assert (execution["runId"], execution["status"], execution["evaluation"]["success"]) == \
            (run_id, "SUCCEEDED", True), check["name"]
