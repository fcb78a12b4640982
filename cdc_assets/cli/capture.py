"""`cdc-assets capture`: start, stop and watch the capture of PostgreSQL source tables."""
from __future__ import annotations

import sys

from .common import add_tables, config_or_none, each_table, tables_or_none


def register(sub) -> None:
    p = sub.add_parser("capture", help="enable, disable or show the capture of PostgreSQL sources",
                       description="A table with `source: postgresql://...` is captured by cdc_assets itself. "
                                   "`enable` creates the changelog, its sequence and the trigger in schema "
                                   "cdc_assets of the source's database (capture: logical: a publication and a "
                                   "replication slot) and takes the table's base snapshot; `disable` removes every "
                                   "object enable made; `status` shows the changes waiting, the oldest one's age "
                                   "and a slot's retained WAL; `check` compares the target with the live source table "
                                   "(the matches_live_source check). Exit 1: a table failed or differs; 2: cdc.yaml is not valid, "
                                   "names no such table, or the table has no PostgreSQL source.")
    p.add_argument("action", choices=("enable", "disable", "status", "check"),
                   help="enable: start capturing (and take the base); disable: remove what enable made; "
                        "status: the changes waiting; check: the target against the live source")
    add_tables(p, "the tables (default: every table with a PostgreSQL source)")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..core.postgres import is_postgresql
    from ..engine import sources
    from ..engine.checks import live_reconciliation
    from ..engine.lock import table_lock

    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    tables = tables_or_none(cfg, args.tables)
    if tables is None:
        return 2
    if args.tables:
        others = [t.name for t in tables if not is_postgresql(t.source)]
        if others:
            print(f"cdc-assets: {cfg.path}: table {others[0]} has no postgresql:// source", file=sys.stderr)
            return 2
    tables = [t for t in tables if is_postgresql(t.source)]
    mismatched: list[str] = []  # tables whose target differs from the live source (`check`)

    def act(table) -> None:
        if args.action == "enable":
            with table_lock(cfg.table_dir(table.name)):
                done = sources.enable(table, cfg.table_dir(table.name))
            print(f"{table.name}: capture enabled; keys {', '.join(done.keys)}; base snapshot of "
                  f"{done.base_rows} rows")
        elif args.action == "disable":
            print(f"{table.name}: capture disabled; removed {'; '.join(sources.disable(table))}")
        elif args.action == "check":
            r = live_reconciliation(cfg, table)
            if not r.target_exists:
                print(f"{table.name}: no target yet: nothing to compare")
                return
            print(f"{table.name}: " + ("a truncate is pending: nothing compared" if r.truncate_pending else
                                       f"{'matches' if r.matches else 'DIFFERS FROM'} the live source: "
                                       f"{r.rows_compared} rows compared, {r.pending_keys} pending keys left out, "
                                       f"{r.mismatches} mismatches ({r.missing_rows} missing, {r.extra_rows} extra, "
                                       f"{r.differing_rows} differing)"))
            if not r.matches:
                mismatched.append(table.name)
        else:
            s = sources.status(table)
            print(f"{table.name}: " + (f"{s.waiting} changes waiting"
                                       + (f", oldest {s.oldest.total_seconds():.0f}s" if s.oldest else "")
                                       + (f"; {s.retained_wal / 2**20:.1f} MiB of WAL retained by the slot"
                                          if s.retained_wal is not None else "")
                                       if s.enabled else "capture not enabled"))

    status = each_table(tables, act)
    return 1 if mismatched else status
