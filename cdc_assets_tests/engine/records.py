"""Small builders for change records in each format, as their writers produce them."""
from __future__ import annotations

import os
import uuid as _uuid

import pytest
from deltalake import DeltaTable

from cdc_assets_tests.helpers import jsonl, land, run_table, target_rows, write_config

TS = "2024-03-01T10:00:00"  # one second: every event below may share it (1-second ties)


def ds_event(change_type: str, payload: dict, *, ts: str = TS, read_method: str = "mysql-cdc-binlog",
             uuid: str | None = None, **position) -> dict:
    """A Datastream JSON event; `position` is the source's metadata (log_file/log_position, scn/rs_id/ssn, lsn)."""
    return {
        "stream_name": "projects/p/locations/l/streams/s",
        "read_method": read_method,
        "object": "shop_orders",
        "uuid": uuid or str(_uuid.uuid4()),
        "read_timestamp": "2024-03-01T10:00:05.000Z",
        "source_timestamp": ts,
        "source_metadata": {"change_type": change_type, "is_deleted": change_type.endswith("DELETE"), **position},
        "payload": payload,
    }


def mysql(change_type, payload, log_file: int, log_position: int, **kw) -> dict:
    return ds_event(change_type, payload, read_method="mysql-cdc-binlog",
                    log_file=f"mysql-bin.{log_file:06d}", log_position=log_position, **kw)


def oracle(change_type, payload, scn: int, rs_id: str = "0x006cf4.00056b26.0010", ssn: int = 0, **kw) -> dict:
    return ds_event(change_type, payload, read_method="oracle-cdc-logminer", scn=scn, rs_id=rs_id, ssn=ssn,
                    log_file="", row_id="AAAGYPAATAAPIC5AAB", **kw)


def postgres(change_type, payload, lsn: str, **kw) -> dict:
    return ds_event(change_type, payload, read_method="postgresql-cdc-wal", lsn=lsn, **kw)


def sqlserver(change_type, payload, lsn: str, **kw) -> dict:
    return ds_event(change_type, payload, read_method="sqlserver-cdc", lsn=lsn, **kw)


def bq_append(change_type, row: dict, csn, *, uuid: str | None = None, ts_ms: int = 1709287200000) -> dict:
    """A row of a Datastream append-mode BigQuery table (seed 000)."""
    return {**row, "datastream_metadata": {
        "uuid": uuid or str(_uuid.uuid4()), "source_timestamp": ts_ms, "change_sequence_number": csn,
        "change_type": change_type, "is_deleted": change_type.endswith("DELETE")}}


def bq_cdc(change_type, row: dict, csn=None) -> dict:
    out = {**row, "_CHANGE_TYPE": change_type}
    if csn is not None:
        out["_CHANGE_SEQUENCE_NUMBER"] = csn
    return out


def delta_version(cfg, table: str, name: str) -> int:
    """The current version of one of a table's Delta tables (-1 when it does not exist yet)."""
    p = os.path.join(cfg.table_dir(table), name)
    if not os.path.isdir(os.path.join(p, "_delta_log")):
        return -1
    return DeltaTable(p).version()


def delta_rows(cfg, table: str, name: str) -> list[dict]:
    return DeltaTable(os.path.join(cfg.table_dir(table), name)).to_pyarrow_table().to_pylist()


def values(rows: list[dict], key: str, col: str) -> dict:
    """{key value: column value} of target rows."""
    return {r[key]: r[col] for r in rows}


# Dagster marks single-run backfills and partitioned checks beta/preview; the product relies on both knowingly.
MARKS = [pytest.mark.spark,
         pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
         pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]


def run_ok(cfg, table: str):
    """One run of one table through the Dagster jobs; it must succeed with its checks passing."""
    outcome = run_table(cfg, table)
    assert outcome.ok, outcome
    return outcome


def run_batches(workdir, table: dict, batches: list, state) -> object:
    """Land each of `batches` (change records, the state expected after them) as a JSON lines file
    and run the table: after each but the last the target's `state` (rows -> comparable) is the
    batch's; the last waits (`apply.min_changes`), the fresh read shows it, then it is applied.
    Returns the table's config."""
    from cdc_assets.engine import fresh

    name = table["name"]
    cfg = write_config(workdir, [table])
    for n, (records, expected) in enumerate(batches):
        if n == len(batches) - 1:
            cfg = write_config(workdir, [{**table, "apply": {"min_changes": 10**9}}])
        land(cfg, name, f"b{n}", {"c.jsonl": jsonl(records)})
        run_ok(cfg, name)
        if n < len(batches) - 1:
            assert state(target_rows(cfg, name, source_only=False)) == expected, f"after batch {n}"
    final = batches[-1][1]
    assert state(fresh.fresh_table(cfg, cfg.table(name)).to_pylist()) == final
    cfg = write_config(workdir, [table])
    run_ok(cfg, name)
    assert state(target_rows(cfg, name, source_only=False)) == final
    return cfg
