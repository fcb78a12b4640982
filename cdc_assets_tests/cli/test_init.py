"""`cdc-assets init DIR`: a new user's folder runs as written, and an existing project is never overwritten."""
from __future__ import annotations

import json
import os

from deltalake import DeltaTable

from cdc_assets.cli.main import main
from cdc_assets_tests.support.landing import jsonl
from cdc_assets_tests.support.records import mysql


def test_an_initialised_folder_takes_a_landed_file_into_its_target(tmp_path, capsys):
    project = tmp_path / "project"
    assert main(["init", str(project)]) == 0
    assert sorted(os.listdir(project)) == ["cdc.yaml", "landing", "workspace.yaml"]
    assert "module_name: cdc_assets.definitions" in (project / "workspace.yaml").read_text()
    batch = project / "landing" / "ORDERS" / "batch-0001"
    batch.mkdir()
    (batch / "part-1.jsonl").write_text(jsonl([mysql("INSERT", {"order_id": 7, "status": "open"}, 1, 1),
                                               mysql("INSERT", {"order_id": 8, "status": "open"}, 1, 2),
                                               mysql("DELETE", {"order_id": 8, "status": "open"}, 1, 3)]))
    capsys.readouterr()
    assert main(["run", "--config", str(project / "cdc.yaml"), "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out.splitlines()[0])
    assert outcome["ok"] and outcome["new_batch"]
    target = DeltaTable(str(project / "warehouse" / "ORDERS" / "target")).to_pyarrow_table()
    assert target["order_id"].to_pylist() == [7]


def test_init_writes_nothing_into_a_folder_that_has_a_cdc_yaml(tmp_path, capsys):
    (tmp_path / "cdc.yaml").write_text("# mine\n")
    assert main(["init", str(tmp_path)]) == 2
    assert "already has cdc.yaml" in capsys.readouterr().err
    assert (tmp_path / "cdc.yaml").read_text() == "# mine\n"
    assert sorted(os.listdir(tmp_path)) == ["cdc.yaml"]
