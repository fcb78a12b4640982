"""`cdc-assets demo --gcp`, run as a user runs it: the demo feed lands in the Cloud Storage
emulator, each run applies it and publishes every target to the BigQuery emulator, and the
landed files, the Delta targets and the BigQuery tables reconcile with no discrepancy."""
from __future__ import annotations

import os
import subprocess

import pytest
import yaml


@pytest.mark.spark
def test_the_gcp_demo_reconciles_files_targets_and_bigquery_tables(cli, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "STORAGE_EMULATOR_HOST", "BIGQUERY_EMULATOR_HOST")}
    p = subprocess.run(cli + ["demo", "--gcp", "--dir", str(tmp_path / "demo-gcp")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=1200)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    results = [line for line in lines if line.endswith(("-> OK", "-> DISCREPANCIES"))]
    assert [r.split(":")[0] for r in results] == ["ORDERS", "CUSTOMERS", "PAYMENTS"]
    for r in results:
        assert r.endswith("-> OK") and "0 missing, 0 extra, 0 differing" in r and ", 0 discrepancies" in r
        landed, taken = r.split(": ", 1)[1].split(";")[0].split(", ")
        assert landed.split()[0] == taken.split()[0] != "0"  # every landed object taken, once
    assert lines[-1].startswith("demo passed")
    # the demo's cdc.yaml is the file a user would copy: YAML with comments
    text = (tmp_path / "demo-gcp" / "cdc.yaml").read_text()
    assert text.startswith("# ") and "publish: {bigquery: " in text
    cfg = yaml.safe_load(text)
    assert cfg["landing"] == "gs://cdc-demo-landing/landing"
    assert [t["publish"]["bigquery"] for t in cfg["tables"]] == [
        f"cdc-assets-demo.demo.{t}" for t in ("ORDERS", "CUSTOMERS", "PAYMENTS")]
