"""Quarantine is loud and something a user works with: a batch whose records all went to quarantine
fails the table's run with the first reasons (and its `quarantine_within_limit` check), the next batch
still applies; `cdc-assets quarantine TABLE` lists what is there; after cdc.yaml is fixed,
`cdc-assets quarantine replay TABLE` applies the quarantined records once, ranked as if they had
applied the first time."""
from __future__ import annotations

import json

import pytest

from cdc_assets.cli.main import main
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.warehouse import target_rows, values

pytestmark = MARKS

OPS = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}


def orders(keys=("order_id",), **more) -> dict:
    return {"name": "ORDERS", "keys": list(keys), "format": "changeset", "options": OPS, **more}


def first_batch() -> str:
    return jsonl([{"op": "I", "order_id": 1, "v": "a", "seq": 1},
                  {"op": "I", "order_id": 2, "v": "b", "seq": 2},
                  {"op": "U", "order_id": 1, "v": "c", "seq": 3}])


def run(cfg, capsys, *extra) -> tuple[int, str, str]:
    code = main(["run", "--config", cfg.path, *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_batch_whose_every_record_is_quarantined_fails_the_run_and_the_next_batch_still_applies(
        workdir, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(keys=("orderid",))])  # the column is order_id
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    code, out, err = run(cfg, capsys)
    assert code == 1
    line = out.strip().splitlines()[-1]
    assert line.startswith("ORDERS: FAILED")
    assert "3 quarantined" in line and "quarantine_within_limit" in line
    # the first reasons, with where they are: the user sees why without opening the quarantine
    assert "b1/f.jsonl line 1" in line and "'orderid'" in line
    # a later batch whose records are good still applies (nothing stops the table for good)
    land(cfg, "ORDERS", "b2", {"f.jsonl": jsonl([{"op": "I", "orderid": "o7", "v": "z", "seq": 9}])})
    code, out, _ = run(cfg, capsys)
    assert code == 0 and out.startswith("ORDERS: ok"), out
    assert values(target_rows(cfg, "ORDERS"), "orderid", "v") == {"o7": "z"}


def test_valid_records_around_quarantined_ones_are_applied_in_the_batch_that_fails(workdir, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(quarantine_limit=0.5)])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([{"op": "I", "order_id": 1, "v": "a", "seq": 1},
                                                 {"op": "I", "v": "no key", "seq": 2},
                                                 {"op": "X", "order_id": 3, "v": "bad op", "seq": 3}])})
    code, out, _ = run(cfg, capsys)
    assert code == 1 and out.startswith("ORDERS: FAILED"), out  # 2 of 3 quarantined: over the table's half
    assert values(target_rows(cfg, "ORDERS"), "order_id", "v") == {1: "a"}


def test_a_batch_partly_quarantined_under_the_default_limit_is_ok(workdir, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders()])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([{"op": "I", "order_id": 1, "v": "a", "seq": 1},
                                                 {"op": "I", "v": "no key", "seq": 2}])})
    code, out, _ = run(cfg, capsys)
    assert code == 0 and out.startswith("ORDERS: ok") and "1 quarantined" in out, out


def test_a_table_that_accepts_wholly_quarantined_batches_stays_ok(workdir, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(keys=("orderid",), quarantine_limit="none")])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    code, out, _ = run(cfg, capsys)
    assert code == 0 and out.startswith("ORDERS: ok") and "3 quarantined" in out, out


def test_the_check_counts_what_each_batch_sent_to_quarantine(workdir):
    from cdc_assets.engine import checks
    from cdc_assets_tests.support.runs import run_table

    cfg = write_config(workdir, [orders(keys=("orderid",))])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    outcome = run_table(cfg, "ORDERS")
    assert not outcome.ok and outcome.checks["quarantine_within_limit"] is False
    assert outcome.checks["batch_accounted"]  # the counts add up: every record is accounted for
    figures = checks.batch_quarantine(cfg, cfg.table("ORDERS"), 1).to_metadata()
    assert (figures["records_read"], figures["quarantined"], figures["within_limit"]) == (3, 3, False)
    assert figures["reasons"] == {"key column 'orderid' is missing": 3}
    assert not any(str(v) in json.dumps(figures) for v in ("\"a\"", "\"b\"", "\"c\""))


@pytest.mark.parametrize("limit", [0, 1.5, "half", True])
def test_a_quarantine_limit_that_is_not_a_share_is_refused(workdir, limit):
    from cdc_assets.core.config import ConfigError

    with pytest.raises(ConfigError, match="quarantine_limit"):
        write_config(workdir, [orders(quarantine_limit=limit)])


def comparable(cfg, columns=None) -> list:
    """The target's rows with their keys and ordering keys: what a replay must leave as a right config would.
    `columns`: only these (a target keeps the columns an earlier configuration gave it, all null here)."""
    rows = target_rows(cfg, "ORDERS", source_only=False)
    keep = [{k: v for k, v in r.items() if (not k.startswith("_cdc_") or k in ("_cdc_key", "_cdc_order"))
             and (columns is None or k in columns)} for r in rows]
    return sorted(keep, key=lambda r: r["_cdc_key"])


def status_of(cfg, capsys) -> dict:
    assert main(["status", "--config", cfg.path, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def quarantine(cfg, capsys, *extra) -> tuple[int, str, str]:
    code = main(["quarantine", *extra, "--config", cfg.path])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_after_a_wrong_key_is_fixed_a_replay_leaves_the_target_a_right_config_would_have_once(
        tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    right_dir, wrong_dir = tmp_path / "right", tmp_path / "wrong"
    for d in (right_dir, wrong_dir):
        (d / "landing").mkdir(parents=True)
    later = jsonl([{"op": "I", "order_id": 3, "v": "d", "seq": 4}, {"op": "D", "order_id": 2, "seq": 5}])
    right = write_config(right_dir, [orders()])
    for name, records in (("b1", first_batch()), ("b2", later)):  # a batch each, as in the other warehouse
        land(right, "ORDERS", name, {"f.jsonl": records})
        assert run(right, capsys)[0] == 0
    expected = comparable(right)
    assert values(target_rows(right, "ORDERS"), "order_id", "v") == {1: "c", 3: "d"}

    cfg = write_config(wrong_dir, [orders(keys=("orderid",))])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    assert run(cfg, capsys)[0] == 1
    cfg = write_config(wrong_dir, [orders()])  # the key fixed
    land(cfg, "ORDERS", "b2", {"f.jsonl": later})
    assert run(cfg, capsys)[0] == 0  # b2's records apply on their own

    code, out, _ = quarantine(cfg, capsys, "ORDERS")
    assert code == 0
    listed = [line.split("\t") for line in out.strip().splitlines()]
    assert listed[0] == ["batch", "file", "line", "column", "reason"]
    assert [row[:4] for row in listed[1:]] == [["b000001", "b1/f.jsonl", str(n), "orderid"] for n in (1, 2, 3)]
    assert all("missing" in row[4] for row in listed[1:])
    assert '"v"' not in out and "order_id" not in out  # no row values without asking
    code, out, _ = quarantine(cfg, capsys, "ORDERS", "--show-values")
    assert code == 0 and out.splitlines()[0].endswith("\tvalues") and '"order_id": 1' in out

    assert status_of(cfg, capsys)["quarantined"] == 3
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 0, out
    assert "ORDERS: ok; nothing new landed, batch b000003 taken; 3 records, 3 new changes" in out, out
    assert status_of(cfg, capsys)["quarantined"] == 0
    # ranked by their own ordering keys, as if applied the first time
    assert comparable(cfg, set(expected[0])) == expected
    assert {r["orderid"] for r in target_rows(cfg, "ORDERS")} == {None}  # the wrong key's column, empty
    assert quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines() == ["batch\tfile\tline\tcolumn\treason"]

    from cdc_assets_tests.support.warehouse import delta_version

    version = delta_version(cfg, "ORDERS", "target")
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 0 and "nothing to replay" in out, out
    assert delta_version(cfg, "ORDERS", "target") == version and comparable(cfg, set(expected[0])) == expected


@pytest.mark.parametrize("ordered_by", ["sequence", "arrival"])
def test_a_replayed_change_never_beats_a_newer_change_of_its_key(workdir, capsys, monkeypatch, ordered_by):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    options = OPS if ordered_by == "sequence" else {k: v for k, v in OPS.items() if k != "sequence_by"}
    cfg = write_config(workdir, [orders(keys=("orderid",), options=options)])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([{"op": "I", "order_id": 1, "v": "old", "seq": 1},
                                                 {"op": "I", "order_id": 2, "v": "only", "seq": 2}])})
    assert run(cfg, capsys)[0] == 1
    cfg = write_config(workdir, [orders(options=options)])
    land(cfg, "ORDERS", "b2", {"f.jsonl": jsonl([{"op": "U", "order_id": 1, "v": "new", "seq": 5}])})
    assert run(cfg, capsys)[0] == 0
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 0, out
    assert values(target_rows(cfg, "ORDERS"), "order_id", "v") == {1: "new", 2: "only"}


def test_records_that_fail_again_stay_in_quarantine_once(workdir, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(keys=("orderid",))])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    assert run(cfg, capsys)[0] == 1
    cfg = write_config(workdir, [orders(keys=("order_key",))])  # still wrong
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 1 and "FAILED" in out and "'order_key'" in out, out
    listed = quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()[1:]
    assert [row.split("\t")[1:4] for row in listed] == [["b1/f.jsonl", str(n), "order_key"] for n in (1, 2, 3)]
    cfg = write_config(workdir, [orders()])
    assert quarantine(cfg, capsys, "replay", "ORDERS")[0] == 0
    assert values(target_rows(cfg, "ORDERS"), "order_id", "v") == {1: "c", 2: "b"}
    assert quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()[1:] == []


def test_read_of_a_quarantine_by_its_table_name_says_where_it_is(workdir, capsys):
    cfg = write_config(workdir, [orders()])
    assert main(["read", "ORDERS_quarantine", "--config", cfg.path]) == 2
    assert "cdc-assets quarantine ORDERS" in capsys.readouterr().err


@pytest.mark.parametrize("crash_at", ["register.committed", "changes.before_commit"])
def test_a_replay_killed_and_run_again_takes_each_record_once(workdir, capsys, monkeypatch, cli, crash_at):
    import os
    import subprocess

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(keys=("orderid",))])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    assert run(cfg, capsys)[0] == 1
    cfg = write_config(workdir, [orders()])
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    replay = [*cli, "quarantine", "replay", "ORDERS", "--config", cfg.path]
    killed = subprocess.run(replay, env={**env, "CDC_ASSETS_CRASH_AT": crash_at}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    # nothing counts as taken until its changes are committed: the records are still listed
    assert len(quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()) == 4
    again = subprocess.run(replay, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "ORDERS: ok" in again.stdout, again.stdout + again.stderr
    assert values(target_rows(cfg, "ORDERS"), "order_id", "v") == {1: "c", 2: "b"}
    assert quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()[1:] == []
    last = subprocess.run(replay, env=env, capture_output=True, text=True)
    assert last.returncode == 0 and "nothing to replay" in last.stdout
    from cdc_assets.engine.checks import batch_accounting

    assert batch_accounting(cfg, cfg.table("ORDERS"), 2).adds_up  # the replay's batch: every record accounted for


def test_the_quarantine_is_an_asset_with_its_records_and_reasons_counted_and_no_values(workdir, capsys):
    import dagster as dg

    from cdc_assets.defs.definitions import build_definitions
    from cdc_assets_tests.support.runs import run_table

    cfg = write_config(workdir, [orders(keys=("orderid",))])
    key = dg.AssetKey(["ORDERS", "quarantine"])
    spec = build_definitions(cfg).resolve_asset_graph().get(key)
    assert spec.group_name == "ORDERS"
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    instance = dg.DagsterInstance.ephemeral()
    assert not run_table(cfg, "ORDERS", instance).ok
    event = instance.get_latest_materialization_event(key)
    metadata = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert metadata["dagster/row_count"] == 3 and metadata["records"] == 3
    assert metadata["reasons"] == {"key column 'orderid' is missing": 3}
    assert '"c"' not in json.dumps(metadata) and "order_id" not in json.dumps(metadata)  # no record's text
    cfg = write_config(workdir, [orders()])
    from cdc_assets.defs.quarantine import replay_quarantined

    batch, outcomes = replay_quarantined(cfg, cfg.table("ORDERS"), build_definitions, echo=lambda *a, **k: None)
    assert batch is not None and all(o.ok for o in outcomes)
    # the replay's run says what the quarantine holds now (cdc-assets run, as this test, uses its own instance)
    assert outcomes[0].figures["quarantine"] == {"records": 0, "reasons": {}}


def test_the_summary_line_is_explained_in_run_help_and_the_docs(capsys):
    import os

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "command-line.md"), encoding="utf-8") as fh:
        docs = " ".join(fh.read().split())
    for text in (shown, docs):
        assert "inserted" in text and "updated" in text and "deleted" in text and "stale" in text
        assert "quarantine_limit" in text and "quarantined" in text
    assert "+ inserted ~ updated - deleted keys, N stale" in shown


def test_a_replay_whose_file_is_gone_keeps_its_records_in_quarantine_saying_why(workdir, capsys, monkeypatch):
    import os

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(keys=("orderid",))])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    assert run(cfg, capsys)[0] == 1
    os.remove(os.path.join(cfg.landing_dir("ORDERS"), "b1", "f.jsonl"))
    cfg = write_config(workdir, [orders()])
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 1 and "FAILED" in out, out
    listed = [row.split("\t") for row in quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()[1:]]
    assert [row[1:3] for row in listed] == [["b1/f.jsonl", str(n)] for n in (1, 2, 3)]
    assert all("read" in row[4] for row in listed), listed
    from cdc_assets.engine.checks import batch_accounting

    assert batch_accounting(cfg, cfg.table("ORDERS"), 2).adds_up


def test_a_csv_file_quarantined_line_by_line_for_a_wrong_key_is_taken_whole_by_its_replay(workdir, capsys,
                                                                                          monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    options = {k: v for k, v in OPS.items() if k != "sequence_by"}
    cfg = write_config(workdir, [orders(keys=("orderid",), options=options)])
    land(cfg, "ORDERS", "b1", {"f.csv": "op,order_id,v\nI,1,a\nI,2,b\nU,1,c\n"})
    assert run(cfg, capsys)[0] == 1
    assert len(quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()) == 5  # the header and each line
    cfg = write_config(workdir, [orders(options=options)])
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 0 and "3 records, 3 new changes" in out, out
    assert {str(r["order_id"]): r["v"] for r in target_rows(cfg, "ORDERS")} == {"1": "c", "2": "b"}
    assert quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()[1:] == []  # the header is a header again


def test_a_debezium_file_under_a_datastream_table_fails_and_is_replayed_into_its_partitions(workdir, capsys,
                                                                                            monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)

    def event(op, before, after, pos):
        return {"payload": {"before": before, "after": after, "op": op, "ts_ms": 1709287200000,
                            "source": {"connector": "mysql", "file": "mysql-bin.000001", "pos": pos, "row": 0,
                                       "ts_ms": 1709287200000, "snapshot": "false"}}}

    table = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["region"]}
    cfg = write_config(workdir, [table])
    land(cfg, "ORDERS", "b1", {"f.jsonl": jsonl([
        event("c", None, {"id": 1, "region": "eu", "v": "a"}, 10),
        event("c", None, {"id": 2, "region": "us", "v": "b"}, 20),
        event("u", {"id": 1, "region": "eu", "v": "a"}, {"id": 1, "region": "eu", "v": "c"}, 30),
        event("d", {"id": 2, "region": "us", "v": "b"}, None, 40)])})
    code, out, _ = run(cfg, capsys)
    assert code == 1 and out.startswith("ORDERS: FAILED") and "4 of 4 records quarantined" in out, out
    cfg = write_config(workdir, [{**table, "format": "debezium-json"}])
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 0, out
    assert {r["id"]: (r["region"], r["v"]) for r in target_rows(cfg, "ORDERS")} == {1: ("eu", "c")}


def test_a_replayed_file_appended_to_afterwards_gives_only_its_new_lines(workdir, capsys, monkeypatch):
    """A replay reads files batches took before; it takes nothing new of them, so a later run still
    compares the file with what its own batch took: nothing new after the replay, the new lines once
    after an append."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(keys=("orderid",))])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    assert run(cfg, capsys)[0] == 1
    cfg = write_config(workdir, [orders()])
    assert quarantine(cfg, capsys, "replay", "ORDERS")[0] == 0
    code, out, _ = run(cfg, capsys)
    assert code == 0 and "nothing new landed" in out, out
    with open(workdir / "landing" / "ORDERS" / "b1" / "f.jsonl", "a") as f:
        f.write(jsonl([{"op": "I", "order_id": 4, "v": "e", "seq": 6}]))
    code, out, _ = run(cfg, capsys)
    assert code == 0 and "(1 file appended)" in out and "1 records, 1 new changes" in out, out
    assert values(target_rows(cfg, "ORDERS"), "order_id", "v") == {1: "c", 2: "b", 4: "e"}


def test_a_replay_of_a_file_replaced_since_keeps_its_records_in_quarantine_and_takes_the_new_content_once(
        workdir, capsys, monkeypatch):
    """The bytes a batch took are what its quarantined records were: a file replaced afterwards
    holds other records (its new content is a batch of its own), so a replay takes none of it for
    the old records, which stay in quarantine saying why."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    cfg = write_config(workdir, [orders(keys=("orderid",))])
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    assert run(cfg, capsys)[0] == 1
    with open(workdir / "landing" / "ORDERS" / "b1" / "f.jsonl", "w") as f:
        f.write(jsonl([{"op": "I", "order_id": 9, "v": "new", "seq": 7}]))
    cfg = write_config(workdir, [orders()])
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 1 and "FAILED" in out, out
    listed = [row.split("\t") for row in quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()[1:]]
    assert [row[1:3] for row in listed] == [["b1/f.jsonl", str(n)] for n in (1, 2, 3)]
    assert all("replaced" in row[4] for row in listed), listed
    # the replay's run of the table took the new content as a batch of its own, once
    assert "(1 file replaced)" in out, out
    code, out, _ = run(cfg, capsys)
    assert code == 0 and "nothing new landed" in out, out
    assert values(target_rows(cfg, "ORDERS"), "order_id", "v") == {9: "new"}


@pytest.mark.parametrize("declared, on_spark", [(False, False), (True, False), (False, True)],
                         ids=["row-by-row", "typed", "export-read-again-on-spark"])
def test_a_replay_takes_the_base_exports_quarantined_rows_below_every_change(tmp_path, capsys, monkeypatch, declared,
                                                                             on_spark, request):
    """A base export's rows are quarantined records too: once cdc.yaml is fixed a replay takes them
    again, each ranked as a base row, below every change of its key (a change that deleted the key
    meanwhile still wins); the target is the one a right configuration gives. An export over
    `local_parse_bytes` is read again by Spark's tasks, which hand back only the named rows."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    if on_spark:
        from cdc_assets.engine import replay

        request.getfixturevalue("spark")
        settings_of(monkeypatch, replay, local_parse_bytes=0)
    columns = {"order_id": "long", "v": "string", "seq": "long", "op": "string"} if declared else None

    def config(root, keys):
        export = root / "orders.csv"
        export.write_text("order_id,v\n1,base-1\n2,base-2\n5,base-5\n")
        more = {"base_snapshot": str(export), **({"columns": columns} if columns else {})}
        return write_config(root, [orders(keys=keys, **more)])

    right_dir, wrong_dir = tmp_path / "right", tmp_path / "wrong"
    for d in (right_dir, wrong_dir):
        (d / "landing").mkdir(parents=True)
    later = jsonl([{"op": "I", "order_id": 3, "v": "d", "seq": 4}, {"op": "D", "order_id": 5, "seq": 5}])
    right = config(right_dir, ("order_id",))
    for name, records in (("b1", first_batch()), ("b2", later)):
        land(right, "ORDERS", name, {"f.jsonl": records})
        assert run(right, capsys)[0] == 0
    expected = comparable(right)
    assert values(target_rows(right, "ORDERS"), "order_id", "v") == {1: "c", 2: "b", 3: "d"}

    cfg = config(wrong_dir, ("orderid",))
    land(cfg, "ORDERS", "b1", {"f.jsonl": first_batch()})
    assert run(cfg, capsys)[0] == 1
    listed = [row.split("\t") for row in quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines()[1:]]
    # the header first (under the wrong key it is not one), then each row
    assert [row[:3] for row in listed if row[1] == "orders.csv"] == [["b000000", "orders.csv", str(n)]
                                                                      for n in (1, 2, 3, 4)], listed
    cfg = config(wrong_dir, ("order_id",))  # the key fixed
    land(cfg, "ORDERS", "b2", {"f.jsonl": later})
    assert run(cfg, capsys)[0] == 0
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 0, out
    assert "6 records, 6 new changes" in out, out
    assert quarantine(cfg, capsys, "ORDERS")[1].strip().splitlines() == ["batch\tfile\tline\tcolumn\treason"]
    assert comparable(cfg, set(expected[0])) == expected
    code, out, _ = quarantine(cfg, capsys, "replay", "ORDERS")
    assert code == 0 and "nothing to replay" in out, out
