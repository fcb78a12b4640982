"""`cdc-assets rekey`: recompute the stored keys of tables an earlier release keyed, once."""
from __future__ import annotations

import json

from .common import add_tables, config_or_none, each_table, tables_or_none


def register(sub) -> None:
    p = sub.add_parser("rekey", help="recompute stored keys by the exact rule (once, after an upgrade)",
                       description="For each table (or those named) whose stored keys an earlier cdc_assets built, "
                                   "which read number-like text keys as numbers ('1.10' and '1.1' were one key): "
                                   "recompute every stored key of changes, staging and base, then rebuild the "
                                   "target, its tombstones and its history from them. A table keyed by this "
                                   "release is left as it is. A run of such a table stops before its ingest and "
                                   "names this command. Exit 1: a table failed; 2: cdc.yaml is not valid or "
                                   "names no such table.")
    add_tables(p, "the tables to rekey (default: every table)")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--json", action="store_true", help="one JSON object per table")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..engine.lock import table_lock
    from ..engine.rekey import rekey
    from ..engine.spark import choose_session

    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    tables = tables_or_none(cfg, args.tables)
    if tables is None:
        return 2
    sessions: list = []

    def spark():  # started only when a target is rebuilt
        if not sessions:
            sessions.append(choose_session(cfg.spark, cfg).session)
        return sessions[0]

    def act(table) -> None:
        with table_lock(cfg.table_dir(table.name)):
            report = rekey(spark, cfg, table)
        changed = sum(report.keys_changed.values())
        print(json.dumps(report.to_json()) if args.json else
              f"{table.name}: {changed} stored keys recomputed"
              + ("; target and tombstones rebuilt" if report.target_rebuilt else "") + f"; {report.seconds}s")

    return each_table(tables, act)
