"""A CSV export whose columns are all declared is read column by column by Arrow, and ends in
the same base column types, target and quarantine as when it is read row by row."""
from __future__ import annotations

import os
from decimal import Decimal

import pytest
from deltalake import DeltaTable

from cdc_assets.engine import base_import, delta, ingest
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.steps import take_and_apply

DECLARED = {"amount": "decimal(12,2)", "id": "long", "name": "string", "day": "date", "ratio": "double",
            "note": "string", "nothing": "long"}
HEADER = "id,name,amount,day,ratio,note,nothing"
LINES = [
    '1,"Smith, ""Jo""",12.30,2024-02-29,0.5,ü,',
    '2,,-0.01,,1e300,"",',
    '3,c,1.5,1970-01-01,-2.25,x,',          # 1.5 is 1.50: the text is not Arrow's spelling of it
    ',d,1.00,2000-01-01,3,y,',              # a null key
    '5,e,oops,2001-01-01,3.0,z,',           # not a decimal
    '6,f,9.999,2002-01-01,4,w,',            # more digits than decimal(12,2) holds
    '6,g,5.50,2003-01-01,+5,v,',            # key 6 again: the later line wins
    '7,h,007,2004-01-01,0.1,u,',
]


def export(path, eol: str = "\n", bom: bool = False) -> str:
    text = eol.join([HEADER, *LINES]) + eol
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return str(path)


def import_and_apply(root, spark, name: str, eol: str, bom: bool):
    (root / "landing").mkdir(parents=True)
    table = {"name": name, "keys": ["id"], "format": "datastream-json", "columns": DECLARED,
             "base_snapshot": export(root / f"{name}.csv", eol, bom)}
    cfg = write_config(root, [table])
    take_and_apply(spark, cfg, name)
    imported = delta.step_commit(os.path.join(cfg.table_dir(name), "base"), "base", 0) or {}
    land(cfg, name, "batch-1", {"part-1.jsonl": jsonl([
        mysql("UPDATE", {"id": 1, "amount": "7.25", "name": "a"}, 1, 10),
        mysql("DELETE", {"id": 2}, 1, 11)])})
    take_and_apply(spark, cfg, name)
    target = DeltaTable(os.path.join(cfg.table_dir(name), "target")).to_pyarrow_table()
    source = [f.name for f in target.schema if not f.name.startswith("_cdc_")]
    quarantine = DeltaTable(os.path.join(cfg.table_dir(name), "quarantine")).to_pyarrow_table().to_pylist()
    return (imported, sorted(target.select(source).to_pylist(), key=lambda r: r["id"]),
            {f.name: str(f.type) for f in target.schema}, ingest.column_types(cfg.table_dir(name)),
            [(q["_cdc_line"], q["_cdc_reason"], q["_cdc_raw"]) for q in quarantine])


@pytest.mark.parametrize("eol,bom", [("\n", False), ("\r\n", True)])
def test_a_declared_csv_export_ends_as_when_read_row_by_row(spark_when_needed, tmp_path, monkeypatch, eol, bom):
    columns, rows, types, ledger, rejects = import_and_apply(tmp_path / "columns", spark_when_needed, "COLS", eol, bom)
    assert "typed_columns" in columns, columns
    monkeypatch.setattr(base_import, "typed_export_columns", lambda table: None)  # the row-by-row reader
    by_rows = import_and_apply(tmp_path / "rows", spark_when_needed, "ROWS", eol, bom)
    assert "typed_columns" not in by_rows[0]
    assert (rows, types, ledger, rejects) == by_rows[1:]

    assert rejects == [(5, "key column 'id' is null", ",d,1.00,2000-01-01,3,y,"),
                       (6, "column 'amount' is declared decimal(12,2); this change's value does not fit it",
                        "5,e,oops,2001-01-01,3.0,z,"),
                       (7, "column 'amount' is declared decimal(12,2); this change's value does not fit it",
                        "6,f,9.999,2002-01-01,4,w,")]
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {1, 3, 6, 7}
    assert by_id[1]["amount"] == Decimal("7.25")
    assert by_id[3]["amount"] == Decimal("1.50") and by_id[3]["name"] == "c"
    assert by_id[6]["name"] == "g" and by_id[6]["ratio"] == 5.0
    assert by_id[7]["amount"] == Decimal("7.00")
    assert "nothing" not in ledger  # no line holds a value for it


def test_a_csv_export_with_a_line_break_in_a_value_is_read_row_by_row(spark_when_needed, tmp_path):
    (tmp_path / "landing").mkdir()
    path = tmp_path / "e.csv"
    path.write_text(HEADER + '\n1,"two\nlines",1.00,2024-01-01,1,n,\n2,b,2.00,2024-01-02,2,m,\n')
    cfg = write_config(tmp_path, [{"name": "T", "keys": ["id"], "format": "datastream-json", "columns": DECLARED,
                                   "base_snapshot": str(path)}])
    take_and_apply(spark_when_needed, cfg, "T")
    assert "typed_columns" not in (delta.step_commit(os.path.join(cfg.table_dir("T"), "base"), "base", 0) or {})
    target = DeltaTable(os.path.join(cfg.table_dir("T"), "target")).to_pyarrow_table()
    assert sorted(target.select(["id", "name"]).to_pylist(), key=lambda r: r["id"]) == \
        [{"id": 1, "name": "two\nlines"}, {"id": 2, "name": "b"}]


@pytest.mark.parametrize("where", ["here", "spark"])
def test_a_csv_export_read_in_slices_numbers_its_lines_across_them(spark_when_needed, tmp_path, monkeypatch, where):
    monkeypatch.setattr(base_import, "CSV_SLICE_BYTES", 64)  # a slice of about two lines
    if where == "spark":  # the slices' lines counted, and the slices read, by Spark's tasks
        settings_of(monkeypatch, base_import, local_build_rows=0)
    (tmp_path / "landing").mkdir()
    path = tmp_path / "e.csv"
    lines = [f"{i},n{i},{i}.25,2024-01-01,{i},x," for i in range(1, 40)]
    lines[30] = "31,n31,bad,2024-01-01,1,x,"
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    cfg = write_config(tmp_path, [{"name": "T", "keys": ["id"], "format": "datastream-json", "columns": DECLARED,
                                   "base_snapshot": str(path)}])
    assert len(base_import._csv_slices(str(path))[0]) > 10
    take_and_apply(spark_when_needed, cfg, "T")
    quarantine = DeltaTable(os.path.join(cfg.table_dir("T"), "quarantine")).to_pyarrow_table().to_pylist()
    assert [(q["_cdc_line"], q["_cdc_raw"]) for q in quarantine] == [(32, "31,n31,bad,2024-01-01,1,x,")]
    base = DeltaTable(os.path.join(cfg.table_dir("T"), "base")).to_pyarrow_table()
    assert sorted(zip(base["_cdc_line"].to_pylist(), base["id"].to_pylist())) == \
        [(i + 1, i) for i in range(1, 40) if i != 31]
