"""A Debezium feed through the engine: snapshot reads rank below streamed changes (rules.md#rule-3),
a delete stays deleted (rules.md#rule-2), a re-delivered event counts once (rules.md#rule-4), Kafka tombstones
are no change (a truncate, rules.md#rule-9: test_rule9_truncate.py)."""
from __future__ import annotations

from cdc_assets_tests.support.config import write_config
from cdc_assets_tests.support.landing import jsonl, land
from cdc_assets_tests.support.runs import MARKS
from cdc_assets_tests.support.steps import run_steps
from cdc_assets_tests.support.warehouse import target_rows, values

pytestmark = MARKS

TS = 1_709_287_200_000  # source.ts_ms of the snapshot, 2024-03-01T10:00:00Z
MINUTE = 60_000


def pg_event(op: str, image: dict, ts_ms: int, lsn: int | None) -> dict:
    """A Debezium PostgreSQL event; a delete's row image is `before`."""
    source = {"version": "2.5.0.Final", "connector": "postgresql", "name": "shop", "ts_ms": ts_ms,
              "snapshot": "true" if op == "r" else "false", "db": "shop", "schema": "public", "table": "orders"}
    if lsn is not None:
        source["lsn"] = lsn
    before, after = (image, None) if op == "d" else (None, image)
    return {"before": before, "after": after, "op": op, "source": source, "ts_ms": ts_ms + 40}


def lines(*events) -> str:
    """JSON lines as a Kafka sink writes them; None is a Kafka tombstone, written as `null`."""
    return jsonl(list(events))


def test_debezium_snapshot_stream_redelivery_and_tombstones(spark, workdir):
    cfg = write_config(workdir, [{"name": "DBZ", "keys": ["id"], "format": "debezium-json"}])
    update_1 = pg_event("u", {"id": 1, "v": "updated"}, TS + MINUTE, 2000)
    land(cfg, "DBZ", "batch-1", {"orders-0.jsonl": lines(
        pg_event("r", {"id": 1, "v": "snapshot"}, TS, None),  # a snapshot read may have no lsn
        pg_event("r", {"id": 2, "v": "snapshot"}, TS, None),
        pg_event("r", {"id": 3, "v": "snapshot"}, TS, None),
        update_1,
        pg_event("c", {"id": 4, "v": "created"}, TS + MINUTE, 2100),
        pg_event("d", {"id": 3, "v": "snapshot"}, TS + 2 * MINUTE, 2200),
        None,  # the tombstone Debezium writes after a delete
        pg_event("u", {"id": 2, "v": "updated"}, TS + 2 * MINUTE, 2300),
    )})
    first = run_steps(spark, cfg, "DBZ").taken
    assert values(target_rows(cfg, "DBZ"), "id", "v") == {1: "updated", 2: "updated", 4: "created"}
    assert first.records_read == 7  # the tombstone is no record

    land(cfg, "DBZ", "batch-2", {"orders-0.jsonl": lines(
        update_1,  # re-delivered after a connector restart: counts once
        # a later snapshot (a re-snapshot) still ranks below the streamed changes of its keys ...
        pg_event("r", {"id": 2, "v": "resnapshot"}, TS + 60 * MINUTE, 9000),
        pg_event("r", {"id": 3, "v": "resnapshot"}, TS + 60 * MINUTE, 9000),  # ... a delete included
        pg_event("r", {"id": 5, "v": "snapshot"}, TS + 60 * MINUTE, 9000),    # a key only the snapshot has
        pg_event("u", {"id": 4, "v": "older"}, TS, 1500),  # streamed, but older than the create: loses
        None,
    )})
    assert run_steps(spark, cfg, "DBZ").taken.duplicates_skipped == 1
    rows = target_rows(cfg, "DBZ")
    assert values(rows, "id", "v") == {1: "updated", 2: "updated", 4: "created", 5: "snapshot"}
    assert len(rows) == 4  # each key once; 3 stays deleted
