"""A big Parquet change file is parsed by several Spark tasks, a row group each: its changes, and
the lines its rejections name, are those of the whole file read by one reader."""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_assets.core.formats import parse_file
from cdc_assets.engine import spark_ingest
from cdc_assets_tests.support.config import settings_of, write_config
from cdc_assets_tests.support.landing import land
from cdc_assets_tests.support.runs import MARKS, run_ok
from cdc_assets_tests.support.warehouse import by_key, delta_rows, target_rows

pytestmark = MARKS

CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}


def change_file() -> bytes:
    """Three row groups of two rows; line 5, in the third, has no key."""
    rows = pa.table({"op": ["I", "I", "U", "D", "I", "U"], "id": [1, 2, 1, 2, None, 3],
                     "seq": [1, 1, 2, 2, 1, 1], "v": ["a", "b", "c", None, "x", "e"]})
    out = io.BytesIO()
    pq.write_table(rows, out, row_group_size=2)
    return out.getvalue()


def test_each_row_group_of_a_parquet_change_file_gives_its_changes_with_the_files_line_numbers():
    data = change_file()
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups == 3
    whole = [(type(x).__name__, x.line) for x in parse_file("changeset", CHANGESET, ["id"], "c.parquet", data)]
    by_group = [(type(x).__name__, x.line) for g in range(3)
                for x in parse_file("changeset", CHANGESET, ["id"], "c.parquet", data, row_group=g)]
    assert by_group == whole
    assert ("Rejection", 5) in by_group and len(by_group) == 6


@pytest.mark.parametrize("parser", ["in-process", "spark"])
def test_a_change_file_of_many_row_groups_gives_the_same_target_and_quarantine_on_either_parser(
        spark, workdir, monkeypatch, parser):
    if parser == "spark":
        settings_of(monkeypatch, spark_ingest, local_parse_bytes=-1)
    cfg = write_config(workdir, [{"name": "RG", "keys": ["id"], "format": "changeset", "options": CHANGESET}])
    land(cfg, "RG", "batch-1", {"c.parquet": change_file()})
    run_ok(cfg, "RG")
    assert {k: r["v"] for k, r in by_key(target_rows(cfg, "RG"), "id").items()} == {(1,): "c", (3,): "e"}
    assert [(r["_cdc_file"], r["_cdc_line"]) for r in delta_rows(cfg, "RG", "quarantine")] == [("batch-1/c.parquet", 5)]
