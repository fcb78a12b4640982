"""Quarantine is loud and something a user works with: a batch whose records all went to quarantine
fails the table's run with the first reasons (and its `quarantine_within_limit` check), the next batch
still applies; `cdc-assets quarantine TABLE` lists what is there; after cdc.yaml is fixed,
`cdc-assets quarantine replay TABLE` applies the quarantined records once, ranked as if they had
applied the first time."""
from __future__ import annotations

import json

import pytest

from cdc_assets.cli.main import main
from cdc_assets_tests.support.config import write_config
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
