"""The maintenance vacuum removes the data files a killed write left behind: files in a table's
folder that no version of its log references, once they are older than the retention."""
from __future__ import annotations

import datetime as dt
import glob
import os
import shutil
import time

from cdc_assets.engine import delta
from cdc_assets.engine.maintenance import maintain
from cdc_assets.engine.table_layout import STAGING, TARGET, path
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import target_rows

pytestmark = MARKS

TABLE = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["region"]}


def test_the_vacuum_removes_files_a_killed_write_left_unreferenced(spark, workdir):
    cfg = write_config(workdir, [TABLE])
    for n in (1, 2):
        land(cfg, "ORDERS", f"batch-{n}", {"p.jsonl": jsonl(
            [mysql("INSERT", {"id": 10 * n + i, "region": ("eu", "us")[i % 2], "v": "a"}, 1, 10 * n + i)
             for i in range(4)])})
        take_and_apply(spark, cfg, "ORDERS")
    rows = sorted(map(repr, target_rows(cfg, "ORDERS", source_only=False)))
    table_dir = cfg.table_dir("ORDERS")
    orphans, recent = [], []
    for name in (TARGET, STAGING):
        referenced = delta.load(path(table_dir, name)).file_uris()[0].removeprefix("file://")
        for kind, age in ((orphans, 3 * 3600), (recent, 60)):  # a write killed hours ago, one a minute ago
            copy = os.path.join(os.path.dirname(referenced), f"part-killed-{age}-{os.path.basename(referenced)}")
            shutil.copyfile(referenced, copy)
            os.utime(copy, (time.time() - age, time.time() - age))
            kind.append(copy)

    report = maintain(cfg, cfg.table("ORDERS"), now=dt.datetime.now(dt.UTC), retention=3600)
    assert [p for p in orphans if os.path.exists(p)] == []
    assert all(os.path.exists(p) for p in recent)  # younger than the retention: perhaps a write still going on
    assert report.files_vacuumed[TARGET] >= 1 and report.files_vacuumed[STAGING] >= 1
    assert sorted(map(repr, target_rows(cfg, "ORDERS", source_only=False))) == rows
    assert glob.glob(os.path.join(path(table_dir, TARGET), "**", "*.parquet"), recursive=True)
