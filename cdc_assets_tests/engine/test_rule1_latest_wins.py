"""rules.md#rule-1: per key, the change with the greatest ordering key (the source's order) wins,
whatever file or batch it arrives in; a winning delete removes the row.

Each test lands two batches whose arrival order contradicts the source order, so
"last file read wins" or "last batch wins" would give a different target. Values
name the change that should win ("new") and the ones that should lose ("old").
"""
from __future__ import annotations

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import bq_append, bq_cdc, ds_event, mysql, oracle, postgres, sqlserver
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import by_key, target_rows, values

pytestmark = MARKS


def test_datastream_json_every_source_position(spark, workdir):
    """Oracle scn/rs_id/ssn, MySQL binlog file/position, PostgreSQL and SQL Server lsn: all events
    share one source_timestamp second, so only the position orders them."""
    cfg = write_config(workdir, [{"name": "DS", "keys": ["id"], "format": "datastream-json"}])
    batch1 = {
        "part-a.jsonl": jsonl([
            # 1 Oracle: rs_id's parts are hexadecimal numbers (0x10 > 0xf, though "10" < "f" as text)
            oracle("UPDATE", {"id": 1, "v": "new"}, scn=500, rs_id="0x6cf4.56b26.10"),
            # 2 MySQL: binlog 1000000 follows 999999 (as text, '9' > '1'); the newer event lands first
            mysql("UPDATE", {"id": 2, "v": "new"}, 1_000_000, 4),
            # 3 MySQL: an older file arrives first, its successor in the next batch
            mysql("INSERT", {"id": 3, "v": "old"}, 999_999, 900),
            # 4 PostgreSQL lsn X/Y as two hex numbers: 10/0 follows F/FFFFFFFF
            postgres("UPDATE", {"id": 4, "v": "new"}, "10/0"),
            # 5 SQL Server lsn: three hex numbers
            sqlserver("UPDATE", {"id": 5, "v": "new"}, "0000002B:00000000:0001"),
            # 6 MySQL log_position compares as a number (10 > 9)
            mysql("UPDATE", {"id": 6, "v": "new"}, 7, 10),
        ]),
        "part-b.jsonl": jsonl([
            oracle("UPDATE", {"id": 1, "v": "old"}, scn=500, rs_id="0x6cf4.56b26.f"),
            oracle("INSERT", {"id": 1, "v": "old"}, scn=499, rs_id="0x6cf4.56b26.ff", ssn=9),
            mysql("UPDATE", {"id": 6, "v": "old"}, 7, 9),
            postgres("INSERT", {"id": 4, "v": "old"}, "F/FFFFFFFF"),
            # 7 a later source_timestamp wins even at a smaller position (timestamp first)
            mysql("UPDATE", {"id": 7, "v": "new"}, 7, 1, ts="2024-03-01T10:00:01"),
            mysql("UPDATE", {"id": 7, "v": "old"}, 7, 99),
            # 8 a delete with the greatest position removes the row, read before the older insert
            sqlserver("DELETE", {"id": 8, "v": None}, "0000002A:00000120:0002"),
            sqlserver("INSERT", {"id": 8, "v": "old"}, "0000002A:00000120:0001"),
            # 9 a backfill read (no position) ranks below a CDC event of the same second
            mysql("UPDATE", {"id": 9, "v": "new"}, 7, 5),
        ]),
    }
    land(cfg, "DS", "batch-1", batch1)
    take_and_apply(spark, cfg, "DS")
    assert values(target_rows(cfg, "DS"), "id", "v") == {1: "new", 2: "new", 3: "old", 4: "new", 5: "new",
                                                        6: "new", 7: "new", 9: "new"}

    land(cfg, "DS", "batch-2", {"part-a.jsonl": jsonl([
        oracle("DELETE", {"id": 1, "v": None}, scn=499, rs_id="0x6cf4.56b26.fff", ssn=99),  # older: ignored
        mysql("DELETE", {"id": 2, "v": None}, 999_999, 1_000_000),  # delayed from the previous binlog
        mysql("UPDATE", {"id": 3, "v": "new"}, 1_000_000, 4),       # the binlog rotated
        postgres("DELETE", {"id": 4, "v": None}, "F/FFFFFFFF"),
        sqlserver("INSERT", {"id": 5, "v": "old"}, "0000002A:FFFFFFFF:FFFF"),
        ds_event("INSERT", {"id": 9, "v": "old"}, read_method="mysql-backfill-fulldump"),
        ds_event("INSERT", {"id": 10, "v": "new"}, read_method="mysql-backfill-fulldump"),
    ])})
    take_and_apply(spark, cfg, "DS")
    rows = target_rows(cfg, "DS")
    assert values(rows, "id", "v") == {1: "new", 2: "new", 3: "new", 4: "new", 5: "new", 6: "new", 7: "new",
                                      9: "new", 10: "new"}
    assert len(rows) == 9  # each key once; 8 stays deleted


def test_datastream_update_delete_ranks_before_update_insert_at_one_position(spark, workdir):
    """A key update is logged as UPDATE-DELETE + UPDATE-INSERT at one position: the row survives."""
    cfg = write_config(workdir, [{"name": "DSPK", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "DSPK", "batch-1", {
        "a.jsonl": jsonl([mysql("UPDATE-INSERT", {"id": 1, "v": "new"}, 3, 77)]),
        "b.jsonl": jsonl([mysql("UPDATE-DELETE", {"id": 1, "v": "old"}, 3, 77)]),
    })
    take_and_apply(spark, cfg, "DSPK")
    assert target_rows(cfg, "DSPK") == [{"id": 1, "v": "new"}]


def test_bigquery_append_integer_and_string_sequence_numbers(spark, workdir):
    """datastream_metadata.change_sequence_number orders the rows: integers as numbers ('9' < '10'),
    strings as '/'-separated hexadecimal sections ('FF' < '100'); source_timestamp ties don't matter."""
    cfg = write_config(workdir, [{"name": "BQA", "keys": ["COL1"], "format": "bigquery-append"}])
    land(cfg, "BQA", "batch-1", {
        "part-0001.jsonl": jsonl([
            bq_append("UPDATE-INSERT", {"COL1": "int", "COL2": "new"}, 10),
            bq_append("INSERT", {"COL1": "str", "COL2": "old"}, "FF"),
            bq_append("INSERT", {"COL1": "sections", "COL2": "new"}, "1/100"),
            bq_append("INSERT", {"COL1": "gone", "COL2": "old"}, 5),
        ]),
        "part-0002.jsonl": jsonl([
            bq_append("UPDATE-INSERT", {"COL1": "str", "COL2": "new"}, "100"),
            bq_append("UPDATE-INSERT", {"COL1": "sections", "COL2": "old"}, "1/FF"),
            bq_append("DELETE", {"COL1": "gone", "COL2": "old"}, 6),
            # one position, UPDATE-DELETE then UPDATE-INSERT: the insert wins
            bq_append("UPDATE-INSERT", {"COL1": "pk", "COL2": "new"}, 42),
            bq_append("UPDATE-DELETE", {"COL1": "pk", "COL2": "old"}, 42),
        ]),
    })
    take_and_apply(spark, cfg, "BQA")
    assert values(target_rows(cfg, "BQA"), "COL1", "COL2") == {"int": "new", "str": "new", "sections": "new",
                                                              "pk": "new"}

    land(cfg, "BQA", "batch-2", {"part-0001.jsonl": jsonl([
        bq_append("UPDATE-INSERT", {"COL1": "int", "COL2": "old"}, 9),   # 9 < 10 as numbers
        bq_append("UPDATE-INSERT", {"COL1": "str", "COL2": "old"}, "FE"),
        bq_append("INSERT", {"COL1": "gone", "COL2": "old"}, 4),
        bq_append("DELETE", {"COL1": "sections", "COL2": None}, "1/FF/0"),  # more sections, smaller prefix
    ])})
    take_and_apply(spark, cfg, "BQA")
    assert values(target_rows(cfg, "BQA"), "COL1", "COL2") == {"int": "new", "str": "new", "sections": "new",
                                                              "pk": "new"}


def test_bigquery_cdc_change_sequence_number_and_arrival(spark, workdir):
    """_CHANGE_SEQUENCE_NUMBER compares as hexadecimal sections ('9' < '10', case-blind);
    without one, arrival (batch, file name, line) orders the rows."""
    cfg = write_config(workdir, [{"name": "BQC", "keys": ["K"], "format": "bigquery-cdc"}])
    land(cfg, "BQC", "batch-1", {
        "a.jsonl": jsonl([
            bq_cdc("UPSERT", {"K": "hex", "V": "new"}, "10"),
            bq_cdc("UPSERT", {"K": "case", "V": "new"}, "AC"),
            bq_cdc("UPSERT", {"K": "deleted", "V": "old"}, "FFF/B"),
            bq_cdc("UPSERT", {"K": "arrival", "V": "old"}),
            bq_cdc("UPSERT", {"K": "arrival", "V": "old"}),
        ]),
        "b.jsonl": jsonl([
            bq_cdc("UPSERT", {"K": "hex", "V": "old"}, "9"),
            bq_cdc("UPSERT", {"K": "case", "V": "old"}, "ab"),  # as text "ab" > "AC"
            bq_cdc("DELETE", {"K": "deleted", "V": None}, "FFF/ABC"),
            bq_cdc("UPSERT", {"K": "arrival", "V": "new-in-batch-1"}),  # file b follows file a
        ]),
    })
    take_and_apply(spark, cfg, "BQC")
    assert values(target_rows(cfg, "BQC"), "K", "V") == {"hex": "new", "case": "new", "arrival": "new-in-batch-1"}

    land(cfg, "BQC", "batch-2", {"a.jsonl": jsonl([
        bq_cdc("UPSERT", {"K": "hex", "V": "old"}, "F"),
        bq_cdc("UPSERT", {"K": "deleted", "V": "old"}, "FFF/AB"),
        bq_cdc("UPSERT", {"K": "arrival", "V": "new"}),
    ])})
    take_and_apply(spark, cfg, "BQC")
    assert values(target_rows(cfg, "BQC"), "K", "V") == {"hex": "new", "case": "new", "arrival": "new"}


CHANGESET = {"op_column": "FLAG", "sequence_by": ["SEQ"], "inserts": ["I"], "updates": ["U"], "deletes": ["D"]}


def test_changeset_csv_and_json_lines_sequence_by(spark, workdir):
    """sequence_by columns are typed: CSV integers are numbers (9 < 10), in CSV and JSON lines alike."""
    cfg = write_config(workdir, [{"name": "CS", "keys": ["ID"], "format": "changeset", "options": CHANGESET}])
    land(cfg, "CS", "batch-1", {
        "part-0001.csv": "FLAG,ID,VALUE,SEQ\n"
                         "U,1,new,10\n"
                         "I,2,old,9\n"
                         "D,3,,10\n"
                         "I,4,old,1\n",
        "part-0002.jsonl": jsonl([
            {"FLAG": "I", "ID": 1, "VALUE": "old", "SEQ": 9},
            {"FLAG": "U", "ID": 2, "VALUE": "new", "SEQ": 10},
            {"FLAG": "I", "ID": 3, "VALUE": "old", "SEQ": 9},
            {"FLAG": "U", "ID": 4, "VALUE": "new", "SEQ": 2.5},
        ]),
    })
    take_and_apply(spark, cfg, "CS")
    assert values(target_rows(cfg, "CS"), "ID", "VALUE") == {1: "new", 2: "new", 4: "new"}

    land(cfg, "CS", "batch-2", {
        "part-0001.jsonl": jsonl([{"FLAG": "U", "ID": 1, "VALUE": "old", "SEQ": 9},
                                  {"FLAG": "D", "ID": 4, "VALUE": None, "SEQ": 3}]),
        "part-0002.csv": "FLAG,ID,VALUE,SEQ\nU,2,old,9\nU,3,old,9\nI,5,new,1\n",
    })
    take_and_apply(spark, cfg, "CS")
    rows = target_rows(cfg, "CS")
    assert values(rows, "ID", "VALUE") == {1: "new", 2: "new", 5: "new"}
    assert by_key(rows, "ID")[(1,)]["SEQ"] == 10
