"""No row contents in logs or Dagster metadata (security basics): a run over rows that carry a
secret, some of them bad, reports counts, reasons, files and lines, never a row's values.
The rows themselves, the bad ones included, are only in the warehouse (target, quarantine).

The run is the `cdc-assets run` command in its own process, so everything its process tree prints
is read: the driver's, Dagster's, and the Spark JVM's and Python workers' (which parse the rows).
A Spark session shared with the test process would print to an output this test cannot see."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.warehouse import delta_rows, target_rows

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
    env["CDC_ASSETS_LOCAL_BUILD_ROWS"] = "0"  # the first build on Spark: its JVM and workers print here too
    proc = subprocess.run(cli + ["run", "--config", str(workdir / "cdc.yaml")], env={**env, "DAGSTER_HOME": str(home)},
                          capture_output=True, text=True, errors="replace", timeout=600)
    printed = proc.stdout + proc.stderr
    summary = next(ln for ln in proc.stdout.splitlines() if ln.startswith("CARDS:"))

    assert proc.returncode == 0, printed[-3000:]
    assert {r["id"] for r in target_rows(cfg, "CARDS")} == {1, 2, 3}
    assert len(delta_rows(cfg, "CARDS", "quarantine")) == 3
    assert any(SECRET in r["_cdc_raw"] for r in delta_rows(cfg, "CARDS", "quarantine"))  # kept for the user
    assert "3 quarantined" in summary and "checks 4/4 passed" in summary, summary

    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    runs = instance.get_runs()
    assert [r.job_name for r in runs] == ["CARDS_batch_job"]  # the batch's one run: ingest and apply
    events = [e for run in runs for e in instance.all_logs(run.run_id)]
    assert any(e.dagster_event and e.dagster_event.is_step_materialization for e in events)
    assert any("quarantined" in (e.user_message or "") or "line 4" in (e.user_message or "") for e in events)
    for e in events:
        assert SECRET not in repr(e), repr(e)[:2000]
    assert "line 4" in printed  # the log names the bad lines ...
    assert SECRET not in printed  # ... and no value of theirs


KEY_SECRET = "k3y-5ecret-4111"  # every key value holds it: a batch's smallest and largest key too


def _leaks_in_delta_logs(root, secret: str) -> list[str]:
    """Every action of every Delta commit under `root` that holds `secret`, but for the file
    statistics of added files (a Delta table's own min/max, as in any Delta table)."""
    found = []
    for folder, _, files in os.walk(root):
        if os.path.basename(folder) != "_delta_log":
            continue
        for name in sorted(f for f in files if f.endswith(".json")):
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                for line in fh.read().split("\n"):
                    if not line.strip():
                        continue
                    action = json.loads(line)
                    action.get("add", {}).pop("stats", None)
                    text = json.dumps(action, ensure_ascii=False)
                    if secret in text:
                        found.append(f"{os.path.relpath(folder, root)}/{name}: {text[:600]}")
    return found


def test_key_values_reach_no_log_event_tag_or_commit_info(workdir, cli, capfd):
    """A secret in a key column of an unpartitioned table, through a first build, an incremental
    apply, the SCD2 history, the checks, maintenance (compaction, trims, vacuum) and a re-delivery
    after a trim: the Dagster instance's storage (events and their metadata, run tags, logs, any
    file of DAGSTER_HOME), everything printed and every Delta commit's actions hold no key value;
    only the warehouse's rows and its files' statistics do."""
    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets.engine.maintenance import maintain

    tables = [{"name": "HIST", "keys": ["id"], "format": "datastream-json", "history": True,
               "maintenance": {"trim_staging_after": "1h"}},
              {"name": "TRIM", "keys": ["id"], "format": "datastream-json",
               "maintenance": {"trim_changes_after": "1h", "trim_staging_after": "1h"}}]
    cfg = write_config(workdir, tables)
    key = [f"{KEY_SECRET}-{i}" for i in range(5)]
    first = [mysql("INSERT", {"id": key[i], "v": "a"}, 1, 10 + i, uuid=f"ev-{i}") for i in range(1, 4)]
    batches = [first,
               [mysql("UPDATE", {"id": key[1], "v": "b"}, 1, 20), mysql("DELETE", {"id": key[2], "v": None}, 1, 21),
                mysql("INSERT", {"id": key[4], "v": "a"}, 1, 22), first[0]],
               [mysql("UPDATE", {"id": key[3], "v": "c"}, 1, 30), first[1]]]
    home = workdir / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**{k: v for k, v in os.environ.items() if k != "CDC_ASSETS_CRASH_AT"}, "DAGSTER_HOME": str(home)}
    printed = []

    def command(*args: str) -> None:
        proc = subprocess.run(cli + list(args) + ["--config", str(workdir / "cdc.yaml")], env=env,
                              capture_output=True, text=True, errors="replace", timeout=600)
        printed.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, printed[-1][-3000:]

    for n, changes in enumerate(batches[:2], start=1):
        for t in tables:
            land(cfg, t["name"], f"batch-{n}", {"p.jsonl": jsonl(changes)})
        command("run")  # the first build, then an incremental apply and history update, with their checks
    command("maintain")
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    for t in tables:
        assert build_definitions(cfg).resolve_job_def(f"{t['name']}_maintenance_job").execute_in_process(
            instance=instance).success
        report = maintain(cfg, cfg.table(t["name"]), now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2),
                          retention=0)
        assert report.staging_trimmed_through == 2
    for t in tables:
        land(cfg, t["name"], "batch-3", {"p.jsonl": jsonl(batches[2])})
    command("run")  # after the trims: a re-delivery, and an update
    command("status")
    captured = capfd.readouterr()
    printed.append(captured.out + captured.err)

    for t in tables:
        assert {r["id"]: r["v"] for r in target_rows(cfg, t["name"])} == {
            key[1]: "b", key[3]: "c", key[4]: "a"}, t
    assert len(delta_rows(cfg, "HIST", "history")) >= 6

    runs = instance.get_runs()
    assert len(runs) >= 6
    leaks = [f"run {r.run_id} tags: {r.tags}" for r in runs if KEY_SECRET in repr(r.tags) or KEY_SECRET in repr(r)]
    events = [e for r in runs for e in instance.all_logs(r.run_id)]
    assert any(e.dagster_event and e.dagster_event.is_step_materialization for e in events)
    leaks += [repr(e)[:1500] for e in events if KEY_SECRET in repr(e)]
    leaks += [os.path.join(folder, f) for folder, _, files in os.walk(home) for f in files
              if KEY_SECRET.encode() in open(os.path.join(folder, f), "rb").read()]
    leaks += [f"printed: ...{p[max(0, p.find(KEY_SECRET) - 300):p.find(KEY_SECRET) + 300]}" for p in printed
              if KEY_SECRET in p]
    leaks += _leaks_in_delta_logs(cfg.warehouse, KEY_SECRET)
    assert not leaks, "\n".join(leaks)


def test_quarantine_reasons_name_columns_never_values(workdir, cli):
    """Bad records whose offending value carries a marker (a card number in the op column of a
    column-shifted row, in a change type, a sequence number, a source position, a timestamp), in
    every format: each is quarantined with its reason, and the marker is in no reason, nothing the
    run prints and no Dagster event; the quarantine's raw text keeps it for the user."""
    from cdc_assets_tests.support.marked import MARKER, TABLES, catalogue
    from cdc_assets_tests.support.records import bq_append, bq_cdc

    cases = catalogue()
    good = {
        "DS": jsonl([mysql("INSERT", {"id": 1, "v": "ok", "amount": 5}, 1, 1)]),
        "DSTYPED": jsonl([mysql("INSERT", {"id": 1, "amount": 5, "ts": "2024-01-01T00:00:00Z"}, 1, 1)]),
        "BQCDC": jsonl([bq_cdc("UPSERT", {"id": 1, "v": "ok"}, "1")]),
        "BQAPPEND": jsonl([bq_append("INSERT", {"id": 1, "v": "ok"}, 1)]),
        "CHANGES": "FLAG,id,v,SEQ\nI,1,ok,1\n",
        "DBZ": jsonl([{"before": None, "after": {"id": 1, "v": "ok"}, "op": "c",
                       "source": {"connector": "postgresql", "ts_ms": 1709287200000, "lsn": 1}, "ts_ms": 1}]),
    }
    cfg = write_config(workdir, [{"name": n, **t} for n, t in TABLES.items()])
    landed = {}  # (table, landed file) -> its case
    for name, text in good.items():
        ext = "csv" if name == "CHANGES" else "jsonl"
        files = {f"a-good.{ext}": text}
        for i, c in enumerate(cases):
            if c.table == name:
                file = f"bad-{i:02d}.{c.file.rsplit('.', 1)[1]}"
                files[file] = "\n".join(c.lines) + "\n"
                landed[name, f"batch-1/{file}"] = c
        land(cfg, name, "batch-1", files)
    home = workdir / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if k != "CDC_ASSETS_CRASH_AT"}
    proc = subprocess.run(cli + ["run", "--config", str(workdir / "cdc.yaml")], env={**env, "DAGSTER_HOME": str(home)},
                          capture_output=True, text=True, errors="replace", timeout=600)
    printed = proc.stdout + proc.stderr

    reasons = []
    for name in TABLES:
        assert {r["id"] for r in target_rows(cfg, name)} == {1}, (name, printed[-3000:])
        quarantined = delta_rows(cfg, name, "quarantine")
        expected = [c for c in cases if c.table == name]
        assert len(quarantined) == len(expected), (name, [r["_cdc_reason"] for r in quarantined])
        for r in quarantined:
            case = landed[name, r["_cdc_file"]]
            assert case.value in r["_cdc_raw"], (case.name, r["_cdc_raw"])  # kept for the user
            reasons.append(r["_cdc_reason"])
    assert len(reasons) == len(cases)
    for reason in reasons:
        assert MARKER not in reason and all(c.value not in reason for c in cases), reason
    assert "line 2" in printed or "line 1" in printed  # the log names the bad lines ...
    assert MARKER not in printed, printed[printed.index(MARKER) - 500:][:1000]  # ... and no value of theirs
    assert not [c.value for c in cases if c.value in printed]
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    events = [e for run in instance.get_runs() for e in instance.all_logs(run.run_id)]
    assert events
    for e in events:
        assert not [c.value for c in cases if c.value in repr(e)], repr(e)[:2000]
