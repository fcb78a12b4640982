"""cdc_assets inside a user's own Dagster project: `dg scaffold defs` writes the component's `defs.yaml`
and a starter `cdc.yaml`, `dg check defs` loads it, and its landing sensor's runs bring a landed file
into the target; and `cdc_definitions` merges into a project's own `Definitions`, as the docs show."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
from deltalake import DeltaTable

from cdc_assets.core.starter import STARTER_CONFIG
from cdc_assets_tests.support.landing import jsonl
from cdc_assets_tests.support.records import mysql

REPO = Path(__file__).resolve().parents[2]
PROJECT_TOML = """\
[project]
name = "my_project"
version = "0.1.0"
requires-python = ">=3.11"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "my_project"
"""
# what `create-dagster project` writes: the code location loads the defs folder
PROJECT_DEFINITIONS = """\
from pathlib import Path

import dagster as dg


@dg.definitions
def defs():
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def _dg(project: Path, *args: str) -> subprocess.CompletedProcess:
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(project / "src")}
    done = subprocess.run([os.path.join(bin_dir, "dg"), *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "my_project"
    (project / "src" / "my_project" / "defs").mkdir(parents=True)
    (project / "pyproject.toml").write_text(PROJECT_TOML)
    (project / "src" / "my_project" / "__init__.py").write_text("")
    (project / "src" / "my_project" / "defs" / "__init__.py").write_text("")
    (project / "src" / "my_project" / "definitions.py").write_text(PROJECT_DEFINITIONS)
    return project


def _land(folder: Path, name: str, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}.tmp").write_text(jsonl(records))
    os.replace(folder / f".{name}.tmp", folder / name)


def test_a_scaffolded_component_loads_and_its_sensor_runs_bring_landed_changes_into_the_target(tmp_path, monkeypatch):
    project = _project(tmp_path)
    _dg(project, "scaffold", "defs", "cdc_assets.defs.component.CdcTables", "cdc")
    component = project / "src" / "my_project" / "defs" / "cdc"
    assert "type: cdc_assets.defs.component.CdcTables" in (component / "defs.yaml").read_text()
    assert "name: ORDERS" in (component / "cdc.yaml").read_text()
    assert "All definitions loaded successfully" in _dg(project, "check", "defs").stdout

    _land(component / "landing" / "ORDERS" / "batch-0001", "part-1.jsonl", [
        mysql("INSERT", {"order_id": 1, "status": "open"}, 1, 1),
        mysql("INSERT", {"order_id": 2, "status": "open"}, 1, 2),
        mysql("UPDATE", {"order_id": 1, "status": "shipped"}, 1, 3),
        mysql("DELETE", {"order_id": 2, "status": "open"}, 1, 4)])
    monkeypatch.syspath_prepend(str(project / "src"))  # as the project's own environment has it installed
    defs = dg.load_from_defs_folder(path_within_project=component)
    sensor = defs.get_sensor_def("ORDERS__landing_sensor")
    with dg.instance_for_test() as instance:
        for _ in range(6):  # each tick asks for what is due now; its runs execute before the next tick
            result = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
            for request in result.dynamic_partitions_requests:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            if not result.run_requests:
                break
            for request in result.run_requests:
                run = defs.resolve_job_def(request.job_name).execute_in_process(
                    instance=instance, partition_key=request.partition_key, tags=request.tags)
                assert run.success
        else:
            raise AssertionError("the sensor kept asking for runs")
    target = DeltaTable(str(component / "warehouse" / "ORDERS" / "target")).to_pyarrow_table()
    assert sorted(zip(target["order_id"].to_pylist(), target["status"].to_pylist())) == [(1, "shipped")]


def documented_merge() -> str:
    text = (REPO / "docs" / "dagster-project.md").read_text(encoding="utf-8")
    section = text[text.index("## Merged into your own Definitions"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_documented_merge_puts_the_tables_beside_a_projects_own_assets(tmp_path, monkeypatch):
    (tmp_path / "cdc.yaml").write_text(STARTER_CONFIG)
    monkeypatch.chdir(tmp_path)  # the example names ./cdc.yaml
    example = tmp_path / "definitions.py"
    example.write_text(documented_merge())
    namespace: dict = {}
    exec(compile(example.read_text(), str(example), "exec"), namespace)  # noqa: S102 - the documented example
    defs: dg.Definitions = namespace["defs"]
    graph = defs.resolve_asset_graph()
    own = dg.AssetKey("orders_by_status")
    assert dg.AssetKey(["ORDERS", "target"]) in graph.get(own).parent_keys
    assert defs.get_sensor_def("ORDERS__landing_sensor") is not None
