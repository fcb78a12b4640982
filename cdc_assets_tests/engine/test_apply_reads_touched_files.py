"""An incremental apply's cost follows its batch: it opens only the target files whose key
statistics can hold one of the batch's keys, and rewrites only those holding a row it changes,
while no key value reaches the commit."""
from __future__ import annotations

import json
import os

from deltalake import DeltaTable

from cdc_assets_tests.helpers import jsonl, land, target_rows, write_config

from .records import MARKS, mysql, run_ok, values

pytestmark = MARKS


def _file_of(target: str, key_value: str) -> str:
    """The data file of target that holds the row of `key_value` (read through the file's own rows)."""
    dt_ = DeltaTable(target)
    for uri in dt_.file_uris():
        import pyarrow.parquet as pq

        if key_value in pq.read_table(uri, columns=["id"])["id"].to_pylist():
            return uri
    raise AssertionError("no file holds the key")


def test_an_apply_opens_only_the_files_whose_key_range_holds_a_batch_key(workdir):
    cfg = write_config(workdir, [{"name": "FILES", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"id": "string", "v": "string"}}])
    target = os.path.join(cfg.table_dir("FILES"), "target")
    land(cfg, "FILES", "batch-1", {"part-1.jsonl": jsonl(
        [mysql("INSERT", {"id": f"pq{i}", "v": "one"}, 1, i) for i in range(1, 6)])})
    run_ok(cfg, "FILES")
    land(cfg, "FILES", "batch-2", {"part-1.jsonl": jsonl(
        [mysql("INSERT", {"id": f"wz{i}", "v": "two"}, 1, 100 + i) for i in range(1, 6)])})
    run_ok(cfg, "FILES")
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
    outcome = run_ok(cfg, "FILES")
    with open(w_file, "wb") as f:
        f.write(kept)

    figures = outcome.figures["target"]
    assert (figures["inserts"], figures["updates"], figures["deletes"]) == (1, 1, 1)
    assert figures["files_removed"] == 1 and figures["files_before"] == files_before
    expected = {f"pq{i}": "one" for i in (1, 3, 5)} | {"pq2": "three", "rs1": "three"} \
        | {f"wz{i}": "two" for i in range(1, 6)}
    assert values(target_rows(cfg, "FILES"), "id", "v") == expected

    # A stale change (older than the row) changes nothing, and commits nothing.
    version = DeltaTable(target).version()
    land(cfg, "FILES", "batch-4", {"part-1.jsonl": jsonl([mysql("UPDATE", {"id": "pq2", "v": "stale"}, 1, 150)])})
    outcome = run_ok(cfg, "FILES")
    assert outcome.figures["target"]["stale_skipped"] == 1
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
