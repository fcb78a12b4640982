"""A batch above CDC_ASSETS_LOCAL_PARSE_BYTES is parsed, deduplicated, admitted and stored by Spark
tasks, and staged by them when its changes exceed CDC_ASSETS_LOCAL_APPLY_ROWS: for the same feed it
gives the same `changes`, `staging`, quarantine and target as the in-process path, value for value,
while the run's own process never holds the batch's records."""
from __future__ import annotations

import io
import json
import os
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from cdc_assets.engine import spark_ingest
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok

pytestmark = MARKS

BULK = 120  # inserts in the second batch's second file: more records than anything the driver may collect
COLLECTED_AT_MOST = 16
# A new column's first value is a JSON integer, later ones JSON text, each in another of the slices
# the Spark path admits one after another (ROWS_PER_SLICE below): arrival order makes the column an
# integer one and quarantines both texts, where the slice of the first text, admitted on its own,
# would have made the column text, and the last text fit it.
NOTES = {0: 7, 50: "seven", 100: "eight"}


def batches() -> list[dict[str, str]]:
    """A first batch; then a batch of three files with an event delivered twice within it (in two
    files, the second copy later in arrival order), an event the first batch already holds, a value
    that cannot fit its column (JSON text in an integer column: quarantined), an amount that widens
    the column to decimal numbers, new columns (one whose later value cannot fit its first), deletes,
    a key changed twice, and a bad line."""
    first = [mysql("INSERT", {"id": i, "amount": i * 10, "region": "eu" if i % 2 else "us"}, 1, i, uuid=f"b1-{i}")
             for i in range(1, 9)]
    again = mysql("UPDATE", {"id": 2, "amount": 22, "region": "us"}, 1, 22, uuid="b2-dup")
    second = {
        "part-1.jsonl": jsonl([mysql("UPDATE", {"id": 1, "amount": 11, "region": "eu"}, 1, 20, uuid="b2-1"),
                               again,
                               first[2],  # re-delivered from the first batch
                               mysql("DELETE", {"id": 3, "region": "eu"}, 1, 23, uuid="b2-3"),
                               mysql("UPDATE", {"id": 4, "amount": "lots", "region": "us"}, 1, 24, uuid="b2-4"),
                               mysql("UPDATE", {"id": 5, "amount": 5.5, "region": "eu"}, 1, 25, uuid="b2-5"),
                               mysql("UPDATE", {"id": 5, "amount": 55, "region": "eu"}, 1, 26, uuid="b2-6")])
        + '{"not json\n',
        "part-2.jsonl": jsonl([mysql("INSERT", {"id": 100 + i, "amount": i, "region": "us", "extra": f"x{i}",
                                                **({"note": NOTES[i]} if i in NOTES else {})}, 2, i,
                                     uuid=f"b2-bulk-{i}") for i in range(BULK)]),
        "part-3.jsonl": jsonl([again, mysql("DELETE", {"id": 7, "region": "eu"}, 3, 1, uuid="b2-7")]),
    }
    return [{"part-1.jsonl": jsonl(first)}, second]


def rows_of(table_path: str, drop=()) -> list[dict]:
    data = DeltaTable(table_path).to_pyarrow_table()
    rows = [{k: v for k, v in r.items() if k not in drop} for r in data.to_pylist()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def watch_the_driver(spark, monkeypatch) -> list[tuple[int, set[str]]]:
    """The row count and columns of every result the run's own process takes from Spark."""
    frame_class = type(spark.range(1))
    taken: list[tuple[int, set[str]]] = []

    def counted(name):
        original = getattr(frame_class, name)

        def take(self, *a, **k):
            out = original(self, *a, **k)
            taken.append((out.num_rows if hasattr(out, "num_rows") else len(out), set(self.columns)))
            return out
        return take
    for name in ("toArrow", "collect", "toPandas"):
        monkeypatch.setattr(frame_class, name, counted(name))
    return taken


CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}
GROUP_ROWS = 20  # rows per row group of the big Parquet change files: each is read by several tasks


def change_file(rows: list[dict], schema: pa.Schema) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out, row_group_size=GROUP_ROWS)
    return out.getvalue()


def changeset_batches() -> list[dict[str, bytes]]:
    """Parquet change sets: a first batch; then a batch of four files. The first has several
    row groups and a change without a key in one of them (that row group, and the file in
    process, goes record by record), an event delivered twice in two of its row groups, and a new
    column; the second holds an amount that is text (a misfit in the integer column); the third,
    several row groups read column by column either way, a decimal amount (widening the column)
    and a second new column; the fourth, an event the first batch already holds."""
    base = pa.schema([("op", pa.string()), ("id", pa.int64()), ("seq", pa.int64()), ("amount", pa.int64()),
                      ("region", pa.string())])
    first = [{"op": "I", "id": i, "seq": i, "amount": i * 10, "region": "eu" if i % 2 else "us"} for i in range(1, 9)]
    again = {"op": "U", "id": 2, "seq": 22, "amount": 22, "region": "us", "extra": "again"}
    bulk = [{"op": "I", "id": 100 + i, "seq": 30 + i, "amount": i, "region": "us", "extra": f"x{i}"}
            for i in range(50)]
    part_1 = [{"op": "U", "id": 1, "seq": 20, "amount": 11, "region": "eu", "extra": None}, again,
              {"op": "D", "id": 3, "seq": 23, "amount": None, "region": "eu", "extra": None}] + bulk[:30] + [again] \
        + [{"op": "U", "id": None, "seq": 24, "amount": 1, "region": "eu", "extra": "no key"}] + bulk[30:]
    with_extra = pa.schema(list(base) + [("extra", pa.string())])
    part_2 = change_file([{"op": "U", "id": 4, "seq": 25, "amount": "lots", "region": "us"}],
                         pa.schema([(f.name, pa.string() if f.name == "amount" else f.type) for f in base]))
    part_3 = [{"op": "U", "id": 200 + i, "seq": 90 + i, "amount": f"{i}.5", "region": "eu", "note": f"n{i}"}
              for i in range(45)] + [{"op": "D", "id": 7, "seq": 200, "amount": None, "region": "eu", "note": None}]
    decimal = pa.schema([(f.name, pa.decimal128(10, 1) if f.name == "amount" else f.type) for f in base]
                        + [("note", pa.string())])
    part_3 = [{**r, "amount": None if r["amount"] is None else Decimal(r["amount"])} for r in part_3]
    return [{"part-1.parquet": change_file(first, base)},
            {"part-1.parquet": change_file(part_1, with_extra), "part-2.parquet": part_2,
             "part-3.parquet": change_file(part_3, decimal),
             "part-4.parquet": change_file([first[2]], base)}]  # re-delivered from the first batch


def feed(workdir, on_spark: bool, spark, monkeypatch, table: dict | None = None, landed=batches):
    monkeypatch.setenv("CDC_ASSETS_LOCAL_APPLY_ROWS", "0" if on_spark else str(10**9))
    settings_of(monkeypatch, spark_ingest, local_parse_bytes=0 if on_spark else 10**9)
    monkeypatch.setattr(spark_ingest, "ROWS_PER_SLICE", 25)  # the second batch in several slices
    taken = watch_the_driver(spark, monkeypatch) if on_spark else []
    (workdir / "landing").mkdir(parents=True)
    cfg = write_config(workdir, [table or {"name": "T", "keys": ["id"], "format": "datastream-json"}])
    figures = []
    for n, files in enumerate(landed(), 1):
        land(cfg, "T", f"batch-{n}", files)
        outcome = run_ok(cfg, "T")
        figures.append((outcome.figures["changes"], outcome.figures["staging"]))
    monkeypatch.undo()
    table_dir = cfg.table_dir("T")
    tables = {step: rows_of(os.path.join(table_dir, step), drop=("quarantined_at",) if step == "quarantine" else ())
              for step in ("changes", "staging", "quarantine", "target")}
    return tables, figures, taken


# what differs by who wrote the files, not by what they hold
PLACES = ("seconds", "delta_version", "compacted")


def both_ways(spark, tmp_path, monkeypatch, table: dict | None = None, landed=batches):
    """The feed in process and on Spark: the same tables and figures, and the run's own process
    took no change records from Spark, only small results (the rejected records, column types,
    counts and bounds, file ids, written files' figures). The tables, and what it took."""
    local, local_figures, _ = feed(tmp_path / "local", False, spark, monkeypatch, table, landed)
    on_spark, spark_figures, taken = feed(tmp_path / "spark", True, spark, monkeypatch, table, landed)
    for step in ("changes", "staging", "quarantine", "target"):
        assert local[step] == on_spark[step], step
    for n, (mine, theirs) in enumerate(zip(local_figures, spark_figures), 1):
        for a, b in zip(mine, theirs):
            differ = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if k not in PLACES and a.get(k) != b.get(k)}
            assert not differ, (n, differ)
    assert taken and not [t for t in taken if {"_cdc_key", "_cdc_row"} & t[1]], taken
    return local, taken


def test_a_batch_on_spark_equals_the_one_in_process(spark, tmp_path, monkeypatch):
    local, taken = both_ways(spark, tmp_path, monkeypatch)
    assert max(n for n, _ in taken) <= COLLECTED_AT_MOST, taken
    changes = [r for r in local["changes"] if r["_cdc_batch_seq"] == 2]
    # key 1, the event delivered twice (once), 3's delete, 5 twice; the bulk but its text notes; 7's delete
    assert len(changes) == 5 + BULK - 2 + 1
    reasons = sorted(r["_cdc_reason"] for r in local["quarantine"])
    assert len(reasons) == 4 and any("'amount'" in r for r in reasons), reasons
    assert len([r for r in reasons if "'note'" in r]) == 2, reasons
    target = {r["id"]: r for r in local["target"]}
    assert 3 not in target and 7 not in target and target[5]["amount"] == 55 and target[2]["amount"] == 22
    assert target[100]["extra"] == "x0" and target[100]["note"] == 7 and target[4]["amount"] == 40 and 150 not in target and 200 not in target


def test_a_parquet_change_set_on_spark_equals_the_one_in_process(spark, tmp_path, monkeypatch):
    """Spark's tasks read a Parquet change set a row group at a time, column by column where the
    in-process path does (a row group with a change to reject record by record): the same
    `changes`, quarantine, staging and target, and the same figures."""
    table = {"name": "T", "keys": ["id"], "format": "changeset", "options": CHANGESET}
    for name, data in changeset_batches()[1].items():
        if name in ("part-1.parquet", "part-3.parquet"):
            assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups > 1, name
    local, _ = both_ways(spark, tmp_path, monkeypatch, table, changeset_batches)
    # 1's update, 2's update once, 3's delete, the bulk; part-3's 45 updates and 7's delete
    assert len([r for r in local["changes"] if r["_cdc_batch_seq"] == 2]) == 3 + 50 + 46
    lines = sorted((r["_cdc_file"], r["_cdc_line"]) for r in local["quarantine"])
    assert lines == [("batch-2/part-1.parquet", 35), ("batch-2/part-2.parquet", 1)], local["quarantine"]
    target = {r["id"]: r for r in local["target"]}
    assert 3 not in target and 7 not in target and target[2]["amount"] == 22 and target[4]["amount"] == 40
    assert target[100]["extra"] == "x0" and target[201]["note"] == "n1" and str(target[201]["amount"]) == "1.5"
