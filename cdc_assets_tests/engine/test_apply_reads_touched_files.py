"""An incremental apply's cost follows its batch: it opens only the target files whose key
statistics can hold one of the batch's keys, and rewrites only those holding a row it changes,
while no key value reaches the commit."""
from __future__ import annotations

import json
import os

import pytest
from deltalake import DeltaTable

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import target_rows, values

pytestmark = MARKS


def _file_of(target: str, key_value: str) -> str:
    """The data file of target that holds the row of `key_value` (read through the file's own rows)."""
    dt_ = DeltaTable(target)
    for uri in dt_.file_uris():
        import pyarrow.parquet as pq

        if key_value in pq.read_table(uri, columns=["id"])["id"].to_pylist():
            return uri
    raise AssertionError("no file holds the key")


def test_an_apply_opens_only_the_files_whose_key_range_holds_a_batch_key(workdir, spark_when_needed):
    cfg = write_config(workdir, [{"name": "FILES", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"id": "string", "v": "string"}}])
    target = os.path.join(cfg.table_dir("FILES"), "target")
    land(cfg, "FILES", "batch-1", {"part-1.jsonl": jsonl(
        [mysql("INSERT", {"id": f"pq{i}", "v": "one"}, 1, i) for i in range(1, 6)])})
    take_and_apply(spark_when_needed, cfg, "FILES")
    land(cfg, "FILES", "batch-2", {"part-1.jsonl": jsonl(
        [mysql("INSERT", {"id": f"wz{i}", "v": "two"}, 1, 100 + i) for i in range(1, 6)])})
    take_and_apply(spark_when_needed, cfg, "FILES")
    p_file, w_file = _file_of(target, "pq2"), _file_of(target, "wz2")
    assert p_file != w_file
    files_before = len(DeltaTable(target).file_uris())

    # The file of the wz keys is made unreadable: a batch touching only pq keys and a new key
    # outside both ranges must not open it.
    with open(w_file, "rb") as f:
        kept = f.read()
    with open(w_file, "wb") as f:
        f.write(b"not parquet" * 100)
    land(cfg, "FILES", "batch-3", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": "pq2", "v": "three"}, 1, 200),
        mysql("DELETE", {"id": "pq4", "v": "one"}, 1, 201),
        mysql("INSERT", {"id": "rs1", "v": "three"}, 1, 202),
    ])})
    applied = take_and_apply(spark_when_needed, cfg, "FILES")
    with open(w_file, "wb") as f:
        f.write(kept)

    assert (applied.inserts, applied.updates, applied.deletes) == (1, 1, 1)
    assert applied.files_removed == 1 and applied.files_before == files_before
    expected = {f"pq{i}": "one" for i in (1, 3, 5)} | {"pq2": "three", "rs1": "three"} \
        | {f"wz{i}": "two" for i in range(1, 6)}
    assert values(target_rows(cfg, "FILES"), "id", "v") == expected

    # A stale change (older than the row) changes nothing, and commits nothing.
    version = DeltaTable(target).version()
    land(cfg, "FILES", "batch-4", {"part-1.jsonl": jsonl([mysql("UPDATE", {"id": "pq2", "v": "stale"}, 1, 150)])})
    assert take_and_apply(spark_when_needed, cfg, "FILES").stale_skipped == 1
    assert values(target_rows(cfg, "FILES"), "id", "v") == expected
    assert DeltaTable(target).version() == version

    # No key value in any commit of target.
    log = os.path.join(target, "_delta_log")
    for name in sorted(os.listdir(log)):
        if name.endswith(".json"):
            for line in open(os.path.join(log, name), encoding="utf-8"):
                info = json.loads(line).get("commitInfo")
                if info:
                    text = json.dumps(info)
                    assert not any(k in text for k in ("pq2", "pq4", "rs1", "wz2")), name


@pytest.mark.parametrize("partitioned", [False, True])
def test_new_keys_across_the_key_range_do_not_leave_a_small_file_per_batch(workdir, spark_when_needed, partitioned):
    """A feed inserting keys all over the key range (random ids, UUIDs) writes its new rows as a
    file spanning that range; the next batch's keys fall in it, so without merging, every batch
    leaves one more small file that every later batch opens and reads: an apply whose cost grows
    with the number of batches since the last compaction."""
    import random

    rnd = random.Random(5)
    table = {"name": "SPREAD", "keys": ["id"], "format": "datastream-json",
             "columns": {"id": "string", "v": "string", "region": "string"}}
    cfg = write_config(workdir, [{**table, "partition_by": ["region"]} if partitioned else table])
    target = os.path.join(cfg.table_dir("SPREAD"), "target")
    expected: dict[str, str] = {}
    position = 0
    for n in range(1, 9):
        events = []
        for _ in range(6):  # new keys anywhere in the range
            key = f"k{rnd.randrange(10**6):06d}"
            position += 1
            events.append(mysql("INSERT", {"id": key, "v": f"b{n}", "region": key[-1] in "01234" and "e" or "w"},
                                1, position))
            expected[key] = f"b{n}"
        for key in rnd.sample(sorted(expected), 2):  # and updates of keys already there
            position += 1
            events.append(mysql("UPDATE", {"id": key, "v": f"u{n}", "region": key[-1] in "01234" and "e" or "w"},
                                1, position))
            expected[key] = f"u{n}"
        land(cfg, "SPREAD", f"batch-{n}", {"part-1.jsonl": jsonl(events)})
        take_and_apply(spark_when_needed, cfg, "SPREAD")
    assert values(target_rows(cfg, "SPREAD"), "id", "v") == expected
    # 48 rows: a file or two (per partition), not one per batch
    assert len(DeltaTable(target).file_uris()) <= (4 if partitioned else 2)


def test_a_batch_reads_only_the_newest_commits_of_each_table_log(workdir, monkeypatch):
    """A batch's run reads the commits it needs from the newest end of each Delta log: a table
    landing a file a minute has thousands of versions within days, and reading all of them for
    each batch would make every batch slower than the one before."""
    cfg = write_config(workdir, [{"name": "LOGS", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"id": "string", "v": "string"}}])
    for n in range(1, 4):
        land(cfg, "LOGS", f"batch-{n}", {"part-1.jsonl": jsonl([mysql("INSERT", {"id": f"a{n}", "v": "x"}, 1, n)])})
        run_ok(cfg, "LOGS")
    limits = []
    history = DeltaTable.history

    def recorded(self, limit=None):
        limits.append(limit)
        return history(self, limit)

    monkeypatch.setattr(DeltaTable, "history", recorded)
    land(cfg, "LOGS", "batch-4", {"part-1.jsonl": jsonl([mysql("UPDATE", {"id": "a1", "v": "y"}, 1, 10)])})
    run_ok(cfg, "LOGS")
    assert limits and None not in limits
    assert values(target_rows(cfg, "LOGS"), "id", "v") == {"a1": "y", "a2": "x", "a3": "x"}


def test_a_batch_opens_each_version_of_a_table_a_few_times_not_once_per_read(workdir, monkeypatch):
    """Opening a Delta table reads its log (checkpoint and commits since): the reads of one version
    within a batch's run share one opened snapshot instead of opening it again for each read."""
    from collections import Counter

    from cdc_assets.engine import delta

    cfg = write_config(workdir, [{"name": "OPENS", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"id": "string", "v": "string"}}])
    for n in range(1, 3):
        land(cfg, "OPENS", f"batch-{n}", {"part-1.jsonl": jsonl([mysql("INSERT", {"id": f"a{n}", "v": "x"}, 1, n)])})
        run_ok(cfg, "OPENS")
    opened: Counter = Counter()
    load = delta.load

    def counted(path, version=None):
        dt_ = load(path, version)
        opened[(os.path.basename(path), dt_.version())] += 1
        return dt_

    monkeypatch.setattr(delta, "load", counted)
    land(cfg, "OPENS", "batch-3", {"part-1.jsonl": jsonl([mysql("UPDATE", {"id": "a1", "v": "y"}, 1, 10),
                                                          mysql("DELETE", {"id": "a2", "v": "x"}, 1, 11)])})
    run_ok(cfg, "OPENS")
    assert opened and max(opened.values()) <= 3, opened
    assert values(target_rows(cfg, "OPENS"), "id", "v") == {"a1": "y"}
