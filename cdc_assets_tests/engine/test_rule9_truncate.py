"""rules.md#rule-9: a truncate (Debezium `op: t`, or a change set op value listed in `options.truncates`)
deletes every row whose latest change ranks at or below it; changes ranking above it apply in
whatever order they arrive, and one ranking below it that arrives later is stale. It is the
whole table's tombstone: it holds across batches, on the Spark path as in this process, in a
fresh read, a rebuild, after a staging trim and after a restore."""
from __future__ import annotations

import datetime as dt

import pytest

from cdc_assets.engine import fresh
from cdc_assets.engine.apply import apply_pending
from cdc_assets.engine.maintenance import maintain
from cdc_assets.engine.table_layout import QUARANTINE, TOMBSTONES
from cdc_assets.engine.target_build import rebuild
from cdc_assets.engine.target_versions import restore
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import land
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.steps import take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, delta_version, target_rows, values

from .test_debezium_feed import lines

pytestmark = MARKS

TS = 1_709_287_200_000  # 2024-03-01T10:00:00Z


def pg(op: str, lsn: int, id_: int | None = None, v: str | None = None) -> dict:
    """A Debezium PostgreSQL event at log position `lsn` (its time follows the position); a
    truncate (`t`) has no row image."""
    source = {"version": "2.5.0.Final", "connector": "postgresql", "name": "shop", "ts_ms": TS + lsn,
              "snapshot": "true" if op == "r" else "false", "db": "shop", "schema": "public", "table": "orders",
              "lsn": lsn}
    image = None if id_ is None else {"id": id_, "v": v, "region": ("eu", "us")[id_ % 2]}
    before, after = (image, None) if op in ("d", "t") else (None, image)
    return {"before": before, "after": after, "op": op, "source": source, "ts_ms": TS + lsn + 40}


# Each batch's events and the rows after it. The truncate at lsn 500 lands in batch 2.
BATCHES = [
    ([pg("c", 100, 1, "a"), pg("c", 110, 2, "a"), pg("c", 120, 3, "a"), pg("c", 130, 4, "a"),
      pg("c", 900, 7, "a")],  # ranks above the truncate that lands later: it stays
     {1: "a", 2: "a", 3: "a", 4: "a", 7: "a"}),
    ([pg("u", 450, 1, "below"),  # below the truncate in its own batch: gone with it
      pg("t", 500),
      pg("c", 600, 5, "a"), pg("u", 640, 3, "above"),  # above it: they apply
      pg("d", 140, 4)],  # a delete below the truncate: the row is gone either way
     {3: "above", 5: "a", 7: "a"}),
    ([pg("u", 480, 2, "late"),  # below the truncate, arriving later: stale
      pg("c", 550, 6, "late"),  # above it, arriving later: applies
      pg("d", 700, 5),
      pg("r", 0, 8, "snapshot")],  # a snapshot read ranks below every streamed change (rules.md#rule-3)
     {3: "above", 6: "late", 7: "a"}),
    ([pg("t", 300),  # an older truncate landing late: it changes nothing
      pg("u", 950, 7, "b")],
     {3: "above", 6: "late", 7: "b"}),
]


def _table(partition_by: list[str], **more) -> dict:
    return {"name": "TR", "keys": ["id"], "format": "debezium-json", "partition_by": partition_by, **more}


@pytest.mark.parametrize("partition_by,on_spark", [([], False), (["region"], False), (["region"], True)],
                         ids=["in-process", "partitioned", "partitioned-on-spark"])
def test_a_truncate_deletes_what_ranks_below_it_and_stays_the_tables_tombstone(spark, workdir, monkeypatch,
                                                                                 partition_by, on_spark):
    if on_spark:
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")  # every incremental apply on Spark executors
        monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")  # and every whole build
    cfg = write_config(workdir, [_table(partition_by, maintenance={"trim_staging_after": "1h"})])
    table, table_dir = cfg.table("TR"), cfg.table_dir("TR")
    for n, (events, expected) in enumerate(BATCHES, start=1):
        land(cfg, "TR", f"batch-{n}", {"orders.jsonl": lines(*events)})
        outcome = run_ok(cfg, "TR")
        assert values(target_rows(cfg, "TR"), "id", "v") == expected, n
        if n == 2:
            assert outcome.figures["target"]["deletes"] == 3  # ids 1, 2 and 4: 3 is replaced
            if on_spark:
                assert outcome.figures["target"]["applied_on"] == "spark"
    final = BATCHES[-1][1]
    assert delta_version(cfg, "TR", QUARANTINE) == -1  # nothing quarantined
    tombstones = {r["_cdc_key"] for r in delta_rows(cfg, "TR", TOMBSTONES)}
    assert "[]" in tombstones  # the whole table's

    # a rebuild from staging gives the same rows
    rebuild(spark, cfg, table, None)
    assert values(target_rows(cfg, "TR"), "id", "v") == final

    # a restore to before the truncate, then the next run: the truncate applies again
    restore("TR", table_dir, 0)
    assert values(target_rows(cfg, "TR"), "id", "v") == BATCHES[0][1]
    run_ok(cfg, "TR")
    assert values(target_rows(cfg, "TR"), "id", "v") == final

    # staging trimmed (each key's latest change kept), then a rebuild and late changes below the truncate
    assert maintain(cfg, table, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)).staging_trimmed_through == 4
    rebuild(spark, cfg, table, None)
    assert values(target_rows(cfg, "TR"), "id", "v") == final
    land(cfg, "TR", "batch-5", {"orders.jsonl": lines(pg("u", 499, 1, "late"), pg("c", 501, 9, "late"))})
    run_ok(cfg, "TR")
    assert values(target_rows(cfg, "TR"), "id", "v") == {**final, 9: "late"}


def test_a_fresh_read_lays_a_pending_truncate_over_the_target(spark, workdir):
    cfg = write_config(workdir, [_table([], apply={"min_changes": 10**9})])
    table = cfg.table("TR")
    for n, (events, expected) in enumerate(BATCHES, start=1):
        land(cfg, "TR", f"batch-{n}", {"orders.jsonl": lines(*events)})
        run_ok(cfg, "TR")  # the first run builds the target; later merges wait
        assert values(fresh.fresh_table(cfg, table).to_pylist(), "id", "v") == expected, n
    shown = sorted(map(repr, fresh.fresh_table(cfg, table, with_metadata=True).to_pylist()))
    assert values(target_rows(cfg, "TR"), "id", "v") == BATCHES[0][1]  # nothing merged since the build
    apply_pending(spark, cfg, table)
    assert sorted(map(repr, target_rows(cfg, "TR", source_only=False))) == shown


def test_a_change_set_truncate_without_sequence_columns_ranks_by_arrival(spark, workdir):
    """Without `sequence_by`, arrival orders changes: a truncate row takes the rows that arrived
    before it, in earlier batches, files and lines, and not those after it."""
    cfg = write_config(workdir, [{"name": "CS", "keys": ["ID"], "format": "changeset",
                                  "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"],
                                              "deletes": ["D"], "truncates": ["T", "TRUNC"]}}])
    land(cfg, "CS", "batch-1", {"a.csv": "FLAG,ID,V\nI,1,a\nI,2,a\nI,3,a\n"})
    take_and_apply(spark, cfg, "CS")
    land(cfg, "CS", "batch-2", {"a.csv": "FLAG,ID,V\nU,1,b\nT,,\nI,4,a\n", "b.csv": "FLAG,ID,V\nU,2,b\n"})
    applied = take_and_apply(spark, cfg, "CS")
    assert values(target_rows(cfg, "CS"), "ID", "V") == {2: "b", 4: "a"}
    assert applied.deletes == 2
    land(cfg, "CS", "batch-3", {"a.csv": "FLAG,ID,V\nI,5,a\nTRUNC,9,x\n"})
    take_and_apply(spark, cfg, "CS")
    assert target_rows(cfg, "CS") == []
    assert delta_version(cfg, "CS", QUARANTINE) == -1  # nothing quarantined


def test_the_rows_above_a_truncate_are_found_in_a_partitioned_target_delta_rs_wrote_with_string_views(tmp_path):
    """A pending truncate on a partial-update table looks up the target's keys ranking above it. A
    partitioned target whose files delta-rs wrote with string views made Arrow's dataset filter compare
    partition values of two string types, and the apply failed (no kernel for string and string_view)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from cdc_assets.engine import merge_source

    views = pa.schema([("_cdc_key", pa.string_view()), ("_cdc_order", pa.string_view()), ("region", pa.string_view())])
    rows = pa.table({"_cdc_key": ["a", "b", "c"], "_cdc_order": ["1", "2", "3"], "region": ["x", "y", "x"]})
    write_deltalake(str(tmp_path / "target"), rows.cast(views), partition_by=["region"])
    assert merge_source._keys_above(DeltaTable(str(tmp_path / "target")), "1") == {"b", "c"}


def _file_holding(target: str, column: str, value) -> str:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    return next(uri for uri in DeltaTable(target).file_uris() if value in pq.read_table(uri, columns=[column])[column].to_pylist())


@pytest.mark.parametrize("new_column", [False, True], ids=["same-columns", "new-column"])
def test_a_truncate_drops_a_file_ranking_below_it_unread_and_leaves_one_above_it_unread(workdir, spark_when_needed,
                                                                                     new_column):
    """A truncate rewrites file by file: a file whose ordering keys all rank at or below it, and that
    holds none of the batch's keys, goes whole from its statistics; a file whose ordering keys all
    rank above it is not a file the truncate touches. Neither is opened (both are made unreadable).
    A batch bringing a new column too has the column added first, and goes file by file the same."""
    import os

    from cdc_assets.engine.table_layout import TARGET

    cfg = write_config(workdir, [{"name": "TF", "keys": ["k"], "format": "changeset",
                                  "columns": {"k": "string", "v": "string"},
                                  "options": {"op_column": "FLAG", "inserts": ["I"], "updates": ["U"], "deletes": ["D"],
                                              "truncates": ["T"], "sequence_by": ["SEQ"]}}])
    target = os.path.join(cfg.table_dir("TF"), TARGET)
    land(cfg, "TF", "b1", {"c.csv": "FLAG,SEQ,k,v\n" + "".join(f"I,{i},pq{i},one\n" for i in range(1, 6))})
    take_and_apply(spark_when_needed, cfg, "TF")
    land(cfg, "TF", "b2", {"c.csv": "FLAG,SEQ,k,v\n" + "".join(f"I,{100 + i},wz{i},two\n" for i in range(1, 6))})
    take_and_apply(spark_when_needed, cfg, "TF")
    below, above = _file_holding(target, "k", "pq1"), _file_holding(target, "k", "wz1")
    assert below != above
    kept = _unreadable([below, above])
    # a new key outside both files (and a value of a new column w)
    land(cfg, "TF", "b3", {"c.csv": "FLAG,SEQ,k,v,w\nT,50,,,\nI,60,rs1,three,new\n" if new_column else
                           "FLAG,SEQ,k,v\nT,50,,\nI,60,rs1,three\n"})
    try:
        applied = take_and_apply(spark_when_needed, cfg, "TF")
    finally:
        _put_back(kept)
    assert (applied.inserts, applied.updates, applied.deletes) == (1, 0, 5)
    assert applied.files_removed == 1
    rows = target_rows(cfg, "TF")
    assert values(rows, "k", "v") == {"rs1": "three"} | {f"wz{i}": "two" for i in range(1, 6)}
    if new_column:
        assert values(rows, "k", "w") == {"rs1": "new"} | {f"wz{i}": None for i in range(1, 6)}


def _unreadable(files: list[str]) -> dict[str, bytes]:
    """Overwrite `files` with bytes no Parquet reader takes; their contents, to put back."""
    kept = {}
    for f in files:
        with open(f, "rb") as fh:
            kept[f] = fh.read()
        with open(f, "wb") as fh:
            fh.write(b"not parquet" * 100)
    return kept


def _put_back(kept: dict[str, bytes]) -> None:
    for f, data in kept.items():
        with open(f, "wb") as fh:
            fh.write(data)


def test_a_truncate_that_cuts_more_rows_than_an_apply_in_process_takes_runs_on_spark(spark, workdir, monkeypatch):
    """The rows a truncate reads row by row (a file ranking partly above it) count against the
    in-process apply's limit, as a batch's rows do: past it, the apply runs on Spark executors; a
    truncate that takes whole files from their statistics reads no row and stays in this process."""
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "4")
    cfg = write_config(workdir, [_table([])])
    land(cfg, "TR", "batch-1", {"orders.jsonl": lines(*[pg("c", 100 + 10 * i, i, "a") for i in range(1, 4)],
                                                      *[pg("c", 600 + 10 * i, i, "a") for i in range(4, 7)])})
    run_ok(cfg, "TR")
    land(cfg, "TR", "batch-2", {"orders.jsonl": lines(pg("t", 500), pg("c", 700, 9, "b"))})
    outcome = run_ok(cfg, "TR")  # one file of six rows, three of them above the truncate
    assert outcome.figures["target"].get("applied_on") == "spark"
    assert values(target_rows(cfg, "TR"), "id", "v") == {4: "a", 5: "a", 6: "a", 9: "b"}
    land(cfg, "TR", "batch-3", {"orders.jsonl": lines(pg("t", 800), pg("c", 900, 10, "c"))})
    outcome = run_ok(cfg, "TR")  # every row ranks below it: files taken whole
    assert outcome.figures["target"].get("applied_on") != "spark"
    assert values(target_rows(cfg, "TR"), "id", "v") == {10: "c"}


def test_a_truncate_on_a_table_with_a_change_feed_records_each_row_it_deletes(spark, workdir):
    """With the change data feed, the truncate is a MERGE of its own before the batch's: the feed
    records a delete of every row it takes, those of keys the batch does not hold too, and the
    batch's changes above it as inserts; no key value and no ordering key goes into a commit."""
    from cdc_assets.engine import target_versions
    from cdc_assets_tests.support.warehouse import target_version

    cfg = write_config(workdir, [_table([], change_feed=True)])
    land(cfg, "TR", "batch-1", {"orders.jsonl": lines(*BATCHES[0][0])})
    run_ok(cfg, "TR")
    start = target_version(cfg, "TR") + 1
    land(cfg, "TR", "batch-2", {"orders.jsonl": lines(*BATCHES[1][0])})
    outcome = run_ok(cfg, "TR")
    assert values(target_rows(cfg, "TR"), "id", "v") == BATCHES[1][1]
    assert outcome.figures["target"]["deletes"] == 4  # ids 1 to 4, then 3 inserted again above it
    feed = target_versions.changes("TR", cfg.table_dir("TR"), start).to_pylist()
    assert sorted((r["_change_type"], r["id"], r["v"]) for r in feed) == [
        ("delete", 1, "a"), ("delete", 2, "a"), ("delete", 3, "a"), ("delete", 4, "a"),
        ("insert", 3, "above"), ("insert", 5, "a")]
    from deltalake import DeltaTable

    from cdc_assets.engine.table_layout import TARGET, path
    [truncate_at] = [r["_cdc_order"] for r in delta_rows(cfg, "TR", "changes") if r["_cdc_op"] == "T"]
    assert not [h for h in DeltaTable(path(cfg.table_dir("TR"), TARGET)).history() if truncate_at in repr(h)]
    land(cfg, "TR", "batch-3", {"orders.jsonl": lines(*BATCHES[2][0])})
    run_ok(cfg, "TR")
    assert values(target_rows(cfg, "TR"), "id", "v") == BATCHES[2][1]
    # a batch of a truncate alone: its MERGE is the apply's one commit, which records the batch applied
    land(cfg, "TR", "batch-4", {"orders.jsonl": lines(pg("t", 2000))})
    run_ok(cfg, "TR")
    assert target_rows(cfg, "TR") == []
    last = target_versions.versions(cfg.table_dir("TR"))[-1]
    assert (last.kind, last.batch, last.rows_deleted) == ("apply", 4, 3)


def test_a_soft_delete_tables_truncate_flags_the_same_rows_with_and_without_a_change_feed(spark, workdir):
    """A soft-delete table's truncate flags the rows it takes (rules.md#rule-12): as its own MERGE where the
    change data feed is on, file by file where it is not, with the same rows either way."""
    tables = [{**_table([], deletes="soft", change_feed=True), "name": "FEED"}, {**_table([], deletes="soft")}]
    cfg = write_config(workdir, tables)
    for n, (events, _) in enumerate(BATCHES, start=1):
        for name in ("FEED", "TR"):
            land(cfg, name, f"batch-{n}", {"orders.jsonl": lines(*events)})
            run_ok(cfg, name)
        shown = [sorted(map(repr, target_rows(cfg, name, source_only=False))) for name in ("FEED", "TR")]
        assert shown[0] == shown[1], n
        assert {r["id"] for r in target_rows(cfg, "TR", source_only=False) if not r["_cdc_deleted"]} == set(
            BATCHES[n - 1][1]), n
