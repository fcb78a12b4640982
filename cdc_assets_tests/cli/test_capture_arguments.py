"""`cdc-assets capture ACTION`: its options and its tables in any order, as every other command takes
them (`capture enable --config cdc.yaml ORDERS`, `capture status ORDERS --config cdc.yaml`)."""
from __future__ import annotations

import pytest

from cdc_assets.cli.main import main
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.postgres_source import orders_table

ACTIONS = ("enable", "status", "check", "disable")


@pytest.mark.parametrize("action", ACTIONS)
def test_the_tables_after_the_options_reach_the_action(workdir, capsys, action):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"},
                                 {"name": "ITEMS", "keys": ["id"], "format": "bigquery-cdc"}])
    # ORDERS, named after --config, is the table the action refuses: no PostgreSQL source
    assert main(["capture", action, "--config", cfg.path, "ORDERS"]) == 2
    assert capsys.readouterr().err == f"cdc-assets: {cfg.path}: table ORDERS has no postgresql:// source\n"
    # names on both sides of an option are all the action's tables
    assert main(["capture", action, "NOPE", "--config", cfg.path, "NADA"]) == 2
    err = capsys.readouterr().err
    assert "no table 'NOPE'" in err and "no table 'NADA'" in err, err


def test_an_unknown_option_after_the_tables_is_still_refused(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    with pytest.raises(SystemExit) as stopped:
        main(["capture", "status", "--config", cfg.path, "ORDERS", "--frobnicate"])
    assert stopped.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::dagster.BetaWarning")
@pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")
def test_each_action_with_the_config_before_the_table_acts_on_a_postgresql_source(postgres_db, workdir, capsys):
    _, _, cfg = orders_table(postgres_db, workdir)
    assert main(["capture", "enable", "--config", cfg.path, "ORDERS"]) == 0
    assert capsys.readouterr().out.startswith("ORDERS: capture enabled; keys region, id; base snapshot of 0 rows")
    assert main(["capture", "status", "--config", cfg.path, "ORDERS"]) == 0
    assert capsys.readouterr().out == "ORDERS: 0 changes waiting\n"
    assert main(["capture", "check", "--config", cfg.path, "ORDERS"]) == 0
    assert capsys.readouterr().out == "ORDERS: no target yet: nothing to compare\n"
    assert main(["capture", "disable", "--config", cfg.path, "ORDERS"]) == 0
    assert capsys.readouterr().out.startswith("ORDERS: capture disabled; removed ")
    assert main(["capture", "status", "--config", cfg.path, "ORDERS"]) == 0
    assert capsys.readouterr().out == "ORDERS: capture not enabled\n"


@pytest.mark.parametrize("words", [["replay", "--config", "CFG", "NOPE"], ["--config", "CFG", "replay", "NOPE"],
                                   ["replay", "NOPE", "--config", "CFG"]])
def test_quarantine_replay_takes_its_table_on_either_side_of_its_options(workdir, capsys, words):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "bigquery-cdc"}])
    assert main(["quarantine", *[cfg.path if w == "CFG" else w for w in words]]) == 2
    # the table reached the command, which names it as unknown
    assert "no table 'NOPE'" in capsys.readouterr().err
