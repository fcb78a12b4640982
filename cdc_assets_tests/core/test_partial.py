"""rules.md#rule-10 in the core: the Debezium parser marks a TOAST placeholder as a column not carried, in
every form Debezium writes it, and a key's changes combine column by column to the same state
whatever their order and however they are grouped first."""
from __future__ import annotations

import base64
import itertools
import json
import random

import pytest

from cdc_assets.core.changes import DELETE, UPSERT, Change
from cdc_assets.core.formats import parse_file
from cdc_assets.core.partial import Piece, combine
from cdc_assets.core.values import decode_image, decode_row, encode_row

UNAVAILABLE = "__debezium_unavailable_value"


def parsed(after: dict, schema: dict | None = None, rename: dict | None = None) -> Change:
    event = {"before": None, "after": after, "op": "u",
             "source": {"connector": "postgresql", "ts_ms": 1_709_287_200_000, "lsn": 100}}
    line = json.dumps({"schema": schema, "payload": event} if schema else event)
    (item,) = parse_file("debezium-json", {}, ["id"], "f.jsonl", line.encode(), rename=rename)
    assert isinstance(item, Change), item
    return item


@pytest.mark.parametrize("value", [UNAVAILABLE, [UNAVAILABLE], base64.b64encode(UNAVAILABLE.encode()).decode(),
                                   UNAVAILABLE.encode().hex()],
                         ids=["text", "array", "base64", "hex"])
def test_a_toast_placeholder_is_a_column_not_carried(value):
    change = parsed({"id": 1, "doc": value, "v": "x"})
    assert change.unset == {"doc"} and change.row == {"id": 1, "v": "x"}


def test_placeholder_bytes_under_a_bytes_schema_and_a_renamed_column():
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "id", "type": "int32"}, {"field": "blob", "type": "bytes", "optional": True}]}]}
    change = parsed({"id": 1, "blob": base64.b64encode(UNAVAILABLE.encode()).decode()}, schema,
                    rename={"blob": "payload"})
    assert change.unset == {"payload"} and "payload" not in change.row


def test_a_plain_null_and_other_text_are_carried():
    change = parsed({"id": 1, "doc": None, "v": UNAVAILABLE + " ", "w": [UNAVAILABLE, UNAVAILABLE]})
    assert change.unset == frozenset() and change.row["doc"] is None and change.row["v"] == UNAVAILABLE + " "


def test_the_image_lists_what_it_does_not_carry_and_a_row_reader_never_sees_it():
    text = encode_row({"id": 1, "v": "x"}, unset=["doc"])
    assert decode_image(text) == ({"id": 1, "v": "x"}, frozenset({"doc"}))
    assert decode_row(text) == {"id": 1, "v": "x"}


def history(rnd: random.Random, n: int) -> list[Piece]:
    """A key's changes in true order (ordering keys ascending), some leaving columns out."""
    out = []
    for i in range(n):
        order = f"{i:04d}"
        if rnd.random() < 0.15:
            out.append(Piece(order, DELETE, {"id": 1}))
            continue
        row = {"id": 1}
        unset = set()
        for c in ("a", "b", "c"):
            r = rnd.random()
            if r < 0.4:
                row[c] = f"{c}{i}"
            elif r < 0.6:
                row[c] = None
            elif r < 0.8:
                unset.add(c)
        out.append(Piece(order, UPSERT, row, frozenset(unset)))
    return out


def by_definition(pieces: list[Piece], partial: bool) -> dict | None:
    """The rule as written: replay in true order; a delete forgets everything; an upsert sets each
    column it carries (a non-full image's absent column is null unless the table is partial)."""
    state = None
    for p in sorted(pieces, key=lambda p: p.order):
        if p.op == DELETE:
            state = None
            continue
        state = dict(state or {})
        for c in ("id", "a", "b", "c"):
            if c in p.unset or (partial and p.row.get(c) is None):
                continue
            state[c] = p.row.get(c)
    return state


@pytest.mark.parametrize("partial", [False, True])
def test_combination_equals_the_rule_in_any_order_and_grouping(partial):
    rnd = random.Random(7)
    for _ in range(300):
        pieces = history(rnd, rnd.randint(1, 7))
        want = by_definition(pieces, partial)
        shuffled = pieces[:]
        rnd.shuffle(shuffled)
        done = combine(shuffled, partial)
        got = done.row if done.op(shuffled) == UPSERT else None
        # a column no change carried since the last delete is absent: null, as the rule has it
        assert (None if got is None else {c: got.get(c) for c in ("id", "a", "b", "c")}) == \
            (None if want is None else {c: want.get(c) for c in ("id", "a", "b", "c")})
        # a subset combined first (a batch, or the target row) and then with the rest: the same state
        cut = rnd.randint(0, len(shuffled))
        first, rest = shuffled[:cut], shuffled[cut:]
        if first and rest:
            early = combine(first, partial)
            if early.op(first) == UPSERT and all(p.order > max(q.order for q in first) for p in rest):
                folded = [Piece(first[early.latest].order, UPSERT, early.row)] + rest
                again = combine(folded, partial)
                assert (again.row if again.op(folded) == UPSERT else None) == got


def test_permutations_of_a_late_fill():
    pieces = [Piece("1", UPSERT, {"id": 1, "a": "a1", "b": "b1"}),
              Piece("3", UPSERT, {"id": 1, "b": "b3"}, frozenset({"a"})),
              Piece("2", UPSERT, {"id": 1, "a": "a2", "b": "b2"})]
    for order in itertools.permutations(pieces):
        assert combine(list(order), partial=False).row == {"id": 1, "a": "a2", "b": "b3"}


def replayed(pieces: list[Piece], partial: bool, soft: bool, cuts: list[str]) -> tuple[bool, dict]:
    """rules.md#rule-9, rules.md#rule-10 and rules.md#rule-12 as written, replayed in true order: a
    delete or truncate ends the live row; a soft-delete table keeps that row, each column a delete's
    image carries (not null, not a placeholder) laid over it. Returns whether the key is live and
    its row (the kept one if not)."""
    events = sorted([(p.order, p) for p in pieces] + [(c, None) for c in cuts], key=lambda e: e[0])
    live: dict | None = None
    kept: dict = {}
    for _, p in events:
        if p is None or p.op == DELETE:
            if live is not None:
                kept, live = live, None
            if p is not None and soft:
                kept = {**kept, **{c: v for c, v in p.row.items() if v is not None and c not in p.unset}}
            continue
        live = dict(live or {})
        for c in ("id", "a", "b", "c"):
            if c in p.unset or (partial and p.row.get(c) is None):
                continue
            live[c] = p.row.get(c)
    return (True, live) if live is not None else (False, kept)


def with_images(pieces: list[Piece], rnd: random.Random) -> list[Piece]:
    """Some deletes carry a row image (REPLICA IDENTITY FULL), some only the key."""
    out = []
    for p in pieces:
        if p.op == DELETE and rnd.random() < 0.5:
            p = Piece(p.order, DELETE, {"id": 1, **{c: rnd.choice([None, f"{c}-{p.order}"]) for c in ("a", "b", "c")}})
        out.append(p)
    return out


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("soft", [False, True])
def test_truncates_and_soft_deletes_combine_as_the_rules_replay(partial, soft):
    rnd = random.Random(f"{partial}{soft}")
    for _ in range(400):
        pieces = with_images(history(rnd, rnd.randint(1, 7)), rnd)
        # a truncate ranks just after change i; only those below the key's latest change concern its row
        top = max(p.order for p in pieces)
        cuts = [f"{i:04d}~" for i in range(len(pieces)) if rnd.random() < 0.2 and f"{i:04d}~" < top]
        live, want = replayed(pieces, partial, soft, cuts)
        shuffled = pieces[:]
        rnd.shuffle(shuffled)
        done = combine(shuffled, partial, soft=soft, cuts=cuts)
        assert (done.op(shuffled) == UPSERT) == live
        if live or soft:
            assert {c: done.row.get(c) for c in ("id", "a", "b", "c")} == {c: want.get(c) for c in ("id", "a", "b", "c")}


def test_a_soft_delete_with_only_the_key_keeps_the_last_live_row():
    pieces = [Piece("1", UPSERT, {"id": 1, "a": "a1", "b": "b1"}),
              Piece("2", UPSERT, {"id": 1, "a": "a2", "b": None}),
              Piece("3", DELETE, {"id": 1, "a": None, "b": None})]
    for order in itertools.permutations(pieces):
        assert combine(list(order), partial=False, soft=True).row == {"id": 1, "a": "a2", "b": None}
        assert combine(list(order), partial=True, soft=True).row == {"id": 1, "a": "a2", "b": "b1"}
    # a second delete keeps it; its image's non-null values are the row as the source deleted it
    again = pieces + [Piece("4", DELETE, {"id": 1, "b": "b4"})]
    assert combine(again, partial=False, soft=True).row == {"id": 1, "a": "a2", "b": "b4"}
    # a truncate between two upserts: the later partial one starts from nothing
    assert combine(pieces[:2], partial=True, cuts=["15"]).row == {"id": 1, "a": "a2"}


def test_a_placeholder_in_a_deletes_image_is_not_carried():
    """A soft-delete table keeps a deleted key's row from what the delete's image carries: a TOAST
    placeholder there is no value (the row keeps the stored one), as in an update."""
    event = {"before": {"id": 1, "doc": UNAVAILABLE, "v": "x"}, "after": None, "op": "d",
             "source": {"connector": "postgresql", "ts_ms": 1_709_287_200_000, "lsn": 100}}
    (item,) = parse_file("debezium-json", {}, ["id"], "f.jsonl", json.dumps(event).encode())
    assert isinstance(item, Change) and item.op == DELETE
    assert item.unset == {"doc"} and item.row == {"id": 1, "v": "x"}
    kept = combine([Piece("1", UPSERT, {"id": 1, "doc": "long", "v": "a"}),
                    Piece("2", DELETE, item.row, item.unset)], partial=False, soft=True)
    assert kept.row == {"id": 1, "doc": "long", "v": "x"}
