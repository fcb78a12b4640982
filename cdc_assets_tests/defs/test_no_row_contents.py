"""No row contents in logs or Dagster metadata (security basics): a run over rows that carry a
secret, some of them bad, reports counts, reasons, files and lines, never a row's values.
The rows themselves, the bad ones included, are only in the warehouse (target, quarantine).

The run is the `cdc-assets run` command in its own process, so everything its process tree prints
is read: the driver's, Dagster's, and the Spark JVM's and Python workers' (which parse the rows).
A Spark session shared with the test process would print to an output this test cannot see."""
from __future__ import annotations

import json
import os
import subprocess

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from cdc_assets_tests.engine.records import MARKS, delta_rows, mysql
from cdc_assets_tests.helpers import land, target_rows, write_config

pytestmark = MARKS

SECRET = "4111-1111-1111-1111"  # a card number in a payload column


def test_logs_and_metadata_hold_no_row_values(workdir, cli):
    export = workdir / "export.csv"
    export.write_text(f"id,card,amount\n1,{SECRET},5\n2,{SECRET},7\n3,{SECRET},1\n")
    cfg = write_config(workdir, [{"name": "CARDS", "keys": ["id"], "format": "datastream-json",
                                  "reconcile_with": str(export)}])
    dup = mysql("INSERT", {"id": 2, "card": SECRET, "amount": 7}, 1, 2)
    lines = [
        json.dumps(mysql("INSERT", {"id": 1, "card": SECRET, "amount": 5}, 1, 1)),
        json.dumps(dup), json.dumps(dup),                                                  # a re-delivery
        '{"payload": {"id": 9, "card": "' + SECRET + '"',                                  # not JSON
        json.dumps(mysql("INSERT", {"id": None, "card": SECRET}, 1, 4)),                   # a null key
        json.dumps(mysql("INSERT", {"id": 4, "card": SECRET, "amount": SECRET}, 1, 5)),    # cannot widen
        json.dumps(mysql("INSERT", {"id": 3, "card": SECRET, "amount": 1}, 1, 6)),
    ]
    land(cfg, "CARDS", "batch-1", {"part-1.jsonl": "\n".join(lines) + "\n"})
    home = workdir / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if k != "CDC_ASSETS_CRASH_AT"}
    proc = subprocess.run(cli + ["run", "--config", str(workdir / "cdc.yaml")], env={**env, "DAGSTER_HOME": str(home)},
                          capture_output=True, text=True, errors="replace", timeout=600)
    printed = proc.stdout + proc.stderr
    summary = next(ln for ln in proc.stdout.splitlines() if ln.startswith("CARDS:"))

    assert proc.returncode == 0, printed[-3000:]
    assert {r["id"] for r in target_rows(cfg, "CARDS")} == {1, 2, 3}
    assert len(delta_rows(cfg, "CARDS", "quarantine")) == 3
    assert any(SECRET in r["_cdc_raw"] for r in delta_rows(cfg, "CARDS", "quarantine"))  # kept for the user
    assert "3 quarantined" in summary and "checks 3/3 passed" in summary, summary

    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    runs = instance.get_runs()
    assert len(runs) >= 2  # ingest and apply
    events = [e for run in runs for e in instance.all_logs(run.run_id)]
    assert any(e.dagster_event and e.dagster_event.is_step_materialization for e in events)
    assert any("quarantined" in (e.user_message or "") or "line 4" in (e.user_message or "") for e in events)
    for e in events:
        assert SECRET not in repr(e), repr(e)[:2000]
    assert "line 4" in printed  # the log names the bad lines ...
    assert SECRET not in printed  # ... and no value of theirs
