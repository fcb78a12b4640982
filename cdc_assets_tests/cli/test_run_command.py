"""`cdc-assets run` refuses what it cannot do before doing anything: a `--table` that cdc.yaml does
not have exits 2 naming it and the tables there are, and no table is run. `status` says `none` for
a table that has applied nothing."""
from __future__ import annotations

import json
import os

from cdc_assets.cli.main import main
from cdc_assets_tests.helpers import write_config


def test_run_with_a_table_the_config_does_not_have_exits_2_naming_it(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"},
                                 {"name": "ITEMS", "keys": ["id"], "format": "datastream-json"}])
    code = main(["run", "--config", cfg.path, "--table", "ORDERS", "--table", "NOPE"])
    out = capsys.readouterr()
    assert code == 2
    assert "no table 'NOPE'" in out.err and "tables: ORDERS, ITEMS" in out.err
    assert out.out == ""
    assert not os.path.exists(cfg.table_dir("ORDERS"))  # nothing ran, not even the table it does have


def test_status_of_a_table_that_applied_nothing_says_none_not_batch_minus_one(workdir, capsys):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}])
    assert main(["status", "--config", cfg.path, "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["applied_through"], row["staged_through"], row["ingested_through"]) == (None, None, None)
    assert main(["status", "--config", cfg.path]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert line.split()[:3] == ["ORDERS", "0", "none"]  # table, batches, applied
