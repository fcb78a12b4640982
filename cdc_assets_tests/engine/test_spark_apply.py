"""A large incremental apply runs on Spark executors (CDC_ASSETS_LOCAL_APPLY_ROWS; 0 sends every one
there), a small one in the run's own process: for the same feed both give the same target,
tombstones, staging and quarantine, row for row and value for value, and the same figures."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
from deltalake import DeltaTable

from cdc_assets.core.config import load_config
from cdc_assets.engine import apply, base_import, spark_ingest
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply

pytestmark = MARKS


def batches() -> list[str]:
    """Inserts, updates (one moving its key to another partition, whose value Spark escapes in its
    folder's name, so the apply reads those files through Python workers), deletes, a delete of a key
    never there, stale changes, a re-insert after a delete, an upsert older than its key's
    tombstone, a re-delivered event from an earlier batch, a bad line, then a new column."""
    redelivered = mysql("UPDATE", {"id": 2, "amount": 22, "region": "u s"}, 1, 22, uuid="b2-2")
    return [
        jsonl([mysql("INSERT", {"id": i, "amount": i * 10, "region": "eu" if i % 2 else "u s"}, 1, i, uuid=f"b1-{i}")
               for i in range(1, 9)]),
        jsonl([mysql("UPDATE", {"id": 1, "amount": 11, "region": "eu"}, 1, 20, uuid="b2-1"),
               mysql("UPDATE", {"id": 2, "amount": 21, "region": "u s"}, 1, 21, uuid="b2-0"),
               redelivered,  # key 2 twice in the batch: the later wins
               mysql("DELETE", {"id": 3, "region": "eu"}, 1, 23, uuid="b2-3"),
               mysql("DELETE", {"id": 99, "region": "eu"}, 1, 24, uuid="b2-4"),
               mysql("INSERT", {"id": 9, "amount": 90, "region": "eu"}, 1, 25, uuid="b2-5"),
               mysql("UPDATE", {"id": 4, "amount": 44, "region": "eu"}, 1, 26, uuid="b2-6")]),  # us -> eu
        jsonl([mysql("UPDATE", {"id": 1, "amount": 1, "region": "eu"}, 1, 15, uuid="b3-1"),  # older than the row
               mysql("INSERT", {"id": 3, "amount": 33, "region": "u s"}, 1, 30, uuid="b3-2"),  # back after its delete
               mysql("INSERT", {"id": 99, "amount": 9, "region": "u s"}, 1, 10, uuid="b3-3"),  # older than its delete
               redelivered,
               mysql("DELETE", {"id": 5, "region": "eu"}, 1, 31, uuid="b3-4"),
               mysql("INSERT", {"id": 10, "amount": 100, "region": None}, 1, 32, uuid="b3-5")])
        + '{"not json\n',
        jsonl([mysql("UPDATE", {"id": 6, "amount": 66, "region": "u s", "extra": "x"}, 1, 40, uuid="b4-1"),
               mysql("INSERT", {"id": 11, "amount": 110, "region": "eu", "extra": "y"}, 1, 41, uuid="b4-2"),
               mysql("DELETE", {"id": 7, "region": "eu"}, 1, 42, uuid="b4-3")]),
    ]


def rows_of(table_path: str, drop=()) -> list[dict]:
    data = DeltaTable(table_path).to_pyarrow_table()
    rows = [{k: v for k, v in r.items() if k not in drop} for r in data.to_pylist()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


# Files are laid out by whoever writes them, and the Spark path rewrites the target once for a new
# column before it applies (one version more); the rows, counts and batches are what must agree.
PLACES = ("seconds", "delta_version", "files_added", "files_removed", "files_before", "target_files", "target_bytes",
          "versions_kept", "oldest_readable_version", "applied_on")


def feed(spark, workdir, name: str, partition_by: list[str], with_base: bool, on_spark: bool, monkeypatch):
    """Every batch applied by one path; what each apply reported and what the tables hold."""
    limit = 0 if on_spark else 10**9
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", str(limit))
    monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", str(limit))  # a whole build (the new column's) on Spark too
    settings_of(monkeypatch, base_import, local_parse_bytes=limit)
    settings_of(monkeypatch, spark_ingest, local_parse_bytes=10**9)
    if on_spark:
        def no_batch_on_the_driver(*_a, **_k):
            raise AssertionError("the pending batch was read into the run's own process")
        monkeypatch.setattr(apply, "merge_source", no_batch_on_the_driver)
    (workdir / "landing").mkdir(parents=True)
    table = {"name": name, "keys": ["id"], "format": "datastream-json"}
    if with_base:
        export = workdir / "export.csv"
        pa_csv.write_csv(pa.table({"id": [1, 2, 3, 4, 5, 6], "amount": [1, 2, 3, 4, 5, 6],
                                   "region": ["eu", "u s", "eu", "u s", "eu", "u s"]}), export)
        table["base_snapshot"] = str(export)
    if partition_by:
        table["partition_by"] = partition_by
    cfg = write_config(workdir, [table])
    figures = []
    for n, text in enumerate(batches(), 1):
        land(cfg, name, f"batch-{n}", {"part-1.jsonl": text})
        figures.append(take_and_apply(spark, cfg, name).to_metadata())
    table_dir = cfg.table_dir(name)
    tables = {step: rows_of(os.path.join(table_dir, step), drop=("quarantined_at",) if step == "quarantine" else ())
              for step in ("target", "tombstones", "staging", "quarantine")}
    return tables, figures


@pytest.mark.parametrize("partition_by, with_base", [([], True), (["region"], False)])
def test_an_apply_on_spark_equals_the_one_in_process(spark, tmp_path, monkeypatch, partition_by, with_base):
    local, local_figures = feed(spark, tmp_path / "local", "T", partition_by, with_base, False, monkeypatch)
    on_spark, spark_figures = feed(spark, tmp_path / "spark", "T", partition_by, with_base, True, monkeypatch)
    incremental = slice(1, None)  # the first run's apply is the first build
    assert [f.get("applied_on") for f in spark_figures[incremental]] == ["spark"] * len(spark_figures[incremental])
    assert all("applied_on" not in f for f in local_figures)
    for step in ("target", "tombstones", "staging", "quarantine"):
        assert local[step] == on_spark[step], step
    for n, (mine, theirs) in enumerate(zip(local_figures, spark_figures), 1):
        differ = {k: (mine.get(k), theirs.get(k)) for k in set(mine) | set(theirs)
                  if k not in PLACES and mine.get(k) != theirs.get(k)}
        assert not differ, (n, differ)
    target = {r["id"]: r for r in local["target"]}
    assert set(target) == {1, 2, 3, 4, 6, 8, 9, 10, 11}
    assert target[1]["amount"] == 11 and target[2]["amount"] == 22 and target[3]["amount"] == 33
    assert target[4]["region"] == "eu" and target[6]["extra"] == "x" and target[11]["extra"] == "y"
    assert {r["_cdc_key"] for r in local["tombstones"]} == {json.dumps([k]) for k in ("5", "7", "99")}
    assert len(local["quarantine"]) == 1


def test_after_an_apply_on_spark_the_key_check_reads_no_batch_of_keys_into_the_runs_process(spark, tmp_path,
                                                                                           monkeypatch):
    """A catch-up's keys are a batch of millions: the check after it proves or counts every key on
    the executors, as after a build, instead of reading the batch's keys and the target's key column
    into the run's own process."""
    from cdc_assets.engine import checks, delta

    feed(spark, tmp_path, "T", [], True, True, monkeypatch)
    cfg = load_config(str(tmp_path / "cdc.yaml"))

    def no_keys_on_the_driver(*_a, **_k):
        raise AssertionError("the batch's keys were read into the run's own process")
    monkeypatch.setattr(delta, "rows_with_keys", no_keys_on_the_driver)
    unique = checks.key_uniqueness(cfg, cfg.table("T"), spark=lambda: spark)
    assert (unique.rows, unique.keys_checked, unique.duplicate_keys) == (9, 9, 0)
