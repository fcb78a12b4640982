"""`cdc-assets status --config PATH`: per table, what has been applied and what waits."""
from __future__ import annotations

import json

from .common import config_or_none

COLUMNS = (("table", "table"), ("batches", "batches"), ("applied_through", "applied"), ("pending_files", "pending files"),
           ("rows", "rows"), ("quarantined", "quarantined"), ("last_run", "last run (UTC)"),
           ("last_change_at", "last change applied (file:line)"), ("last_error", "last run failed with"))


def register(sub) -> None:
    p = sub.add_parser("status", help="per table: batches, last applied, rows, pending files, quarantine",
                       description="Per table: batches registered, the last batch applied, pending files, rows, "
                                   "the quarantine count, the last run and, when it failed, its root cause.")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--json", action="store_true", help="one JSON object per table")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..engine.status import table_status

    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    rows = [table_status(cfg, t) for t in cfg.tables]
    for r in rows:
        if r.get("staging_unreadable"):
            r["last_change_at"] = f"staging unreadable: {r['staging_unreadable']}"
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    cells = [[h for _, h in COLUMNS]] + [[_cell(k, r.get(k)) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())
    return 0


def _cell(key: str, value) -> str:
    if value is None:
        return "none" if key == "applied_through" else ""  # nothing applied yet, not batch -1
    return str(value)
