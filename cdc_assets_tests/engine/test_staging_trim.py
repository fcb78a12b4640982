"""The trim of `staging` (`maintenance.trim_staging_after`): the applied batches older than the
setting keep only each key's latest change, and nothing a user reads changes for it: a full
and a partition rebuild, a restore to a version older than the trim followed by a rebuild (of a
partition, or of all) or by the next run, late changes arriving after the trim, and each trimmed
batch's `batch_accounted` check give what they gave before: every target version committed is
one a clean run passes through."""
from __future__ import annotations

import datetime as dt

from cdc_assets.engine import checks, delta, maintenance
from cdc_assets.engine.maintenance import maintain
from cdc_assets.engine.status import table_status
from cdc_assets.engine.table_layout import STAGING, TARGET, path
from cdc_assets.engine.target_build import rebuild
from cdc_assets.engine.target_versions import restore
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import canonical, delta_rows, target_rows, values

pytestmark = MARKS

TABLE = {"name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["region"],
         "maintenance": {"trim_staging_after": "1h"}}


def target_rows_at(table_dir: str, version: int) -> list[dict]:
    rows = delta.load(path(table_dir, TARGET), version).to_pyarrow_table().to_pylist()
    return [{k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows]


def row(id_: int, region: str, v: str) -> dict:
    return {"id": id_, "region": region, "v": v}


# Each batch's changes; the binlog position orders them (a lower position arriving later is late).
BATCHES = [
    [mysql("INSERT", row(i, ("eu", "us")[i % 2], "a"), 1, 100 + i) for i in range(1, 7)],
    [mysql("UPDATE", row(1, "eu", "b"), 1, 200),  # id 1 moves from us to eu
     mysql("DELETE", row(2, "eu", "a"), 1, 201),
     mysql("UPDATE", row(3, "us", "b"), 1, 202), mysql("UPDATE", row(3, "us", "c"), 1, 203)],
    [mysql("UPDATE", row(1, "us", "late"), 1, 150),  # older than batch 2's update: stale
     mysql("INSERT", row(7, "us", "a"), 1, 300)],
    [mysql("INSERT", row(2, "us", "again"), 1, 400),  # newer than its delete: back
     mysql("DELETE", row(5, "us", "a"), 1, 401), mysql("UPDATE", row(4, "eu", "b"), 1, 402)],
    [mysql("UPDATE", row(5, "us", "late"), 1, 350),  # older than batch 4's delete: stays deleted
     mysql("UPDATE", row(6, "eu", "b"), 1, 500)],
]


def test_a_trimmed_staging_rebuilds_restores_and_applies_late_changes_as_the_whole_one(spark, workdir, monkeypatch):
    # windows of about 5 staged rows: the trim goes through batches 1, 3 and 5 in three commits,
    # the later two looking at the keys of their own batches only
    monkeypatch.setattr(maintenance, "TRIM_WINDOW_ROWS", 5)
    cfg = write_config(workdir, [TABLE])
    table, table_dir = cfg.table("ORDERS"), cfg.table_dir("ORDERS")
    clean = []  # the target's rows after each batch of a clean run: the states a target may show
    for n, changes in enumerate(BATCHES, start=1):
        land(cfg, "ORDERS", f"batch-{n}", {"p.jsonl": jsonl(changes)})
        take_and_apply(spark, cfg, "ORDERS")
        clean.append(canonical(target_rows(cfg, "ORDERS")))
    target = target_rows(cfg, "ORDERS", source_only=False)
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "b", 2: "again", 3: "c", 4: "b", 6: "b", 7: "a"}
    staged_before = delta_rows(cfg, "ORDERS", STAGING)
    assert len(staged_before) == 6 + 3 + 2 + 3 + 2  # one row per key and batch
    version_after_batch_1 = 0
    assert delta.txn_version(delta.load(path(table_dir, TARGET), version_after_batch_1), TARGET) == 1

    # two hours on: every batch is older than trim_staging_after
    staging_version = delta.table_version(path(table_dir, STAGING))
    report = maintain(cfg, table, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    assert report.staging_trimmed_through == 5 and report.changes_trimmed_through is None
    trims = [h for h in delta.load(path(table_dir, STAGING)).history() if h["version"] > staging_version]
    assert sorted(int(h["cdc.through_batch"]) for h in trims) == [1, 3, 5]
    staged = delta_rows(cfg, "ORDERS", STAGING)
    assert report.staging_rows_trimmed == len(staged_before) - len(staged) == 16 - 7
    # each key keeps its latest change, deletes included (id 5's delete outranks its late update)
    latest = {r["_cdc_key"]: max((s for s in staged_before if s["_cdc_key"] == r["_cdc_key"]),
                                 key=lambda s: s["_cdc_order"]) for r in staged}
    assert canonical(staged) == canonical(list(latest.values())) and len(latest) == 7
    assert canonical(target_rows(cfg, "ORDERS", source_only=False)) == canonical(target)
    settings = table_status(cfg, table)
    assert (settings.trim_staging_after_seconds, settings.staging_trimmed_through,
            settings.changes_trimmed_through) == (3600.0, 5, None)

    # a second pass finds nothing more to trim and commits nothing to staging
    staging_version = delta.table_version(path(table_dir, STAGING))
    again = maintain(cfg, table, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    assert again.staging_rows_trimmed == 0 and delta.table_version(path(table_dir, STAGING)) == staging_version

    # rebuilds from the trimmed staging: a partition, then the whole target, as the applies left it
    rebuild(spark, cfg, table, ["region=eu"])
    assert canonical(target_rows(cfg, "ORDERS", source_only=False)) == canonical(target)
    rebuild(spark, cfg, table, None)
    assert canonical(target_rows(cfg, "ORDERS", source_only=False)) == canonical(target)

    # every trimmed batch still adds up, from what its commits recorded
    for seq in range(1, 6):
        figures = checks.batch_accounting(cfg, table, seq)
        assert figures.adds_up and figures.counted_from_commits == ("staged",), (seq, figures)

    def committed_since(version: int) -> list[list[str]]:
        """The rows of every target version committed after `version`."""
        return [canonical(target_rows_at(table_dir, v)) for v in range(version + 1, delta.table_version(
            path(table_dir, TARGET)) + 1)]

    # back to the version after batch 1, whose batch the trimmed staging no longer holds whole:
    # a rebuild (of a partition, or of all), and the next run, commit only states a clean run
    # passes through, ending where the clean run ended
    for then in (lambda: rebuild(spark, cfg, table, ["region=eu"]), lambda: rebuild(spark, cfg, table, None),
                 lambda: take_and_apply(spark, cfg, "ORDERS")):
        restored = restore("ORDERS", table_dir, version_after_batch_1).version
        assert canonical(target_rows(cfg, "ORDERS")) == clean[0]
        then()
        states = committed_since(restored)
        assert states and all(state in clean for state in states), states
        assert states[-1] == clean[-1]

    # changes older than what the trimmed batches decided, arriving now, change nothing
    land(cfg, "ORDERS", "batch-6", {"p.jsonl": jsonl([
        mysql("UPDATE", row(3, "us", "older"), 1, 202),  # older than batch 2's last update of id 3
        mysql("UPDATE", row(5, "us", "older"), 1, 360),  # older than id 5's delete
        mysql("UPDATE", row(7, "us", "b"), 1, 600)])})
    take_and_apply(spark, cfg, "ORDERS")
    assert values(target_rows(cfg, "ORDERS"), "id", "v") == {1: "b", 2: "again", 3: "c", 4: "b", 6: "b", 7: "b"}


def test_a_widening_after_a_restore_older_than_the_trim_commits_only_clean_states(spark, workdir):
    """A restore to a version older than the trim's reach, then a batch that widens a column: the
    widening rewrites the target, which staging can no longer give as of the restored batch."""
    cfg = write_config(workdir, [{"name": "WIDE", "keys": ["id"], "format": "datastream-json",
                                  "maintenance": {"trim_staging_after": "1h"}}])
    table, table_dir = cfg.table("WIDE"), cfg.table_dir("WIDE")
    batches = [[mysql("INSERT", {"id": 1, "n": 1}, 1, 10), mysql("INSERT", {"id": 2, "n": 1}, 1, 11)],
               [mysql("UPDATE", {"id": 1, "n": 2}, 1, 20)],
               [mysql("UPDATE", {"id": 2, "n": 3}, 1, 30)]]
    def shown(rows: list[dict]) -> dict:  # n as a number, whichever type the widening gave it
        return {r["id"]: float(r["n"]) for r in rows}

    clean = []
    for n, changes in enumerate(batches, start=1):
        land(cfg, "WIDE", f"batch-{n}", {"p.jsonl": jsonl(changes)})
        take_and_apply(spark, cfg, "WIDE")
        clean.append(shown(target_rows(cfg, "WIDE")))
    assert maintain(cfg, table, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)) \
        .staging_trimmed_through == 3
    restored = restore("WIDE", table_dir, 0).version
    land(cfg, "WIDE", "batch-4", {"p.jsonl": jsonl([mysql("UPDATE", {"id": 1, "n": 2.5}, 1, 40)])})  # no integer
    take_and_apply(spark, cfg, "WIDE")
    final = {1: 2.5, 2: 3.0}
    assert target_rows(cfg, "WIDE") and shown(target_rows(cfg, "WIDE")) == final
    states = [shown(target_rows_at(table_dir, v))
              for v in range(restored + 1, delta.table_version(path(table_dir, TARGET)) + 1)]
    assert states and all(state in clean + [final] for state in states), states


def test_a_trim_keeps_what_a_soft_deleted_key_keeps(spark, workdir):
    """A soft-delete table's key deleted by a key-only image keeps its last live row from its
    upserts: a trim keeps that upsert and the deletes after it, so a rebuild and a later delete
    of the same key still show the row."""
    table = {"name": "SK", "keys": ["k"], "format": "changeset", "deletes": "soft",
             "columns": {"v": "string"}, "maintenance": {"trim_staging_after": "1h"},
             "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                         "sequence_by": ["SEQ"]}}
    cfg = write_config(workdir, [table])

    def cs(flag: str, seq: int, k: int, v: str | None = None) -> dict:
        return {"FLAG": flag, "SEQ": seq, "k": k, "v": v}

    batches = [[cs("I", 1, 1, "a"), cs("I", 1, 2, "a")],
               [cs("U", 2, 1, "b"), cs("D", 3, 1), cs("U", 2, 2, "b")],
               [cs("D", 4, 2)]]
    for n, records in enumerate(batches):
        land(cfg, "SK", f"b{n}", {"c.jsonl": jsonl(records)})
        take_and_apply(spark, cfg, "SK")

    def kept() -> dict:
        return {r["k"]: (r["v"], r["_cdc_deleted"]) for r in target_rows(cfg, "SK", source_only=False)}

    assert kept() == {1: ("b", True), 2: ("b", True)}
    report = maintain(cfg, cfg.table("SK"), now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    assert report.staging_rows_trimmed == 2  # each key's insert, which its update outranks
    rebuild(spark, cfg, cfg.table("SK"), None)
    assert kept() == {1: ("b", True), 2: ("b", True)}
    land(cfg, "SK", "b3", {"c.jsonl": jsonl([cs("D", 5, 1), cs("D", 6, 2)])})  # deleted again
    take_and_apply(spark, cfg, "SK")
    assert kept() == {1: ("b", True), 2: ("b", True)}
