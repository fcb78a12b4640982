"""The import benchmark (imports.py) imports each export format and compares it with delta-rs'
write by value; no timing is asserted."""
from __future__ import annotations

import csv

import pyarrow.parquet as pq

from . import imports


def test_a_csv_export_holds_the_parquet_exports_rows(tmp_path):
    parquet = imports.write_export(str(tmp_path), 2_000, "parquet", 7)
    text = imports.write_export(str(tmp_path), 2_000, "csv", 7)
    with open(text, newline="") as fh:
        rows = list(csv.DictReader(fh))
    want = pq.read_table(parquet).to_pylist()
    assert len(rows) == len(want) == 2_000
    assert [int(r["id"]) for r in rows] == [w["id"] for w in want]
    assert [r["amount"] for r in rows[:50]] == [str(w["amount"]) for w in want[:50]]


def test_both_formats_import_equal_to_delta_rs_writing_the_same_rows(tmp_path):
    out = tmp_path / "out"
    rc = imports.main(["--sizes", "20k", "--formats", "parquet,csv", "--out", str(out), "--work", str(tmp_path / "w")])
    table = (out / "imports.md").read_text()
    assert rc == 0, table
    lines = [ln for ln in table.splitlines() if ln.startswith("| 20k |")]
    assert [ln.split(" | ")[1] for ln in lines] == ["parquet", "csv"]
    assert all("| values equal | ok |" in ln for ln in lines), table
    with open(out / "imports.csv", newline="") as fh:
        assert [r["format"] for r in csv.DictReader(fh)] == ["parquet", "csv"]
