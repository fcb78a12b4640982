"""`cdc-assets history TABLE` and `cdc-assets restore TABLE`: a target's versions, and putting
a target back to one of them."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from .common import config_or_none, table_or_none

HISTORY_COLUMNS = (("version", "version"), ("committed_at", "committed (UTC)"), ("kind", "commit"),
                   ("batch", "batch reached"), ("rows_inserted", "inserted"), ("rows_updated", "updated"),
                   ("rows_deleted", "deleted"), ("files_added", "files +"), ("files_removed", "files -"),
                   ("restored_from", "restored from"))
LOCK_SECONDS = 60.0


def _table_command(sub, name: str, help_: str, description: str, func):
    p = sub.add_parser(name, help=help_, description=description)
    p.add_argument("table", help="the table's name in cdc.yaml")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.set_defaults(func=func)
    return p


def register(sub) -> None:
    p = _table_command(sub, "history", "a table's target versions and the batch each reached",
                       "List the versions of a table's target, oldest first: when each was committed, "
                       "what committed it (first build, apply, rebuild, widen, restore), the last batch "
                       "it holds, and the rows and files it changed. Any version listed can be read "
                       "(deltalake.DeltaTable(path, version=N)) or restored until a vacuum removes its "
                       "files. Exit 2: cdc.yaml is not valid or names no such table.", history)
    p.add_argument("--json", action="store_true", help="one JSON object per version")

    p = _table_command(sub, "restore", "put a table's target back to an earlier version",
                       "Put a table's target back to an earlier version, as one new commit that records "
                       "the batch that version held. Nothing staged is lost: the next run re-applies "
                       "every later batch from staging. Exit 0: restored (or already there); 1: the "
                       "restore failed (a missing file, a run committing at the same time); 2: cdc.yaml "
                       "is not valid, names no such table, or the version does not exist.", restore)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--version", type=int, help="the target version to put back (see `cdc-assets history`)")
    when.add_argument("--as-of", dest="as_of", type=_instant,
                      help="the newest version committed at or before this time, ISO 8601 with a zone "
                           "(2026-11-24T09:30:00Z)")


def _instant(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None


def history(args) -> int:
    from ..engine.target_versions import versions

    cfg = config_or_none(args.config)
    table = table_or_none(cfg, args.table) if cfg else None
    if cfg is None or table is None:
        return 2
    rows = [v.to_json() for v in versions(cfg.table_dir(table.name))]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    if not rows:
        print(f"{table.name}: no target yet (nothing applied)")
        return 0
    cells = [[h for _, h in HISTORY_COLUMNS]] + [["" if r[k] is None else str(r[k]) for k, _ in HISTORY_COLUMNS]
                                                 for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HISTORY_COLUMNS))]
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())
    return 0


def restore(args) -> int:
    from ..engine import target_versions
    from ..engine.lock import table_lock

    cfg = config_or_none(args.config)
    table = table_or_none(cfg, args.table) if cfg else None
    if cfg is None or table is None:
        return 2
    table_dir = cfg.table_dir(table.name)
    try:
        with table_lock(table_dir, timeout=LOCK_SECONDS):
            version = args.version
            if args.as_of is not None:
                version = target_versions.version_as_of(table.name, target_versions.versions(table_dir), args.as_of)
            done = target_versions.restore(table.name, table_dir, version)
    except target_versions.RestoreError as e:
        print(f"cdc-assets: {e}", file=sys.stderr)
        return 1 if isinstance(e, target_versions.RestoreFailed) else 2
    except TimeoutError:
        print(f"cdc-assets: table {table.name}: a run holds the table; restore after it ends", file=sys.stderr)
        return 1
    if done.version == done.restored_from:
        print(f"{table.name}: target is at version {done.version} already (batch {done.batch}); nothing restored")
        return 0
    print(f"{table.name}: target version {done.restored_from} restored as version {done.version} "
          f"(batch {done.batch}; {done.files_removed} files removed, {done.files_restored} restored); "
          f"the next run re-applies the batches after {done.batch}")
    return 0
