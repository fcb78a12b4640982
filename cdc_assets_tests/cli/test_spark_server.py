"""`cdc-assets spark start`: runs use the configuration's long-lived Spark Connect server when it is
up, and fall back to an in-process session, saying so, when the recorded server is dead.

One real server serves the whole module (it takes 20-30 s to start) and is stopped at the end.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import dagster as dg
import pytest

from cdc_assets.cli.generate import write_feed
from cdc_assets.cli.main import main
from cdc_assets.engine import connect
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.ports import listeners
from cdc_assets_tests.support.runs import run_table
from cdc_assets_tests.support.warehouse import target_rows


def _config(root, table="T"):
    feed = write_feed(root / "feed", table, "mysql", changes=300, batches=1, seed=3)
    return write_config(root, [{"name": table, "keys": ["id"], "format": "datastream-json",
                                "reconcile_with": feed["export"]}], landing=str(root / "feed" / "landing"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A configuration whose Spark Connect server is up, started as `cdc-assets spark start` does."""
    root = tmp_path_factory.mktemp("served")
    cfg = _config(root)
    assert main(["spark", "start", "--config", cfg.path]) == 0
    try:
        yield cfg
    finally:
        main(["spark", "stop", "--config", cfg.path])
        server = connect.recorded(cfg)
        assert server is None


def test_the_server_listens_on_127_0_0_1_only_and_status_shows_it(served, capsys):
    server = connect.recorded(served)
    assert listeners(server.port) in ({"0100007F"}, {"0000000000000000FFFF00000100007F"})  # 127.0.0.1, v4 or v4-in-v6
    capsys.readouterr()
    assert main(["spark", "status", "--config", served.path]) == 0
    assert f"up at {server.url}" in capsys.readouterr().out


def test_a_run_uses_the_server_and_needs_no_spark_of_its_own(served, cli):
    # Java made unreachable: an in-process session cannot start, so the run succeeding proves the server served it.
    # CDC_ASSETS_LOCAL_BUILD_ROWS=0: the first build goes to Spark, however small the table
    env = {**os.environ, "JAVA_HOME": "/nonexistent", "CDC_ASSETS_LOCAL_BUILD_ROWS": "0"}
    env.pop("SPARK_REMOTE", None)
    proc = subprocess.run([*cli, "run", "--config", served.path], env=env, capture_output=True, text=True, timeout=600)
    server = connect.recorded(served)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"spark: Spark Connect server at {server.url} (pid {server.pid}, started {server.started_at})"
    assert lines[1].startswith("T: ok; new batch b000001") and "checks 4/4 passed" in lines[1], lines


def test_without_a_server_the_same_broken_java_fails_the_run(tmp_path, cli):
    # The counterpart of the test above: with nothing to serve it, the run needs its own Java.
    cfg = _config(tmp_path)
    env = {**os.environ, "JAVA_HOME": "/nonexistent", "CDC_ASSETS_LOCAL_BUILD_ROWS": "0"}
    env.pop("SPARK_REMOTE", None)
    proc = subprocess.run([*cli, "run", "--config", cfg.path], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "spark: in-process Spark session, master local[2]"
    assert "T: FAILED" in proc.stdout


def _run_log(instance: dg.DagsterInstance) -> list[str]:
    return [e.user_message for run in instance.get_runs() for e in instance.all_logs(run.run_id)]


def test_a_dead_server_recorded_as_up_falls_back_to_in_process_and_says_so(served, spark, tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")  # the first build goes to Spark, however small the table
    # The module's server is killed without `spark stop`, as a crash would: its record stays.
    cfg = _config(tmp_path)
    dead = connect.recorded(served)
    os.kill(dead.pid, signal.SIGKILL)
    while connect.unhealthy(dead) is None:
        time.sleep(0.1)
    os.makedirs(connect.state_dir(cfg))
    with open(os.path.join(connect.state_dir(cfg), "server.json"), "w") as fh:
        json.dump(dead.__dict__, fh)

    instance = dg.DagsterInstance.ephemeral()
    outcome = run_table(cfg, "T", instance)

    assert outcome.ok, outcome.error
    assert outcome.checks == {"batch_accounted": True, "quarantine_within_limit": True, "keys_unique": True,
                              "reconciles_with_source": True}
    assert len(target_rows(cfg, "T")) > 0
    log = _run_log(instance)
    assert any(f"({dead.url}) cannot serve this run: its process {dead.pid} is gone; "
               "using an in-process Spark session instead" in m for m in log), log
    assert "Spark: in-process Spark session, master local[2]" in log
    assert main(["spark", "status", "--config", served.path]) == 1
