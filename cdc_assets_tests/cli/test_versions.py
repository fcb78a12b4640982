"""`cdc-assets history` lists a target's versions with the batch each reached; `cdc-assets
restore` puts the target back to one of them, and the next run re-applies the later batches
from staging, so the target ends where it was and nothing is lost."""
from __future__ import annotations

import json

import pytest

from cdc_assets.cli.main import main
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.warehouse import target_rows, target_version, values

pytestmark = MARKS

BATCHES = [
    [mysql("INSERT", {"id": i, "v": "a"}, 1, i) for i in (1, 2, 3)],
    [mysql("UPDATE", {"id": 1, "v": "b"}, 1, 10), mysql("DELETE", {"id": 2, "v": "a"}, 1, 11)],
    [mysql("INSERT", {"id": 4, "v": "a"}, 1, 20), mysql("UPDATE", {"id": 3, "v": "c"}, 1, 21)],
]
AFTER = [{1: "a", 2: "a", 3: "a"}, {1: "b", 3: "a"}, {1: "b", 3: "c", 4: "a"}]


def history(cfg, capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["history", "ORDERS", "--config", cfg.path, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_restore_puts_a_version_back_and_the_next_run_reapplies_the_later_batches(spark, workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    for n, batch in enumerate(BATCHES, 1):
        land(cfg, "ORDERS", f"batch-{n}", {"p.jsonl": jsonl(batch)})
        run_ok(cfg, "ORDERS")
    versions = history(cfg, capsys)
    assert [(v["version"], v["kind"], v["batch"]) for v in versions] == [
        (0, "first build", 1), (1, "apply", 2), (2, "apply", 3)]
    assert (versions[1]["from_batch"], versions[1]["rows_updated"], versions[1]["rows_deleted"]) == (2, 1, 1)
    assert versions[2]["rows_inserted"] == 1 and versions[2]["rows_updated"] == 1

    # the first version back: the deleted key 2 is there again, as it was
    assert main(["restore", "ORDERS", "--config", cfg.path, "--version", "0"]) == 0
    assert "target version 0 restored as version 3 (batch 1" in capsys.readouterr().out
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == AFTER[0]
    restored = history(cfg, capsys)[-1]
    assert (restored["version"], restored["kind"], restored["batch"], restored["restored_from"]) == (3, "restore", 1, 0)

    # nothing new landed, and the next run applies batches 2 and 3 again from staging
    out = run_ok(cfg, "ORDERS")
    assert out.figures["target"]["applied_batch"] == 3
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == AFTER[2]
    assert history(cfg, capsys)[-1]["batch"] == 3

    # --as-of: the newest version committed by then (version 1's own time gives version 1)
    at = history(cfg, capsys)[1]["committed_at"]
    assert main(["restore", "ORDERS", "--config", cfg.path, "--as-of", at]) == 0
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == AFTER[1]
    assert history(cfg, capsys)[-1]["restored_from"] == 1
    run_ok(cfg, "ORDERS")
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == AFTER[2]

    # the current version again: nothing to do, no commit
    latest = target_version(cfg, "ORDERS")
    capsys.readouterr()
    assert main(["restore", "ORDERS", "--config", cfg.path, "--version", str(latest)]) == 0
    assert "nothing restored" in capsys.readouterr().out and target_version(cfg, "ORDERS") == latest

    # the text listing: a header and one line per version
    assert main(["history", "ORDERS", "--config", cfg.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["version", "committed", "(UTC)"] and len(lines) == 1 + latest + 1


@pytest.mark.parametrize("args, message", [
    (["--version", "7"], "table ORDERS: the target has no version 7 (it has 0..0)"),
    (["--as-of", "2020-01-01T00:00:00Z"], "table ORDERS: no target version was committed by 2020-01-01T00:00:00+00:00"),
    (["--as-of", "2030-01-01T00:00:00"], "has no time zone"),
])
def test_a_restore_that_cannot_be_done_exits_2_saying_why(spark, workdir, capsys, args, message):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "ORDERS", "batch-1", {"p.jsonl": jsonl(BATCHES[0])})
    run_ok(cfg, "ORDERS")
    capsys.readouterr()
    assert main(["restore", "ORDERS", "--config", cfg.path, *args]) == 2
    assert message in capsys.readouterr().err
    assert target_version(cfg, "ORDERS") == 0


def test_history_and_restore_name_the_tables_there_are(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    assert main(["history", "NOPE", "--config", cfg.path]) == 2
    assert "no table 'NOPE' (tables: ORDERS)" in capsys.readouterr().err
    assert main(["restore", "ORDERS", "--config", cfg.path, "--version", "0"]) == 2
    assert "no target to restore" in capsys.readouterr().err
    assert main(["history", "ORDERS", "--config", cfg.path]) == 0
    assert "no target yet" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["restore", "ORDERS", "--config", cfg.path, "--as-of", "yesterday"])
    assert "not an ISO 8601 time: 'yesterday'" in capsys.readouterr().err


def test_the_restore_job_does_from_the_ui_what_the_command_does(spark, workdir):
    import dagster as dg

    from cdc_assets.defs.definitions import build_definitions

    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    for n, batch in enumerate(BATCHES[:2], 1):
        land(cfg, "ORDERS", f"batch-{n}", {"p.jsonl": jsonl(batch)})
        run_ok(cfg, "ORDERS")
    job = build_definitions(cfg).resolve_job_def("ORDERS_restore_job")
    result = job.execute_in_process(instance=dg.DagsterInstance.ephemeral(),
                                    run_config={"ops": {"ORDERS__restore": {"config": {"version": 0}}}})
    assert result.success
    [observation] = [e.event_specific_data.asset_observation for e in result.all_events
                     if e.event_type_value == "ASSET_OBSERVATION"]
    assert observation.metadata["restored_from_version"].value == 0 and observation.metadata["batch"].value == 1
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == AFTER[0]
    failed = job.execute_in_process(instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                                    run_config={"ops": {"ORDERS__restore": {"config": {}}}})
    assert not failed.success  # neither a version nor a time: nothing restored
    run_ok(cfg, "ORDERS")
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == AFTER[1]
