"""What the warehouse says was done for a table (the `status` command; seed 001's status report)."""
from __future__ import annotations

import datetime as dt
import json

from ..core.config import Config, TableConfig
from . import delta, storage
from .errors import root_cause_of_exception
from .landing import pending_files, registered
from .tables import CHANGES, QUARANTINE, STAGING, TARGET, path


LAST_RUN = "_cdc_last_run.json"  # beside the table's Delta tables; '_' keeps Delta readers off it


def record_run(cfg: Config, table: TableConfig, ok: bool, error: str | None) -> None:
    """Note how the table's latest `run` ended, so `status` can name a failure's root cause."""
    note = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "ok": ok, "error": error}
    storage.write_bytes(storage.join(cfg.table_dir(table.name), LAST_RUN), json.dumps(note).encode("utf-8"))


def last_run(cfg: Config, table: TableConfig) -> dict | None:
    try:
        return json.loads(storage.read_bytes(storage.join(cfg.table_dir(table.name), LAST_RUN)))
    except (OSError, ValueError):
        return None


def _batch_or_none(seq: int) -> int | None:
    return seq if seq >= 0 else None


def table_status(cfg: Config, table: TableConfig) -> dict:
    table_dir = cfg.table_dir(table.name)
    batches = registered(table_dir)
    applied = delta.step_version(path(table_dir, TARGET), TARGET)
    target = delta.open_table(path(table_dir, TARGET))
    last = delta.last_commit(path(table_dir, TARGET))
    quarantine = delta.read_arrow(path(table_dir, QUARANTINE), columns=["_cdc_line"])
    out = {
        "table": table.name,
        "format": table.format,
        "batches": len(batches),
        "last_batch": batches[-1].id if batches else None,
        # The last batch each step took (0: the base snapshot); None before the first.
        "ingested_through": _batch_or_none(delta.step_version(path(table_dir, CHANGES), CHANGES)),
        "staged_through": _batch_or_none(delta.step_version(path(table_dir, STAGING), STAGING)),
        "applied_through": _batch_or_none(applied),
        "pending_files": len(pending_files(cfg.landing_dir(table.name), table_dir)),
        "rows": target.count() if target is not None else 0,
        "target_version": target.version() if target is not None else None,
        "last_run": dt.datetime.fromtimestamp(last["timestamp"] / 1000, dt.timezone.utc).isoformat(timespec="seconds")
        if last.get("timestamp") else None,
        "quarantined": quarantine.num_rows if quarantine is not None else 0,
        "last_ordering_key": None,
        "last_error": None,
    }
    note = last_run(cfg, table)
    if note is not None and not note.get("ok"):
        out["last_error"] = f"{note.get('error') or 'failed'} (run at {note.get('at')})"
    if applied >= 1:
        try:
            top = delta.query(path(table_dir, STAGING), "SELECT _cdc_order, _cdc_file, _cdc_line FROM t "
                              f"WHERE _cdc_batch_seq <= {applied} ORDER BY _cdc_order DESC LIMIT 1")
        except Exception as e:  # noqa: BLE001 - status reports a damaged table, it does not fail on it
            out["staging_unreadable"] = root_cause_of_exception(e)
            top = None
        if top is not None and top.num_rows:
            row = top.to_pylist()[0]
            out["last_ordering_key"] = row["_cdc_order"]
            out["last_change_at"] = f"{row['_cdc_file']}:{row['_cdc_line']}"
    return out
