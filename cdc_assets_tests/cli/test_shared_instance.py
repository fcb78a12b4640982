"""The Dagster instance `cdc-assets run` records into: the configuration's one (dagster_home beside
cdc.yaml, which `cdc-assets ui` opens too; cli/test_ui_runs.py finds the runs there through the UI),
or the user's $DAGSTER_HOME; several runs at once share it."""
from __future__ import annotations

import os
import subprocess

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRunStatus

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.warehouse import target_rows

TABLES = ("ORDERS", "ITEMS")


def _records(batch: int) -> list[dict]:
    return [{"id": i, "v": f"value-{batch}-{i}", "_CHANGE_TYPE": "UPSERT",
             "_CHANGE_SEQUENCE_NUMBER": format(batch * 100 + i, "x")} for i in range(3)]


def _setup(root):
    cfg = write_config(root, [{"name": t, "keys": ["id"], "format": "bigquery-cdc"} for t in TABLES])
    for t in TABLES:
        land(cfg, t, "batch-0001", {"part-0.jsonl": jsonl(_records(1))})
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "CDC_ASSETS_CONFIG", "CDC_ASSETS_CRASH_AT")}
    return cfg, env


def test_a_user_dagster_home_is_the_instance_run_records_into(tmp_path, cli):
    cfg, env = _setup(tmp_path)
    home = tmp_path / "elsewhere" / "home"
    ran = subprocess.run([*cli, "run", "--config", cfg.path, "--table", "ORDERS"], env={**env, "DAGSTER_HOME": str(home)},
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    runs = dg.DagsterInstance.from_config(str(home)).get_runs()
    assert [(r.job_name, r.status) for r in runs] == [("ORDERS_batch_job", DagsterRunStatus.SUCCESS)]
    assert not (tmp_path / "dagster_home").exists()  # no second instance beside cdc.yaml


def test_two_runs_at_once_on_a_new_configuration_share_its_instance(tmp_path, cli):
    """Both start before the instance exists: one makes it, and each table's batch is applied once,
    by whichever run takes it first, the other finding it done."""
    cfg, env = _setup(tmp_path)
    procs = [subprocess.Popen([*cli, "run", "--config", cfg.path], env=env, cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for cwd in (tmp_path, tmp_path / "landing")]
    outputs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, out + err
    for t in TABLES:
        assert sorted(r["v"] for r in target_rows(cfg, t)) == [f"value-1-{i}" for i in range(3)]
        # each table's batch was new to exactly one of the runs
        assert sum(f"{t}: ok; new batch b000001" in out for out, _ in outputs) == 1, outputs
    instance = dg.DagsterInstance.from_config(str(tmp_path / "dagster_home"))
    runs = instance.get_runs()
    assert runs and all(r.status == DagsterRunStatus.SUCCESS for r in runs), [(r.job_name, r.status) for r in runs]
    # each table's batch run, and an apply when one run found the batch staged by the other's
    assert {f"{t}_batch_job" for t in TABLES} <= {r.job_name for r in runs} <= \
        {f"{t}_{job}_job" for t in TABLES for job in ("batch", "ingest", "apply")}
    for t in TABLES:  # what a later run and the UI see: the target materialized
        assert instance.get_latest_materialization_event(dg.AssetKey([t, "target"])) is not None


def test_a_configuration_in_a_folder_the_run_may_not_write_says_to_set_dagster_home(tmp_path, cli):
    cfg, env = _setup(tmp_path)
    (tmp_path / "dagster_home").write_text("")  # a file where the instance's folder would be made
    ran = subprocess.run([*cli, "run", "--config", cfg.path], env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 1
    assert ran.stderr.strip().splitlines()[-1] == (
        f"cdc-assets run: the Dagster instance {tmp_path / 'dagster_home'} cannot be opened or made "
        "(File exists): set DAGSTER_HOME to a folder this process may write")
    home = tmp_path / "home"
    ran = subprocess.run([*cli, "run", "--config", cfg.path], env={**env, "DAGSTER_HOME": str(home)},
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_the_ui_with_no_folder_for_its_instance_says_to_set_dagster_home(tmp_path, cli):
    cfg, env = _setup(tmp_path)
    (tmp_path / "dagster_home").write_text("")  # a file where the instance's folder would be made
    ran = subprocess.run([*cli, "ui", "--no-spark", "--config", cfg.path], env=env, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 1
    assert ran.stderr.strip().splitlines()[-1] == (
        f"cdc-assets ui: the Dagster instance {tmp_path / 'dagster_home'} cannot be opened or made "
        "(File exists): set DAGSTER_HOME to a folder this process may write")
