"""Source schema changes beyond a new column (rules.md#types, rules.md#rule-6): a column that stops arriving
stays in the target; a column whose file type changes widens where rules.md#types allows it (int to long,
a decimal to a wider one, an integer into a decimal wide enough, date to timestamp; a 32-bit
float is a double already), the target's files rewritten once with the wider type and every
stored value kept exactly; a change that cannot widen goes to quarantine with its file, line and
column while the rest of its batch applies; `rename:` keeps a renamed source column in its
target column. All on the in-process path (small batches, no Spark)."""
from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from cdc_assets.engine import target_build
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land, parquet
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import run_steps, take_and_apply
from cdc_assets_tests.support.warehouse import by_key, delta_rows, target_rows

pytestmark = MARKS

UTC = dt.UTC
CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}


def schema_of(cfg, table) -> dict[str, pa.DataType]:
    schema = pa.schema(DeltaTable(os.path.join(cfg.table_dir(table), "target")).schema())
    return {f.name: f.type for f in schema}


def quarantine(cfg, table: str) -> list[dict]:
    """The table's quarantined records (none when nothing was ever quarantined)."""
    if not os.path.isdir(os.path.join(cfg.table_dir(table), "quarantine", "_delta_log")):
        return []
    return delta_rows(cfg, table, "quarantine")


def rebuilt_rows(cfg, table: str) -> dict:
    """The target after a whole rebuild from staging (in this process: the history is small)."""
    target_build.rebuild(None, cfg, cfg.table(table), None)
    return by_key(target_rows(cfg, table), "id")


# ---- a column that stops arriving --------------------------------------------------------------

def test_a_column_that_stops_arriving_stays_in_the_target_null_in_new_images(workdir, spark_when_needed):
    cfg = write_config(workdir, [
        {"name": "GONE", "keys": ["id"], "format": "changeset", "options": CHANGESET},
        {"name": "GONEP", "keys": ["id"], "format": "changeset", "options": CHANGESET, "partial_updates": True},
    ])
    for table in ("GONE", "GONEP"):
        land(cfg, table, "batch-1", {"a.jsonl": jsonl([
            {"op": "I", "id": 1, "seq": 1, "name": "a", "fax": "555-1"},
            {"op": "I", "id": 2, "seq": 1, "name": "b", "fax": "555-2"},
        ])})
        take_and_apply(spark_when_needed, cfg, table)
        # the source dropped `fax`: its changes no longer carry it
        land(cfg, table, "batch-2", {"a.jsonl": jsonl([
            {"op": "U", "id": 1, "seq": 2, "name": "a2"},
            {"op": "I", "id": 3, "seq": 1, "name": "c"},
        ])})
        take_and_apply(spark_when_needed, cfg, table)
    plain = by_key(target_rows(cfg, "GONE"), "id")
    assert "fax" in schema_of(cfg, "GONE")
    assert {k: (r["name"], r["fax"]) for k, r in plain.items()} == {
        (1,): ("a2", None), (2,): ("b", "555-2"), (3,): ("c", None)}
    partial = by_key(target_rows(cfg, "GONEP"), "id")
    assert {k: (r["name"], r["fax"]) for k, r in partial.items()} == {
        (1,): ("a2", "555-1"), (2,): ("b", "555-2"), (3,): ("c", None)}
    assert rebuilt_rows(cfg, "GONE") == plain
    assert "fax" in schema_of(cfg, "GONE")
    assert rebuilt_rows(cfg, "GONEP") == partial


# ---- type widening -----------------------------------------------------------------------------

def test_file_types_widen_and_stored_values_keep_their_value(workdir, spark_when_needed):
    cfg = write_config(workdir, [{"name": "WIDEN", "keys": ["id"], "format": "changeset", "options": CHANGESET}])
    big = 9_007_199_254_740_993  # 2**53 + 1: no double holds it
    land(cfg, "WIDEN", "batch-1", {"a.parquet": parquet(pa.table({
        "op": ["I", "I"], "id": pa.array([1, 2], pa.int64()), "seq": [1, 1],
        "qty": pa.array([big, -7], pa.int64()),
        "ratio": pa.array([0.1, 2.5], pa.float32()),
        "day": pa.array([dt.date(2024, 2, 29), None], pa.date32()),
    }))})
    take_and_apply(spark_when_needed, cfg, "WIDEN")
    assert schema_of(cfg, "WIDEN")["qty"] == pa.int64()
    # the source made qty a decimal, ratio a 64-bit float, day a timestamp
    land(cfg, "WIDEN", "batch-2", {"a.parquet": parquet(pa.table({
        "op": ["I"], "id": pa.array([3], pa.int64()), "seq": [1],
        "qty": pa.array([Decimal("12.25")], pa.decimal128(12, 2)),
        "ratio": pa.array([0.1], pa.float64()),
        "day": pa.array([dt.datetime(2024, 3, 1, 10, 30, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
    }))})
    take_and_apply(spark_when_needed, cfg, "WIDEN")
    types = schema_of(cfg, "WIDEN")
    assert types["qty"] == pa.decimal128(21, 2)  # every long and every decimal(12,2) exactly
    assert types["ratio"] == pa.float64() and types["day"] == pa.timestamp("us", tz="UTC")
    rows = by_key(target_rows(cfg, "WIDEN"), "id")
    assert {k: r["qty"] for k, r in rows.items()} == {(1,): Decimal(big), (2,): Decimal(-7), (3,): Decimal("12.25")}
    assert rows[(1,)]["ratio"] == float(pa.scalar(0.1, pa.float32()).as_py()) and rows[(3,)]["ratio"] == 0.1
    assert rows[(1,)]["day"] == dt.datetime(2024, 2, 29, tzinfo=UTC) and rows[(2,)]["day"] is None
    assert rows[(3,)]["day"] == dt.datetime(2024, 3, 1, 10, 30, tzinfo=UTC)
    assert quarantine(cfg, "WIDEN") == []
    # a later batch in the old types still lands (they widen into the column)
    land(cfg, "WIDEN", "batch-3", {"a.parquet": parquet(pa.table({
        "op": ["U"], "id": pa.array([2], pa.int64()), "seq": [2], "qty": pa.array([5], pa.int64()),
        "ratio": pa.array([0.5], pa.float32()), "day": pa.array([dt.date(2024, 1, 1)], pa.date32())}))})
    take_and_apply(spark_when_needed, cfg, "WIDEN")
    rows = by_key(target_rows(cfg, "WIDEN"), "id")
    assert (rows[(2,)]["qty"], rows[(2,)]["ratio"], rows[(2,)]["day"]) == (
        Decimal(5), 0.5, dt.datetime(2024, 1, 1, tzinfo=UTC))
    assert schema_of(cfg, "WIDEN") == types
    assert rebuilt_rows(cfg, "WIDEN") == rows


def files_and_keys(cfg, table: str, version: int) -> list[tuple[dict, list[str]]]:
    """Each data file of a target version: its partition values and the keys it holds."""
    root = os.path.join(cfg.table_dir(table), "target")
    out = []
    for added in pa.table(DeltaTable(root, version=version).get_add_actions(flatten=False)).to_pylist():
        keys = pq.read_table(os.path.join(root, unquote(added["path"])), columns=["_cdc_key"])["_cdc_key"]
        out.append((added["partition"], sorted(keys.to_pylist())))
    return sorted(out, key=repr)


def test_a_widening_casts_each_target_file_and_keeps_its_rows(workdir, spark_when_needed):
    """The target's files are cast, not computed again: the widening commit has as many files,
    each holding the keys of one file before it (in its partition), a column a file lacks reads
    as null, and the result is what a rebuild from the history gives."""
    cfg = write_config(workdir, [{"name": "CAST", "keys": ["id"], "format": "changeset", "options": CHANGESET,
                                  "partition_by": ["region"]}])

    def batch(ids, regions, qty, **more):
        return {"a.parquet": parquet(pa.table({"op": ["I"] * len(ids), "id": pa.array(ids, pa.int64()),
                                               "seq": [1] * len(ids), "region": regions, "qty": qty, **more}))}
    land(cfg, "CAST", "batch-1", batch([1, 2], ["eu", "us"], pa.array([10, 20], pa.int32())))
    take_and_apply(spark_when_needed, cfg, "CAST")
    land(cfg, "CAST", "batch-2", batch([3, 4], ["eu", "us"], pa.array([30, 40], pa.int32()),
                                       note=pa.array(["x", "y"])))
    take_and_apply(spark_when_needed, cfg, "CAST")
    target = DeltaTable(os.path.join(cfg.table_dir("CAST"), "target"))
    before = files_and_keys(cfg, "CAST", target.version())
    assert len(before) == 4  # each batch added a file per partition
    land(cfg, "CAST", "batch-3", batch([5], ["us"], pa.array([Decimal("0.5")], pa.decimal128(4, 1))))
    take_and_apply(spark_when_needed, cfg, "CAST")
    target = DeltaTable(os.path.join(cfg.table_dir("CAST"), "target"))
    (widen,) = [h["version"] for h in target.history() if h.get("cdc.step") == "widen"]
    assert files_and_keys(cfg, "CAST", widen) == before
    assert schema_of(cfg, "CAST")["qty"] == pa.decimal128(11, 1)
    rows = by_key(target_rows(cfg, "CAST"), "id")
    assert {k: (r["region"], r["qty"], r["note"]) for k, r in rows.items()} == {
        (1,): ("eu", Decimal(10), None), (2,): ("us", Decimal(20), None), (3,): ("eu", Decimal(30), "x"),
        (4,): ("us", Decimal(40), "y"), (5,): ("us", Decimal("0.5"), None)}
    assert rebuilt_rows(cfg, "CAST") == rows


def test_a_widening_on_spark_gives_what_the_apply_in_process_gives(spark, tmp_path, monkeypatch):
    """A batch large enough for Spark (the limit set to 0 here) widens the target by the same cast
    and applies on Spark: the rows are those of the apply in this process."""
    def feed(workdir):
        (workdir / "landing").mkdir(parents=True)
        cfg = write_config(workdir, [{"name": "SPW", "keys": ["id"], "format": "changeset", "options": CHANGESET,
                                      "partition_by": ["region"], "history": True}])
        land(cfg, "SPW", "batch-1", {"a.parquet": parquet(pa.table({
            "op": ["I", "I", "I"], "id": pa.array([1, 2, 3], pa.int64()), "seq": [1, 1, 1],
            "region": ["eu", "us", "eu"], "qty": pa.array([1 << 40, -3, None], pa.int64()),
            "day": pa.array([dt.date(2024, 2, 29), None, dt.date(1, 1, 1)], pa.date32())}))})
        run_steps(spark, cfg, "SPW")
        land(cfg, "SPW", "batch-2", {"a.parquet": parquet(pa.table({
            "op": ["U", "I"], "id": pa.array([2, 4], pa.int64()), "seq": [2, 1], "region": ["us", "us"],
            "qty": pa.array([Decimal("-3.75"), Decimal("0.01")], pa.decimal128(12, 2)),
            "day": pa.array([dt.datetime(2024, 3, 1, 10, tzinfo=UTC), None], pa.timestamp("us", tz="UTC"))}))})
        return cfg, run_steps(spark, cfg, "SPW").applied

    local_cfg, _ = feed(tmp_path / "local")
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")
    spark_cfg, figures = feed(tmp_path / "spark")
    assert figures.applied_on == "spark"
    rows = by_key(target_rows(spark_cfg, "SPW"), "id")
    assert rows == by_key(target_rows(local_cfg, "SPW"), "id")
    assert schema_of(spark_cfg, "SPW") == schema_of(local_cfg, "SPW")
    assert schema_of(spark_cfg, "SPW")["qty"] == pa.decimal128(21, 2)
    assert {k: (r["qty"], r["day"]) for k, r in rows.items()} == {
        (1,): (Decimal(1 << 40), dt.datetime(2024, 2, 29, tzinfo=UTC)), (2,): (Decimal("-3.75"), dt.datetime(
            2024, 3, 1, 10, tzinfo=UTC)), (3,): (None, dt.datetime(1, 1, 1, tzinfo=UTC)), (4,): (Decimal("0.01"), None)}
    # the history (every version of each key) widens too, its earlier versions keeping their values
    history = sorted((r["id"], r["qty"], r["day"]) for r in delta_rows(spark_cfg, "SPW", "history"))
    assert history == sorted((r["id"], r["qty"], r["day"]) for r in delta_rows(local_cfg, "SPW", "history"))
    assert [(q, d) for i, q, d in history if i == 2] == [
        (Decimal("-3.75"), dt.datetime(2024, 3, 1, 10, tzinfo=UTC)), (Decimal(-3), None)]


def test_a_type_change_that_cannot_widen_is_quarantined_and_the_rest_applies(workdir, spark_when_needed):
    cfg = write_config(workdir, [{"name": "NARROW", "keys": ["id"], "format": "changeset", "options": CHANGESET}])
    land(cfg, "NARROW", "batch-1", {"a.parquet": parquet(pa.table({
        "op": ["I"], "id": pa.array([1], pa.int64()), "seq": [1],
        "price": pa.array([1.5], pa.float64()), "code": pa.array(["A1"]), "n": pa.array([3], pa.int64()),
        "amount": pa.array([Decimal("1.25")], pa.decimal128(38, 20)),
    }))})
    take_and_apply(spark_when_needed, cfg, "NARROW")
    big = 9_007_199_254_740_993
    land(cfg, "NARROW", "batch-2", {
        # double -> long: 2**53 + 1 has no double; 4 has one
        "a.parquet": parquet(pa.table({"op": ["I", "I"], "id": pa.array([2, 3], pa.int64()), "seq": [1, 1],
                                       "price": pa.array([big, 4], pa.int64())})),
        # long -> double: a double is no long (7.25 has no long; 8 comes as 8)
        "b.parquet": parquet(pa.table({"op": ["I", "I"], "id": pa.array([4, 5], pa.int64()), "seq": [1, 1],
                                       "n": pa.array([7.25, None], pa.float64())})),
        # decimal(38,20) meeting decimal(38,30): no decimal holds both; a value with 30 decimals misfits
        "c.parquet": parquet(pa.table({"op": ["I", "I"], "id": pa.array([6, 7], pa.int64()), "seq": [1, 1],
                                       "amount": pa.array([Decimal("0." + "0" * 29 + "1"), Decimal("2.5")],
                                                          pa.decimal128(38, 30))})),
    })
    take_and_apply(spark_when_needed, cfg, "NARROW")
    rows = by_key(target_rows(cfg, "NARROW"), "id")
    assert sorted(rows) == [(1,), (3,), (5,), (7,)]
    assert (rows[(3,)]["price"], rows[(5,)]["n"], rows[(7,)]["amount"]) == (4.0, None, Decimal("2.5"))
    types = schema_of(cfg, "NARROW")
    assert (types["price"], types["n"], types["amount"]) == (pa.float64(), pa.int64(), pa.decimal128(38, 20))
    quarantined = {(q["_cdc_file"], q["_cdc_line"]): q["_cdc_reason"] for q in quarantine(cfg, "NARROW")}
    assert set(quarantined) == {("batch-2/a.parquet", 1), ("batch-2/b.parquet", 1), ("batch-2/c.parquet", 1)}
    for (file, _), column in zip(sorted(quarantined), ("price", "n", "amount")):
        assert f"'{column}'" in quarantined[(file, 1)], quarantined
        assert str(big) not in quarantined[(file, 1)]
    # the table goes on: a later batch in the column's own type applies
    land(cfg, "NARROW", "batch-3", {"a.parquet": parquet(pa.table({
        "op": ["I"], "id": pa.array([2], pa.int64()), "seq": [2], "price": pa.array([9.5], pa.float64())}))})
    take_and_apply(spark_when_needed, cfg, "NARROW")
    assert by_key(target_rows(cfg, "NARROW"), "id")[(2,)]["price"] == 9.5


# ---- rename ------------------------------------------------------------------------------------

def test_a_renamed_source_column_keeps_landing_in_its_target_column(workdir, spark_when_needed):
    cfg = write_config(workdir, [{"name": "RENAMED", "keys": ["id"], "format": "changeset", "options": CHANGESET,
                                  "rename": {"customer_name": "name", "ident": "id", "unit price": "unit_price"}}])
    land(cfg, "RENAMED", "batch-1", {"a.jsonl": jsonl([
        {"op": "I", "id": 1, "seq": 1, "name": "a", "unit price": 2},
        {"op": "I", "id": 2, "seq": 1, "name": "b", "unit price": 3},
    ])})
    take_and_apply(spark_when_needed, cfg, "RENAMED")
    # the source renamed `name` to `customer_name`, and its key column `id` to `ident`
    land(cfg, "RENAMED", "batch-2", {"a.jsonl": jsonl([
        {"op": "U", "ident": 1, "seq": 2, "customer_name": "a2", "unit price": 4},
        {"op": "I", "ident": 3, "seq": 1, "customer_name": "c", "unit price": 5},
        # a record carrying both names gives one column two values: quarantined
        {"op": "I", "ident": 4, "seq": 1, "customer_name": "d", "name": "dd", "unit price": 6},
        {"op": "I", "ident": 5, "id": 6, "seq": 1, "customer_name": "e", "unit price": 7},
        {"op": "D", "ident": 2, "seq": 2},
    ])})
    take_and_apply(spark_when_needed, cfg, "RENAMED")
    assert set(schema_of(cfg, "RENAMED")) >= {"id", "name", "unit_price"}
    assert not {"customer_name", "ident"} & set(schema_of(cfg, "RENAMED"))
    rows = by_key(target_rows(cfg, "RENAMED"), "id")
    assert {k: (r["name"], r["unit_price"]) for k, r in rows.items()} == {(1,): ("a2", 4), (3,): ("c", 5)}
    quarantined = {q["_cdc_line"]: q["_cdc_reason"] for q in quarantine(cfg, "RENAMED")}
    assert sorted(quarantined) == [3, 4]
    assert "'customer_name'" in quarantined[3] and "'name'" in quarantined[3]
    assert "'ident'" in quarantined[4] and "'id'" in quarantined[4]


def test_a_name_delta_cannot_hold_is_quarantined_until_renamed(workdir, spark_when_needed):
    tables = [{"name": "ODD", "keys": ["id"], "format": "changeset", "options": CHANGESET}]
    cfg = write_config(workdir, tables)
    land(cfg, "ODD", "batch-1", {"a.jsonl": jsonl([
        {"op": "I", "id": 1, "seq": 1, "v": "a"},
        {"op": "I", "id": 2, "seq": 1, "v": "b", "unit price": 3},
    ])})
    take_and_apply(spark_when_needed, cfg, "ODD")
    assert sorted(by_key(target_rows(cfg, "ODD"), "id")) == [(1,)]
    (q,) = quarantine(cfg, "ODD")
    assert (q["_cdc_file"], q["_cdc_line"]) == ("batch-1/a.jsonl", 2)
    assert "'unit price'" in q["_cdc_reason"] and "rename" in q["_cdc_reason"]
    # with a rename, the same record lands again
    cfg = write_config(workdir, [{**tables[0], "rename": {"unit price": "unit_price"}}])
    land(cfg, "ODD", "batch-2", {"a.jsonl": jsonl([{"op": "I", "id": 2, "seq": 1, "v": "b", "unit price": 3}])})
    take_and_apply(spark_when_needed, cfg, "ODD")
    rows = by_key(target_rows(cfg, "ODD"), "id")
    assert rows[(2,)]["unit_price"] == 3 and rows[(1,)]["unit_price"] is None
