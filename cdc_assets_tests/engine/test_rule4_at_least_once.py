"""rules.md#rule-4: delivery is at least once. The same event (same id) in several files or batches
counts once, and landing nothing new changes nothing: no new Delta version anywhere."""
from __future__ import annotations

import datetime as dt

import pytest

from cdc_assets.engine import maintenance, spark_ingest
from cdc_assets.engine.maintenance import maintain
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_table
from cdc_assets_tests.support.steps import run_steps
from cdc_assets_tests.support.warehouse import delta_rows, delta_version, target_rows, values

pytestmark = MARKS

TABLES = ("batches", "changes", "staging", "target")


def versions(cfg, table):
    return {name: delta_version(cfg, table, name) for name in TABLES + ("quarantine",)}


@pytest.mark.parametrize("parser", ["in-process", "spark"])
def test_same_event_in_several_files_and_a_later_batch_counts_once(spark, workdir, monkeypatch, parser):
    # A small batch is parsed in the run's own process, a large one by Spark tasks: both count once.
    if parser == "spark":
        settings_of(monkeypatch, spark_ingest, local_parse_bytes=-1)
    cfg = write_config(workdir, [{"name": "DUP", "keys": ["id"], "format": "datastream-json"}])
    e1 = mysql("INSERT", {"id": 1, "v": "inserted"}, 1, 10)
    e2 = mysql("UPDATE", {"id": 1, "v": "updated"}, 1, 20)
    e3 = mysql("INSERT", {"id": 2, "v": "inserted"}, 1, 10)
    e4 = mysql("INSERT", {"id": 3, "v": "inserted"}, 1, 10)
    e5 = mysql("DELETE", {"id": 3, "v": None}, 1, 30)
    land(cfg, "DUP", "batch-1", {
        "part-a.jsonl": jsonl([e1, e2, e3, e4, e5]),
        "part-b.jsonl": jsonl([e2, e3, e2]),            # re-delivered in another file, and twice in one
    })
    first = run_steps(spark, cfg, "DUP").taken
    assert (first.records_read, first.changes_new, first.duplicates_skipped) == (8, 5, 3)

    e6 = mysql("UPDATE", {"id": 2, "v": "updated"}, 1, 40)
    land(cfg, "DUP", "batch-2", {"part-a.jsonl": jsonl([e1, e4, e6, e2])})  # a batch later, plus one new
    second = run_steps(spark, cfg, "DUP").taken  # the batch's counts add up, each key once: asserted by the steps
    assert (second.changes_new, second.duplicates_skipped) == (1, 3)

    changes = delta_rows(cfg, "DUP", "changes")
    assert sorted(r["_cdc_event_id"] for r in changes) == sorted(e["uuid"] for e in (e1, e2, e3, e4, e5, e6))
    # the re-delivered insert of key 3 did not bring the deleted row back
    assert values(target_rows(cfg, "DUP"), "id", "v") == {1: "updated", 2: "updated"}


def test_a_batch_of_only_redelivered_events_leaves_the_target_as_it_was(spark, workdir):
    cfg = write_config(workdir, [{"name": "REDO", "keys": ["id"], "format": "datastream-json"}])
    events = [mysql("INSERT", {"id": 1, "v": "a"}, 1, 10), mysql("UPDATE", {"id": 1, "v": "b"}, 1, 20)]
    land(cfg, "REDO", "batch-1", {"part-1.jsonl": jsonl(events)})
    run_steps(spark, cfg, "REDO")
    before = target_rows(cfg, "REDO", source_only=False)
    target_before = delta_version(cfg, "REDO", "target")
    land(cfg, "REDO", "batch-2", {"part-1.jsonl": jsonl(events[::-1])})
    assert run_steps(spark, cfg, "REDO").taken.duplicates_skipped == 2
    assert target_rows(cfg, "REDO", source_only=False) == before
    assert delta_version(cfg, "REDO", "target") == target_before
    # and the run after it, with nothing landed, commits nothing anywhere
    settled = versions(cfg, "REDO")
    run_steps(spark, cfg, "REDO")
    assert versions(cfg, "REDO") == settled


def test_changeset_redelivery_without_event_ids_counts_once(spark, workdir):
    """Formats without an event id: an identical record delivered twice is one change."""
    cfg = write_config(workdir, [{"name": "CSDUP", "keys": ["ID"], "format": "changeset", "options": {
        "op_column": "FLAG", "sequence_by": ["TS"], "inserts": ["I"], "updates": ["U"], "deletes": ["D"]}}])
    text = "FLAG,ID,VALUE,TS\nI,1,A1,2018-01-01 16:02:00\nU,1,A2,2018-01-01 16:02:01\n"
    land(cfg, "CSDUP", "batch-1", {"part-0001.csv": text, "part-0002.csv": text})
    taken = run_steps(spark, cfg, "CSDUP").taken
    assert (taken.changes_new, taken.duplicates_skipped) == (2, 2)
    assert values(target_rows(cfg, "CSDUP"), "ID", "VALUE") == {1: "A2"}


TIE_FEEDS = {
    # no event id: the change's identity is its content (key, operation, source order, values)
    "changeset": ({"format": "changeset", "options": {"op_column": "FLAG", "sequence_by": ["SEQ"], "inserts": ["I"],
                                                       "updates": ["U"], "deletes": ["D"]}},
                  ["FLAG,id,v,SEQ\nU,1,A,2024-03-01T10:00:05\nU,1,B,2024-03-01T10:00:05\n",
                   "FLAG,id,v,SEQ\nU,1,A,2024-03-01T10:00:05\n"], "p.csv"),
    # event ids: two events at one source position, the first re-delivered with its uuid
    "datastream": ({"format": "datastream-json"},
                   [jsonl([mysql("UPDATE", {"id": 1, "v": "A"}, 1, 10, uuid="ev-a"),
                           mysql("UPDATE", {"id": 1, "v": "B"}, 1, 10, uuid="ev-b")]),
                    jsonl([mysql("UPDATE", {"id": 1, "v": "A"}, 1, 10, uuid="ev-a")])], "p.jsonl"),
}


@pytest.mark.parametrize("feed", sorted(TIE_FEEDS))
def test_a_change_redelivered_after_its_batch_was_trimmed_changes_no_value(spark, workdir, monkeypatch, feed):
    """Two changes of a key tie on their source order; the later one by arrival wins (the tie rule).
    Re-delivering the earlier one is a duplicate, before and after a trim took its batch out of
    `changes`: the arrival of the re-delivery, being newer, must not make it win."""
    spec, (first, again), name = TIE_FEEDS[feed]
    monkeypatch.setattr(maintenance, "TRIM_WINDOW_ROWS", 1)  # the trim records the ids a batch at a time
    cfg = write_config(workdir, [{"name": "TIE", "keys": ["id"], **spec,
                                  "maintenance": {"trim_changes_after": "1h"}}])
    land(cfg, "TIE", "batch-1", {name: first})
    run_steps(spark, cfg, "TIE")
    assert values(target_rows(cfg, "TIE"), "id", "v") == {1: "B"}
    land(cfg, "TIE", "batch-2", {name: again})
    assert run_steps(spark, cfg, "TIE").taken.duplicates_skipped == 1
    assert values(target_rows(cfg, "TIE"), "id", "v") == {1: "B"}

    report = maintain(cfg, cfg.table("TIE"), now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    # batch 1, the one holding both changes, is out of `changes`
    assert report.changes_trimmed_through >= 1 and delta_rows(cfg, "TIE", "changes") == []
    target = target_rows(cfg, "TIE", source_only=False)
    land(cfg, "TIE", "batch-3", {name: again})
    assert run_steps(spark, cfg, "TIE").taken.duplicates_skipped == 1
    assert target_rows(cfg, "TIE", source_only=False) == target


def test_a_run_with_nothing_new_commits_nothing(spark, workdir):
    cfg = write_config(workdir, [{"name": "QUIET", "keys": ["id"], "format": "datastream-json"}])
    land(cfg, "QUIET", "batch-1", {"part-1.jsonl": jsonl([
        mysql("INSERT", {"id": 1, "v": "a"}, 1, 10),
        mysql("INSERT", {"id": 2, "v": "a"}, 1, 11),
        mysql("DELETE", {"id": 2, "v": None}, 1, 12),
        "{not json\n",  # a quarantine commit too, so that table is covered
    ])})
    run_table(cfg, "QUIET")
    before = versions(cfg, "QUIET")
    assert min(before.values()) >= 0, before
    rows = target_rows(cfg, "QUIET", source_only=False)

    # a file still being written (a '.'-name) or a writer's '_'-name is not a new file
    land_dir = workdir / "landing" / "QUIET" / "batch-2"
    land_dir.mkdir()
    (land_dir / ".part-2.jsonl.tmp").write_text(jsonl([mysql("UPDATE", {"id": 1, "v": "b"}, 1, 20)]))
    (land_dir / "_SUCCESS").write_text("")
    for _ in range(2):
        outcome = run_table(cfg, "QUIET")
        assert outcome.new_batch is None, outcome
        assert versions(cfg, "QUIET") == before
    assert target_rows(cfg, "QUIET", source_only=False) == rows
