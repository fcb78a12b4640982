"""rules.md#rule-7: bad input never stops the other tables or loses a record. Unreadable lines and
files, null or missing keys and unknown change types go to the table's quarantine with
file, line, reason and raw text; the file's valid records are applied; the run's summary
line for the table shows the quarantined count."""
from __future__ import annotations

import json

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.run_loop import run_config
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import bq_cdc, mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.warehouse import delta_rows, delta_version, target_rows, values

pytestmark = MARKS


def test_bad_records_are_quarantined_and_the_rest_applied(spark, workdir, monkeypatch, capfd):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # the configuration's own instance, beside its cdc.yaml
    cfg = write_config(workdir, [
        {"name": "BAD", "keys": ["id"], "format": "datastream-json"},
        {"name": "GOOD", "keys": ["K"], "format": "bigquery-cdc"},
    ])
    null_key = mysql("INSERT", {"id": None, "v": "x"}, 1, 3)
    unknown = mysql("INSERT", {"id": 9, "v": "x"}, 1, 4)
    unknown["source_metadata"]["change_type"] = "MERGE"
    no_key = mysql("INSERT", {"v": "x"}, 1, 6)
    lines = [
        json.dumps(mysql("INSERT", {"id": 1, "v": "ok"}, 1, 1)),
        '{"uuid": "u-2", "payload": {"id": 2',   # cut short: not JSON
        json.dumps(null_key),
        json.dumps(unknown),
        json.dumps(mysql("INSERT", {"id": 2, "v": "ok"}, 1, 5)),
        json.dumps(no_key),
        json.dumps(mysql("INSERT", {"id": 3, "v": "x"}, 1, 7, ts=float("nan"))),  # Python's JSON allows NaN
    ]
    land(cfg, "BAD", "batch-1", {"part-1.jsonl": "\n".join(lines) + "\n",
                                 "part-2.jsonl.gz": b"\x1f\x8b\x08 this is not gzip data"})
    land(cfg, "GOOD", "batch-1", {"a.jsonl": jsonl([bq_cdc("UPSERT", {"K": "a", "V": "1"}, "1"),
                                                    bq_cdc("UPSERT", {"K": "b", "V": "1"}, "1")])})

    summary = []
    outcomes = {o.table: o for o in run_config(cfg, build_definitions, echo=summary.append)}
    logged = capfd.readouterr()

    # the valid records around the bad ones are applied; the other table is unaffected
    assert values(target_rows(cfg, "BAD"), "id", "v") == {1: "ok", 2: "ok"}
    assert values(target_rows(cfg, "GOOD"), "K", "V") == {"a": "1", "b": "1"}
    assert outcomes["GOOD"].ok and outcomes["BAD"].ok, outcomes
    assert outcomes["BAD"].checks["batch_accounted"]  # every record read is applied, a duplicate or quarantined

    q = sorted(delta_rows(cfg, "BAD", "quarantine"), key=lambda r: (r["_cdc_file"], r["_cdc_line"]))
    got = [(r["table"], r["_cdc_file"], r["_cdc_line"]) for r in q]
    f1, f2 = "batch-1/part-1.jsonl", "batch-1/part-2.jsonl.gz"  # file names as landed, under the table's folder
    assert got == [("BAD", f1, 2), ("BAD", f1, 3), ("BAD", f1, 4), ("BAD", f1, 6), ("BAD", f1, 7), ("BAD", f2, 0)]
    reasons = [r["_cdc_reason"] for r in q]
    assert "JSON" in reasons[0]
    assert "'id'" in reasons[1] and "null" in reasons[1]
    # the column and the kind, never the value (MERGE) itself
    assert "source_metadata.change_type" in reasons[2] and "change type" in reasons[2] and "MERGE" not in reasons[2]
    assert "'id'" in reasons[3] and "missing" in reasons[3]
    assert "timestamp" in reasons[4]
    assert "gzip" in reasons[5]
    assert q[0]["_cdc_raw"] == lines[1]
    assert json.loads(q[1]["_cdc_raw"]) == null_key
    assert json.loads(q[2]["_cdc_raw"]) == unknown

    bad_line = next(s for s in summary if s.startswith("BAD:"))
    good_line = next(s for s in summary if s.startswith("GOOD:"))
    assert "6 quarantined" in bad_line, bad_line
    assert "0 quarantined" in good_line and good_line.startswith("GOOD: ok"), good_line
    assert delta_version(cfg, "GOOD", "quarantine") == -1 or delta_rows(cfg, "GOOD", "quarantine") == []

    # the error message names the table, the file and the line
    log_lines = (logged.out + logged.err).splitlines()
    assert any("BAD" in ln and "batch-1/part-1.jsonl" in ln and "line 4" in ln for ln in log_lines)

