"""Shared conformance scenarios with the landing area in Cloud Storage (the GCS emulator): the
same steps as ../shared/conformance/run_conformance.py -- land batch N, `cdc-assets run`, compare
the target with expected.jsonl after the last batch, one more run that changes nothing -- except
that each batch is uploaded as objects under gs://<bucket>/<prefix>/<TABLE>/batch-N/ and cdc.yaml
says `landing: gs://<bucket>/<prefix>`. The warehouse stays a local folder. The comparison is the
suite's own (its functions, imported from the file), not a copy. About 2-3 minutes (4 CLI runs)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time

import pytest
from deltalake import DeltaTable

from cdc_assets_tests.emulators import GCS_BUCKET, put

PREFIX = "datastream"
# Two formats, one config (as the suite does): a Datastream feed of 3 batches, and a CSV change
# set over a base export. Each CLI run applies both, so the second scenario costs no extra run.
SCENARIOS = ["datastream_mysql_orders", "seed002_changeset"]


def load_suite(shared_dir: str):
    path = os.path.join(shared_dir, "conformance", "run_conformance.py")
    if not os.path.isfile(path):
        pytest.skip(f"{path} is absent")
    spec = importlib.util.spec_from_file_location("run_conformance", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.spark
def test_conformance_scenarios_pass_with_a_gcs_landing(cli, shared_dir, tmp_path, gcs_bucket):
    suite = load_suite(shared_dir)
    scenarios = suite.load_scenarios(os.path.join(shared_dir, "conformance", "scenarios"), SCENARIOS)
    assert sorted(s["name"] for s in scenarios) == sorted(SCENARIOS)

    work = str(tmp_path)
    cfg_path = os.path.join(work, "cdc.yaml")
    cfg = suite.write_config(cfg_path, work, scenarios)  # the suite's tables, base snapshots included
    cfg["landing"] = f"gs://{GCS_BUCKET}/{PREFIX}"  # ... with the landing area in the bucket
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh, indent=2)

    # a throw-away Dagster instance per run; STORAGE_EMULATOR_HOST / GOOGLE_CLOUD_PROJECT from the fixture
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    assert env.get("STORAGE_EMULATOR_HOST")

    def run(label: str) -> None:
        t = time.time()
        p = subprocess.run(cli + ["run", "--config", cfg_path], cwd=work, env=env,
                           capture_output=True, text=True, timeout=900)
        print(f"# {label}: exit {p.returncode} in {time.time() - t:.1f}s")
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-25:])
        assert p.returncode == 0, f"{label} exited {p.returncode}:\n{tail}"

    landed: dict[str, dict[str, int]] = {s["table"]["name"]: {} for s in scenarios}  # table -> object -> batch
    n_batches = max(len(s["batches"]) for s in scenarios)
    for b in range(n_batches):
        for s in scenarios:
            if b >= len(s["batches"]):
                continue
            table, batch = s["table"]["name"], s["batches"][b]
            src = os.path.join(s["dir"], batch)
            for root, _dirs, files in os.walk(src):
                for f in sorted(files):
                    relative = os.path.relpath(os.path.join(root, f), s["dir"]).replace(os.sep, "/")
                    with open(os.path.join(root, f), "rb") as fh:
                        put(gcs_bucket, f"{PREFIX}/{table}/{relative}", fh.read())
                    landed[table][relative] = b + 1
        run(f"run after batch {b + 1}")

    versions, failures = {}, {}
    for s in scenarios:
        versions[s["name"]], rows, schema = suite.read_target(cfg, s["table"]["name"])
        failures[s["name"]] = suite.compare(s, rows) + suite.type_problems(s, schema)
    assert failures == {s["name"]: [] for s in scenarios}, failures

    run("idempotence run (nothing new)")
    for s in scenarios:
        v, _, _ = suite.read_target(cfg, s["table"]["name"])
        assert v == versions[s["name"]], f"{s['name']}: a run with nothing new changed the target " \
                                         f"(version {versions[s['name']]} -> {v})"

    # The warehouse's batch ledger names the objects relative to <prefix>/<TABLE>/, batch N's in ledger batch N.
    for table, objects in landed.items():
        ledger = DeltaTable(os.path.join(cfg["warehouse"], table, "batches")).to_pyarrow_table().to_pylist()
        files = [r["file"] for r in ledger]
        assert sorted(files) == sorted(objects), (table, files)
        assert {r["file"]: r["batch_seq"] for r in ledger} == objects
    # nothing was read from, or written to, a local landing folder (nor a gs: URL taken as a local path)
    assert not os.path.exists(os.path.join(work, "landing")) and not os.path.exists(os.path.join(work, "gs:"))
