"""rules.md#rule-2: a deleted key's ordering key is remembered (a tombstone): an older change landing
in a later batch cannot bring the row back; a newer one can."""
from __future__ import annotations

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import bq_cdc, mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import target_rows, values

pytestmark = MARKS


def test_older_change_in_a_later_batch_does_not_resurrect_a_deleted_row(spark, workdir):
    cfg = write_config(workdir, [{"name": "TOMB", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "TOMB", "batch-1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": k, "v": "inserted"}, 1, 100) for k in (1, 2, 3)
    ] + [
        # key 4 is inserted and deleted within the batch: it never reaches the target
        mysql("INSERT", {"id": 4, "v": "inserted"}, 1, 100),
        mysql("DELETE", {"id": 4, "v": None}, 1, 300),
    ])})
    take_and_apply(spark, cfg, "TOMB")
    assert values(target_rows(cfg, "TOMB"), "id", "v") == {1: "inserted", 2: "inserted", 3: "inserted"}

    land(cfg, "TOMB", "batch-2", {"part-1.jsonl": jsonl([
        mysql("DELETE", {"id": k, "v": None}, 1, 300) for k in (1, 2, 3)
    ])})
    take_and_apply(spark, cfg, "TOMB")
    assert target_rows(cfg, "TOMB") == []

    land(cfg, "TOMB", "batch-3", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "v": "late-but-older"}, 1, 200),   # older than the delete: stays deleted
        mysql("UPDATE", {"id": 2, "v": "newer"}, 1, 400),            # newer than the delete: back
        mysql("UPDATE", {"id": 4, "v": "late-but-older"}, 1, 200),   # older than the in-batch delete
        mysql("INSERT", {"id": 3, "v": "newer"}, 2, 1),              # the next binlog file is newer
    ])})
    applied = take_and_apply(spark, cfg, "TOMB")
    assert values(target_rows(cfg, "TOMB"), "id", "v") == {2: "newer", 3: "newer"}
    assert applied.stale_skipped == 2


def test_tombstone_by_change_sequence_number(spark, workdir):
    """The same with BigQuery CDC rows: a DELETE at sequence 'B' outranks a later-landing UPSERT at 'A'."""
    cfg = write_config(workdir, [{"name": "TOMBQ", "keys": ["K"], "format": "bigquery-cdc"}])
    land(cfg, "TOMBQ", "batch-1", {"a.jsonl": jsonl([bq_cdc("UPSERT", {"K": "x", "V": "1"}, "1"),
                                                     bq_cdc("DELETE", {"K": "x", "V": None}, "B"),
                                                     bq_cdc("UPSERT", {"K": "y", "V": "1"}, "1"),
                                                     bq_cdc("DELETE", {"K": "y", "V": None}, "B")])})
    take_and_apply(spark, cfg, "TOMBQ")
    assert target_rows(cfg, "TOMBQ") == []
    land(cfg, "TOMBQ", "batch-2", {"a.jsonl": jsonl([bq_cdc("UPSERT", {"K": "x", "V": "older"}, "A"),
                                                     bq_cdc("UPSERT", {"K": "y", "V": "newer"}, "C")])})
    take_and_apply(spark, cfg, "TOMBQ")
    assert values(target_rows(cfg, "TOMBQ"), "K", "V") == {"y": "newer"}
