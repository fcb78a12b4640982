"""The code location: every configured table gets its assets, checks, jobs and sensor,
the definitions load (in-process and through `dagster definitions validate`), and a
bad cdc.yaml fails naming the table and the field."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import dagster as dg
import pytest

from cdc_assets.core.config import ConfigError, load_config
from cdc_assets.defs.definitions import build_definitions

CHANGESET = {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
             "sequence_by": ["CDC_TIMESTAMP"]}
TABLES = [
    {"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["region"]},
    {"name": "CUSTOMERS", "keys": ["customer_id"], "format": "bigquery-append",
     "base_snapshot": "./exports/CUSTOMERS.csv"},
    {"name": "PAYMENTS", "keys": ["payment_id", "line"], "format": "bigquery-cdc",
     "reconcile_with": "./exports/PAYMENTS.csv", "apply": {"max_staleness": "15m"}},
    {"name": "T_LEGACY", "keys": ["ID"], "format": "changeset", "options": CHANGESET},
]


def write_cfg(root, tables=TABLES) -> str:
    (root / "exports").mkdir(exist_ok=True)
    (root / "exports" / "CUSTOMERS.csv").write_text("customer_id,name\n1,ana\n")
    (root / "exports" / "PAYMENTS.csv").write_text("payment_id,line,amount\n1,1,2.5\n")
    (root / "landing").mkdir(exist_ok=True)
    path = root / "cdc.yaml"
    path.write_text(json.dumps({"warehouse": "./warehouse", "landing": "./landing", "tables": tables}, indent=2))
    return str(path)


@pytest.fixture
def defs(tmp_path) -> dg.Definitions:
    return build_definitions(load_config(write_cfg(tmp_path)))


def key(table: str, asset: str) -> dg.AssetKey:
    return dg.AssetKey([table, asset])


def test_every_table_has_its_assets_with_their_partitions_and_deps(defs):
    graph = defs.resolve_asset_graph()
    expected = set()
    for t in TABLES:
        names = ["changes", "staging", "target", "quarantine"] + (["base"] if "base_snapshot" in t else [])
        expected |= {key(t["name"], n) for n in names}
    assert set(graph.get_all_asset_keys()) == expected

    for t in TABLES:
        name = t["name"]
        for asset in ("changes", "staging"):
            parts = defs.resolve_assets_def(key(name, asset)).partitions_def
            assert isinstance(parts, dg.DynamicPartitionsDefinition) and parts.name == f"{name}__batches"
        target = defs.resolve_assets_def(key(name, "target"))
        if "partition_by" in t:
            assert isinstance(target.partitions_def, dg.DynamicPartitionsDefinition)
            assert target.partitions_def.name == f"{name}__target_partitions"
        else:
            assert target.partitions_def is None
        assert graph.get(key(name, "staging")).parent_keys == {key(name, "changes")}
        assert graph.get(key(name, "target")).parent_keys == (
            {key(name, "staging"), key(name, "base")} if "base_snapshot" in t else {key(name, "staging")})
        # one group per table, so the UI shows a table's graph together
        assert {graph.get(key(name, a)).group_name for a in ("changes", "staging", "target", "quarantine")} == {name}


def test_every_table_has_its_checks(defs):
    checks = {(c.asset_key, c.name) for c in defs.resolve_asset_graph().asset_check_keys}
    expected = set()
    for t in TABLES:
        name = t["name"]
        expected |= {(key(name, "target"), "keys_unique"), (key(name, "staging"), "batch_accounted"),
                     (key(name, "staging"), "quarantine_within_limit")}
        if "reconcile_with" in t:
            expected.add((key(name, "target"), "reconciles_with_source"))
        if "max_staleness" in t.get("apply", {}):
            expected.add((key(name, "target"), "within_max_staleness"))
    assert checks == expected


def test_every_table_has_its_jobs_and_a_sensor_over_them(defs):
    jobs = {j.name: j for j in defs.resolve_all_job_defs() if not j.name.startswith("__")}
    expected = set()
    for t in TABLES:
        name = t["name"]
        expected |= {f"{name}_ingest_job", f"{name}_apply_job", f"{name}_maintenance_job", f"{name}_restore_job"}
        if "base_snapshot" in t:
            expected.add(f"{name}_base_job")
        if "max_staleness" in t.get("apply", {}):
            expected.add(f"{name}_freshness_check_job")
        if "partition_by" not in t:
            expected.add(f"{name}_batch_job")  # a batch's one run: changes, staging and target
    assert set(jobs) == expected

    for t in TABLES:
        name = t["name"]
        ingest = jobs[f"{name}_ingest_job"]
        assert ingest.asset_layer.executable_asset_keys == {key(name, "changes"), key(name, "staging")}
        assert ingest.partitions_def.name == f"{name}__batches"
        apply_job = jobs[f"{name}_apply_job"]
        assert apply_job.asset_layer.executable_asset_keys == {key(name, "target")}
        assert (apply_job.partitions_def is not None) == ("partition_by" in t)
        if "partition_by" not in t:
            batch = jobs[f"{name}_batch_job"]
            assert batch.asset_layer.executable_asset_keys == {key(name, "changes"), key(name, "staging"),
                                                               key(name, "target")}
            assert batch.partitions_def.name == f"{name}__batches"
        if "base_snapshot" in t:  # an unpartitioned target is built in the import's run when the apply is due
            assert jobs[f"{name}_base_job"].asset_layer.executable_asset_keys == {key(name, "base")} | (
                set() if "partition_by" in t else {key(name, "target")})
        if "max_staleness" in t.get("apply", {}):
            # the freshness job evaluates the check alone: it materializes nothing
            freshness = jobs[f"{name}_freshness_check_job"]
            assert freshness.asset_layer.executable_asset_keys == set()
            assert set(freshness.asset_layer.asset_graph.asset_check_keys) == {
                dg.AssetCheckKey(key(name, "target"), "within_max_staleness")}

        sensor = defs.resolve_sensor_def(f"{name}__landing_sensor")
        assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
        targeted = {j.name for j in sensor.jobs}
        assert {f"{name}_ingest_job", f"{name}_apply_job"} <= targeted
        assert (f"{name}_batch_job" in targeted) == ("partition_by" not in t)
        if "base_snapshot" in t:
            assert f"{name}_base_job" in targeted


def test_definitions_validate_loadable(defs):
    dg.Definitions.validate_loadable(defs)


@pytest.fixture
def fresh_module():
    """Import `cdc_assets.definitions` anew, and leave no configured copy behind."""
    sys.modules.pop("cdc_assets.definitions", None)
    yield lambda: importlib.import_module("cdc_assets.definitions")
    sys.modules.pop("cdc_assets.definitions", None)


def test_code_location_module_loads_the_config_named_by_the_environment(tmp_path, monkeypatch, fresh_module):
    path = write_cfg(tmp_path)
    monkeypatch.setenv("CDC_ASSETS_CONFIG", path)
    monkeypatch.chdir("/")  # relative paths resolve against the config file, not the cwd
    module = fresh_module()
    assert isinstance(module.defs, dg.Definitions)
    dg.Definitions.validate_loadable(module.defs)
    assert {k.path[0] for k in module.defs.resolve_all_asset_keys()} == {t["name"] for t in TABLES}
    assert {s.key.path[-1] for s in module.defs.resolve_all_asset_specs()} == {"changes", "staging", "target", "base", "quarantine"}

    # reload picks up an edited cdc.yaml (what `dagster dev`'s "reload definitions" does)
    write_cfg(tmp_path, TABLES[:1])
    module = importlib.reload(module)
    assert {k.path[0] for k in module.defs.resolve_all_asset_keys()} == {"ORDERS"}


def test_code_location_module_defaults_to_cdc_yaml_in_the_working_directory(tmp_path, monkeypatch, fresh_module):
    write_cfg(tmp_path, TABLES[2:3])
    monkeypatch.delenv("CDC_ASSETS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    module = fresh_module()
    assert {k.path[0] for k in module.defs.resolve_all_asset_keys()} == {"PAYMENTS"}


@pytest.mark.parametrize("broken, field", [
    ({"partiton_by": ["region"]}, "partiton_by"),  # a typo is an unknown field, not ignored
    ({"keys": []}, "keys"),
    ({"format": "datastream-xml"}, "format"),
])
def test_a_config_error_names_the_table_and_the_field(tmp_path, monkeypatch, fresh_module, broken, field):
    tables = json.loads(json.dumps(TABLES))
    tables[2].update(broken)
    monkeypatch.setenv("CDC_ASSETS_CONFIG", write_cfg(tmp_path, tables))
    with pytest.raises(ConfigError) as e:
        fresh_module()
    message = str(e.value)
    assert "PAYMENTS" in message and f"'{field}'" in message, message
    assert "ORDERS" not in message


def test_dagster_cli_validates_the_code_location(tmp_path):
    """The way `dagster dev` loads it: a separate process importing the module."""
    env = {**os.environ, "CDC_ASSETS_CONFIG": write_cfg(tmp_path), "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    os.makedirs(env["DAGSTER_HOME"])
    exe = os.path.join(os.path.dirname(sys.executable), "dagster")
    proc = subprocess.run([exe, "definitions", "validate", "-m", "cdc_assets.definitions"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_table_writes_through_its_own_concurrency_pool(defs):
    """One pool per table over all its writer assets: with the instance's pool limit of 1 the
    sensor's, the UI's and the CLI's runs of a table take turns; two tables never share a pool."""
    pools = {}
    for t in TABLES:
        name = t["name"]
        writers = ["changes", "staging", "target"] + (["base"] if "base_snapshot" in t else [])
        found = {defs.resolve_assets_def(key(name, a)).op.pool for a in writers}
        assert found == {f"cdc_{name}"}
        pools[name] = found.pop()
    assert pools["ORDERS"] != pools["CUSTOMERS"]
    assert len(set(pools.values())) == len(TABLES)


def test_checks_are_evaluated_in_the_step_of_the_asset_they_check(defs):
    """A step costs a run about a tenth of a second outside its work: an ingest (changes and staging)
    is one step and an apply one, each asset's checks evaluated by the step that computes it. The freshness check alone is a job of
    its own (run when no apply ran), so it stays a step of its own."""
    for t in TABLES:
        name = t["name"]
        steps = {job: {n.name for n in defs.resolve_job_def(f"{name}_{job}_job").graph.nodes}
                 for job in ("ingest", "apply")}
        assert steps["ingest"] == {f"{name}__batch"}
        assert steps["apply"] == {f"{name}__target"} | (
            {f"{name}__target_within_max_staleness"} if "max_staleness" in t.get("apply", {}) else set())
        staging = defs.resolve_assets_def(key(name, "staging"))
        assert {c.name for c in staging.check_specs} == {"batch_accounted", "quarantine_within_limit"}
        target = defs.resolve_assets_def(key(name, "target"))
        assert {c.name for c in target.check_specs} == {"keys_unique"} | (
            {"reconciles_with_source"} if "reconcile_with" in t else set())
        assert next(c for c in target.check_specs if c.name == "keys_unique").blocking


# A run forked from the launcher's fork server: the server imported defs/warm.py when it started;
# the run then loads the code location (cdc_assets/definitions.py) as Dagster's run worker does.
FORKED_RUN = """
import importlib, json, sys
import cdc_assets.defs.warm  # the fork server, when it starts
made = __import__("cdc_assets.defs.definitions", fromlist=["_built"])._built.copy()
if len(sys.argv) > 1:
    open(sys.argv[1], "w").write(sys.argv[2])  # the configuration edited after the server started
location = importlib.import_module("cdc_assets.definitions")  # the run
print(json.dumps({"made": bool(made), "found_made": any(d is location.defs for d in made.values()),
                  "jobs": sorted(location.defs.get_repository_def().job_names)}))
"""


def _forked_run(tmp_path, *edit) -> dict:
    env = dict(os.environ, CDC_ASSETS_CONFIG=str(tmp_path / "cdc.yaml"))
    env.pop("DAGSTER_HOME", None)
    proc = subprocess.run([sys.executable, "-c", FORKED_RUN, *edit], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_forked_run_finds_the_definitions_made_and_sees_a_configuration_edited_since(tmp_path):
    """The fork server builds the definitions once (a run of one of many tables spent half a CPU-second
    building all of them); a run uses them only while the configuration is the one they were built
    from: an edit made after the server started is what the run sees."""
    path = write_cfg(tmp_path, TABLES[:1])
    same = _forked_run(tmp_path)
    assert same["made"] and same["found_made"]
    assert "ORDERS_ingest_job" in same["jobs"]

    edited = open(path).read().replace('"ORDERS"', '"SHIPMENTS"')
    changed = _forked_run(tmp_path, path, edited)
    assert changed["made"] and not changed["found_made"]
    assert "SHIPMENTS_ingest_job" in changed["jobs"] and not any(j.startswith("ORDERS_") for j in changed["jobs"])
