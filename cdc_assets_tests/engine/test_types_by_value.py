"""A column's type is decided by its values and never changes a stored value (rules.md#types and
rules.md#keys): an inferred integer column holding an integer a double cannot hold exactly never
becomes a double, and a double column refuses such an integer; a key column that widens to text
keeps one row per key value; a batch of only deletes types no column; a column widened to text by
inference is said in the run's summary and the batch's check, and `widen_to_text: false`
quarantines the value instead. Batches are taken in this process, and (`taking`) by Spark's
tasks too, which admit types by the same rules."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_assets.core.values import key_text
from cdc_assets.engine import checks
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import take, take_and_apply
from cdc_assets_tests.support.warehouse import delta_rows, target_rows

pytestmark = MARKS

CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
BEYOND = 2**53 + 1  # 9007199254740993: the first integer no double holds


@pytest.fixture(params=["in process", "on spark"])
def taking(request, monkeypatch, spark_when_needed):
    """The test's batches taken in this process, or by Spark's tasks however small they are."""
    from cdc_assets.engine import spark_ingest

    settings_of(monkeypatch, spark_ingest, local_parse_bytes=0 if request.param == "on spark" else 10**9)
    return spark_when_needed


def changeset(workdir, name: str, **more):
    return write_config(workdir, [{"name": name, "keys": ["ID"], "format": "changeset", "options": CHANGESET,
                                   **more}])


def land_and_apply(spark, cfg, table: str, n: int, files: dict) -> None:
    land(cfg, table, f"b{n}", files)
    take_and_apply(spark, cfg, table)


def quarantined(cfg, table: str) -> list[dict]:
    if not os.path.isdir(os.path.join(cfg.table_dir(table), "quarantine", "_delta_log")):
        return []
    return delta_rows(cfg, table, "quarantine")


def target_types(cfg, table: str) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in pa.schema(DeltaTable(os.path.join(cfg.table_dir(table), "target")).schema())}


def by_id(cfg, table: str) -> dict:
    return {r["ID"]: r for r in target_rows(cfg, table)}


# ---- an integer column meeting a fraction beyond 2^53 --------------------------------------------

def test_a_fraction_never_rounds_the_integers_a_column_holds(workdir, taking):
    cfg = changeset(workdir, "WIDE")
    land_and_apply(taking, cfg, "WIDE", 1, {"c.jsonl": jsonl([{"op": "I", "ID": 1, "seq": 1, "V": BEYOND}])})
    land_and_apply(taking, cfg, "WIDE", 2, {"c.jsonl": jsonl([
        {"op": "I", "ID": 2, "seq": 2, "V": 1.5}, {"op": "I", "ID": 4, "seq": 2, "V": 7}])})
    land_and_apply(taking, cfg, "WIDE", 3, {"c.jsonl": jsonl([{"op": "I", "ID": 3, "seq": 3, "V": BEYOND + 2}])})
    rows = by_id(cfg, "WIDE")
    # key 1, untouched since, keeps its value exactly; so does the later integer
    assert {k: r["V"] for k, r in rows.items()} == {1: BEYOND, 3: BEYOND + 2, 4: 7}
    assert all(type(r["V"]) is int for r in rows.values())
    assert pa.types.is_integer(target_types(cfg, "WIDE")["V"])
    # the fraction that would have rounded them is quarantined, its column named, its value not
    (q,) = quarantined(cfg, "WIDE")
    assert q["_cdc_line"] == 1 and "'V'" in q["_cdc_reason"] and "1.5" not in q["_cdc_reason"]
    assert "2^53" in q["_cdc_reason"]


def test_a_double_column_refuses_an_integer_it_cannot_hold(workdir, taking):
    cfg = changeset(workdir, "FRAC")
    land_and_apply(taking, cfg, "FRAC", 1, {"c.jsonl": jsonl([
        {"op": "I", "ID": 1, "seq": 1, "V": 3}, {"op": "I", "ID": 2, "seq": 1, "V": 1.5}])})
    land_and_apply(taking, cfg, "FRAC", 2, {"c.jsonl": jsonl([
        {"op": "I", "ID": 3, "seq": 2, "V": BEYOND}, {"op": "I", "ID": 4, "seq": 2, "V": 2**53}])})
    rows = by_id(cfg, "FRAC")
    # a column of small integers still widens to double; 2^53 is a double, 2^53 + 1 is not
    assert {k: r["V"] for k, r in rows.items()} == {1: 3.0, 2: 1.5, 4: float(2**53)}
    assert pa.types.is_floating(target_types(cfg, "FRAC")["V"])
    (q,) = quarantined(cfg, "FRAC")
    assert q["_cdc_line"] == 1 and "'V'" in q["_cdc_reason"] and str(BEYOND) not in q["_cdc_reason"]


# ---- a key column widened from number to text --------------------------------------------------

def test_one_key_value_is_one_row_whatever_its_spelling_history(workdir, taking):
    cfg = changeset(workdir, "SPELL")
    land_and_apply(taking, cfg, "SPELL", 1, {"c.jsonl": jsonl([{"op": "I", "ID": 1, "seq": 1, "v": "a"}])})
    land_and_apply(taking, cfg, "SPELL", 2, {"c.jsonl": jsonl([
        {"op": "U", "ID": "1", "seq": 2, "v": "b"}, {"op": "I", "ID": 1.0, "seq": 3, "v": "c"}])})
    land_and_apply(taking, cfg, "SPELL", 3, {"c.jsonl": jsonl([{"op": "U", "ID": "1.0", "seq": 4, "v": "d"}])})
    rows = target_rows(cfg, "SPELL", source_only=False)
    ids = sorted(r["ID"] for r in rows)
    assert ids == sorted(set(ids)), rows  # one row per key value
    assert all(r["_cdc_key"] == key_text([r["ID"]]) for r in rows)
    assert {r["ID"]: r["v"] for r in rows} == {"1": "b", "1.0": "d"}
    assert checks.key_uniqueness(cfg, cfg.table("SPELL")).duplicate_keys == 0


def test_a_key_column_of_fractions_never_becomes_text(workdir, taking):
    """Numbers that are one key (1 and 1.0 in a double column) would be two as text."""
    cfg = changeset(workdir, "DKEY")
    land_and_apply(taking, cfg, "DKEY", 1, {"c.jsonl": jsonl([
        {"op": "I", "ID": 1.0, "seq": 1, "v": "a"}, {"op": "I", "ID": 2.5, "seq": 1, "v": "b"}])})
    land_and_apply(taking, cfg, "DKEY", 2, {"c.jsonl": jsonl([
        {"op": "U", "ID": "1.0", "seq": 2, "v": "c"}, {"op": "U", "ID": 1, "seq": 3, "v": "d"}])})
    rows = by_id(cfg, "DKEY")
    assert {k: r["v"] for k, r in rows.items()} == {1.0: "d", 2.5: "b"}
    assert pa.types.is_floating(target_types(cfg, "DKEY")["ID"])
    (q,) = quarantined(cfg, "DKEY")
    assert q["_cdc_line"] == 1 and "'ID'" in q["_cdc_reason"]


def test_keys_unique_counts_two_rows_holding_one_key_value(workdir, spark_when_needed):
    """The check reads the key columns, not only `_cdc_key`: two rows with one key value fail it
    (here made by hand: a row's key value written over in the target)."""
    cfg = changeset(workdir, "TWICE")
    land_and_apply(spark_when_needed, cfg, "TWICE", 1, {"c.jsonl": jsonl([
        {"op": "I", "ID": "a", "seq": 1}, {"op": "I", "ID": "b", "seq": 1}])})
    target = os.path.join(cfg.table_dir("TWICE"), "target")
    DeltaTable(target).update(updates={'"ID"': "'a'"}, predicate="\"ID\" = 'b'")
    assert checks.key_uniqueness(cfg, cfg.table("TWICE")).duplicate_keys == 1
    land(cfg, "TWICE", "b2", {"c.jsonl": jsonl([{"op": "U", "ID": "a", "seq": 2}])})
    take(spark_when_needed, cfg, "TWICE")
    from cdc_assets.engine import apply

    apply.apply_pending(spark_when_needed, cfg, cfg.table("TWICE"))
    assert checks.key_uniqueness(cfg, cfg.table("TWICE")).duplicate_keys == 1


def test_keys_unique_counted_by_spark_counts_two_rows_holding_one_key_value(workdir, spark, monkeypatch):
    """As above, after a whole build of more rows than this process counts: Spark counts them."""
    from cdc_assets.engine import key_spans

    cfg = changeset(workdir, "TWICE")
    land_and_apply(spark, cfg, "TWICE", 1, {"c.jsonl": jsonl([
        {"op": "I", "ID": "a", "seq": 1}, {"op": "I", "ID": "b", "seq": 1}])})
    DeltaTable(os.path.join(cfg.table_dir("TWICE"), "target")).update(updates={'"ID"': "'a'"}, predicate="\"ID\" = 'b'")
    settings_of(monkeypatch, checks, local_build_rows=0)
    settings_of(monkeypatch, key_spans, local_build_rows=0)
    assert checks.key_uniqueness(cfg, cfg.table("TWICE"), spark=lambda: spark).duplicate_keys == 1


# ---- a first batch of only deletes ---------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["changeset", "datastream-json"])
def test_a_first_batch_of_only_deletes_types_no_column(workdir, spark_when_needed, fmt):
    def change(op, seq, **row):
        if fmt == "changeset":
            return {"op": op[0], "seq": seq, **row}
        return mysql({"I": "INSERT", "D": "DELETE"}[op[0]], row, 1, seq)

    def feed(name, first_deletes: bool):
        cfg = write_config(workdir / name, [{"name": name, "keys": ["ID"], "format": fmt,
                                             **({"options": CHANGESET} if fmt == "changeset" else {})}])
        n = 0
        if first_deletes:
            n += 1
            land_and_apply(spark_when_needed, cfg, name, n, {"c.jsonl": jsonl([change("D", 1, ID=9, v="x")])})
        land_and_apply(spark_when_needed, cfg, name, n + 1, {"c.jsonl": jsonl([change("I", 2, ID=1, v="a")])})
        return cfg

    for name in ("DEL1", "INS1"):
        (workdir / name / "landing").mkdir(parents=True)
    deletes_first, inserts_first = feed("DEL1", True), feed("INS1", False)
    assert target_types(deletes_first, "DEL1")["ID"] == target_types(inserts_first, "INS1")["ID"] == pa.int64()
    rows = by_id(deletes_first, "DEL1")
    assert rows == by_id(inserts_first, "INS1") and {k: r["v"] for k, r in rows.items()} == {1: "a"}


def test_a_deletes_image_neither_types_a_column_nor_has_to_fit_one(workdir, spark_when_needed):
    """A delete's before-image may hold values of other kinds (a fraction in an integer column, text
    for an integer key): the delete removes its key's row, and the table goes on."""
    cfg = changeset(workdir, "GONE")
    land_and_apply(spark_when_needed, cfg, "GONE", 1, {"c.jsonl": jsonl([
        {"op": "I", "ID": 1, "seq": 1, "V": 1}, {"op": "I", "ID": 2, "seq": 1, "V": 2}])})
    land_and_apply(spark_when_needed, cfg, "GONE", 2, {"c.jsonl": jsonl([
        {"op": "D", "ID": 1, "seq": 2, "V": 1.5}, {"op": "D", "ID": "a", "seq": 2, "V": "x"}])})
    assert {k: r["V"] for k, r in by_id(cfg, "GONE").items()} == {2: 2}
    assert pa.types.is_integer(target_types(cfg, "GONE")["V"]) and quarantined(cfg, "GONE") == []
    land_and_apply(spark_when_needed, cfg, "GONE", 3, {"c.jsonl": jsonl([{"op": "I", "ID": 3, "seq": 3, "V": 3}])})
    assert {k: r["V"] for k, r in by_id(cfg, "GONE").items()} == {2: 2, 3: 3}


# ---- a column widened to text by inference -------------------------------------------------------

def test_a_column_widened_to_text_is_said_and_widen_to_text_false_quarantines(workdir, taking):
    csv1, csv2 = "op,ID,seq,PRICE\nI,1,1,21.50\n", "op,ID,seq,PRICE\nI,2,2,oops\nI,3,2,4.25\n"
    cfg = write_config(workdir, [
        {"name": "SAID", "keys": ["ID"], "format": "changeset", "options": CHANGESET},
        {"name": "KEPT", "keys": ["ID"], "format": "changeset", "options": CHANGESET, "widen_to_text": False}])
    for name in ("SAID", "KEPT"):
        land_and_apply(taking, cfg, name, 1, {"c.csv": csv1})
        land(cfg, name, "b2", {"c.csv": csv2})
        taken = take(taking, cfg, name)
        take_and_apply(taking, cfg, name)
        if name == "SAID":
            # allowed (rules.md#types), and said: in the batch's figures and in its check's metadata
            assert taken.widened_to_text == ("PRICE",)
            assert checks.batch_accounting(cfg, cfg.table(name), 2).widened_to_text == ("PRICE",)
            assert {k: r["PRICE"] for k, r in by_id(cfg, name).items()} == {1: "21.50", 2: "oops", 3: "4.25"}
            assert quarantined(cfg, name) == []
        else:
            assert not taken.widened_to_text
            assert checks.batch_accounting(cfg, cfg.table(name), 2).widened_to_text is None
            assert {k: r["PRICE"] for k, r in by_id(cfg, name).items()} == {1: 21.5, 3: 4.25}
            (q,) = quarantined(cfg, name)
            assert q["_cdc_line"] == 2 and "'PRICE'" in q["_cdc_reason"] and "widen_to_text" in q["_cdc_reason"]
            assert "oops" not in q["_cdc_reason"]


def test_the_run_summary_line_says_a_column_widened_to_text(workdir):
    from cdc_assets.defs.run_loop import summary_line
    from cdc_assets_tests.support.runs import run_table

    cfg = changeset(workdir, "PRICES")
    land(cfg, "PRICES", "b1", {"c.csv": "op,ID,seq,PRICE\nI,1,1,21.50\n"})
    first = summary_line(run_table(cfg, "PRICES"))
    assert "widened to text" not in first
    land(cfg, "PRICES", "b2", {"c.csv": "op,ID,seq,PRICE\nI,2,2,oops\n"})
    outcome = run_table(cfg, "PRICES")
    assert outcome.ok
    line = summary_line(outcome)
    assert "warning: inferred column(s) 'PRICE' widened to text" in line and "widen_to_text: false" in line
    assert "oops" not in line


# ---- a property over type changes across batches -------------------------------------------------

KEYS = [1, 2, "1", "2", 1.0, 2.5, "1.0", "a", BEYOND, 2**53]
VALUES = [None, 1, -3, 1.5, 0.1, "x", "13", "", BEYOND, BEYOND + 2, 2**53, True]


def _exactly(landed, stored) -> bool:
    """Whether the target holds the landed value itself: the same number (no rounding), the same
    text, or the number's own text in a text column."""
    from decimal import Decimal

    from cdc_assets.core.values import STRING, convert

    if landed is None or stored is None:
        return landed is stored
    if isinstance(stored, str):
        return stored == convert(landed, STRING)
    if isinstance(stored, bool) or isinstance(landed, bool):
        return stored is landed
    if isinstance(landed, str):
        return False
    return Decimal(repr(landed) if isinstance(landed, float) else landed) == \
        Decimal(repr(stored) if isinstance(stored, float) else stored)


def test_type_changes_across_batches_never_change_a_value_nor_split_a_key(tmp_path_factory):
    """Feeds whose key and non-key columns change kind across batches (numbers, text, number-like
    text, integers past 2^53, first batches of only deletes): after each batch every target row
    holds its winning change's values exactly, its `_cdc_key` is its key value's, one row per key
    value, and a quarantined change names its column."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    change = st.tuples(st.sampled_from("IUD"), st.sampled_from(KEYS), st.sampled_from(VALUES))
    examples = int(os.environ.get("TYPE_FEEDS_EXAMPLES", "12"))

    @settings(max_examples=examples, deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(batches=st.lists(st.lists(change, min_size=1, max_size=4), min_size=1, max_size=3),
           csv=st.booleans())
    def check(batches, csv):
        root = tmp_path_factory.mktemp("feed")
        (root / "landing").mkdir()
        cfg = changeset(root, "FEED")
        landed, seq = {}, 0
        for n, batch in enumerate(batches, start=1):
            records = []
            for op, key, value in batch:
                seq += 1
                records.append({"op": op, "ID": key, "seq": seq, "V": value})
                landed[seq] = (key, value)
            if csv:  # CSV carries text: a number is its spelling, True is `True`, "" and None are null
                def text(v):
                    return "" if v is None else v if isinstance(v, str) else json.dumps(v)
                body = "op,ID,seq,V\n" + "".join(f"{r['op']},{text(r['ID'])},{r['seq']},{text(r['V'])}\n"
                                                  for r in records if text(r["ID"]) not in ("", "a"))
                land(cfg, "FEED", f"b{n}", {"c.csv": body})
            else:
                land(cfg, "FEED", f"b{n}", {"c.jsonl": jsonl(records)})
            take_and_apply(lambda: pytest.fail("a batch this small is taken in this process"), cfg, "FEED")
            rows = target_rows(cfg, "FEED", source_only=False)
            ids = [key_text([r["ID"]]) for r in rows]
            assert len(set(ids)) == len(ids), rows
            assert [r["_cdc_key"] for r in rows] == ids
            if not csv:  # CSV values are text first: their check is that no key splits
                for r in rows:
                    key, value = landed[r["seq"]]
                    assert _exactly(key, r["ID"]) and _exactly(value, r.get("V")), (r, key, value)
            for q in quarantined(cfg, "FEED"):
                assert "'ID'" in q["_cdc_reason"] or "'V'" in q["_cdc_reason"], q["_cdc_reason"]
    check()
