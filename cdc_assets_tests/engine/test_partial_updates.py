"""Columns a change does not carry keep the key's value (rules.md#rule-10): PostgreSQL's TOAST placeholder in
a Debezium feed on every table, and a null or absent column of an update on a `partial_updates`
table. Each column takes the value of the latest change that carried it since the key's last delete,
whatever the arrival order; the in-process apply, the apply on Spark, a rebuild and the fresh read agree."""
from __future__ import annotations

import base64

import pytest

from cdc_assets.engine import apply, target_build, target_versions
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS, run_batches, run_ok
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import by_key, target_rows

pytestmark = MARKS

TS = 1_709_287_200_000
UNAVAILABLE = "__debezium_unavailable_value"


def pg(op: str, image: dict, lsn: int, schema: dict | None = None) -> dict:
    """A Debezium PostgreSQL event at `lsn` (its ts_ms follows the LSN); a delete's image is `before`."""
    source = {"connector": "postgresql", "name": "shop", "ts_ms": TS + lsn, "db": "shop", "schema": "public",
              "table": "docs", "lsn": lsn}
    before, after = (image, None) if op == "d" else (None, image)
    event = {"before": before, "after": after, "op": op, "source": source, "ts_ms": TS + lsn}
    return {"schema": schema, "payload": event} if schema else event


# A Kafka JsonConverter schema whose `blob` column is bytes: Debezium sends its value as base64.
BYTES_SCHEMA = {"type": "struct", "fields": [
    {"field": "after", "type": "struct", "optional": True, "fields": [
        {"field": "id", "type": "int32"}, {"field": "blob", "type": "bytes", "optional": True}]}]}


def test_toast_placeholders_keep_the_stored_value(spark, workdir):
    cfg = write_config(workdir, [{"name": "DOCS", "keys": ["id"], "format": "debezium-json"}])
    land(cfg, "DOCS", "b1", {"e.jsonl": jsonl([
        pg("c", {"id": 1, "v": "a", "doc": "long text 1", "tags": ["x", "y"]}, 1000),
        pg("c", {"id": 2, "v": "a", "doc": "long text 2", "tags": ["z"]}, 1001),
        # the same batch: the placeholder keeps the value of the create before it
        pg("u", {"id": 2, "v": "b", "doc": UNAVAILABLE, "tags": [UNAVAILABLE]}, 1100),
        pg("c", {"id": 3, "v": "a", "doc": "long text 3", "tags": None}, 1002),
        pg("c", {"id": 4, "blob": base64.b64encode(b"\x00\x01").decode()}, 1003, BYTES_SCHEMA),
    ])})
    run_ok(cfg, "DOCS")
    land(cfg, "DOCS", "b2", {"e.jsonl": jsonl([
        pg("u", {"id": 1, "v": "b", "doc": UNAVAILABLE, "tags": [UNAVAILABLE]}, 2000),
        pg("u", {"id": 3, "v": "b", "doc": None, "tags": None}, 2001),  # a plain null writes null
        pg("u", {"id": 4, "blob": base64.b64encode(UNAVAILABLE.encode()).decode()}, 2002, BYTES_SCHEMA),
    ])})
    run_ok(cfg, "DOCS")
    rows = by_key(target_rows(cfg, "DOCS"), "id")
    assert {k[0]: (r["v"], r["doc"], r["tags"]) for k, r in rows.items() if k[0] != 4} == {
        1: ("b", "long text 1", '["x", "y"]'), 2: ("b", "long text 2", '["z"]'), 3: ("b", None, None)}
    assert rows[(4,)]["blob"] == b"\x00\x01"

    # A change older than the placeholders, arriving late, carried the column: it is the latest that
    # did, so its value wins that column, and the newer change keeps every other one.
    land(cfg, "DOCS", "b3", {"e.jsonl": jsonl([
        pg("u", {"id": 1, "v": "late", "doc": "late text", "tags": ["late"]}, 1500),
    ])})
    run_ok(cfg, "DOCS")
    rows = by_key(target_rows(cfg, "DOCS"), "id")
    assert (rows[(1,)]["v"], rows[(1,)]["doc"], rows[(1,)]["tags"]) == ("b", "late text", '["late"]')


def cs(flag: str, seq: int, key: int, **values) -> dict:
    """A change set row; a column left out of `values` is absent from the record."""
    return {"FLAG": flag, "SEQ": seq, "k": key, **values}


# Batches of a partial-update change set, and each key's state after each of them.
PARTIAL_BATCHES = [
    ([cs("I", 1, 1, a=1, b=1, region="eu"), cs("I", 1, 2, a=1, b=1, region="us"),
      cs("U", 5, 1, a=5)],  # b and region absent: kept
     {1: (5, 1, "eu"), 2: (1, 1, "us")}),
    # late: older than the row's change, yet the latest to carry b
    ([cs("U", 3, 1, a=None, b=3), cs("U", 4, 2, b=None, region="eu")],  # moves to another partition, keeps b
     {1: (5, 3, "eu"), 2: (1, 1, "eu")}),
    # a delete forgets the values: the insert after it has b null
    ([cs("D", 7, 1), cs("I", 8, 1, a=8, region="us")],
     {1: (8, None, "us"), 2: (1, 1, "eu")}),
    # older than the delete: stale; an update of a key never inserted makes its row
    ([cs("U", 6, 1, b=6), cs("U", 2, 3, a=3)],
     {1: (8, None, "us"), 2: (1, 1, "eu"), 3: (3, None, None)}),
]


def state(rows: list[dict]) -> dict:
    return {r["k"]: (r["a"], r["b"], r["region"]) for r in rows}


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_partial_updates_combine_columns_whatever_the_arrival_order(spark, workdir, monkeypatch, on_spark):
    if on_spark:  # every apply and build on Spark executors
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
        monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    table = {"name": "P", "keys": ["k"], "format": "changeset", "partial_updates": True, "partition_by": ["region"],
             "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                         "sequence_by": ["SEQ"]}}
    cfg = run_batches(workdir, table, PARTIAL_BATCHES, state)  # the last batch waits: the fresh read shows it
    target_build.rebuild(spark, cfg, cfg.table("P"), None)
    assert state(target_rows(cfg, "P")) == PARTIAL_BATCHES[-1][1]
    target_build.rebuild(spark, cfg, cfg.table("P"), ["region=eu"])  # a backfill of one partition
    assert state(target_rows(cfg, "P")) == PARTIAL_BATCHES[-1][1]


# A partial-update change set with truncates: after a truncate a key starts from nothing, so a
# column no later change carries is null, also when the truncate arrives after the changes
# around it (batch 2), and a change ranking below a truncate is stale.
TRUNCATED_BATCHES = [
    ([cs("I", 1, 1, a=1, b=1, region="eu"), cs("I", 1, 2, a=1, b=1, region="us"),
      cs("T", 5, 0), cs("U", 6, 1, a=6),  # the same batch: the truncate forgets b and region
      cs("I", 10, 3, a=10, b=10, region="eu")],
     {1: (6, None, None), 3: (10, 10, "eu")}),
    ([cs("U", 7, 2, b=7, region="us"), cs("U", 4, 1, b=4),  # below the truncate, arriving later: stale
      cs("U", 12, 3, a=12)],
     {1: (6, None, None), 2: (None, 7, "us"), 3: (12, 10, "eu")}),
    ([cs("T", 11, 0)],  # ranks below 3's last update: 3 keeps only what that update carried
     {3: (12, None, None)}),
    ([cs("U", 13, 3, b=13), cs("I", 9, 4, a=9)],  # 4 ranks below the truncate: stale
     {3: (12, 13, None)}),
]


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_partial_updates_start_from_nothing_after_a_truncate(spark, workdir, monkeypatch, on_spark):
    if on_spark:  # every apply and build on Spark executors
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
        monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
    table = {"name": "PT", "keys": ["k"], "format": "changeset", "partial_updates": True, "partition_by": ["region"],
             "columns": {"a": "long", "b": "long", "region": "string"},
             "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                         "truncates": ["T"], "sequence_by": ["SEQ"]}}
    cfg = run_batches(workdir, table, TRUNCATED_BATCHES, state)  # the last batch waits: the fresh read shows it
    target_build.rebuild(spark, cfg, cfg.table("PT"), None)
    assert state(target_rows(cfg, "PT")) == TRUNCATED_BATCHES[-1][1]


@pytest.mark.parametrize("partial", [False, True], ids=["toast", "partial"])
def test_a_late_change_fills_a_column_the_target_does_not_have_yet(spark, workdir, partial):
    """The first batch's only change of a column leaves it out (a TOAST placeholder, or a null on a
    partial-update table), so the target has no such column; a change ranking below it arrives a
    batch later carrying the column: the key takes that value (the latest that carried one)."""
    cfg = write_config(workdir, [{"name": "LATE", "keys": ["id"], "format": "debezium-json",
                                  "partial_updates": partial}])
    left_out = None if partial else UNAVAILABLE
    land(cfg, "LATE", "b1", {"e.jsonl": jsonl([pg("u", {"id": 1, "doc": left_out, "v": "new"}, 2000)])})
    run_ok(cfg, "LATE")
    land(cfg, "LATE", "b2", {"e.jsonl": jsonl([pg("c", {"id": 1, "doc": "long text", "v": "old"}, 1000)])})
    run_ok(cfg, "LATE")
    assert by_key(target_rows(cfg, "LATE"), "id") == {(1,): {"id": 1, "doc": "long text", "v": "new"}}


def test_a_late_truncate_below_more_rows_than_an_apply_here_takes_combines_them_on_spark(spark, workdir, monkeypatch):
    """A truncate arriving after changes above it ends what each key's row took from changes below
    it, whatever keys the batch holds: every row ranking above it is combined again from its key's
    history. Past the rows an apply in this process takes, that runs on Spark's executors; a
    truncate ranking above every row reads none of them and stays here."""
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "4")
    table = {"name": "PT", "keys": ["k"], "format": "changeset", "partial_updates": True,
             "columns": {"a": "long", "b": "long"},
             "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                         "truncates": ["T"], "sequence_by": ["SEQ"]}}
    cfg = write_config(workdir, [table])
    land(cfg, "PT", "b1", {"c.jsonl": jsonl([cs("I", k, k, a=k, b=k) for k in range(1, 7)]
                                            + [cs("U", 20 + k, k, a=20 + k) for k in range(1, 7)])})
    run_ok(cfg, "PT")
    assert {r["k"]: (r["a"], r["b"]) for r in target_rows(cfg, "PT")} == {k: (20 + k, k) for k in range(1, 7)}
    land(cfg, "PT", "b2", {"c.jsonl": jsonl([cs("T", 10, 0)])})  # below every row: six rows to combine again
    outcome = run_ok(cfg, "PT")
    assert outcome.figures["target"]["applied_on"].startswith("spark")
    assert {r["k"]: (r["a"], r["b"]) for r in target_rows(cfg, "PT")} == {k: (20 + k, None) for k in range(1, 7)}
    land(cfg, "PT", "b3", {"c.jsonl": jsonl([cs("T", 30, 0), cs("I", 31, 7, a=31)])})  # above every row
    outcome = run_ok(cfg, "PT")
    assert outcome.figures["target"].get("applied_on") is None
    assert {r["k"]: (r["a"], r["b"]) for r in target_rows(cfg, "PT")} == {7: (31, None)}


@pytest.mark.parametrize("deletes", ["hard", "soft"])
def test_a_late_truncate_on_a_table_with_a_change_feed_is_combined_on_spark_with_the_same_feed(spark, workdir,
                                                                                             monkeypatch, deletes):
    """With the change data feed on, a late truncate below more rows than an apply in this process
    takes goes to Spark's executors too: they combine the rows again and send delta-rs' MERGE only
    those that change, so the target and its change feed are those of the apply in this process
    (in a soft-delete table too, whose deleted row stays flagged)."""
    table = {"keys": ["k"], "format": "changeset", "partial_updates": True, "change_feed": True, "deletes": deletes,
             "columns": {"a": "long", "b": "long"},
             "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                         "truncates": ["T"], "sequence_by": ["SEQ"]}}
    cfg = write_config(workdir, [{**table, "name": "HERE"}, {**table, "name": "SPARK"}])
    seen = {}
    for name, limit in (("HERE", None), ("SPARK", 4)):
        land(cfg, name, "b1", {"c.jsonl": jsonl([cs("I", k, k, a=k, b=k) for k in range(1, 7)]
                                                + [cs("U", 20 + k, k, a=20 + k) for k in range(1, 7)])})
        take_and_apply(spark, cfg, name)
        start = target_versions.versions(cfg.table_dir(name))[-1].version + 1
        # below every row: six rows to combine again; one of them updated and one deleted above it
        land(cfg, name, "b2", {"c.jsonl": jsonl([cs("T", 10, 0), cs("U", 40, 1, a=40), cs("D", 41, 2),
                                                 cs("I", 42, 8, a=42)])})
        with monkeypatch.context() as m:
            if limit is not None:
                settings_of(m, apply, local_apply_rows=limit)
            done = take_and_apply(spark, cfg, name)
        feed = target_versions.changes(name, cfg.table_dir(name), start).to_pylist()
        seen[name] = (done, sorted((r["_commit_version"] - start, r["_change_type"], r["k"], r["a"], r["b"])
                                   for r in feed))
        live = {r["k"]: (r["a"], r["b"]) for r in target_rows(cfg, name, source_only=False)
                if not r.get("_cdc_deleted")}
        assert live == {1: (40, None), **{k: (20 + k, None) for k in range(3, 7)}, 8: (42, None)}, name
        seen[name] += (sorted(map(repr, target_rows(cfg, name, source_only=False))),)
    (here, here_feed, here_rows), (there, there_feed, there_rows) = seen["HERE"], seen["SPARK"]
    assert here.applied_on is None and (there.applied_on or "").startswith("spark"), there.applied_on
    assert there_feed == here_feed and there_rows == here_rows
    # a soft delete updates the row it flags
    gone = [("delete", 2)] if deletes == "hard" else [("update_preimage", 2), ("update_postimage", 2)]
    assert sorted((kind, k) for _, kind, k, _, _ in here_feed) == sorted(
        gone + [("insert", 8)] + [(kind, k) for k in (1, 3, 4, 5, 6) for kind in ("update_preimage", "update_postimage")])
    assert (there.inserts, there.updates, there.deletes) == (here.inserts, here.updates, here.deletes)


@pytest.mark.parametrize("on_spark", [False, True], ids=["staged-here", "staged-on-spark"])
def test_whether_staged_changes_leave_columns_out_follows_the_batches_not_stagings_rows(spark, workdir, monkeypatch,
                                                                                        on_spark):
    """Whether a staged change up to a batch leaves a column out (a TOAST placeholder) decides how
    a truncate combines rows again: staging's commits say so, batch by batch, with the answer a scan
    of staging's row images gives, and staging's data files are not read for it (made unreadable)."""
    if on_spark:  # every batch staged by Spark's tasks
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
    import glob
    import os

    from cdc_assets.engine import delta
    from cdc_assets.engine.combine import leaves_columns_out
    from cdc_assets.engine.table_layout import STAGING, path

    cfg = write_config(workdir, [{"name": "DOCS", "keys": ["id"], "format": "debezium-json"}])
    table_dir = cfg.table_dir("DOCS")
    batches = [[pg("c", {"id": 1, "v": "a", "doc": "long text 1"}, 1000),
                pg("c", {"id": 2, "v": "a", "doc": "long text 2"}, 1001)],
               [pg("u", {"id": 1, "v": "b", "doc": UNAVAILABLE}, 2000)],  # a partial row image
               [{**pg("c", {"id": 9}, 1500), "op": "t", "after": None}, pg("c", {"id": 3, "v": "c", "doc": "x"}, 3000)]]
    for n, events in enumerate(batches, start=1):
        land(cfg, "DOCS", f"b{n}", {"e.jsonl": jsonl(events)})
        take_and_apply(spark, cfg, "DOCS")
    # the truncate ranks below id 1's update, above the create that carried its doc: the row keeps no doc
    assert by_key(target_rows(cfg, "DOCS"), "id") == {(1,): {"id": 1, "v": "b", "doc": None},
                                                      (3,): {"id": 3, "v": "c", "doc": "x"}}

    def scanned(reached: int) -> bool:  # what a scan of every staged row image says
        found = delta.query(path(table_dir, STAGING), "SELECT count(*) AS n FROM t WHERE _cdc_batch_seq <= "
                                                      f"{reached} AND _cdc_row LIKE '%_cdc_unset%'")
        return int(found["n"][0].as_py() or 0) > 0

    expected = [scanned(reached) for reached in (1, 2, 3)]
    assert expected == [False, True, True]
    files = glob.glob(os.path.join(table_dir, STAGING, "**", "*.parquet"), recursive=True)
    kept = {f: open(f, "rb").read() for f in files}
    try:
        for f in files:
            with open(f, "wb") as fh:
                fh.write(b"not parquet" * 100)
        assert [leaves_columns_out(table_dir, reached) for reached in (1, 2, 3)] == expected
    finally:
        for f, data in kept.items():
            with open(f, "wb") as fh:
                fh.write(data)
