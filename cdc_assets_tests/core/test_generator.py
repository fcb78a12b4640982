"""The demo feed generator: counts, true order, positions, delivery, and the Debezium events whose
updates leave columns out."""
from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest

from cdc_assets.core import generator
from cdc_assets.core.formats import parse_file
from cdc_assets.core.generator import DELETE, INSERT, SOURCES, UPDATE
from cdc_assets.core.partial import Piece, combine
from cdc_assets.core.values import canonical_text

UPSERT_TYPES = {"INSERT", "UPDATE", "UPDATE-INSERT"}


def history(**kw):
    args = dict(table="ORDERS", changes=1000, inserts=38.2, updates=42.4, deletes=19.4, seed=7)
    return generator.generate_history(**{**args, **kw})


def position(event) -> tuple:
    """The ordering key of rules.md#datastream, compared as numbers: source_timestamp, then the position."""
    meta = event["source_metadata"]
    ts = dt.datetime.fromisoformat(event["source_timestamp"])
    if "scn" in meta:
        rs = [int(p, 16) for p in meta["rs_id"].removeprefix("0x").split(".")]
        assert len(rs) == 3
        return ts, (meta["scn"], *rs, meta["ssn"])
    if "log_file" in meta:
        prefix, number = meta["log_file"].rsplit(".", 1)
        assert prefix == "mysql-bin"
        return ts, (int(number), meta["log_position"])
    lsn = meta["lsn"]
    parts = lsn.split("/") if event["read_method"] == "postgres-cdc-wal" else lsn.split(":")
    assert len(parts) == (2 if event["read_method"] == "postgres-cdc-wal" else 3)
    return ts, tuple(int(p, 16) for p in parts)


def parse(events):
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    return list(parse_file("datastream-json", {}, ["id"], "part-0001.jsonl", data))


# ---- history ----------------------------------------------------------------

def test_same_seed_same_history_events_and_delivery():
    a, b = history(), history()
    assert a.operations == b.operations and a.final == b.final
    ea, eb = generator.datastream_events(a, "oracle", seed=7), generator.datastream_events(b, "oracle", seed=7)
    assert ea == eb
    assert generator.deliver(ea, 3, 3, 3, 5, seed=7) == generator.deliver(eb, 3, 3, 3, 5, seed=7)
    other = history(seed=8)
    assert other.operations != a.operations
    assert generator.datastream_events(a, "oracle", seed=8) != ea


@pytest.mark.parametrize("changes, pcts, expected", [
    (1000, (38.2, 42.4, 19.4), (382, 424, 194)),  # a recorded Datastream experiment: 382 - 194 = 188 rows
    (1000, (40, 40, 20), (400, 400, 200)),
    (10, (33.4, 33.3, 33.3), (4, 3, 3)),
    (7, (100, 0, 0), (7, 0, 0)),
    (0, (50, 25, 25), (0, 0, 0)),
    (101, (50, 0, 50), (51, 0, 50)),
])
def test_counts_match_percentages(changes, pcts, expected):
    h = history(changes=changes, inserts=pcts[0], updates=pcts[1], deletes=pcts[2])
    assert len(h.operations) == changes
    assert h.counts() == dict(zip(("inserts", "updates", "deletes"), expected))
    assert len(h.final) == expected[0] - expected[2]


@pytest.mark.parametrize("pcts, message", [
    ((50, 50, 10), "adding to 100"),
    ((-10, 60, 50), "adding to 100"),
    ((30, 30, 40), "deletes need more than"),
    ((40, 20, 40), "deletes need more than"),
    ((0, 100, 0), "need at least one insert"),
])
def test_impossible_mixes_are_clear_errors(pcts, message):
    with pytest.raises(ValueError, match=message):
        history(changes=100, inserts=pcts[0], updates=pcts[1], deletes=pcts[2])


def test_operations_touch_live_keys_and_replay_to_the_final_state():
    h = history(changes=3000, inserts=35, updates=35, deletes=30)
    live, ever_deleted, reused = {}, set(), 0
    for o in h.operations:
        assert o.row["id"] == o.key
        if o.op == INSERT:
            assert o.key not in live
            reused += o.key in ever_deleted
            live[o.key] = o.row
        elif o.op == UPDATE:
            assert o.key in live and o.row != live[o.key]
            live[o.key] = o.row
        else:
            assert o.op == DELETE and live.pop(o.key) == o.row  # a delete carries the row it removed
            ever_deleted.add(o.key)
    assert live == h.final == generator.replay(h.operations)
    assert reused > 0  # an insert sometimes brings a deleted key back


def test_rows_have_typed_columns_and_a_partition_column():
    h = history()
    rows = [o.row for o in h.operations]
    assert all(set(r) == {"id", "customer", "amount", "status", "region"} for r in rows)
    assert all(isinstance(r["id"], int) and isinstance(r["customer"], str) for r in rows)
    assert all(isinstance(r["amount"], float) and round(r["amount"], 2) == r["amount"] for r in rows)
    assert any(r["status"] is None for r in rows) and any(r["status"] for r in rows)
    assert {r["region"] for r in rows} == set(generator.REGIONS)
    prev, moved = {}, 0
    for o in h.operations:
        if o.op == UPDATE:
            moved += prev[o.key]["region"] != o.row["region"]
        prev[o.key] = o.row
    assert moved > 0  # some updates move a row to another region (partition)


def test_custom_columns_and_key():
    h = history(changes=50, inserts=100, updates=0, deletes=0, key="order_id",
                columns={"note": "text", "qty": "int"})
    assert all(set(r) == {"order_id", "note", "qty"} for r in h.final.values())
    with pytest.raises(ValueError, match="unknown column kinds"):
        history(columns={"x": "blob"})


def test_source_time_has_whole_seconds_shared_by_many_changes():
    h = history(changes_per_second=20)
    times = [o.at for o in h.operations]
    assert times == sorted(times) and times[0] == generator.DEFAULT_START
    assert all(t.microsecond == 0 for t in times)
    assert max(Counter(times).values()) == 20


# ---- events -----------------------------------------------------------------

@pytest.mark.parametrize("source", SOURCES)
def test_events_replayed_in_true_order_give_the_final_state(source):
    h = history()
    events = generator.datastream_events(h, source, seed=7)
    assert len(events) == len(h.operations) == len({e["uuid"] for e in events})
    state = {}
    for e in events:
        meta = e["source_metadata"]
        assert meta["is_deleted"] == (meta["change_type"] == "DELETE")
        if meta["change_type"] == "DELETE":
            del state[e["payload"]["id"]]
        else:
            assert meta["change_type"] in UPSERT_TYPES
            state[e["payload"]["id"]] = e["payload"]
    assert state == h.final
    assert all(len(e["source_timestamp"]) == 19 for e in events)  # 'YYYY-MM-DDTHH:MM:SS'


@pytest.mark.parametrize("source, types", [
    ("oracle", {"INSERT", "UPDATE-INSERT", "DELETE"}),
    ("mysql", {"INSERT", "UPDATE-INSERT", "DELETE"}),
    ("postgres", {"INSERT", "UPDATE", "DELETE"}),
    ("sqlserver", {"INSERT", "UPDATE", "DELETE"}),
])
def test_change_types_and_read_method_per_source(source, types):
    events = generator.datastream_events(history(changes=300), source)
    assert {e["source_metadata"]["change_type"] for e in events} == types
    assert {e["read_method"] for e in events} == {generator.READ_METHODS[source]}


@pytest.mark.parametrize("source", SOURCES)
def test_positions_strictly_increase_in_true_order(source):
    events = generator.datastream_events(history(changes=5000, inserts=50, updates=30, deletes=20), source,
                                         seed=3, first_binlog=999_998)
    keys = [position(e) for e in events]
    assert all(a < b for a, b in zip(keys, keys[1:]))
    # and as the project's own parser orders them, with no rejection
    changes = parse(events)
    assert all(hasattr(c, "order") for c in changes), [c for c in changes if not hasattr(c, "order")][:3]
    orders = [c.order for c in changes]
    assert all(a < b for a, b in zip(orders, orders[1:]))


def test_positions_need_numeric_comparison():
    """The feeds exercise what text comparison gets wrong (rules.md#keys)."""
    mysql = generator.datastream_events(history(changes=1500), "mysql", first_binlog=999_999)
    files = [e["source_metadata"]["log_file"] for e in mysql]
    assert "mysql-bin.999999" in files and "mysql-bin.1000000" in files
    assert len(set(files)) >= 4  # rotates every few hundred events
    assert any(a["log_position"] > b["log_position"] for a, b in zip(
        (e["source_metadata"] for e in mysql), (e["source_metadata"] for e in mysql[1:])))
    pg = [e["source_metadata"]["lsn"] for e in generator.datastream_events(history(changes=1500), "postgres")]
    assert any(a > b for a, b in zip(pg, pg[1:]))  # as text, the lsn goes backwards somewhere
    oracle = [e["source_metadata"] for e in generator.datastream_events(history(), "oracle")]
    assert any(a["scn"] == b["scn"] for a, b in zip(oracle, oracle[1:]))  # rs_id/ssn break ties
    assert all(e["rs_id"].startswith("0x") and e["rs_id"].count(".") == 2 for e in oracle)


# ---- delivery ---------------------------------------------------------------

def test_delivery_batches_files_duplicates_and_delays():
    events = generator.datastream_events(history(), "mysql", seed=7)
    landed = generator.deliver(events, batches=3, files_per_batch=4, duplicate_pct=3, delay_pct=5, seed=7)
    assert len(landed) == 3 and all(len(files) == 4 and all(files) for files in landed)
    delivered = [e["uuid"] for files in landed for part in files for e in part]
    assert set(delivered) == {e["uuid"] for e in events}  # nothing lost
    assert len(delivered) - len(events) == 30  # 3% delivered twice
    index = {e["uuid"]: i for i, e in enumerate(events)}
    batch_of = {}
    for b, files in enumerate(landed):
        for part in files:
            for e in part:
                batch_of.setdefault(e["uuid"], b)
    in_time = [i * 3 // len(events) for i in range(len(events))]
    late = sum(batch_of[u] > in_time[i] for u, i in index.items())
    assert late == 50  # 5% delayed into a later batch
    first = [index[e["uuid"]] for e in landed[0][0]]
    assert first != sorted(first)  # shuffled


def meaning(row: dict) -> dict:
    """Values by meaning: the JSON literal 19.9 is kept exact, the generator holds a float."""
    return {c: canonical_text(v) for c, v in row.items()}


def test_delivered_feed_applied_by_the_spec_rules_gives_the_final_state():
    h = history(changes=2000)
    events = generator.datastream_events(h, "postgres", seed=7)
    landed = generator.deliver(events, batches=4, files_per_batch=2, duplicate_pct=10, delay_pct=10, seed=7)
    latest = {}
    for files in landed:
        for part in files:
            for c in parse(part):
                assert hasattr(c, "order"), c
                if c.key not in latest or c.order > latest[c.key].order:
                    latest[c.key] = c
    state = {k[0]: meaning(c.row) for k, c in latest.items() if c.op != "D"}
    assert state == {k: meaning(row) for k, row in h.final.items()}


def test_small_feeds_leave_out_empty_files_and_batches():
    events = generator.datastream_events(history(changes=2, inserts=100, updates=0, deletes=0), "mysql")
    landed = generator.deliver(events, batches=5, files_per_batch=3, duplicate_pct=0, delay_pct=0)
    assert sum(len(p) for files in landed for p in files) == 2
    assert all(files and all(files) for files in landed)
    assert generator.deliver([], 3, 3, 3, 5) == []


def test_snapshot_exports_are_the_source_state_at_each_cut_and_the_last_is_the_final_state():
    history = generator.generate_history(changes=120, seed=4)
    exports = generator.snapshot_exports(history, batches=3, files_per_batch=2, seed=1)
    assert len(exports) == 3
    n = len(history.operations)
    for b, files in enumerate(exports, start=1):
        rows = [r for f in files for r in f]
        assert len(files) <= 2
        assert {r["id"]: r for r in rows} == generator.replay(history.operations[: b * n // 3])
        assert len(rows) == len({r["id"] for r in rows})
    assert {r["id"]: r for f in exports[-1] for r in f} == history.final


def test_debezium_updates_leave_out_only_unchanged_columns_and_the_rule_recovers_the_final_state():
    h = history(changes=1500)
    events = generator.debezium_events(h, seed=7, toast_columns=["customer"])
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    changes = list(parse_file("debezium-json", {}, ["id"], "part-0001.jsonl", data))
    assert sum(bool(c.unset) for c in changes) > 100 and all(c.unset <= {"customer"} for c in changes)
    before: dict = {}
    for o, c in zip(h.operations, changes):
        if c.unset:  # the placeholder stands for the value the key already had
            assert o.op == UPDATE and before[o.key]["customer"] == o.row["customer"]
        before[o.key] = o.row
    by_key: dict = {}
    for c in changes:
        by_key.setdefault(c.key[0], []).append(Piece(c.order, c.op, c.row, c.unset))
    state = {}
    for k, pieces in by_key.items():
        done = combine(pieces[::-1], partial=False)  # any order: the combination ranks them
        if done.op(pieces[::-1]) == "U":
            state[k] = meaning(done.row)
    assert state == {k: meaning(row) for k, row in h.final.items()}


def test_partial_debezium_updates_carry_what_changed():
    h = history(changes=800)
    events = generator.debezium_events(h, seed=3, partial=True)
    before: dict = {}
    left_out = 0
    for o, e in zip(h.operations, events):
        if o.op == UPDATE:
            for c, v in o.row.items():
                if e["after"].get(c) is None:
                    left_out += 1
                    assert before[o.key][c] == v or v is None  # only an unchanged value (or a new null)
                else:
                    assert e["after"][c] == v
        before[o.key] = o.row
    assert left_out > 100
