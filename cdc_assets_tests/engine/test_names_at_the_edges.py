"""Column names (rules.md#names): every name Delta Lake allows without column mapping
works through every path, as a key and as a partition column too; a name no target can hold
is quarantined with the table, file, line and column named, and `rename:` gives it a name."""
from __future__ import annotations

import pytest
from deltalake import DeltaTable

from cdc_assets.engine import fresh, history, target_build
from cdc_assets.engine.table_layout import HISTORY, path
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import run_steps, take, take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, target_rows

pytestmark = MARKS

KEY1, KEY2 = "user.id", 'my"id'
PART = "1p.ré-gion'`#$\"x"  # leading digit, dot, non-ASCII, hyphen, both quotes, backtick, `#`, `$`
DATA = ["select", "MixedCase", "été", "it's", "a`b", "$cost", "#tag", "1st", "a-b", "x.y.z", 'say"hi"', "order"]
ODD = {"name": "ODD", "keys": [KEY1, KEY2], "format": "datastream-json", "partition_by": [PART], "history": True}


def image(k1: int, k2: str, part: str, tag: str) -> dict:
    return {KEY1: k1, KEY2: k2, PART: part, **{c: f"{tag}:{c}" for c in DATA}}


def by_key(rows: list[dict]) -> dict:
    return {(r[KEY1], r[KEY2]): r for r in rows}


def source_part(rows) -> list:
    return sorted((sorted((k, v) for k, v in r.items() if not k.startswith("_cdc_")) for r in rows), key=repr)


def test_every_name_delta_allows_goes_through_build_merge_rebuild_fresh_read_and_history(spark, workdir):
    cfg = write_config(workdir, [ODD])
    table = cfg.table("ODD")
    first = {(1, "a"): image(1, "a", "eu", "v1"), (2, "b"): image(2, "b", "eu", "v1"),
             (3, "c"): image(3, "c", "us", "v1"), (4, "d"): image(4, "d", "us", "v1")}
    land(cfg, "ODD", "b1", {"a.jsonl": jsonl([mysql("INSERT", r, 1, n) for n, r in enumerate(first.values(), 1)])})
    out = run_steps(spark, cfg, "ODD")  # the first build, on Spark
    assert out.taken.quarantined == 0
    assert by_key(target_rows(cfg, "ODD")) == first

    # an update that moves a key to another partition, a delete, an insert: the incremental MERGE
    land(cfg, "ODD", "b2", {"a.jsonl": jsonl([
        mysql("UPDATE", image(1, "a", "us", "v2"), 1, 10),
        mysql("DELETE", image(2, "b", "eu", "v1"), 1, 11),
        mysql("INSERT", image(5, "e", "eu", "v2"), 1, 12),
    ])})
    out = run_steps(spark, cfg, "ODD")
    assert out.taken.quarantined == 0
    assert out.applied.deletes == 1 and out.applied.inserts == 1
    want = {k: v for k, v in first.items() if k != (2, "b")}
    want[(1, "a")] = image(1, "a", "us", "v2")
    want[(5, "e")] = image(5, "e", "eu", "v2")
    assert by_key(target_rows(cfg, "ODD")) == want
    assert DeltaTable(path(cfg.table_dir("ODD"), "target")).metadata().partition_columns == [PART]

    # a partition rebuild and a whole rebuild give the same rows
    before = source_part(target_rows(cfg, "ODD"))
    figures = target_build.rebuild(spark, cfg, table, [f"{PART}=eu"])
    assert figures.partitions_rewritten == (f"{PART}=eu",)
    assert source_part(target_rows(cfg, "ODD")) == before
    target_build.rebuild(spark, cfg, table, None)
    assert source_part(target_rows(cfg, "ODD")) == before

    # a pending batch laid over the target by the fresh read
    cfg = write_config(workdir, [{**ODD, "apply": {"min_changes": 50}}])
    land(cfg, "ODD", "b3", {"a.jsonl": jsonl([mysql("UPDATE", image(3, "c", "eu", "v3"), 1, 20),
                                              mysql("DELETE", image(4, "d", "us", "v1"), 1, 21)])})
    take(spark, cfg, "ODD")
    assert not fresh.decision(cfg, cfg.table("ODD"))[0].due  # staged: its merge waits
    shown = by_key(fresh.fresh_table(cfg, cfg.table("ODD")).to_pylist())
    want[(3, "c")] = image(3, "c", "eu", "v3")
    del want[(4, "d")]
    assert shown == want

    # the merge commits what the fresh read showed; the history's current versions are the target
    cfg = write_config(workdir, [ODD])
    run_steps(spark, cfg, "ODD")
    assert by_key(target_rows(cfg, "ODD")) == want
    versions = DeltaTable(path(cfg.table_dir("ODD"), HISTORY)).to_pyarrow_table().to_pylist()
    assert [(r["select"], r["_cdc_operation"]) for r in sorted(versions, key=lambda r: r["_cdc_version"])
            if (r[KEY1], r[KEY2]) == (1, "a")] == \
        [("v1:select", "insert"), ("v2:select", "update")]
    assert source_part(r for r in versions if r["_cdc_is_current"]) == source_part(target_rows(cfg, "ODD"))
    history.rebuild(spark, cfg, cfg.table("ODD"))
    assert source_part(r for r in delta_rows(cfg, "ODD", HISTORY) if r["_cdc_is_current"]) == \
        source_part(target_rows(cfg, "ODD"))


@pytest.mark.parametrize("key", ['my"id', "my'id", "a`b", "user.id", "select", "É-1", "$k#"])
def test_an_odd_key_name_alone_merges_from_the_second_batch_on(spark, workdir, key):
    cfg = write_config(workdir, [{"name": "K", "keys": [key], "format": "datastream-json"}])
    land(cfg, "K", "b1", {"a.jsonl": jsonl([mysql("INSERT", {key: i, "v": "a"}, 1, i) for i in (1, 2, 3)])})
    take_and_apply(spark, cfg, "K")
    land(cfg, "K", "b2", {"a.jsonl": jsonl([mysql("UPDATE", {key: 2, "v": "b"}, 1, 10),
                                            mysql("DELETE", {key: 3, "v": "a"}, 1, 11)])})
    take_and_apply(spark, cfg, "K")
    assert {r[key]: r["v"] for r in target_rows(cfg, "K")} == {1: "a", 2: "b"}


def test_a_name_no_target_can_hold_is_quarantined_and_rename_lets_later_batches_and_the_file_again_apply(
        spark, workdir):
    table = {"name": "R", "keys": ["id"], "format": "datastream-json"}
    cfg = write_config(workdir, [table])
    bad = mysql("INSERT", {"id": 1, "unit price": 5, "_cdc_key": "x"}, 1, 1)
    good = mysql("INSERT", {"id": 2, "v": "a"}, 1, 2)
    land(cfg, "R", "b1", {"a.jsonl": jsonl([bad, good])})
    assert run_steps(spark, cfg, "R").taken.quarantined == 1
    [q] = delta_rows(cfg, "R", "quarantine")
    assert (q["table"], q["_cdc_file"], q["_cdc_line"]) == ("R", "b1/a.jsonl", 1)
    assert "column 'unit price': Delta Lake forbids ' '" in q["_cdc_reason"] and "rename:" in q["_cdc_reason"]
    assert [r["id"] for r in target_rows(cfg, "R")] == [2]

    cfg = write_config(workdir, [{**table, "rename": {"unit price": "unit_price", "_cdc_key": "cdc_key"}}])
    land(cfg, "R", "b2", {"a.jsonl": jsonl([mysql("INSERT", {"id": 3, "unit price": 7, "_cdc_key": "y"}, 1, 3)])})
    assert run_steps(spark, cfg, "R").taken.quarantined == 0
    land(cfg, "R", "b3", {"again.jsonl": jsonl([bad, good])})  # the quarantined file, landed again
    assert run_steps(spark, cfg, "R").taken.duplicates_skipped == 1  # the record applied the first time
    rows = {r["id"]: r for r in target_rows(cfg, "R")}
    assert rows == {1: {"id": 1, "v": None, "unit_price": 5, "cdc_key": "x"},
                    2: {"id": 2, "v": "a", "unit_price": None, "cdc_key": None},
                    3: {"id": 3, "v": None, "unit_price": 7, "cdc_key": "y"}}


def test_a_renamed_key_of_a_csv_change_set(spark, workdir):
    options = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
    cfg = write_config(workdir, [{"name": "CSV", "keys": ["user_id"], "format": "changeset", "options": options,
                                  "rename": {"user id": "user_id", "V": "v2"}, "columns": {"user_id": "string"}}])
    land(cfg, "CSV", "b1", {"a.csv": "op,user id,v,V,seq\nI,007,a,A,1\nI,7,b,B,1\n"})
    take_and_apply(spark, cfg, "CSV")
    land(cfg, "CSV", "b2", {"a.csv": "op,user id,v,V,seq\nU,007,c,C,2\nD,7,,,2\n"})
    take_and_apply(spark, cfg, "CSV")
    assert target_rows(cfg, "CSV") == [{"user_id": "007", "v": "c", "v2": "C", "seq": 2}]
