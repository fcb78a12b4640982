"""The growth benchmark (growth.py) runs end to end at a tiny size and writes what it says. No
timing is asserted."""
from __future__ import annotations

import csv
import json
import os

from . import growth


def test_growth_measures_every_batch_beside_the_peer(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # restored after: the benchmark's runs use none
    out = tmp_path / "figures"
    assert growth.main(["--batches", "5", "--bucket", "2", "--out", str(out), "--note", "test"]) == 0
    summary = json.loads((out / "growth.json").read_text())
    assert summary["batches"] == 5 and summary["note"] == "test"
    assert [b["batches"] for b in summary["buckets"]] == ["2-3", "4-5"]
    assert summary["run_cpu_growth"] > 0 and summary["peer_cpu_growth"] > 0
    with open(out / "growth.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["batch"]) for r in rows] == [1, 2, 3, 4, 5]
    assert all(float(r["run_cpu_s"]) > 0 for r in rows)
    assert os.path.getsize(out / "growth.png") > 0
