"""The documentation's example of a user's own asset downstream of a target runs as written: its
code, taken from docs/downstream.md, loads the ORDERS target through dagster-deltalake's DeltaTableResource
after a `cdc-assets run`, in a Dagster materialization, with a local warehouse and with one in
an object store."""
from __future__ import annotations

import os
import re
import runpy

import dagster as dg
import pytest

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import run_table

pytestmark = pytest.mark.spark
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def documented_example() -> str:
    with open(os.path.join(REPO, "docs", "downstream.md"), encoding="utf-8") as fh:
        text = fh.read()
    section = text[text.index("## Your own assets downstream of a target"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(params=["local", "object_store"])
def warehouse(request, workdir) -> str:
    """The same example, the warehouse a folder or a bucket (moto's S3): the resource, not the asset, knows which."""
    return str(workdir / "warehouse") if request.param == "local" else request.getfixturevalue("s3_warehouse")


def test_the_documented_downstream_asset_reads_the_target(spark, workdir, warehouse, monkeypatch):
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "datastream-json"}], warehouse=warehouse)
    land(cfg, "ORDERS", "batch-0001", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "status": "open"}, 1, 1), mysql("INSERT", {"id": 2, "status": "open"}, 1, 2),
        mysql("INSERT", {"id": 3, "status": "shipped"}, 1, 3), mysql("DELETE", {"id": 2, "status": "open"}, 1, 4)])})
    assert run_table(cfg, "ORDERS").ok

    monkeypatch.chdir(workdir)  # the example reads ./cdc.yaml
    example = workdir / "user_definitions.py"
    example.write_text(documented_example())
    defs = runpy.run_path(str(example))["defs"]
    job = dg.define_asset_job("downstream", selection=["orders_per_status"])
    result = dg.Definitions.merge(defs, dg.Definitions(jobs=[job])).resolve_job_def("downstream").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success
    [event] = result.get_asset_materialization_events()
    assert event.materialization.metadata["orders_per_status"].value == {"open": 1, "shipped": 1}
