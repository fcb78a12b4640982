"""`cdc-assets maintain`: compact each table's target, trim old batches from changes and staging, vacuum."""
from __future__ import annotations

import json

from .common import add_tables, config_or_none, each_table, tables_or_none


def register(sub) -> None:
    p = sub.add_parser("maintain", help="compact targets, trim old changes and staging, vacuum old files",
                       description="For each table (or those named): compact the target's small files (and Z-order "
                                   "it when maintenance.zorder_by is set), delete from changes the applied batches "
                                   "older than maintenance.trim_changes_after, keep only each key's latest change "
                                   "of the staged batches older than maintenance.trim_staging_after, and vacuum "
                                   "the files no version "
                                   "within maintenance.retention (default 7d) needs. Changes no row. Exit 1: a "
                                   "table failed; 2: cdc.yaml is not valid or names no such table.")
    add_tables(p, "the tables to maintain (default: every table)")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--json", action="store_true", help="one JSON object per table")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..engine.lock import table_lock
    from ..engine.maintenance import maintain

    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    tables = tables_or_none(cfg, args.tables)
    if tables is None:
        return 2
    def act(table) -> None:
        with table_lock(cfg.table_dir(table.name)):
            report = maintain(cfg, table)
        print(json.dumps(report.to_json()) if args.json else summary(report))

    return each_table(tables, act)


def summary(r) -> str:
    b, a = r.target_before, r.target_after
    trimmed = "; ".join(f"{name} trimmed through batch {through} ({rows} rows)" for name, through, rows in (
        ("changes", r.changes_trimmed_through, r.changes_rows_trimmed),
        ("staging", r.staging_trimmed_through, r.staging_rows_trimmed)) if through is not None) or "nothing trimmed"
    vacuumed = sum(r.files_vacuumed.values())
    return (f"{r.table}: target {b.count} files {b.bytes / 1e6:.1f} MB -> {a.count} files {a.bytes / 1e6:.1f} MB"
            + (f", z-ordered by {', '.join(r.zordered_by)}" if r.zordered_by else "")
            + f"; {trimmed}; {vacuumed} files vacuumed (retention {r.retention_hours:g} h); {r.seconds}s")
