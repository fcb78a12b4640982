"""`cdc-assets run` refuses what it cannot do before doing anything: a `--table` that cdc.yaml does
not have exits 2 naming it and the tables there are, and no table is run. `status` says `none` for
a table that has applied nothing."""
from __future__ import annotations

import json
import os

import pytest

from cdc_assets.cli.main import main
from cdc_assets_tests.support.config import write_config


def test_run_with_a_table_the_config_does_not_have_exits_2_naming_it(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"},
                                 {"name": "ITEMS", "keys": ["id"], "format": "datastream-json"}])
    code = main(["run", "--config", cfg.path, "--table", "ORDERS", "--table", "NOPE"])
    out = capsys.readouterr()
    assert code == 2
    assert "no table 'NOPE'" in out.err and "tables: ORDERS, ITEMS" in out.err
    assert out.out == ""
    assert not os.path.exists(cfg.table_dir("ORDERS"))  # nothing ran, not even the table it does have


@pytest.mark.parametrize("command", ["maintain", "rekey"])
def test_maintain_and_rekey_with_tables_the_config_does_not_have_exit_2_naming_each(workdir, capsys, command):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"},
                                 {"name": "ITEMS", "keys": ["id"], "format": "datastream-json"}])
    code = main([command, "--config", cfg.path, "NOPE", "ORDERS", "GONE"])
    out = capsys.readouterr()
    assert code == 2
    assert "no table 'NOPE'" in out.err and "no table 'GONE'" in out.err and "tables: ORDERS, ITEMS" in out.err
    assert out.out == ""  # nothing done, not even for the table it does have


def test_status_of_a_table_that_applied_nothing_says_none_not_batch_minus_one(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    assert main(["status", "--config", cfg.path, "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["applied_through"], row["staged_through"], row["ingested_through"]) == (None, None, None)
    assert main(["status", "--config", cfg.path]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert line.split()[:3] == ["ORDERS", "0", "none"]  # table, batches, applied


def test_status_json_has_every_field_in_its_order_for_a_table_before_its_first_batch(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    assert main(["status", "--config", cfg.path, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert list(row) == [
        "table", "format", "batches", "last_batch", "ingested_through", "staged_through", "applied_through",
        "pending_files", "rows", "target_version", "last_run", "quarantined", "last_ordering_key", "last_change_at",
        "last_error", "target_files", "target_bytes", "versions_kept", "oldest_readable_version", "last_apply_at",
        "last_apply_batch", "last_maintenance_at", "apply_policy", "min_changes", "max_staleness_seconds",
        "retention_seconds", "trim_changes_after_seconds", "trim_staging_after_seconds", "changes_trimmed_through",
        "staging_trimmed_through", "pending_changes", "pending_batches", "oldest_pending_at",
        "oldest_pending_age_seconds", "apply_decision", "within_max_staleness", "soft_deleted_rows"]
    assert (row["table"], row["batches"], row["rows"], row["apply_policy"], row["pending_changes"]) == \
        ("ORDERS", 0, 0, "every batch", 0)


def test_version_names_the_installed_package(capsys):
    import importlib.metadata

    import pytest

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"cdc-assets {importlib.metadata.version('cdc_assets')}"


def test_a_landing_folder_that_does_not_exist_is_said_in_the_summary_not_hidden(workdir):
    from cdc_assets.defs.run_loop import summary_line
    from cdc_assets_tests.support.runs import run_table

    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    outcome = run_table(cfg, "ORDERS")
    assert outcome.ok  # the table's first files may simply not have arrived yet
    line = summary_line(outcome)
    assert f"ok; warning: landing folder {cfg.landing_dir('ORDERS')} does not exist (nothing taken)" in line
    assert "nothing new landed" not in line
    os.makedirs(cfg.landing_dir("ORDERS"))
    assert "nothing new landed" in summary_line(run_table(cfg, "ORDERS"))


def test_every_sub_command_describes_itself_and_each_of_its_options():
    import argparse

    from cdc_assets.cli.main import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == ["capture", "demo", "generate", "history", "init", "maintain", "quarantine", "read", "rekey",
                                  "restore", "run", "spark", "status", "ui"]
    for name, command in sub.choices.items():
        assert command.description, f"cdc-assets {name} --help has no description"
        undocumented = [a.dest for a in command._actions if not a.help and a.dest != "help"]
        assert undocumented == [], f"cdc-assets {name}: options without help: {undocumented}"


def test_run_json_prints_one_object_per_table_and_progress_goes_to_stderr(cli, workdir):
    """What a script reads (stdout: one JSON object per table) and what a person watching sees
    (stderr: Spark starting, each step of each table with its time)."""
    import subprocess

    from cdc_assets_tests.support.landing import jsonl, land
    from cdc_assets_tests.support.records import mysql

    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"},
                                 {"name": "ITEMS", "keys": ["id"], "format": "datastream-json",
                                  "apply": {"min_changes": 100}}])
    for table in ("ORDERS", "ITEMS"):
        land(cfg, table, "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": i, "v": "a"}, 1, i) for i in (1, 2)])})
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "SPARK_REMOTE")}
    env["CDC_ASSETS_LOCAL_BUILD_ROWS"] = "0"  # the first builds go to Spark, however small the tables
    p = subprocess.run(cli + ["run", "--config", cfg.path, "--json"], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {r["table"]: r for r in map(json.loads, p.stdout.splitlines())}
    assert sorted(rows) == ["ITEMS", "ORDERS"]
    assert rows["ORDERS"]["ok"] is True and rows["ORDERS"]["new_batch"] == "b000001"
    assert rows["ORDERS"]["figures"]["target"]["rows"] == 2 and rows["ORDERS"]["checks"]
    assert rows["ITEMS"]["waiting"] is None and rows["ITEMS"]["figures"]["target"]["rows"] == 2  # first build
    lines = p.stderr.splitlines()
    assert any(line.startswith("spark: starting an in-process Spark session") for line in lines)
    # one run per batch: it ingests the batch and applies it
    assert any(line.startswith("ORDERS: batch b000001 done in ") for line in lines)
    assert any(line.startswith("ITEMS: batch b000001 done in ") for line in lines)
    assert not any(": apply done in " in line for line in lines)


def test_run_parallel_runs_tables_side_by_side_in_processes_without_spark_for_small_batches(cli, spark, workdir):
    """The many-tables cycle of rules.md#changeset: many tables, a small batch each. After their
    first builds (one run, one after another), `run --parallel 3` takes the next batches in three
    processes: every table is applied, each line is printed once, and no process starts Spark, since
    an incremental apply of a small batch never needs it."""
    import subprocess

    from cdc_assets_tests.support.landing import jsonl, land
    from cdc_assets_tests.support.records import mysql
    from cdc_assets_tests.support.warehouse import target_rows

    names = ["T1", "T2", "T3", "T4"]
    cfg = write_config(workdir, [{"name": n, "keys": ["id"], "format": "datastream-json"} for n in names])
    for n in names:
        land(cfg, n, "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": i, "v": "a"}, 1, i) for i in (1, 2)])})
    assert main(["run", "--config", cfg.path]) == 0
    for n in names:
        land(cfg, n, "batch-2", {"p.jsonl": jsonl([mysql("UPDATE-INSERT", {"id": 1, "v": n}, 1, 10),
                                                  mysql("INSERT", {"id": 3, "v": n}, 1, 11)])})
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "SPARK_REMOTE")}
    p = subprocess.run(cli + ["run", "--config", cfg.path, "--json", "--parallel", "3"], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert sorted(r["table"] for r in rows) == names and all(r["ok"] and r["new_batch"] == "b000002" for r in rows)
    assert "spark: starting" not in p.stderr
    for n in names:
        assert sorted((r["id"], r["v"]) for r in target_rows(cfg, n)) == [(1, n), (2, "a"), (3, n)]

    bad = subprocess.run(cli + ["run", "--config", cfg.path, "--parallel", "0"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert bad.returncode == 2 and "'0' is not a number of processes" in bad.stderr


@pytest.mark.spark
def test_a_run_of_a_small_batch_loads_neither_spark_nor_google_clients(spark, workdir):
    """A small batch is taken, staged and merged without Spark, on a local warehouse without Google
    Cloud: the run's process does not pay for importing them (a second and more of a cold run)."""
    import subprocess
    import sys

    from cdc_assets_tests.support.landing import jsonl, land
    from cdc_assets_tests.support.records import mysql
    from cdc_assets_tests.support.runs import run_table

    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": i, "v": "a"}, 1, i) for i in range(5)])})
    assert run_table(cfg, "ORDERS").ok  # the first build is Spark's: in this process, with the test's session
    land(cfg, "ORDERS", "batch-2", {"p.jsonl": jsonl([mysql("UPDATE", {"id": 1, "v": "b"}, 2, 1)])})
    program = ("import json, sys\n"
               "from cdc_assets.cli.main import _command\n"
               f"status = _command(['run', '--config', {cfg.path!r}])\n"
               "print(json.dumps({'status': status, 'modules': sorted({m.split('.')[0] for m in sys.modules})}))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=workdir,
                          env={k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}, timeout=300)
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["status"] == 0, done.stdout + done.stderr
    assert "target 5 rows (+0 ~1 -0" in done.stdout  # the batch was merged
    heavy = {"pyspark", "dagster_pyspark", "dagster_spark", "google", "dagster_gcp", "grpc"}
    assert heavy & set(said["modules"]) == set()
