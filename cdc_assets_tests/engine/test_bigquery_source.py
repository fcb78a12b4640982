"""A table read from BigQuery (`source: bigquery://project.dataset.table`), against the BigQuery
emulator (bqemulator, in this process): a Datastream append-mode table (rules.md#bigquery-append) split in two
(seed000_split_merge) gives the conformance result when its halves arrive one run after the
other, each run reads only the rows it has not taken, an extract a crash left unregistered is
taken once, BigQuery CDC rows with a position column work the same way, and a source that
cannot be read fails the run naming the table, the source and the cause."""
from __future__ import annotations

import datetime as dt
import decimal
import json
import os

import pytest
from google.cloud import bigquery

from cdc_assets.engine import bigquery_source
from cdc_assets.engine.landing import registered
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.runs import MARKS, run_table
from cdc_assets_tests.support.steps import run_steps
from cdc_assets_tests.support.warehouse import target_rows, target_version, values

pytestmark = MARKS

APPEND_SCHEMA = [
    bigquery.SchemaField("COL1", "STRING"), bigquery.SchemaField("COL2", "STRING"),
    bigquery.SchemaField("datastream_metadata", "RECORD", fields=[
        bigquery.SchemaField("uuid", "STRING"), bigquery.SchemaField("source_timestamp", "INTEGER"),
        bigquery.SchemaField("change_sequence_number", "INTEGER"), bigquery.SchemaField("change_type", "STRING"),
        bigquery.SchemaField("is_deleted", "BOOLEAN")]),
]


def create(client, name: str, schema) -> str:
    table = f"{client.project}.{client.test_dataset}.{name}"
    client.create_table(bigquery.Table(table, schema=schema))
    return table


def append(client, table: str, rows: list[dict]) -> None:
    """Rows appended as Datastream's append mode does, by streaming inserts."""
    errors = client.insert_rows_json(table, rows)
    assert not errors, errors


def scenario_rows(shared_dir: str, name: str, batch: str) -> list[dict]:
    with open(os.path.join(shared_dir, "conformance", "scenarios", name, batch, "part-0001.jsonl")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def expected(shared_dir: str, name: str) -> dict:
    with open(os.path.join(shared_dir, "conformance", "scenarios", name, "expected.jsonl")) as fh:
        return {r["COL1"]: r["COL2"] for r in map(json.loads, fh) if r}


def source_config(workdir, name: str, source: str, **table):
    return write_config(workdir, [{"name": name, "keys": table.pop("keys", ["COL1"]),
                                   "format": table.pop("format", "bigquery-append"), "source": f"bigquery://{source}",
                                   **table}])


def test_seed000_append_table_read_in_two_runs_gives_the_conformance_result(
        spark, workdir, bigquery_emulator, shared_dir):
    client = bigquery_emulator
    source = create(client, "TABLE1", APPEND_SCHEMA)
    cfg = source_config(workdir, "TABLE1", source)
    first, second = (scenario_rows(shared_dir, "seed000_split_merge", b) for b in ("batch-1", "batch-2"))

    append(client, source, first)
    assert run_steps(spark, cfg, "TABLE1", bigquery=client).new_batch == "b000001"
    append(client, source, second)
    assert run_steps(spark, cfg, "TABLE1", bigquery=client).new_batch == "b000002"

    assert values(target_rows(cfg, "TABLE1"), "COL1", "COL2") == expected(shared_dir, "seed000_split_merge")
    # each run took only the rows it had not taken: every source row is in exactly one batch's extract
    batches = registered(cfg.table_dir("TABLE1"))
    assert [b.files for b in batches] == [("extract-00000001.parquet",), ("extract-00000002.parquet",)]
    folder = cfg.landing_dir("TABLE1")
    import pyarrow.parquet as pq
    extracted = [pq.read_table(os.path.join(folder, f)).column("datastream_metadata").to_pylist()
                 for b in batches for f in b.files]
    assert [len(e) for e in extracted] == [len(first), len(second)]
    assert sorted(m["uuid"] for e in extracted for m in e) == sorted(r["datastream_metadata"]["uuid"]
                                                                     for r in first + second)

    # nothing new in the source: no batch, no commit
    version = target_version(cfg, "TABLE1")
    assert run_steps(spark, cfg, "TABLE1", bigquery=client).new_batch is None
    assert target_version(cfg, "TABLE1") == version


def test_an_extract_a_crash_left_unregistered_is_taken_once(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    source = create(client, "TABLE1", APPEND_SCHEMA)
    cfg = source_config(workdir, "TABLE1", source)

    def row(key, value, csn, kind="INSERT", uuid=None):
        return {"COL1": key, "COL2": value, "datastream_metadata": {
            "uuid": uuid or f"u{csn}", "source_timestamp": 1, "change_sequence_number": csn, "change_type": kind,
            "is_deleted": kind == "DELETE"}}

    append(client, source, [row("a", "1", 10), row("b", "1", 11)])
    # the run that extracted these rows stopped before registering them as a batch
    taken = bigquery_source.extract_new_rows(client, cfg.table("TABLE1"), cfg.table_dir("TABLE1"))
    assert (taken.rows, taken.after, taken.through) == (2, None, 11)
    append(client, source, [row("a", "2", 12, "UPDATE"), row("b", "1", 13, "DELETE"),
                            row("a", "2", 12, "UPDATE", uuid="u12")])  # Datastream delivered u12 twice
    # the next run reads from where the left-over extract stopped, and takes both extracts as one batch
    assert run_steps(spark, cfg, "TABLE1", bigquery=client).new_batch == "b000001"
    assert run_steps(spark, cfg, "TABLE1", bigquery=client).new_batch is None
    assert [b.files for b in registered(cfg.table_dir("TABLE1"))] == [
        ("extract-00000001.parquet", "extract-00000002.parquet")]
    assert values(target_rows(cfg, "TABLE1"), "COL1", "COL2") == {"a": "2"}


def test_bigquery_cdc_rows_are_read_by_their_position_column_with_types_kept(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    source = create(client, "ORDERS_CHANGES", [
        bigquery.SchemaField("id", "INTEGER"), bigquery.SchemaField("amount", "NUMERIC"),
        bigquery.SchemaField("placed", "TIMESTAMP"), bigquery.SchemaField("_CHANGE_TYPE", "STRING"),
        bigquery.SchemaField("_CHANGE_SEQUENCE_NUMBER", "STRING"), bigquery.SchemaField("ingested_at", "TIMESTAMP")])
    cfg = source_config(workdir, "ORDERS", source, keys=["id"], format="bigquery-cdc", source_position="ingested_at")

    def row(i, amount, change, csn, at):
        return {"id": i, "amount": amount, "placed": "2024-03-01T10:00:00.123456Z", "_CHANGE_TYPE": change,
                "_CHANGE_SEQUENCE_NUMBER": csn, "ingested_at": f"2024-03-01T10:00:{at:02d}Z"}

    append(client, source, [row(1, "10.25", "UPSERT", "A/1", 1), row(2, "3.10", "UPSERT", "A/2", 1)])
    run_steps(spark, cfg, "ORDERS", bigquery=client)
    # a later arrival with a smaller sequence number loses; a delete of 2 wins
    append(client, source, [row(1, "99.99", "UPSERT", "A/0", 2), row(2, "3.10", "DELETE", "A/3", 2)])
    run_steps(spark, cfg, "ORDERS", bigquery=client)

    [one] = target_rows(cfg, "ORDERS")
    assert one["id"] == 1 and one["amount"] == decimal.Decimal("10.25")
    assert one["placed"] == dt.datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)


def test_a_source_that_cannot_be_read_fails_the_run_naming_table_source_and_cause(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    missing = f"{client.project}.{client.test_dataset}.NO_SUCH_TABLE"
    outcome = run_table(source_config(workdir, "TABLE1", missing), "TABLE1")
    assert not outcome.ok
    assert "TABLE1" in outcome.error and f"bigquery://{missing}" in outcome.error

    source = create(client, "CHANGES", [bigquery.SchemaField("COL1", "STRING"),
                                        bigquery.SchemaField("_CHANGE_TYPE", "STRING")])
    cfg = source_config(workdir, "T2", source, format="bigquery-cdc", source_position="arrived")
    outcome = run_table(cfg, "T2")
    assert not outcome.ok
    assert "T2" in outcome.error and "'arrived'" in outcome.error and "source_position" in outcome.error


@pytest.mark.parametrize("value", [7, decimal.Decimal("12.500"), dt.date(2024, 3, 1),
                                   dt.datetime(2024, 3, 1, 10, 0, 1, 5, tzinfo=dt.UTC)])
def test_a_position_survives_its_round_trip_through_the_extract_metadata(value):
    assert bigquery_source._decode(json.loads(json.dumps(bigquery_source._encode(value)))) == value
