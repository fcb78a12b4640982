"""A key is exactly its value (rules.md#keys): distinct texts never merge into one target row, through
real runs of every reader (JSON events, CSV declared or inferred, Parquet column by column)."""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute in the duplicate test
import pyarrow.parquet as pq

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import target_rows, values

pytestmark = MARKS

IDS = ["1.1", "1.10", "1.0", "1", "+5", "5", "-0", "0", "007", "7", "", " 7", "7 ", "Ⅶ", "e\u0301", "\u00e9",
       "ABC", "abc"]
CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}


def csv_rows(rows) -> str:
    return "op,id,v,seq\n" + "".join(f'{op},"{i}",{v},{seq}\n' for op, i, v, seq in rows)


def test_json_text_keys_that_look_alike_stay_distinct(spark, workdir):
    cfg = write_config(workdir, [{"name": "JK", "keys": ["id"], "format": "datastream-json",
                                  "columns": {"id": "string"}}])
    land(cfg, "JK", "b1", {"a.jsonl": jsonl([mysql("INSERT", {"id": i, "v": f"v{n}"}, 1, n + 1)
                                             for n, i in enumerate(IDS)])})
    take_and_apply(spark, cfg, "JK")
    assert values(target_rows(cfg, "JK"), "id", "v") == {i: f"v{n}" for n, i in enumerate(IDS)}
    # An update and a delete of one of them touch that text only.
    land(cfg, "JK", "b2", {"a.jsonl": jsonl([mysql("UPDATE", {"id": "1.10", "v": "new"}, 2, 1),
                                             mysql("DELETE", {"id": "+5", "v": None}, 2, 2)])})
    take_and_apply(spark, cfg, "JK")
    want = {i: f"v{n}" for n, i in enumerate(IDS) if i != "+5"}
    want["1.10"] = "new"
    assert values(target_rows(cfg, "JK"), "id", "v") == want


def test_csv_text_keys_declared_and_inferred(spark, workdir):
    csv_ids = [i for i in IDS if i != ""]  # an empty CSV field is null: no key
    cfg = write_config(workdir, [
        {"name": "DECLARED", "keys": ["id"], "format": "changeset", "options": CHANGESET, "columns": {"id": "string"}},
        {"name": "INFERRED", "keys": ["id"], "format": "changeset", "options": CHANGESET},
    ])
    for name in ("DECLARED", "INFERRED"):
        land(cfg, name, "b1", {"a.csv": csv_rows([("I", i, f"v{n}", 1) for n, i in enumerate(csv_ids)])})
        take_and_apply(spark, cfg, name)
        land(cfg, name, "b2", {"a.csv": csv_rows([("U", "+5", "new", 2), ("D", "1.0", "", 2)])})
        take_and_apply(spark, cfg, name)
        want = {i: f"v{n}" for n, i in enumerate(csv_ids) if i != "1.0"}
        want["+5"] = "new"
        assert values(target_rows(cfg, name), "id", "v") == want, name


def test_parquet_text_keys_read_column_by_column(spark, workdir):
    cfg = write_config(workdir, [{"name": "PQ", "keys": ["id"], "format": "changeset", "options": CHANGESET}])
    table = pa.table({"op": ["I"] * len(IDS), "id": IDS, "v": [f"v{n}" for n in range(len(IDS))],
                      "seq": list(range(len(IDS)))})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    land(cfg, "PQ", "b1", {"a.parquet": buf.getvalue()})
    take_and_apply(spark, cfg, "PQ")
    assert values(target_rows(cfg, "PQ"), "id", "v") == {i: f"v{n}" for n, i in enumerate(IDS)}


def test_numbers_of_one_column_are_keys_by_value(spark, workdir):
    """A numeric column: 5 and 5.0 are one number, so one key; the later change wins."""
    cfg = write_config(workdir, [{"name": "NUM", "keys": ["id"], "format": "changeset", "options": CHANGESET}])
    land(cfg, "NUM", "b1", {"a.csv": "op,id,v,seq\nI,5,old,1\nI,6.5,x,1\n"})
    take_and_apply(spark, cfg, "NUM")
    land(cfg, "NUM", "b2", {"a.csv": "op,id,v,seq\nU,5.0,new,2\nU,6.50,y,2\n"})
    take_and_apply(spark, cfg, "NUM")
    assert sorted(values(target_rows(cfg, "NUM"), "id", "v").values()) == ["new", "y"]


def test_a_duplicated_key_is_found_and_pointed_at_without_its_value(spark, workdir):
    import os

    from deltalake import DeltaTable, write_deltalake

    from cdc_assets.engine.checks import key_uniqueness

    secret = "carol@example.com"
    cfg = write_config(workdir, [{"name": "DUP", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "DUP", "b1", {"a.jsonl": jsonl([mysql("INSERT", {"id": secret, "v": "a"}, 1, 1),
                                              mysql("INSERT", {"id": "other", "v": "b"}, 1, 2)])})
    take_and_apply(spark, cfg, "DUP")
    target = os.path.join(cfg.table_dir("DUP"), "target")
    rows = DeltaTable(target).to_pyarrow_table()
    write_deltalake(target, rows.filter(pa.compute.equal(rows["id"], secret)), mode="append")  # a second row
    figures = key_uniqueness(cfg, cfg.table("DUP"))
    assert figures.duplicate_keys == 1
    assert figures.sample_duplicates == ("batch 1 file 1 line 1",) * 2
    assert secret not in repr(figures)
