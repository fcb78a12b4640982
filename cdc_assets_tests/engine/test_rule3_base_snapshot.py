"""rules.md#rule-3: rows of a base snapshot rank below every change, however old the change."""
from __future__ import annotations

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import ds_event, mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, target_rows, values

pytestmark = MARKS


def test_changes_older_than_the_base_export_still_win(spark, workdir):
    export = workdir / "orders_export.csv"
    export.write_text("id,v,amount\n1,base,10\n2,base,20\n3,base,30\n")
    cfg = write_config(workdir, [{"name": "BASED", "keys": ["id"], "format": "datastream-json",
                                  "base_snapshot": str(export)}])

    # Nothing landed yet: the first run imports the export and the target starts from it.
    take_and_apply(spark, cfg, "BASED")
    assert values(target_rows(cfg, "BASED"), "id", "v") == {1: "base", 2: "base", 3: "base"}
    assert len(delta_rows(cfg, "BASED", "base")) == 3

    land(cfg, "BASED", "batch-1", {"part-1.jsonl": jsonl([
        # source timestamps far older than the export, and a backfill read that ranks lowest
        # among changes: each still outranks the base row
        mysql("UPDATE", {"id": 1, "v": "change", "amount": 11}, 1, 4, ts="2000-01-01T00:00:00"),
        ds_event("INSERT", {"id": 3, "v": "backfill", "amount": 33}, ts="1999-12-31T23:59:59",
                 read_method="mysql-backfill-fulldump"),
        mysql("DELETE", {"id": 2, "v": None, "amount": None}, 1, 5, ts="2000-01-01T00:00:00"),
        mysql("INSERT", {"id": 4, "v": "change", "amount": 44}, 1, 6, ts="2000-01-01T00:00:00"),
    ])})
    take_and_apply(spark, cfg, "BASED")
    rows = target_rows(cfg, "BASED")
    assert values(rows, "id", "v") == {1: "change", 3: "backfill", 4: "change"}
    assert values(rows, "id", "amount") == {1: 11, 3: 33, 4: 44}


def test_base_and_first_batch_applied_together(spark, workdir):
    """Export and first batch in one run: the change still wins over the base row."""
    export = workdir / "export.csv"
    export.write_text("ID,VALUE\n1,base\n2,base\n")
    cfg = write_config(workdir, [{"name": "BASED1", "keys": ["ID"], "format": "bigquery-cdc",
                                  "base_snapshot": str(export)}])
    land(cfg, "BASED1", "batch-1", {"a.jsonl": jsonl([
        {"ID": 1, "VALUE": "change", "_CHANGE_TYPE": "UPSERT", "_CHANGE_SEQUENCE_NUMBER": "0"},
        {"ID": 2, "VALUE": None, "_CHANGE_TYPE": "DELETE"},
    ])})
    take_and_apply(spark, cfg, "BASED1")
    assert values(target_rows(cfg, "BASED1"), "ID", "VALUE") == {1: "change"}


def test_a_base_row_whose_column_differs_from_another_rows_only_by_case_is_quarantined(spark, workdir):
    # Spark and Delta take `v` and `V` as one column: the row naming it the other way goes to
    # quarantine with its line and reason, and its value is not lost into the other column.
    export = workdir / "export.jsonl"
    export.write_text('{"id": 1, "v": "a"}\n{"id": 2, "V": "b"}\n{"id": 3, "v": "c"}\n')
    cfg = write_config(workdir, [{"name": "CASES", "keys": ["id"], "format": "datastream-json",
                                  "base_snapshot": str(export)}])
    take_and_apply(spark, cfg, "CASES")
    assert values(target_rows(cfg, "CASES"), "id", "v") == {1: "a", 3: "c"}
    [bad] = delta_rows(cfg, "CASES", "quarantine")
    assert (bad["_cdc_file"], bad["_cdc_line"]) == ("export.jsonl", 2)
    assert "column 'V' and the table's column 'v' are one column to Spark and Delta" in bad["_cdc_reason"]
