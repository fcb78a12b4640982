"""What the asset checks measure, read straight from the warehouse's Delta tables."""
from __future__ import annotations

import os

import pyarrow.compute as pc

from ..core import reconcile
from ..core.config import Config, TableConfig
from ..core.formats import parse_snapshot
from . import delta
from .tables import CHANGES, QUARANTINE, STAGING, TARGET, path


def key_uniqueness(cfg: Config, table: TableConfig) -> dict:
    data = delta.read_arrow(path(cfg.table_dir(table.name), TARGET), columns=["_cdc_key"])
    if data is None:
        return {"rows": 0, "duplicate_keys": 0, "sample_duplicate_keys": []}
    counts = data.group_by("_cdc_key").aggregate([("_cdc_key", "count")])
    dupes = counts.filter(pc.greater(counts["_cdc_key_count"], 1))
    return {"rows": data.num_rows, "duplicate_keys": dupes.num_rows,
            "sample_duplicate_keys": dupes["_cdc_key"].to_pylist()[:10]}


def _rows_of_batch(table_path: str, batch_seq: int) -> int:
    data = delta.read_arrow(table_path, columns=["_cdc_batch_seq"])
    if data is None:
        return 0
    return pc.sum(pc.equal(data["_cdc_batch_seq"], batch_seq)).as_py() or 0


def batch_accounting(cfg: Config, table: TableConfig, batch_seq: int) -> dict:
    """Every record of a batch is a distinct change, a duplicate or quarantined; every
    distinct change is staged or superseded within the batch; the counts must add up."""
    table_dir = cfg.table_dir(table.name)
    ingest = delta.step_commit(path(table_dir, CHANGES), CHANGES, batch_seq)
    staged = delta.step_commit(path(table_dir, STAGING), STAGING, batch_seq)
    if ingest is None or staged is None:
        return {"complete": False}
    n = {k: int(v) for k, v in ingest.items() if v.isdigit()}
    s = {k: int(v) for k, v in staged.items() if v.isdigit()}
    figures = {
        "records_read": n["records_read"],
        "changes_new": _rows_of_batch(path(table_dir, CHANGES), batch_seq),
        "duplicates_skipped": n["duplicates_skipped"],
        "quarantined": _rows_of_batch(path(table_dir, QUARANTINE), batch_seq),
        "staged": _rows_of_batch(path(table_dir, STAGING), batch_seq),
        "superseded_in_batch": s["superseded_in_batch"],
    }
    figures["complete"] = True
    figures["adds_up"] = (
        figures["records_read"] == figures["changes_new"] + figures["duplicates_skipped"] + figures["quarantined"]
        and figures["changes_new"] == figures["staged"] + figures["superseded_in_batch"]
    )
    return figures


def read_export(export_path: str, keys) -> tuple[list[dict], list]:
    """The export's rows, and the lines that could not be read (reported, never skipped silently)."""
    if export_path.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(export_path).to_pylist(), []
    with open(export_path, "rb") as fh:
        data = fh.read()
    items = list(parse_snapshot(list(keys), os.path.basename(export_path), data))
    return [c.row for c in items if hasattr(c, "row")], [c for c in items if not hasattr(c, "row")]


def reconciliation(cfg: Config, table: TableConfig) -> dict:
    target = delta.read_arrow(path(cfg.table_dir(table.name), TARGET))
    rows = target.to_pylist() if target is not None else []
    source, unreadable = read_export(table.reconcile_with, table.keys)
    report = reconcile.compare(rows, source, table.keys)
    report["unreadable_source_rows"] = len(unreadable)
    report["sample_unreadable_source_rows"] = [f"line {r.line}: {r.reason}" for r in unreadable[:5]]
    return report

