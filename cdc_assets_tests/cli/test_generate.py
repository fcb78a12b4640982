"""`cdc-assets generate` and `write_feed`: the files on disk."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cdc_assets.cli.generate import write_feed
from cdc_assets.cli.main import main
from cdc_assets.core import generator
from cdc_assets.core.changes import Change
from cdc_assets.core.formats import parse_file
from cdc_assets.core.values import canonical_text, infer_text

ARGS = ["--table", "ORDERS", "--changes", "1000", "--inserts", "38.2", "--updates", "42.4",
        "--deletes", "19.4", "--seed", "5", "--batches", "3", "--files-per-batch", "3",
        "--duplicates", "3", "--delays", "5"]


def meaning(row: dict) -> dict:
    return {c: canonical_text(v) for c, v in row.items()}


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read_export(path: Path) -> dict:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [{k: infer_text(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    return {r["id"]: r for r in rows}


@pytest.mark.parametrize("source", generator.SOURCES)
def test_generate_writes_complete_parsable_files_and_the_export(tmp_path, capsys, source):
    assert main(["generate", "--out", str(tmp_path), "--source", source, *ARGS]) == 0
    out = capsys.readouterr().out.strip()
    assert "\n" not in out
    assert "1000 changes (382 inserts, 424 updates, 194 deletes) -> 188 live rows" in out

    landing = tmp_path / "landing" / "ORDERS"
    assert sorted(p.name for p in landing.iterdir()) == ["batch-0001", "batch-0002", "batch-0003"]
    files = sorted(landing.rglob("*.jsonl"))
    assert [f.name for f in files] == ["part-0001.jsonl", "part-0002.jsonl", "part-0003.jsonl"] * 3
    leftovers = [p for p in tmp_path.rglob("*") if p.name.startswith((".", "_"))]
    assert leftovers == []

    latest, uuids, lines = {}, set(), 0
    for f in files:
        for c in parse_file("datastream-json", {}, ["id"], f.name, f.read_bytes()):
            assert isinstance(c, Change), f"{f}: {c}"
            lines += 1
            uuids.add(c.event_id)
            if c.key not in latest or c.order > latest[c.key].order:
                latest[c.key] = c
    assert len(uuids) == 1000 and lines == 1030  # 3% delivered twice
    applied = {k[0]: c.row for k, c in latest.items() if c.op != "D"}

    export = read_export(tmp_path / "exports" / "ORDERS.csv")
    assert len(export) == 188
    assert export == applied  # the feed, applied by the rules (rules.md#apply-rules), reconciles with the source


def test_export_equals_the_final_source_state(tmp_path):
    summary = write_feed(tmp_path, "T1", "oracle", changes=400, inserts=50, updates=30, deletes=20, seed=9)
    h = generator.generate_history(table="T1", changes=400, inserts=50, updates=30, deletes=20, seed=9)
    export_path = Path(summary["export"])
    assert export_path == tmp_path / "exports" / "T1.csv"
    text = export_path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "id,customer,amount,status,region"
    # by meaning: the export's "296.32" is kept exact, the generator holds the float
    assert {k: meaning(r) for k, r in read_export(export_path).items()} == {k: meaning(r) for k, r in h.final.items()}
    raw = {r["id"]: r for r in csv.DictReader(text.splitlines())}
    nulls = [k for k, r in h.final.items() if r["status"] is None]
    assert nulls and all(raw[str(k)]["status"] == "" for k in nulls)  # NULL is an empty field
    assert summary["live_rows"] == len(h.final) == 120
    assert (summary["inserts"], summary["updates"], summary["deletes"]) == (200, 120, 80)
    assert summary["events"] == 400 and summary["delivered"] >= 400
    assert all(Path(f).is_file() for f in summary["files"])


def test_same_seed_writes_the_same_bytes(tmp_path):
    for name in ("a", "b"):
        write_feed(tmp_path / name, "ORDERS", "mysql", changes=500, seed=3, first_binlog=999_999)
    write_feed(tmp_path / "c", "ORDERS", "mysql", changes=500, seed=4)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert tree(tmp_path / "a") != tree(tmp_path / "c")
    logs = {json.loads(line)["source_metadata"]["log_file"]
            for f in (tmp_path / "a").rglob("*.jsonl") for line in f.read_text().splitlines()}
    assert "mysql-bin.1000000" in logs


def test_percentages_must_add_to_100(tmp_path, capsys):
    code = main(["generate", "--out", str(tmp_path), "--inserts", "50", "--updates", "50", "--deletes", "10"])
    assert code == 2
    err = capsys.readouterr().err
    assert "adding to 100" in err and "110" in err
    assert not (tmp_path / "landing").exists() and not (tmp_path / "exports").exists()


def test_refuses_a_landing_folder_that_already_has_batches(tmp_path, capsys):
    assert main(["generate", "--out", str(tmp_path), "--changes", "50"]) == 0
    before = tree(tmp_path)
    assert main(["generate", "--out", str(tmp_path), "--changes", "50", "--seed", "1"]) == 2
    assert "already holds batches" in capsys.readouterr().err
    assert tree(tmp_path) == before
    assert main(["generate", "--out", str(tmp_path), "--changes", "50", "--table", "OTHER"]) == 0


def test_unknown_source_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["generate", "--out", str(tmp_path), "--source", "db2"])
    assert e.value.code == 2
