"""`cdc-assets run` refuses what it cannot do before doing anything: a `--table` that cdc.yaml does
not have exits 2 naming it and the tables there are, and no table is run."""
from __future__ import annotations

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
