"""A key is exactly its value, compared by its column's type (rules.md#keys).

Every reader gives one key text per typed value: JSON strings, CSV text (declared or inferred),
Parquet read row by row or column by column.
"""
from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_assets.core.changes import Change, Rejection, to_record
from cdc_assets.core.formats import parse_file
from cdc_assets.core.typed_changes import typed_change_records
from cdc_assets.core.typed_export import key_texts
from cdc_assets.core.values import key_text

from .test_values import NUMBER_LIKE_TEXTS

IDS = ["1.1", "1.10", "1.0", "1", "+5", "5", "-0", "0"]
CHANGESET = {"op_column": "op", "inserts": ["I"], "updates": ["U"], "deletes": ["D"], "sequence_by": ["seq"]}


def keys_of(results) -> list[str]:
    assert all(isinstance(r, Change) for r in results), [r for r in results if isinstance(r, Rejection)]
    return [key_text(r.key) for r in results]


def csv_of(ids) -> bytes:
    return ("op,id,seq\n" + "".join(f"I,{i},{n}\n" for n, i in enumerate(ids))).encode()


def test_json_strings_that_look_like_numbers_are_distinct_keys():
    data = "".join(json.dumps({"payload": {"id": i, "v": n}, "source_timestamp": "2024-01-01T00:00:00",
                               "uuid": f"u{n}", "read_method": "mysql-cdc-binlog",
                               "source_metadata": {"change_type": "INSERT", "log_file": "mysql-bin.1",
                                                   "log_position": n}}) + "\n"
                   for n, i in enumerate(IDS)).encode()
    keys = keys_of(list(parse_file("datastream-json", {}, ["id"], "a.jsonl", data)))
    assert len(set(keys)) == len(IDS)


def test_csv_text_in_a_declared_string_column_keeps_its_spelling():
    results = list(parse_file("changeset", CHANGESET, ["id"], "a.csv", csv_of(IDS), columns={"id": "string"}))
    assert [r.row["id"] for r in results] == IDS
    assert len(set(keys_of(results))) == len(IDS)


def test_csv_text_in_a_text_column_keeps_its_spelling():
    """Undeclared: a column holding any text is text in that file, numbers and all."""
    results = list(parse_file("changeset", CHANGESET, ["id"], "a.csv", csv_of(IDS + ["abc"])))
    assert [r.row["id"] for r in results] == IDS + ["abc"]
    assert len(set(keys_of(results))) == len(IDS) + 1


def test_csv_numbers_in_a_numeric_column_are_keys_by_value():
    """Undeclared and every value a number: the column is numeric, and 1.0 is 1."""
    results = list(parse_file("changeset", CHANGESET, ["id"], "a.csv", csv_of(["1.0", "1", "+5", "5", "2.5"])))
    keys = keys_of(results)
    assert keys[0] == keys[1] and keys[2] == keys[3] and len(set(keys)) == 3


def test_a_declared_numeric_key_compares_as_a_number():
    results = list(parse_file("changeset", CHANGESET, ["id"], "a.csv", csv_of(["+5", "5", "05"]),
                              columns={"id": "long"}))
    assert len(set(keys_of(results))) == 1


def test_every_reader_gives_the_same_key_text():
    """Parquet read column by column, Parquet read row by row, and a text column of an export."""
    texts = [t for t in NUMBER_LIKE_TEXTS if t != ""] + ["é", "a\\b", 'q"uote']
    table = pa.table({"op": ["I"] * len(texts), "id": texts, "seq": list(range(len(texts)))})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    by_row = keys_of(list(parse_file("changeset", CHANGESET, ["id"], "a.parquet", buf.getvalue())))
    from cdc_assets.engine import delta
    from cdc_assets.engine.ingest import PARSED_FIELDS  # the records as ingest writes them

    typed = typed_change_records(table, CHANGESET, ["id"], "a.parquet", None, [], batch_seq=1, batch_id="b",
                                 file_index=0, schema=delta.arrow_schema(PARSED_FIELDS))
    assert typed is not None, "this file is read column by column"
    assert typed.records.column("_cdc_key").to_pylist() == by_row
    assert pa.array(key_texts([pa.array(texts)])).to_pylist() == by_row
    assert len(set(by_row)) == len(texts)
    assert [to_record(c, batch_seq=1, batch_id="b", file_name="a.parquet", file_index=0, partition_by=[])["_cdc_key"]
            for c in parse_file("changeset", CHANGESET, ["id"], "a.parquet", buf.getvalue())] == by_row
