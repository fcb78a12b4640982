"""The SCD2 history of feeds as they really are: a truncate closes every version current at it
(rules.md#rule-9), a version of a change that leaves columns out (a partial update, a TOAST placeholder)
shows the key's whole row at that version (rules.md#rule-10), and `history: {track_except: [...]}` folds a
change that touches only those columns into the current version. Each holds whatever the
arrival order across batches, and a rebuild gives the rows the updates gave."""
from __future__ import annotations

import pytest

from cdc_assets.core.config import ConfigError, parse_config
from cdc_assets.core.generator import debezium_events, deliver, generate_history
from cdc_assets.core.history import source_order
from cdc_assets.engine import history
from cdc_assets_tests.reference_model import TRUNCATE, ReferenceTable, SourceChange
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import run_steps
from cdc_assets_tests.support.warehouse import delta_rows, target_rows

from .test_history import assert_linked, history_rows, source_part
from .test_partial_feeds import differences, source_change

pytestmark = MARKS

TS = 1_709_287_200_000
PLACEHOLDER = "__debezium_unavailable_value"


def pg(op: str, lsn: int, row: dict | None = None) -> dict:
    """A Debezium PostgreSQL event at log position `lsn`; a truncate (`t`) has no row image."""
    source = {"version": "2.5.0.Final", "connector": "postgresql", "name": "shop", "ts_ms": TS + lsn,
              "snapshot": "false", "db": "shop", "schema": "public", "table": "t", "lsn": lsn}
    before, after = (row, None) if op in ("d", "t") else (None, row)
    return {"before": before, "after": after, "op": op, "source": source, "ts_ms": TS + lsn + 40}


def lsn_of(order: str | None) -> str | None:
    return None if order is None else source_order(order)


def story(rows: list[dict], *columns: str) -> list[tuple]:
    """Each version by its source position: what arrival order must not change."""
    return [(r["id"], r["_cdc_version"], r["_cdc_operation"], r["_cdc_is_current"], lsn_of(r["_cdc_valid_from"]),
             lsn_of(r["_cdc_valid_to"])) + tuple(r[c] for c in columns) for r in rows]


def versions_by_key(rows: list[dict], *columns: str) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(r["id"], []).append((r["_cdc_operation"], r["_cdc_is_current"]) + tuple(r[c] for c in columns))
    return out


def run_batches(spark, cfg, table: str, batches: list[list[dict]], first: int = 1) -> None:
    for n, events in enumerate(batches, start=first):
        land(cfg, table, f"batch-{n}", {"a.jsonl": jsonl(events)})
        run_steps(spark, cfg, table)
        rows = history_rows(cfg, table)
        assert_linked(rows)
        assert source_part(r for r in rows if r["_cdc_is_current"]) == source_part(target_rows(cfg, table))


def assert_rebuild_agrees(spark, cfg, table: str) -> None:
    before = history_rows(cfg, table)
    history.rebuild(spark, cfg, cfg.table(table))
    assert history_rows(cfg, table) == before


def test_a_truncate_closes_every_version_current_at_it_whatever_the_arrival_order(spark, workdir):
    cfg = write_config(workdir, [{"name": "TR", "keys": ["id"], "format": "debezium-json", "history": True}])
    run_batches(spark, cfg, "TR", [
        [pg("c", 100, {"id": 1, "v": "a"}), pg("c", 110, {"id": 2, "v": "a"}), pg("c", 900, {"id": 3, "v": "a"})],
        # the truncate at 500; 1 inserted again above it, 2 updated below it in the same batch
        [pg("t", 500), pg("c", 600, {"id": 1, "v": "b"}), pg("u", 450, {"id": 2, "v": "below"})],
    ])
    rows = history_rows(cfg, "TR")
    assert versions_by_key(rows, "v") == {
        1: [("insert", False, "a"), ("delete", False, None), ("insert", True, "b")],
        2: [("insert", False, "a"), ("update", False, "below"), ("delete", False, None)],
        3: [("insert", True, "a")]}  # above the truncate: untouched
    closed = [r for r in rows if r["id"] == 2]
    assert [lsn_of(r["_cdc_valid_to"]) for r in closed] == [lsn_of(closed[1]["_cdc_valid_from"]),
                                                           lsn_of(closed[2]["_cdc_valid_from"]), None]
    truncate_at = closed[2]["_cdc_valid_from"]
    assert [r["_cdc_valid_from"] for r in rows if r["_cdc_operation"] == "delete"] == [truncate_at, truncate_at]

    # late: 2 updated below the truncate (a version it closes); 1 deleted below it (the truncate then
    # finds it gone and closes nothing of it); an older truncate at 120 closes the versions current at it
    run_batches(spark, cfg, "TR", [[pg("u", 480, {"id": 2, "v": "late"}), pg("d", 140, {"id": 1}), pg("t", 120),
                             pg("c", 130, {"id": 4, "v": "a"})]], first=3)
    rows = history_rows(cfg, "TR")
    assert versions_by_key(rows, "v") == {
        1: [("insert", False, "a"), ("delete", False, None), ("delete", False, None), ("insert", True, "b")],
        2: [("insert", False, "a"), ("delete", False, None), ("insert", False, "below"), ("update", False, "late"),
            ("delete", False, None)],
        3: [("insert", True, "a")],
        4: [("insert", False, "a"), ("delete", False, None)]}
    truncates = sorted(r["_cdc_order"] for r in delta_rows(cfg, "TR", "changes") if r["_cdc_op"] == "T")
    by_id = {i: [r["_cdc_valid_from"] for r in rows if r["id"] == i and r["_cdc_operation"] == "delete"]
             for i in (1, 2, 4)}
    assert by_id[1][0] == by_id[2][0] == truncates[0] and by_id[2][1] == by_id[4][0] == truncates[1]
    assert by_id[1][1] < truncates[1]  # 1's own delete, at 140
    assert_rebuild_agrees(spark, cfg, "TR")


PARTIAL = {"keys": ["id"], "format": "debezium-json", "history": True, "partial_updates": True}
TRACKED = {"keys": ["id"], "format": "debezium-json", "history": {"track_except": ["seen"]}}


def test_each_version_shows_the_whole_row_and_a_late_change_refills_the_versions_after_it(spark, workdir):
    events = [pg("c", 100, {"id": 1, "a": "a1", "b": "b1", "c": "c1"}),
              pg("u", 200, {"id": 1, "a": None, "b": "b2", "c": PLACEHOLDER}),  # a: null keeps; c: TOAST
              pg("u", 300, {"id": 1, "a": "a3", "b": PLACEHOLDER}),  # c absent keeps
              pg("d", 400, {"id": 1}),
              pg("c", 500, {"id": 1, "a": "a5"})]  # after the delete: nothing to keep
    cfg = write_config(workdir, [{"name": "INORDER", **PARTIAL}, {"name": "LATE", **PARTIAL}])
    run_batches(spark, cfg, "INORDER", [events])
    run_batches(spark, cfg, "LATE", [[events[0], events[2]], [events[4], events[3]], [events[1]]])
    rows = history_rows(cfg, "INORDER")
    assert versions_by_key(rows, "a", "b", "c") == {1: [
        ("insert", False, "a1", "b1", "c1"), ("update", False, "a1", "b2", "c1"), ("update", False, "a3", "b2", "c1"),
        ("delete", False, None, None, None), ("insert", True, "a5", None, None)]}
    assert story(history_rows(cfg, "LATE"), "a", "b", "c") == story(rows, "a", "b", "c")
    assert_rebuild_agrees(spark, cfg, "LATE")


def test_track_except_folds_changes_of_untracked_columns_into_the_current_version(spark, workdir):
    events = [pg("c", 100, {"id": 1, "v": "a", "seen": 1}),
              pg("u", 200, {"id": 1, "v": "a", "seen": 2}),  # only `seen`: version 1 takes it in place
              pg("u", 250, {"id": 1, "v": "c", "seen": 9}),
              pg("u", 300, {"id": 1, "v": "b", "seen": 3}),
              pg("u", 400, {"id": 1, "v": "b", "seen": 4}),  # in place
              pg("d", 500, {"id": 1}),
              pg("c", 600, {"id": 1, "v": "b", "seen": 5})]  # after a delete: a version of its own
    cfg = write_config(workdir, [{"name": "INORDER", **TRACKED}, {"name": "LATE", **TRACKED},
                                 {"name": "TYPO", **TRACKED, "history": {"track_except": ["sen"]}}])
    run_batches(spark, cfg, "INORDER", [events])
    rows = history_rows(cfg, "INORDER")
    assert versions_by_key(rows, "v", "seen") == {1: [
        ("insert", False, "a", 2), ("update", False, "c", 9), ("update", False, "b", 4), ("delete", False, None, None),
        ("insert", True, "b", 5)]}
    # a version keeps the position of the change that opened it
    opened = sorted(r["_cdc_order"] for r in delta_rows(cfg, "INORDER", "changes"))
    assert [r["_cdc_valid_from"] for r in rows] == [opened[i] for i in (0, 2, 3, 5, 6)]
    # late arrivals across batches: 250 splits the version 300 and 400 share only once it lands
    run_batches(spark, cfg, "LATE", [[events[0], events[3], events[6], events[5]], [events[4], events[1]], [events[2]]])
    assert story(history_rows(cfg, "LATE"), "v", "seen") == story(rows, "v", "seen")
    assert_rebuild_agrees(spark, cfg, "LATE")

    land(cfg, "TYPO", "batch-1", {"a.jsonl": jsonl(events[:2])})
    with pytest.raises(ConfigError) as failure:
        run_steps(spark, cfg, "TYPO")
    assert "table TYPO" in str(failure.value) and "'sen'" in str(failure.value) \
        and "track_except" in str(failure.value)


def test_track_except_is_checked_with_the_configuration():
    def table(history) -> dict:
        return {"warehouse": "./w", "landing": "./l", "tables": [
            {"name": "E", "keys": ["id"], "format": "datastream-json", "history": history}]}

    parsed = parse_config(table({"track_except": ["seen", "note"]}), "/etc/cdc/cdc.yaml").table("E")
    assert parsed.history and parsed.history_track_except == ("seen", "note")
    assert parse_config(table(True), "/etc/cdc/cdc.yaml").table("E").history_track_except == ()
    with pytest.raises(ConfigError, match=r"table 'E'.*'history.track_except'.*key column 'id'"):
        parse_config(table({"track_except": ["seen", "id"]}), "/etc/cdc/cdc.yaml")
    with pytest.raises(ConfigError, match=r"table 'E'.*'history'.*unknown field 'track'"):
        parse_config(table({"track": ["seen"]}), "/etc/cdc/cdc.yaml")
    with pytest.raises(ConfigError, match=r"table 'E'.*'history.track_except'"):
        parse_config(table({"track_except": []}), "/etc/cdc/cdc.yaml")


def as_model(i: int, event: dict) -> SourceChange:
    if event["op"] == "t":
        return SourceChange((), i + 1, TRUNCATE, {}, f"e{i}")
    return source_change(i, event)


def test_generated_feeds_delivered_late_give_the_in_order_history(spark, workdir):
    """Generated Debezium feeds with TOAST placeholders, partial updates and two truncates, delivered
    shuffled, duplicated and late across batches: the same history as all of it in order, with and
    without track_except, its current versions the reference model's state after every batch, and a
    rebuild agrees."""
    made = generate_history(changes=160, inserts=30, updates=55, deletes=15, seed=5, reuse_pct=40,
                            changes_per_second=5)
    events = debezium_events(made, seed=5, toast_columns=["customer"], partial=True)
    for at in (len(events) // 3, 2 * len(events) // 3):  # a truncate just after the event at `at`
        source = {**events[at]["source"], "lsn": events[at]["source"]["lsn"] + 1}
        events.insert(at + 1, {"before": None, "after": None, "op": "t", "source": source,
                               "ts_ms": events[at]["ts_ms"]})
    landed = deliver(list(range(len(events))), batches=4, files_per_batch=2, duplicate_pct=5, delay_pct=25, seed=5)
    flat = [sum(files, []) for files in landed]
    assert any(min(flat[n]) < max(max(b) for b in flat[:n]) for n in range(1, len(flat))), "nothing arrives late"
    columns = {"amount": "double", "status": "string", "region": "string", "customer": "string"}
    kept = {"": True, "_T": {"track_except": ["amount"]}}
    cfg = write_config(workdir, [{"name": name + suffix, "keys": ["id"], "format": "debezium-json",
                                  "partial_updates": True, "columns": columns, "history": h}
                                 for suffix, h in kept.items() for name in ("INORDER", "LATE")])
    for suffix in kept:
        model = ReferenceTable(partial=True)  # the current versions are the reference model's state
        land(cfg, "INORDER" + suffix, "b0", {"a.jsonl": jsonl(events)})
        run_steps(spark, cfg, "INORDER" + suffix)
        for n, files in enumerate(landed):
            land(cfg, "LATE" + suffix, f"b{n}", {f"f{j}.jsonl": jsonl([events[i] for i in f])
                                                 for j, f in enumerate(files)})
            run_steps(spark, cfg, "LATE" + suffix)
            rows = history_rows(cfg, "LATE" + suffix)
            assert_linked(rows)
            for i in sum(files, []):
                model.deliver(as_model(i, events[i]))
            assert differences(model.state(), source_part(r for r in rows if r["_cdc_is_current"])) == [], n
        every = list(columns)
        assert story(history_rows(cfg, "LATE" + suffix), *every) == story(history_rows(cfg, "INORDER" + suffix), *every)
    folded, whole = history_rows(cfg, "LATE_T"), history_rows(cfg, "LATE")
    assert 0 < len(folded) < len(whole)
    assert_rebuild_agrees(spark, cfg, "LATE_T")


def test_a_truncate_closes_versions_of_columns_named_with_backticks_and_dots(spark, workdir):
    """A truncate's closing versions are selected by column name: names Delta allows that Spark
    would parse (a backtick, a dot) are columns, not expressions, there too."""
    cfg = write_config(workdir, [{"name": "TN", "keys": ["id"], "format": "debezium-json", "history": True}])
    run_batches(spark, cfg, "TN", [[pg("c", 100, {"id": 1, "a.b": "x", "k`ey": "y"}), pg("t", 200),
                             pg("c", 300, {"id": 2, "a.b": "z", "k`ey": None})]])
    rows = history_rows(cfg, "TN")
    assert sorted((r["id"], r["_cdc_operation"], r["_cdc_is_current"], r["a.b"], r["k`ey"]) for r in rows) == [
        (1, "delete", False, None, None), (1, "insert", False, "x", "y"), (2, "insert", True, "z", None)]
    assert_rebuild_agrees(spark, cfg, "TN")


def test_a_placeholder_update_that_arrives_before_the_insert_takes_the_inserts_value(spark, workdir):
    """An update carrying a TOAST placeholder lands first, the insert before it (by LSN) a batch
    later: the update's version shows the insert's value of the left-out column (rules.md#rule-10), in the
    history the batches built and in a rebuild."""
    cfg = write_config(workdir, [{"name": "TL", "keys": ["id"], "format": "debezium-json", "history": True}])
    run_batches(spark, cfg, "TL", [[pg("u", 200, {"id": 1, "a": PLACEHOLDER, "b": "b2"})],
                            [pg("c", 100, {"id": 1, "a": "a1", "b": "b1"})]])
    assert versions_by_key(history_rows(cfg, "TL"), "a", "b") == {
        1: [("insert", False, "a1", "b1"), ("update", True, "a1", "b2")]}
    assert_rebuild_agrees(spark, cfg, "TL")


def test_a_rebuild_keeps_a_placeholder_beside_a_non_finite_double(spark, workdir):
    """A change whose image holds an infinity (JSON's non-standard numbers) and leaves a
    column out: the rebuilt history still knows the column was left out, as the updates did."""
    cfg = write_config(workdir, [{"name": "NF", "keys": ["id"], "format": "debezium-json", "history": True,
                                  "columns": {"x": "double"}}])
    run_batches(spark, cfg, "NF", [[pg("c", 100, {"id": 1, "a": "a1", "x": 1.5}),
                             pg("u", 200, {"id": 1, "a": PLACEHOLDER, "x": float("inf")})],
                            [pg("u", 300, {"id": 1, "a": PLACEHOLDER, "x": float("-inf")})]])
    assert [v[:3] for v in versions_by_key(history_rows(cfg, "NF"), "a")[1]] == [
        ("insert", False, "a1"), ("update", False, "a1"), ("update", True, "a1")]
    assert_rebuild_agrees(spark, cfg, "NF")


def test_a_truncate_closing_more_versions_than_an_update_here_takes_builds_the_history_on_spark(spark, workdir,
                                                                                                  monkeypatch):
    """A truncate closes every version live at it, which may be every key's: past the size of an
    update in this process (settings.local_apply_rows), the history is built again by Spark's
    executors, with the versions an update gives; a truncate closing fewer is an update."""
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "3")
    cfg = write_config(workdir, [{"name": "TR", "keys": ["id"], "format": "debezium-json", "history": True}])
    run_batches(spark, cfg, "TR", [[pg("c", 100 + i, {"id": i, "v": "a"}) for i in range(1, 6)]])
    land(cfg, "TR", "batch-2", {"a.jsonl": jsonl([pg("t", 500), pg("c", 600, {"id": 1, "v": "b"})])})
    out = run_steps(spark, cfg, "TR").history
    assert out.built == "truncate"  # five versions live at it
    rows = history_rows(cfg, "TR")
    assert_linked(rows)
    assert versions_by_key(rows, "v") == {
        1: [("insert", False, "a"), ("delete", False, None), ("insert", True, "b")],
        **{i: [("insert", False, "a"), ("delete", False, None)] for i in range(2, 6)}}
    land(cfg, "TR", "batch-3", {"a.jsonl": jsonl([pg("t", 700)])})
    out = run_steps(spark, cfg, "TR").history
    assert out.built is None and out.keys_touched == 1
    assert versions_by_key(history_rows(cfg, "TR"), "v")[1] == [("insert", False, "a"), ("delete", False, None),
                                                                ("insert", False, "b"), ("delete", False, None)]
    assert_rebuild_agrees(spark, cfg, "TR")
