"""`insert_only: true`: a table that only ever gets new rows (logs, events) appends each batch
without a MERGE: no target file is read or rewritten, an update or delete arriving anyway goes to
quarantine with its reason, and a re-delivered insert still counts once."""
from __future__ import annotations

import pytest
from deltalake import DeltaTable

from cdc_assets.core.config import ConfigError, parse_config
from cdc_assets.engine.table_layout import QUARANTINE, TARGET, path
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_table
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, target_rows, values

pytestmark = MARKS

TABLE = {"name": "EVENTS", "keys": ["id"], "format": "datastream-json", "partition_by": ["day"],
         "insert_only": True}


def test_an_insert_only_table_appends_and_quarantines_what_is_not_an_insert(spark, workdir):
    cfg = write_config(workdir, [TABLE])
    land(cfg, "EVENTS", "batch-1", {"p.jsonl": jsonl([mysql("INSERT", {"id": i, "day": "d1", "v": "a"}, 1, i)
                                                      for i in (1, 2, 3)])})
    take_and_apply(spark, cfg, "EVENTS")
    target = path(cfg.table_dir("EVENTS"), TARGET)
    files_before = set(DeltaTable(target).file_uris())

    again = mysql("INSERT", {"id": 5, "day": "d2", "v": "a"}, 1, 12)
    land(cfg, "EVENTS", "batch-2", {"p.jsonl": jsonl([
        mysql("INSERT", {"id": 4, "day": "d1", "v": "a", "extra": "x"}, 1, 10),
        mysql("UPDATE", {"id": 1, "day": "d1", "v": "b"}, 1, 11),  # line 2
        again,
        mysql("DELETE", {"id": 2, "day": "d1", "v": None}, 1, 13),  # line 4
    ])})
    figures = take_and_apply(spark, cfg, "EVENTS")
    assert figures.appended is True and (figures.inserts, figures.files_removed) == (2, 0)
    assert files_before <= set(DeltaTable(target).file_uris())  # nothing rewritten
    assert values(target_rows(cfg, "EVENTS"), "id", "v") == {1: "a", 2: "a", 3: "a", 4: "a", 5: "a"}
    assert {r["id"]: r["extra"] for r in target_rows(cfg, "EVENTS")}[4] == "x"  # a new column, as in a MERGE
    rejected = sorted((r["_cdc_line"], r["_cdc_reason"]) for r in delta_rows(cfg, "EVENTS", QUARANTINE))
    assert rejected == [(2, "change type 'UPDATE' in an insert_only table: only inserts (INSERT) are applied"),
                        (4, "change type 'DELETE' in an insert_only table: only inserts (INSERT) are applied")]

    # at least once: the same event again counts once
    land(cfg, "EVENTS", "batch-3", {"p.jsonl": jsonl([again, mysql("INSERT", {"id": 6, "day": "d2", "v": "a"}, 1, 20)])})
    assert take_and_apply(spark, cfg, "EVENTS").inserts == 1
    assert sorted(r["id"] for r in target_rows(cfg, "EVENTS")) == [1, 2, 3, 4, 5, 6]

    # a key the source inserts twice is appended twice, and the key check says so
    land(cfg, "EVENTS", "batch-4", {"p.jsonl": jsonl([mysql("INSERT", {"id": 6, "day": "d2", "v": "b"}, 1, 30)])})
    out = run_table(cfg, "EVENTS")  # the run's key check, on Dagster
    assert out.checks.get("keys_unique") is False
    assert sorted(r["id"] for r in target_rows(cfg, "EVENTS")) == [1, 2, 3, 4, 5, 6, 6]


@pytest.mark.parametrize("table, message", [
    ({"format": "bigquery-cdc", "insert_only": True}, "format 'bigquery-cdc' does not say which changes insert"),
    ({"insert_only": "yes"}, "field 'insert_only' must be true or false"),
])
def test_insert_only_needs_a_format_that_tells_inserts_from_updates(table, message):
    raw = {"warehouse": "./w", "landing": "./l", "tables": [{"name": "E", "keys": ["id"], "format": "datastream-json",
                                                            **table}]}
    with pytest.raises(ConfigError, match=message):
        parse_config(raw, "/etc/cdc/cdc.yaml")
