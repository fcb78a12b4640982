"""`cdc-assets status --config PATH`: per table, what has been applied and what waits."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.apply_policy import format_duration
from .common import config_or_none

if TYPE_CHECKING:
    from ..engine.status import TableStatus


def _plain(field: str) -> Callable[[TableStatus], str]:
    return lambda r: "" if getattr(r, field) is None else str(getattr(r, field))


def _applied(r: TableStatus) -> str:
    return "none" if r.applied_through is None else str(r.applied_through)  # not batch -1


def _pending(r: TableStatus) -> str:
    if r.pending_changes is None:
        return ""
    age = r.oldest_pending_age_seconds
    return f"{r.pending_changes}" + (f", oldest {_duration(age)}" if r.pending_changes and age is not None else "")


def _policy(r: TableStatus) -> str:
    parts = ([f"min {r.min_changes}"] if r.min_changes is not None else []) + \
        ([f"max {format_duration(r.max_staleness_seconds)}"] if r.max_staleness_seconds is not None else [])
    return ", ".join(parts) or "every batch"


def _within(r: TableStatus) -> str:
    return "" if r.within_max_staleness is None else "yes" if r.within_max_staleness else "NO"


def _files(r: TableStatus) -> str:
    return f"{r.target_files} ({_bytes(r.target_bytes)})" if r.versions_kept else ""


def _versions(r: TableStatus) -> str:
    return f"{r.versions_kept} (from v{r.oldest_readable_version})" if r.versions_kept else ""


def _rows(r: TableStatus) -> str:
    """The live rows, and the rows a soft-delete table keeps flagged deleted when it has any."""
    return str(r.rows) + (f" (+{r.soft_deleted_rows} soft-deleted)" if r.soft_deleted_rows else "")


def _retention(r: TableStatus) -> str:
    """Files kept (maintenance.retention), then the trims' settings when set."""
    trims = [f"{name} {format_duration(after)}" for name, after in (
        ("changes", r.trim_changes_after_seconds), ("staging", r.trim_staging_after_seconds)) if after is not None]
    return format_duration(r.retention_seconds) + (f"; trim {', '.join(trims)}" if trims else "")


# (header, cell): the important fields in compact columns; --json has every field.
COLUMNS = (("table", _plain("table")), ("batches", _plain("batches")), ("applied", _applied),
           ("pending files", _plain("pending_files")), ("pending changes", _pending), ("apply", _policy),
           ("within max_staleness", _within), ("rows", _rows), ("files (size)", _files),
           ("versions", _versions), ("retention", _retention), ("quarantined", _plain("quarantined")),
           ("last run (UTC)", _plain("last_run")),
           ("last change applied (file:line)", _plain("last_change_at")),
           ("last run failed with", _plain("last_error")))


def register(sub) -> None:
    p = sub.add_parser("status", help="per table: batches, last applied, pending changes, size, versions, quarantine",
                       description="Per table: batches registered, the last batch applied, pending files, pending "
                                   "changes and the oldest one's wait, the apply policy and whether the table is "
                                   "within its max_staleness, the target's rows, files, bytes and versions, the "
                                   "retention settings (maintenance.retention, and the trims' when set), the "
                                   "quarantine count, the last run and, when it failed, its root cause. --json "
                                   "adds the last apply, the last maintenance and how far the trims went.")
    p.add_argument("--config", default="cdc.yaml", help="path of cdc.yaml (default ./cdc.yaml)")
    p.add_argument("--json", action="store_true", help="one JSON object per table")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..engine.status import table_status

    cfg = config_or_none(args.config)
    if cfg is None:
        return 2
    rows = [table_status(cfg, t) for t in cfg.tables]
    rows = [dataclasses.replace(r, last_change_at=f"staging unreadable: {r.staging_unreadable}")
            if r.staging_unreadable else r for r in rows]
    if args.json:
        for r in rows:
            print(json.dumps(r.to_json()))
        return 0
    cells = [[h for h, _ in COLUMNS]] + [[cell(r) for _, cell in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())
    return 0


def _duration(seconds: float) -> str:
    """An age in its largest whole unit, as a person reads it (90 s: 1m)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _bytes(n: float) -> str:
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} TiB"
