"""An empty text in a string partition column stays an empty text: Delta's protocol writes "" and
null alike as a null partition value, so a table that receives "" stores such a column as data
and partitions by an escaped copy of it (`_cdc_part_<column>`); "", null, ".x" and "x" stay
distinct through the first build, a later batch that re-lays the target out, moves, deletes,
reruns and partition rebuilds, in this process and on Spark."""
from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_assets.core.partition_text import derived_value, original_value
from cdc_assets.core.target import NULL_PARTITION
from cdc_assets.defs.run_loop import summary_line
from cdc_assets.engine import target_versions
from cdc_assets.engine.fresh import fresh_table
from cdc_assets.engine.partitions import staged_partition_keys
from cdc_assets.engine.target_build import rebuild
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import bq_cdc
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.warehouse import target_version

pytestmark = MARKS

SIDE_BY_SIDE = {1: "", 2: None, 3: ".x", 4: "x", 5: ".", 6: "..", 8: "~"}


def _read(cfg, table) -> dict:
    """id -> (P, v), as any Delta reader reads the target."""
    rows = DeltaTable(os.path.join(cfg.table_dir(table), "target")).to_pyarrow_table().to_pylist()
    return {r["id"]: (r["P"], r["v"]) for r in rows}


def _spark_env(on_spark, monkeypatch):
    if on_spark:
        monkeypatch.setenv("CDC_ASSETS_LOCAL_BUILD_ROWS", "0")
        monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0")


def _upserts(values: dict, v, order: str) -> str:
    return jsonl([bq_cdc("UPSERT", {"id": i, "P": p, "v": v}, order) for i, p in values.items()])


def _the_rest(spark, cfg, table, expected):
    """Moves, a delete, a rerun and a rebuild of the "" partition after `expected`."""
    land(cfg, table, "b-move", {"c.jsonl": jsonl([
        bq_cdc("UPSERT", {"id": 1, "P": "y", "v": 3}, "5"),     # out of ""
        bq_cdc("UPSERT", {"id": 4, "P": "", "v": 3}, "5"),      # into ""
        bq_cdc("UPSERT", {"id": 7, "P": "", "v": 3}, "5"),
        bq_cdc("DELETE", {"id": 5, "P": "."}, "5"),
    ])})
    run_ok(cfg, table)
    expected = {**expected, 1: ("y", 3), 4: ("", 3), 7: ("", 3)}
    del expected[5]
    assert _read(cfg, table) == expected
    land(cfg, table, "b-delete", {"c.jsonl": jsonl([bq_cdc("DELETE", {"id": 7, "P": ""}, "6")])})
    run_ok(cfg, table)
    del expected[7]
    assert _read(cfg, table) == expected
    version = target_version(cfg, table)
    run_ok(cfg, table)
    assert target_version(cfg, table) == version  # a rerun commits nothing

    for with_metadata in (False, True):  # what `cdc-assets read` shows: the exact values, no derived column
        read = fresh_table(cfg, cfg.table(table), with_metadata)
        assert "_cdc_part_P" not in read.column_names
        assert {r["id"]: (r["P"], r["v"]) for r in read.to_pylist()} == expected
    keys = staged_partition_keys(cfg, cfg.table(table))
    assert "P=" in keys and f"P={NULL_PARTITION}" in keys  # "" and null: two partitions
    rebuild(spark, cfg, cfg.table(table), ["P="])
    assert _read(cfg, table) == expected
    rebuild(spark, cfg, cfg.table(table), None)
    assert _read(cfg, table) == expected


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_an_empty_text_in_a_later_batch_re_lays_the_target_out_once(spark, workdir, monkeypatch, on_spark):
    _spark_env(on_spark, monkeypatch)
    cfg = write_config(workdir, [{"name": "EP", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"]}])
    land(cfg, "EP", "b1", {"c.jsonl": _upserts({10: "x", 11: "y"}, 1, "1")})
    run_ok(cfg, "EP")
    assert _read(cfg, "EP") == {10: ("x", 1), 11: ("y", 1)}
    native = DeltaTable(os.path.join(cfg.table_dir("EP"), "target"))
    assert native.metadata().partition_columns == ["P"]  # laid out as configured until "" comes
    land(cfg, "EP", "b2", {"c.jsonl": _upserts(SIDE_BY_SIDE, 2, "2")})
    outcome = run_ok(cfg, "EP")
    expected = {10: ("x", 1), 11: ("y", 1)} | {i: (p, 2) for i, p in SIDE_BY_SIDE.items()}
    assert _read(cfg, "EP") == expected
    assert DeltaTable(os.path.join(cfg.table_dir("EP"), "target")).metadata().partition_columns == ["_cdc_part_P"]
    assert "_cdc_part_P" in summary_line(outcome)  # the run says the target was laid out again
    _the_rest(spark, cfg, "EP", expected)


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_an_empty_text_in_the_first_batch(spark, workdir, monkeypatch, on_spark):
    _spark_env(on_spark, monkeypatch)
    cfg = write_config(workdir, [{"name": "EF", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"]}])
    land(cfg, "EF", "b1", {"c.jsonl": _upserts(SIDE_BY_SIDE, 1, "1")})
    run_ok(cfg, "EF")
    expected = {i: (p, 1) for i, p in SIDE_BY_SIDE.items()}
    assert _read(cfg, "EF") == expected
    _the_rest(spark, cfg, "EF", expected)


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_an_empty_text_as_the_key_and_the_partition_column(spark, workdir, monkeypatch, on_spark):
    _spark_env(on_spark, monkeypatch)
    cfg = write_config(workdir, [{"name": "EK", "keys": ["P"], "format": "bigquery-cdc", "partition_by": ["P"]}])
    land(cfg, "EK", "b1", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"P": "x", "v": 1}, "1")])})
    run_ok(cfg, "EK")
    land(cfg, "EK", "b2", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"P": p, "v": 2}, "2") for p in ("", ".", ".x")])})
    run_ok(cfg, "EK")
    rows = DeltaTable(os.path.join(cfg.table_dir("EK"), "target")).to_pyarrow_table().to_pylist()
    assert sorted((r["P"], r["v"]) for r in rows) == [("", 2), (".", 2), (".x", 2), ("x", 1)]
    land(cfg, "EK", "b3", {"c.jsonl": jsonl([bq_cdc("DELETE", {"P": ""}, "3"),
                                             bq_cdc("UPSERT", {"P": ".", "v": 3}, "3")])})
    run_ok(cfg, "EK")
    rows = DeltaTable(os.path.join(cfg.table_dir("EK"), "target")).to_pyarrow_table().to_pylist()
    assert sorted((r["P"], r["v"]) for r in rows) == [(".", 3), (".x", 2), ("x", 1)]


VALUES = st.lists(st.one_of(st.none(), st.text(max_size=12), st.text(".~", max_size=4),
                            st.builds(lambda s: "." + s, st.text(max_size=6)),
                            # around the longest a folder name takes: plain, percent-encoded, multibyte
                            st.builds(lambda c, n, s: c * n + s, st.sampled_from("a.é~😀/"), st.integers(0, 260),
                                      st.text(max_size=3))), max_size=40)
COLUMNS = st.sampled_from(["P", "region_code", "x" * 150, "é" * 25, "a b"])


@settings(max_examples=300)
@given(VALUES, COLUMNS)
def test_the_derived_partition_value_is_one_rule_in_arrow_and_on_spark_and_it_inverts(values, column):
    import pyarrow as pa

    from cdc_assets.core.partition_text import derived_column, escaped, fits_a_folder, is_digest, is_plain
    from cdc_assets.engine.partition_layout import arrow_derived

    derived = [derived_value(v, column) for v in values]
    assert [v if is_digest(d) else original_value(d) for v, d in zip(values, derived)] == values
    assert len({d for d in derived}) == len(set(values))  # injective: two values never share a partition
    assert all(d != "" for d in derived)  # what Delta's log cannot tell from null is never written
    assert all(d is None or fits_a_folder(derived_column(column), d) for d in derived)
    # plain characters only; a digest only for a value whose escaped form is too long for a folder name
    assert all(d is None or is_plain(d) for d in derived)
    assert all(not is_digest(d) or not fits_a_folder(derived_column(column), escaped(v))
               for v, d in zip(values, derived))
    assert arrow_derived(pa.array(values, pa.string()), column).to_pylist() == derived


@settings(max_examples=15, deadline=None)
@given(VALUES, COLUMNS)
def test_the_derived_partition_value_on_spark_is_the_rule(spark, values, column):
    from cdc_assets.engine.partition_layout import spark_derived

    frame = spark.createDataFrame([(i, v) for i, v in enumerate(values)], f"i long, `{column}` string")
    got = [r[0] for r in frame.orderBy("i").select(spark_derived(column)).collect()]
    assert got == [derived_value(v, column) for v in values]


@pytest.mark.parametrize("change_feed", [False, True], ids=["new-column", "change-feed"])
def test_an_empty_text_through_delta_rs_merge(spark, workdir, change_feed):
    """A batch bringing a new column (schema evolution) or a table recording its change data feed
    takes delta-rs' MERGE; "" stays exact there too."""
    cfg = write_config(workdir, [{"name": "EM", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"],
                                  "change_feed": change_feed}])
    land(cfg, "EM", "b1", {"c.jsonl": _upserts({10: "x", 11: "y"}, 1, "1")})
    run_ok(cfg, "EM")
    land(cfg, "EM", "b2", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": i, "P": p, "v": 2, "w": "new"}, "2")
                                             for i, p in SIDE_BY_SIDE.items()])})
    run_ok(cfg, "EM")
    expected = {10: ("x", 1), 11: ("y", 1)} | {i: (p, 2) for i, p in SIDE_BY_SIDE.items()}
    assert _read(cfg, "EM") == expected
    land(cfg, "EM", "b3", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": 1, "P": "z", "v": 3}, "3"),
                                             bq_cdc("UPSERT", {"id": 10, "P": "", "v": 3}, "3"),
                                             bq_cdc("DELETE", {"id": 3, "P": ".x"}, "3")])})
    run_ok(cfg, "EM")
    expected = {**expected, 1: ("z", 3), 10: ("", 3)}
    del expected[3]
    assert _read(cfg, "EM") == expected
    if change_feed:  # the feed of the last apply holds the exact values too
        v = target_version(cfg, "EM")
        feed = target_versions.changes("EM", cfg.table_dir("EM"), v).to_pylist()
        assert sorted((r["_change_type"], r["id"], r["P"]) for r in feed) == [
            ("delete", 3, ".x"), ("update_postimage", 1, "z"), ("update_postimage", 10, ""),
            ("update_preimage", 1, ""), ("update_preimage", 10, "x")]
        # the whole feed, across the relayout, which records no row: no derived column, exact values
        whole = target_versions.changes("EM", cfg.table_dir("EM"), 0)
        relayout = [t.version for t in target_versions.versions(cfg.table_dir("EM")) if t.kind == "relayout"]
        assert len(relayout) == 1 and "_cdc_part_P" not in whole.column_names
        assert sorted((r["_commit_version"], r["_change_type"], r["id"], r["P"]) for r in whole.to_pylist()
                      if r["_change_type"] in ("insert", "delete")) == sorted(
            [(0, "insert", 10, "x"), (0, "insert", 11, "y"), (v, "delete", 3, ".x")]
            + [(relayout[0] + 1, "insert", i, p) for i, p in SIDE_BY_SIDE.items()])


def _pg(op: str, lsn: int, id_: int | None = None, region: str | None = None) -> dict:
    source = {"version": "2.5.0.Final", "connector": "postgresql", "name": "shop", "ts_ms": 1_709_287_200_000 + lsn,
              "snapshot": "false", "db": "shop", "schema": "public", "table": "orders", "lsn": lsn}
    image = None if id_ is None else {"id": id_, "v": lsn, "region": region}
    before, after = (image, None) if op in ("d", "t") else (None, image)
    return {"before": before, "after": after, "op": op, "source": source, "ts_ms": 1_709_287_200_000 + lsn + 40}


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_a_truncate_keeps_empty_texts_above_it(spark, workdir, monkeypatch, on_spark):
    _spark_env(on_spark, monkeypatch)
    cfg = write_config(workdir, [{"name": "ET", "keys": ["id"], "format": "debezium-json",
                                  "partition_by": ["region"]}])
    land(cfg, "ET", "b1", {"o.jsonl": jsonl([_pg("c", 100, 1, "eu"), _pg("c", 110, 2, ""), _pg("c", 900, 3, ""),
                                             _pg("c", 910, 4, None)])})
    run_ok(cfg, "ET")
    land(cfg, "ET", "b2", {"o.jsonl": jsonl([_pg("t", 500), _pg("c", 600, 5, ""), _pg("u", 920, 1, "")])})
    run_ok(cfg, "ET")
    rows = DeltaTable(os.path.join(cfg.table_dir("ET"), "target")).to_pyarrow_table().to_pylist()
    assert {r["id"]: r["region"] for r in rows} == {1: "", 3: "", 4: None, 5: ""}


def _export(regions: dict) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(list(regions), pa.int64()), "region": pa.array(list(regions.values()),
                                                                                        pa.string()),
                             "v": pa.array([1] * len(regions), pa.int64())}), out)
    return out.getvalue()


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_a_snapshot_table_keeps_empty_texts(spark, workdir, monkeypatch, on_spark):
    """A snapshot table's exports compared with a target that holds "" (a derived layout): an
    unchanged "" row is no change, a row moving out of "" is one."""
    from cdc_assets.engine import snapshot
    from cdc_assets_tests.support.config import settings_of

    if on_spark:
        settings_of(monkeypatch, snapshot, local_parse_bytes=-1, local_build_rows=-1)
        _spark_env(True, monkeypatch)
    cfg = write_config(workdir, [{"name": "ES", "keys": ["id"], "format": "snapshot", "partition_by": ["region"]}])
    first = {1: "x", 2: "", 3: None, 4: "."}
    land(cfg, "ES", "b1", {"a.parquet": _export(first)})
    run_ok(cfg, "ES")
    rows = DeltaTable(os.path.join(cfg.table_dir("ES"), "target")).to_pyarrow_table().to_pylist()
    assert {r["id"]: r["region"] for r in rows} == first
    second = {1: "", 2: "", 3: None, 5: ""}
    land(cfg, "ES", "b2", {"a.parquet": _export(second)})
    run_ok(cfg, "ES")
    dt = DeltaTable(os.path.join(cfg.table_dir("ES"), "target"))
    assert {r["id"]: r["region"] for r in dt.to_pyarrow_table().to_pylist()} == second
    changed = [r for r in DeltaTable(os.path.join(cfg.table_dir("ES"), "changes")).to_pyarrow_table().to_pylist()
               if r["_cdc_batch_seq"] == 2]
    assert sorted((r["_cdc_change_type"], r["_cdc_key"]) for r in changed) == [
        ("DELETE", '["4"]'), ("INSERT", '["5"]'), ("UPDATE", '["1"]')]


def test_a_bigquery_publish_sends_empty_texts_and_no_derived_column(spark, workdir, bigquery_emulator):
    from cdc_assets.engine import bigquery_publish as publishing
    from cdc_assets_tests.emulators import PROJECT
    from cdc_assets_tests.support.steps import run_steps

    client = bigquery_emulator
    dest = f"{PROJECT}.{client.test_dataset}.ep"
    cfg = write_config(workdir, [{"name": "EB", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"],
                                  "publish": {"bigquery": dest}}])

    def published() -> dict:
        return {r["id"]: (r["P"], r["v"]) for r in client.query(f"SELECT * FROM `{dest}`").result()}

    land(cfg, "EB", "b1", {"c.jsonl": _upserts({10: "x", 11: "y"}, 1, "1")})
    assert run_steps(spark, cfg, "EB", bigquery=client).published.mode == "all"
    land(cfg, "EB", "b2", {"c.jsonl": _upserts(SIDE_BY_SIDE, 2, "2")})
    out = run_steps(spark, cfg, "EB", bigquery=client)
    # the re-layout changed no row: only the batch's keys are sent
    assert (out.published.mode, out.published.rows_sent) == ("changes", len(SIDE_BY_SIDE))
    assert published() == _read(cfg, "EB") == {10: ("x", 1), 11: ("y", 1)} | {i: (p, 2) for i, p in SIDE_BY_SIDE.items()}
    assert sorted(f.name for f in client.get_table(dest).schema) == ["P", "id", "v"]  # no _cdc_ column
    assert publishing.reconcile(client, cfg, cfg.table("EB")).discrepancies == 0


def test_an_insert_only_table_appends_empty_texts(spark, workdir):
    from cdc_assets_tests.support.records import mysql

    cfg = write_config(workdir, [{"name": "EA", "keys": ["id"], "format": "datastream-json", "partition_by": ["P"],
                                  "insert_only": True}])
    land(cfg, "EA", "b1", {"c.jsonl": jsonl([mysql("INSERT", {"id": 1, "P": "x", "v": 1}, 1, 1)])})
    run_ok(cfg, "EA")
    land(cfg, "EA", "b2", {"c.jsonl": jsonl([mysql("INSERT", {"id": i, "P": p, "v": 2}, 2, i)
                                             for i, p in {2: "", 3: None, 4: "."}.items()])})
    run_ok(cfg, "EA")
    land(cfg, "EA", "b3", {"c.jsonl": jsonl([mysql("INSERT", {"id": 5, "P": "", "v": 3}, 3, 1)])})
    run_ok(cfg, "EA")
    assert _read(cfg, "EA") == {1: ("x", 1), 2: ("", 2), 3: (None, 2), 4: (".", 2), 5: ("", 3)}


@pytest.mark.parametrize("declared,wider", [({}, {"v": 2.5}), ({"v": "int"}, {})], ids=["rebuilt", "retyped"])
def test_a_widening_keeps_the_derived_layout_and_empty_texts(spark, workdir, declared, wider):
    """A column widened on a target in the derived layout: built again (long to double) or its
    files rewritten with a cast (a declared int to long), the "" rows and the layout stay."""
    table = {"name": "EW", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"]}
    cfg = write_config(workdir, [{**table, "columns": declared}])
    land(cfg, "EW", "b1", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": i, "P": p, "v": 1}, "1")
                                             for i, p in SIDE_BY_SIDE.items()])})
    run_ok(cfg, "EW")
    cfg = write_config(workdir, [{**table, "columns": {"v": "long"} if declared else {}}])
    land(cfg, "EW", "b2", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": 20, "P": "", "v": 1, **wider}, "2")])})
    run_ok(cfg, "EW")
    dt = DeltaTable(os.path.join(cfg.table_dir("EW"), "target"))
    assert dt.metadata().partition_columns == ["_cdc_part_P"]
    rows = {r["id"]: r for r in dt.to_pyarrow_table().to_pylist()}
    assert {i: r["P"] for i, r in rows.items()} == SIDE_BY_SIDE | {20: ""}
    assert rows[20]["v"] == wider.get("v", 1) and rows[1]["v"] == 1
    import pyarrow as pa

    assert pa.schema(dt.schema().to_arrow()).field("v").type == (pa.int64() if declared else pa.float64())


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "on-spark"])
def test_a_base_snapshot_with_empty_texts(spark, workdir, monkeypatch, on_spark):
    """A base export (a typed Parquet file) holding "" in the partition column: the first build
    lays the target out in the derived layout; a later change moves a key out of ""."""
    _spark_env(on_spark, monkeypatch)
    (workdir / "base.parquet").write_bytes(_export({1: "x", 2: "", 3: None, 4: "."}))
    cfg = write_config(workdir, [{"name": "EB", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["region"],
                                  "base_snapshot": str(workdir / "base.parquet")}])
    run_ok(cfg, "EB")

    def regions():
        rows = DeltaTable(os.path.join(cfg.table_dir("EB"), "target")).to_pyarrow_table().to_pylist()
        return {r["id"]: r["region"] for r in rows}

    assert regions() == {1: "x", 2: "", 3: None, 4: "."}
    land(cfg, "EB", "b1", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": 2, "region": "y", "v": 2}, "2"),
                                             bq_cdc("UPSERT", {"id": 5, "region": "", "v": 2}, "2")])})
    run_ok(cfg, "EB")
    assert regions() == {1: "x", 2: "y", 3: None, 4: ".", 5: ""}


def test_two_partition_columns_only_the_text_one_derived(spark, workdir):
    cfg = write_config(workdir, [{"name": "E2", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["n", "P"]}])
    land(cfg, "E2", "b1", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": 1, "n": 1, "P": "x", "v": 1}, "1")])})
    run_ok(cfg, "E2")
    land(cfg, "E2", "b2", {"c.jsonl": jsonl([bq_cdc("UPSERT", {"id": 2, "n": 1, "P": "", "v": 2}, "2"),
                                             bq_cdc("UPSERT", {"id": 3, "n": 2, "P": None, "v": 2}, "2")])})
    run_ok(cfg, "E2")
    dt = DeltaTable(os.path.join(cfg.table_dir("E2"), "target"))
    assert dt.metadata().partition_columns == ["n", "_cdc_part_P"]

    def state():
        rows = DeltaTable(os.path.join(cfg.table_dir("E2"), "target")).to_pyarrow_table().to_pylist()
        return {r["id"]: (r["n"], r["P"], r["v"]) for r in rows}

    assert state() == {1: (1, "x", 1), 2: (1, "", 2), 3: (2, None, 2)}
    assert {"n=1/P=x", "n=1/P=", f"n=2/P={NULL_PARTITION}"} <= set(staged_partition_keys(cfg, cfg.table("E2")))
    rebuild(spark, cfg, cfg.table("E2"), ["n=1/P="])
    assert state() == {1: (1, "x", 1), 2: (1, "", 2), 3: (2, None, 2)}


def test_an_object_store_target_is_laid_out_again_too(spark, tmp_path, s3_warehouse):
    from cdc_assets.engine import delta

    (tmp_path / "landing").mkdir(parents=True)
    cfg = write_config(tmp_path, [{"name": "EO", "keys": ["id"], "format": "bigquery-cdc", "partition_by": ["P"]}],
                       warehouse=s3_warehouse)
    land(cfg, "EO", "b1", {"c.jsonl": _upserts({10: "x", 11: "y"}, 1, "1")})
    run_ok(cfg, "EO")
    land(cfg, "EO", "b2", {"c.jsonl": _upserts(SIDE_BY_SIDE, 2, "2")})
    run_ok(cfg, "EO")
    dt = delta.load(os.path.join(cfg.table_dir("EO"), "target"))
    assert dt.metadata().partition_columns == ["_cdc_part_P"]
    assert {r["id"]: (r["P"], r["v"]) for r in dt.to_pyarrow_table().to_pylist()} == \
        {10: ("x", 1), 11: ("y", 1)} | {i: (p, 2) for i, p in SIDE_BY_SIDE.items()}
