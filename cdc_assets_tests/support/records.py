"""Small builders for change records in each format, as their writers produce them."""
from __future__ import annotations

import uuid as _uuid

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
    """A row of a Datastream append-mode BigQuery table (rules.md#bigquery-append)."""
    return {**row, "datastream_metadata": {
        "uuid": uuid or str(_uuid.uuid4()), "source_timestamp": ts_ms, "change_sequence_number": csn,
        "change_type": change_type, "is_deleted": change_type.endswith("DELETE")}}


def bq_cdc(change_type, row: dict, csn=None) -> dict:
    out = {**row, "_CHANGE_TYPE": change_type}
    if csn is not None:
        out["_CHANGE_SEQUENCE_NUMBER"] = csn
    return out
