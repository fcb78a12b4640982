"""`publish: {bigquery: project.dataset.table}`, against the BigQuery emulator (bqemulator, in this
process): after inserts, updates, deletes and a re-delivered batch the BigQuery table equals the
target row by row with its types; a publish with nothing new, or one re-sent after a crash,
changes nothing; a rebuilt target is sent whole; failures name the table and the cause; the
reconciliation check sees a row deleted behind our back."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import dagster as dg
import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

from cdc_assets.defs.definitions import build_definitions
from cdc_assets.defs.publish import publish_job_name
from cdc_assets.engine import bigquery_publish as publishing
from cdc_assets.engine import target_build
from cdc_assets_tests.emulators import PROJECT
from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.records import mysql
from cdc_assets_tests.support.runs import MARKS, run_ok, run_table
from cdc_assets_tests.support.steps import run_steps
from cdc_assets_tests.support.warehouse import target_rows

pytestmark = MARKS
UTC = dt.UTC


def orders_config(workdir, dataset: str, publish: bool = True):
    dest = f"{PROJECT}.{dataset}.orders"
    return write_config(workdir, [{
        "name": "ORDERS", "keys": ["id"], "format": "datastream-json", "partition_by": ["day"],
        "columns": {"amount": "decimal(12,2)", "created_at": "timestamp", "day": "date"},
        **({"publish": {"bigquery": dest}} if publish else {})}]), dest


def order(i: int, amount: str, day: str, note: str = "x") -> dict:
    return {"id": i, "amount": Decimal(amount), "created_at": f"{day}T10:00:00.123456+02:00", "day": day, "note": note}


def event(kind: str, row: dict, pos: int, uuid: str | None = None) -> dict:
    return mysql(kind, {**row, "amount": float(row["amount"])}, 1, pos, uuid=uuid)  # a JSON number, read exactly


def bigquery_rows(client, dest: str) -> list[dict]:
    return sorted((dict(r.items()) for r in client.query(f"SELECT * FROM `{dest}`").result()), key=lambda r: r["id"])


def reconciles(client, cfg, table: str) -> bool:
    """What the `reconciles_with_target` check says: the BigQuery table holds the target's rows."""
    return publishing.reconcile(client, cfg, cfg.table(table)).discrepancies == 0


def assert_equal_to_target(client, cfg, dest: str) -> list[dict]:
    target = sorted(target_rows(cfg, "ORDERS"), key=lambda r: r["id"])
    published = bigquery_rows(client, dest)
    assert published == target
    for row in published:
        assert isinstance(row["amount"], Decimal) and isinstance(row["day"], dt.date)
        assert row["created_at"].utcoffset() == dt.timedelta(0)  # an instant, in UTC
    return published


def test_the_bigquery_table_follows_the_target_through_inserts_updates_deletes_and_redeliveries(
        spark, workdir, bigquery_emulator, monkeypatch):
    client = bigquery_emulator
    cfg, dest = orders_config(workdir, client.test_dataset)
    land(cfg, "ORDERS", "b1", {"part-1.jsonl": jsonl([
        event("INSERT", order(1, "12.34", "2024-03-01"), 1), event("INSERT", order(2, "0.10", "2024-03-01"), 2),
        event("INSERT", order(3, "99999.99", "2024-03-02"), 3)])})
    out = run_steps(spark, cfg, "ORDERS", bigquery=client)
    assert out.published.mode == "all" and reconciles(client, cfg, "ORDERS")
    rows = assert_equal_to_target(client, cfg, dest)
    assert rows[0]["amount"] == Decimal("12.34") and str(rows[1]["amount"].normalize()) == "0.1"
    assert rows[0]["created_at"] == dt.datetime(2024, 3, 1, 8, 0, 0, 123456, tzinfo=UTC)
    made = client.get_table(dest)
    assert made.clustering_fields == ["id"] and made.time_partitioning.field == "day"
    assert sorted(f.name for f in made.schema) == ["amount", "created_at", "day", "id", "note"]  # no _cdc_ columns
    assert {f.name: f.field_type for f in made.schema}["amount"] == "NUMERIC"

    second = [event("UPDATE", order(1, "13.00", "2024-03-02", "moved"), 4, uuid="u-4"),
              event("DELETE", order(2, "0.10", "2024-03-01"), 5, uuid="u-5"),
              event("INSERT", order(4, "1.00", "2024-03-03"), 6, uuid="u-6")]
    land(cfg, "ORDERS", "b2", {"part-1.jsonl": jsonl(second)})
    figures = run_steps(spark, cfg, "ORDERS", bigquery=client).published
    assert (figures.mode, figures.rows_sent, figures.deletes_sent) == ("changes", 3, 1)
    assert_equal_to_target(client, cfg, dest)
    assert [r["id"] for r in bigquery_rows(client, dest)] == [1, 3, 4]

    # The same events again (at-least-once delivery), beside a real update.
    # A new source column (rules.md#rule-6) is added to the BigQuery table too.
    land(cfg, "ORDERS", "b3", {"part-1.jsonl": jsonl(second + [
        event("UPDATE", {**order(3, "5.55", "2024-03-02"), "channel": "web"}, 7)])})
    out = run_steps(spark, cfg, "ORDERS", bigquery=client)
    assert out.published.mode == "changes" and reconciles(client, cfg, "ORDERS")
    rows = {r["id"]: r for r in assert_equal_to_target(client, cfg, dest)}
    assert (rows[3]["amount"], rows[3]["channel"], rows[1]["channel"]) == (Decimal("5.55"), "web", None)

    # Nothing new: no publish, and a direct one changes nothing.
    before = bigquery_rows(client, dest)
    assert run_steps(spark, cfg, "ORDERS", bigquery=client).published is None
    assert publishing.publish(client, cfg, cfg.table("ORDERS")).nothing_new is True
    assert bigquery_rows(client, dest) == before

    # A crash between the MERGE and the ledger's record: the keys are sent again, and the MERGE
    # finds nothing to change.
    land(cfg, "ORDERS", "b4", {"part-1.jsonl": jsonl([event("DELETE", order(4, "1.00", "2024-03-03"), 8)])})
    real_record = publishing._record

    def crash(*a, **kw):
        raise RuntimeError("killed after the MERGE")
    monkeypatch.setattr(publishing, "_record", crash)
    with pytest.raises(RuntimeError, match="killed after the MERGE"):
        run_steps(spark, cfg, "ORDERS", bigquery=client)
    monkeypatch.setattr(publishing, "_record", real_record)
    again = publishing.publish(client, cfg, cfg.table("ORDERS"))
    assert (again.mode, again.deletes_sent, again.rows_affected) == ("changes", 1, 0)
    assert_equal_to_target(client, cfg, dest)

    # A rebuilt target is sent whole; rows BigQuery holds that the target does not are deleted.
    client.query(f"INSERT INTO `{dest}` (id, note) VALUES (77, 'stray')").result()
    target_build.rebuild(spark, cfg, cfg.table("ORDERS"), None)
    assert publishing.plan(cfg, cfg.table("ORDERS")).mode == "all"
    whole = publishing.publish(client, cfg, cfg.table("ORDERS"))
    assert (whole.mode, whole.rows_sent, whole.rows_affected) == ("all", 2, 1)
    assert_equal_to_target(client, cfg, dest)


def test_the_reconciliation_check_fails_when_a_row_is_deleted_behind_our_back(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    cfg, dest = orders_config(workdir, client.test_dataset)
    land(cfg, "ORDERS", "b1", {"part-1.jsonl": jsonl([event("INSERT", order(i, f"{i}.25", "2024-03-01"), i)
                                                      for i in range(1, 6)])})
    run_steps(spark, cfg, "ORDERS", bigquery=client)
    table = cfg.table("ORDERS")
    assert publishing.reconcile(client, cfg, table).discrepancies == 0
    assert publishing.reconcile(client, cfg, table, small=2, sample=3).discrepancies == 0

    client.query(f"DELETE FROM `{dest}` WHERE id = 3").result()
    client.query(f"UPDATE `{dest}` SET amount = 0 WHERE id = 4").result()
    report = publishing.reconcile(client, cfg, table)
    assert (report.rows_target, report.rows_bigquery, report.missing_in_bigquery) == (5, 4, 1)
    assert report.differing_rows == 1 and report.differing_columns == ("amount",)
    assert report.discrepancies == 3
    # The check beside the asset says the same: the publish job finds nothing new, and its check fails.
    result = build_definitions(cfg).resolve_job_def(publish_job_name(table)).execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.check_name == "reconciles_with_target" and evaluation.passed is False
    assert evaluation.metadata["missing_in_bigquery"].value == 1


def test_a_failed_merge_fails_the_publish_naming_table_and_cause_and_the_next_run_catches_up(
        spark, workdir, bigquery_emulator, monkeypatch):
    client = bigquery_emulator
    cfg, dest = orders_config(workdir, client.test_dataset)
    land(cfg, "ORDERS", "b1", {"part-1.jsonl": jsonl([event("INSERT", order(1, "1.50", "2024-03-01"), 1)])})
    real_load = publishing.load_staging

    def load_then_lose_the_staging_table(calls, *a, **kw):
        loaded = real_load(calls, *a, **kw)
        client.delete_table(publishing.staging_table(dest))  # another hand drops it before the MERGE
        return loaded
    monkeypatch.setattr(publishing, "load_staging", load_then_lose_the_staging_table)
    out = run_table(cfg, "ORDERS")
    assert not out.ok
    assert "ORDERS__bigquery" in out.error and "BigQueryPublishError: table ORDERS" in out.error
    assert f"MERGE into {dest} failed" in out.error and "orders__cdc_publish_staging" in out.error
    assert publishing.last_publish(cfg, cfg.table("ORDERS")) is None  # nothing recorded: the next run sends it again

    monkeypatch.setattr(publishing, "load_staging", real_load)
    out = run_ok(cfg, "ORDERS")
    assert out.new_batch is None and out.figures["bigquery"]["mode"] == "all"
    assert_equal_to_target(client, cfg, dest)


def test_a_bigquery_column_of_another_type_fails_the_publish_naming_it(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    cfg, dest = orders_config(workdir, client.test_dataset)
    client.create_table(bigquery.Table(dest, schema=[bigquery.SchemaField("id", "INT64"),
                                                     bigquery.SchemaField("amount", "FLOAT64")]))
    land(cfg, "ORDERS", "b1", {"part-1.jsonl": jsonl([event("INSERT", order(1, "1.50", "2024-03-01"), 1)])})
    with pytest.raises(publishing.BigQueryPublishError) as failure:
        run_steps(spark, cfg, "ORDERS", bigquery=client)
    assert "column amount is FLOAT64 in BigQuery but NUMERIC in the target (decimal(12,2))" in str(failure.value)


def test_an_unreachable_bigquery_fails_the_publish_naming_table_and_cause(spark, workdir):
    cfg, _ = orders_config(workdir, "ds", publish=False)
    land(cfg, "ORDERS", "b1", {"part-1.jsonl": jsonl([event("INSERT", order(1, "1.50", "2024-03-01"), 1)])})
    run_steps(spark, cfg, "ORDERS")
    cfg, dest = orders_config(workdir, "ds")  # publishing from now on
    nowhere = bigquery.Client(project=PROJECT, credentials=AnonymousCredentials(),
                              client_options=ClientOptions(api_endpoint="http://127.0.0.1:9"))
    with pytest.raises(publishing.BigQueryPublishError) as failure:
        publishing.publish(nowhere, cfg, cfg.table("ORDERS"), timeout=2)
    text = str(failure.value)
    assert text.startswith(f"table ORDERS: BigQuery {dest}: get table {dest} failed: ")
    assert "Connection" in text or "Timeout" in text or "refused" in text, text
    assert publishing.last_publish(cfg, cfg.table("ORDERS")) is None


def test_a_composite_key_table_from_csv_change_sets_publishes_its_deletes(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    dest = f"{PROJECT}.{client.test_dataset}.cs"
    options = {"op_column": "FLAG", "sequence_by": ["SEQ"], "inserts": ["I"], "updates": ["U"], "deletes": ["D"]}
    cfg = write_config(workdir, [{"name": "CS", "keys": ["REGION", "ID"], "format": "changeset", "options": options,
                                  "publish": {"bigquery": dest}}])
    land(cfg, "CS", "b1", {"part-1.csv": "FLAG,REGION,ID,VALUE,SEQ\nI,eu,1,a,1\nI,us,1,b,1\nI,eu,2,c,1\n"})
    run_steps(spark, cfg, "CS", bigquery=client)
    land(cfg, "CS", "b2", {"part-1.csv": "FLAG,REGION,ID,VALUE,SEQ\nD,eu,1,,2\nU,us,1,bb,2\nD,eu,9,,2\n"})
    out = run_steps(spark, cfg, "CS", bigquery=client)
    assert out.published.deletes_sent == 2  # eu/1, and eu/9 which BigQuery never held
    published = sorted((dict(r.items()) for r in client.query(f"SELECT * FROM `{dest}`").result()),
                       key=lambda r: (r["REGION"], r["ID"]))
    assert published == sorted(target_rows(cfg, "CS"), key=lambda r: (r["REGION"], r["ID"]))
    assert [(r["REGION"], r["ID"], r["VALUE"]) for r in published] == [("eu", 2, "c"), ("us", 1, "bb")]
    assert client.get_table(dest).clustering_fields == ["REGION", "ID"]


def test_column_types_map_to_bigquery_types_that_keep_their_values():
    assert publishing.bigquery_type("decimal(12,2)") == ("NUMERIC", 12, 2)
    assert publishing.bigquery_type("decimal(38,9)") == ("NUMERIC", 38, 9)
    assert publishing.bigquery_type("decimal(38,10)") == ("BIGNUMERIC", 38, 10)  # scale over 9
    assert publishing.bigquery_type("decimal(38,0)") == ("BIGNUMERIC", 38, 0)  # over 29 integer digits
    assert [publishing.bigquery_type(t)[0] for t in ("boolean", "int", "long", "double", "string", "date",
                                                     "timestamp", "timestamp_ntz", "binary")] == \
        ["BOOL", "INT64", "INT64", "FLOAT64", "STRING", "DATE", "TIMESTAMP", "DATETIME", "BYTES"]
    sql = publishing.merge_statement("p.d.t", {"id": "long", "v": "string"}, ["id"], delete_others=False)
    assert sql.count("MERGE") == 1 and "WHEN MATCHED AND S._cdc_deleted THEN DELETE" in sql
    assert "T.`v` IS DISTINCT FROM S.`v`" in sql and "NOT MATCHED BY SOURCE" not in sql


def _unquoted(quoted: str) -> str:
    """A GoogleSQL quoted identifier read back: between backticks, a backslash escapes the next
    character (a backtick or a backslash among them); an unescaped backtick ends it."""
    assert quoted[0] == "`" and quoted[-1] == "`", quoted
    out, chars = [], iter(quoted[1:-1])
    for c in chars:
        assert c != "`", quoted  # it would end the identifier
        out.append(next(chars) if c == "\\" else c)
    return "".join(out)


@pytest.mark.parametrize("name", ["a\\`b", "back\\slash", "tick`", "end\\", "plain"])
def test_a_name_is_quoted_for_googlesql_backslashes_and_backticks_included(name):
    assert _unquoted(publishing._quote(name)) == name
    sql = publishing.merge_statement("p.d.t", {name: "string", "id": "long"}, ["id"], delete_others=False)
    assert f"T.{publishing._quote(name)} IS DISTINCT FROM S.{publishing._quote(name)}" in sql


def test_a_name_bigquery_cannot_take_is_published_with_each_character_it_excludes_as_underscore():
    from cdc_assets.core import names

    assert names.bigquery_name("user.id") == "user_id"
    assert names.bigquery_name('my"id$') == "my_id_"
    assert names.bigquery_name("a`b") == "a_b"
    for kept in ("it's", "#tag", "1st", "a-b", "été", "MixedCase", "select", "a&b|c"):
        assert names.bigquery_name(kept) == kept
    assert names.bigquery_name("_PARTITIONTIME") == "c_PARTITIONTIME"
    with pytest.raises(ValueError, match="columns 'user.id' and 'user_id' would both be BigQuery column 'user_id'"):
        names.bigquery_names(["user.id", "user_id"], "T")


def test_odd_column_names_publish_under_their_bigquery_names(spark, workdir, bigquery_emulator):
    client = bigquery_emulator
    dest = f"{PROJECT}.{client.test_dataset}.odd"
    cols = ["it's", "#tag", "1st", "a-b", "été", "x.y", 'q"d', "a`b", "$c"]
    cfg = write_config(workdir, [{"name": "ODD", "keys": ["user.id"], "format": "datastream-json",
                                  "publish": {"bigquery": dest}}])
    land(cfg, "ODD", "b1", {"a.jsonl": jsonl([mysql("INSERT", {"user.id": i, **{c: f"{c}{i}" for c in cols}}, 1, i)
                                             for i in (1, 2, 3)])})
    run_steps(spark, cfg, "ODD", bigquery=client)
    assert reconciles(client, cfg, "ODD")
    land(cfg, "ODD", "b2", {"a.jsonl": jsonl([mysql("UPDATE", {"user.id": 2, **{c: "new" for c in cols}}, 1, 10),
                                             mysql("DELETE", {"user.id": 3}, 1, 11)])})
    out = run_steps(spark, cfg, "ODD", bigquery=client)
    assert out.published.mode == "changes" and reconciles(client, cfg, "ODD")
    published = sorted((dict(r.items()) for r in client.query(f"SELECT * FROM `{dest}`").result()),
                       key=lambda r: r["user_id"])
    from cdc_assets.core.names import bigquery_name
    assert published == sorted(({bigquery_name(c): v for c, v in r.items()} for r in target_rows(cfg, "ODD")),
                               key=lambda r: r["user_id"])
    assert [r["user_id"] for r in published] == [1, 2] and published[1]["x_y"] == "new"


def test_a_soft_deleted_row_and_a_truncate_reach_the_copy_as_deletes(spark, workdir, bigquery_emulator):
    """The copy holds the live rows: a row a soft-delete table keeps flagged is deleted there, and
    after a truncate (its deletes name no key) the whole target is sent."""
    from .test_debezium_feed import lines
    from .test_rule9_truncate import pg

    client = bigquery_emulator
    dest = f"{PROJECT}.{client.test_dataset}.orders"
    cfg = write_config(workdir, [{"name": "ORDERS", "keys": ["id"], "format": "debezium-json", "deletes": "soft",
                                  "publish": {"bigquery": dest}}])

    def published() -> dict:
        return {r["id"]: r["v"] for r in bigquery_rows(client, dest)}

    land(cfg, "ORDERS", "b1", {"p.jsonl": lines(pg("c", 100, 1, "a"), pg("c", 110, 2, "a"), pg("c", 120, 3, "a"))})
    run_steps(spark, cfg, "ORDERS", bigquery=client)
    land(cfg, "ORDERS", "b2", {"p.jsonl": lines(pg("d", 200, 2, "a"), pg("u", 210, 3, "b"))})
    out = run_steps(spark, cfg, "ORDERS", bigquery=client)
    assert out.published.mode == "changes" and reconciles(client, cfg, "ORDERS")
    assert published() == {1: "a", 3: "b"}
    assert len(target_rows(cfg, "ORDERS")) == 3  # 2 is kept, flagged
    land(cfg, "ORDERS", "b3", {"p.jsonl": lines(pg("t", 205), pg("c", 300, 4, "a"))})
    out = run_steps(spark, cfg, "ORDERS", bigquery=client)
    assert out.published.mode == "all" and reconciles(client, cfg, "ORDERS")
    assert published() == {3: "b", 4: "a"}
