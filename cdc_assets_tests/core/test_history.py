"""core/history.versions on random feeds: truncates, left-out columns and `track_except`, each
checked against a model built another way (core/partial.combine for a version's row), and the
history taken batch by batch, in any arrival order, equal to the history of every change at once."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from cdc_assets.core.changes import DELETE, UPSERT
from cdc_assets.core.history import UNSET, Rules, Truncate, as_changes, versions
from cdc_assets.core.partial import Piece, combine

KEYS = ["id"]
DATA = ["id", "a", "b"]


def feed(rnd: random.Random, n: int) -> tuple[list[dict], list[Truncate]]:
    """`n` changes of three keys and a few truncates, each with its own position (`order`)."""
    rows, truncates = [], []
    for i in range(n):
        order = f"1{i:05d}|{rnd.randrange(9)}"
        pick = rnd.random()
        if pick < 0.08:
            truncates.append(Truncate(order, f"b{i}", None))
            continue
        op = DELETE if pick < 0.2 else UPSERT
        row = {"id": rnd.randrange(3), "a": rnd.choice([None, "x", "y"]), "b": rnd.choice([None, 1, 2])}
        unset = sorted(c for c in ("a", "b") if op == UPSERT and rnd.random() < 0.2)
        rows.append({**row, "_cdc_key": str(row["id"]), "_cdc_op": op, "_cdc_order": order, "_cdc_batch": f"b{i}",
                     "_cdc_event_id": None, UNSET: ("[" + ", ".join(f'"{c}"' for c in unset) + "]") if unset else None})
    return rows, truncates


SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.int64())] +
                   [(c, pa.string()) for c in ("_cdc_key", "_cdc_op", "_cdc_order", "_cdc_batch", "_cdc_event_id", UNSET)])


def history_of(rows: list[dict], rules: Rules) -> list[dict]:
    return versions(pa.Table.from_pylist(rows, schema=SCHEMA), DATA, KEYS, rules).to_pylist()


@pytest.mark.parametrize("seed", range(40))
def test_each_version_is_the_key_combined_up_to_it_and_a_truncate_closes_what_is_live(seed):
    rnd = random.Random(seed)
    rows, truncates = feed(rnd, 40)
    partial = seed % 2 == 0
    out = history_of(rows, Rules(partial=partial, truncates=tuple(truncates)))
    cut = sorted(t.order for t in truncates)
    for key in {r["_cdc_key"] for r in rows}:
        mine = sorted((r for r in rows if r["_cdc_key"] == key), key=lambda r: r["_cdc_order"])
        got = [v for v in out if v["_cdc_key"] == key]
        for v in got:
            at = v["_cdc_valid_from"]
            pieces = [Piece(r["_cdc_order"], r["_cdc_op"], {c: r[c] for c in DATA},
                      frozenset(c for c in ("a", "b") if r[UNSET] and f'"{c}"' in r[UNSET]))
                      for r in mine if r["_cdc_order"] <= at]
            pieces += [Piece(t, DELETE, {"id": int(key)}) for t in cut if t <= at]
            state = combine(pieces, partial)
            if state.op(pieces) == UPSERT:
                assert {c: v[c] for c in DATA} == {c: state.row.get(c) for c in DATA}, (key, at)
            else:
                assert v["_cdc_operation"] == "delete" and v["a"] is None and v["b"] is None
        # a truncate leaves no key live across it
        for t in cut:
            live = [v for v in got if v["_cdc_valid_from"] < t and (v["_cdc_valid_to"] is None or v["_cdc_valid_to"] > t)
                    and v["_cdc_operation"] != "delete"]
            assert live == []


@pytest.mark.parametrize("seed", range(40))
def test_batch_by_batch_in_any_arrival_order_equals_every_change_at_once(seed):
    rnd = random.Random(seed)
    rows, truncates = feed(rnd, 40)
    rows = [{**r, UNSET: None} for r in rows]  # such tables' versions are computed from their changes instead
    rules = Rules(truncates=tuple(truncates))
    whole = history_of(rows, rules)
    arrival = rows[:]
    rnd.shuffle(arrival)
    came: list[Truncate] = []
    shuffled = truncates[:]
    rnd.shuffle(shuffled)
    current = pa.Table.from_pylist([], schema=versions(pa.Table.from_pylist(rows, schema=SCHEMA), DATA, KEYS).schema)
    for b in range(4):
        batch = arrival[b * len(arrival) // 4:(b + 1) * len(arrival) // 4]
        came += shuffled[b * len(shuffled) // 4:(b + 1) * len(shuffled) // 4]
        source = pa.concat_tables([as_changes(current).select(SCHEMA.names).cast(SCHEMA),
                                   pa.Table.from_pylist(batch, schema=SCHEMA)])
        current = versions(source, DATA, KEYS, Rules(truncates=tuple(came)))
    assert current.to_pylist() == whole


@pytest.mark.parametrize("seed", range(40))
def test_track_except_folds_exactly_the_changes_of_untracked_columns(seed):
    rnd = random.Random(seed)
    rows, truncates = feed(rnd, 40)
    rules = Rules(truncates=tuple(truncates))
    every = history_of(rows, rules)
    folded = history_of(rows, Rules(track_except=frozenset({"b"}), truncates=tuple(truncates)))
    expected: list[dict] = []
    for v in every:  # the model: a version whose `a` equals its live predecessor's joins it
        last = expected[-1] if expected and expected[-1]["_cdc_key"] == v["_cdc_key"] else None
        if (last is not None and "delete" not in (v["_cdc_operation"], last["_cdc_operation"])
                and v["a"] == last["a"]):
            last.update(b=v["b"], _cdc_valid_to=v["_cdc_valid_to"], _cdc_is_current=v["_cdc_is_current"])
            continue
        expected.append({**v, "_cdc_version": 1 if last is None else last["_cdc_version"] + 1})
    assert folded == expected
