"""What the warehouse says was done for a table (the `status` command)."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

from ..core.apply_policy import format_duration
from ..core.config import Config, TableConfig
from ..core.figures import Figures
from ..core.target import DELETED
from . import delta, fresh, replay, storage
from .errors import root_cause_of_exception
from .landing import pending_files, registered
from .table_layout import CHANGES, CHANGES_TRIM, STAGING, STAGING_TRIM, TARGET, path
from .target_versions import APPLY_KINDS, MAINTENANCE_KINDS, oldest_readable, versions

LAST_RUN = "_cdc_last_run.json"  # beside the table's Delta tables; '_' keeps Delta readers off it


def record_run(cfg: Config, table: TableConfig, ok: bool, error: str | None) -> None:
    """Note how the table's latest `run` ended, so `status` can name a failure's root cause."""
    note = {"at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "ok": ok, "error": error}
    storage.write_bytes(storage.join(cfg.table_dir(table.name), LAST_RUN), json.dumps(note).encode("utf-8"))


def last_run(cfg: Config, table: TableConfig) -> dict | None:
    try:
        return json.loads(storage.read_bytes(storage.join(cfg.table_dir(table.name), LAST_RUN)))
    except (OSError, ValueError):
        return None


def _batch_or_none(seq: int) -> int | None:
    return seq if seq >= 0 else None


def _iso(when: dt.datetime | None) -> str | None:
    return when.isoformat(timespec="seconds") if when is not None else None


def apply_policy(table: TableConfig) -> dict:
    """The table's `apply:` settings: when its pending changes are merged."""
    policy = table.apply
    words = [f"min_changes {policy.min_changes}"] if policy.min_changes is not None else []
    if policy.max_staleness is not None:
        words.append(f"max_staleness {format_duration(policy.max_staleness)}")
    return {"apply_policy": ", ".join(words) or "every batch", "min_changes": policy.min_changes,
            "max_staleness_seconds": policy.max_staleness}


def maintenance_settings(table: TableConfig, table_dir: str) -> dict:
    """The table's retention settings (`maintenance:`, seconds; None: kept) and how far its trims went."""
    policy = table.maintenance
    return {"retention_seconds": policy.retention, "trim_changes_after_seconds": policy.trim_changes_after,
            "trim_staging_after_seconds": policy.trim_staging_after,
            "changes_trimmed_through": _batch_or_none(delta.step_version(path(table_dir, CHANGES), CHANGES_TRIM)),
            "staging_trimmed_through": _batch_or_none(delta.step_version(path(table_dir, STAGING), STAGING_TRIM))}


@dataclasses.dataclass(frozen=True)
class Freshness(Figures):
    """What waits for the next merge (staged, not merged); every field None: unknown."""
    pending_changes: int | None = None
    pending_batches: int | None = None  # the base snapshot counts as batch 0
    oldest_pending_at: str | None = None
    oldest_pending_age_seconds: float | None = None
    apply_decision: str | None = None  # why the next run merges or waits; None when nothing waits
    within_max_staleness: bool | None = None  # None: no max_staleness; True when nothing waits


def freshness(cfg: Config, table: TableConfig, now: dt.datetime | None = None) -> Freshness:
    """What waits for the next merge, and whether the table is within its max_staleness: the
    oldest pending batch has waited less than that. Reads the Delta logs and the pending batches'
    statistics."""
    now = now or dt.datetime.now(dt.UTC)
    decision, p = fresh.decision(cfg, table, now)
    wait = p.oldest_wait(now)
    limit = table.apply.max_staleness
    return Freshness(
        pending_changes=p.changes,
        pending_batches=max(p.reached - p.applied, 0),
        oldest_pending_at=_iso(p.oldest_registered_at),
        oldest_pending_age_seconds=round(wait, 1) if wait is not None else None,
        apply_decision=decision.reason if p.reached > p.applied else None,
        within_max_staleness=None if limit is None else wait is None or wait < limit,
    )


def target_log(table_dir: str) -> dict:
    """The target's size and versions from its Delta log alone (no data file is read): rows,
    files and bytes of the current version, the versions the log keeps and the oldest of them
    still readable, and the last apply and maintenance commits."""
    target = delta.open_table(path(table_dir, TARGET))
    files, size, rows = delta.file_stats(target)
    known = versions(table_dir)
    applied = next((v for v in reversed(known) if v.kind in APPLY_KINDS), None)
    maintained = next((v for v in reversed(known) if v.kind in MAINTENANCE_KINDS), None)
    return {
        "rows": rows, "target_files": files, "target_bytes": size,
        "target_version": target.version() if target is not None else None,
        "versions_kept": len(known), "oldest_readable_version": oldest_readable(known),
        "last_commit_at": _iso(known[-1].committed_at) if known else None,
        "last_apply_at": _iso(applied.committed_at) if applied else None,
        "last_apply_batch": applied.batch if applied else None,
        "last_maintenance_at": _iso(maintained.committed_at) if maintained else None,
    }


@dataclasses.dataclass(frozen=True)
class TargetFigures(Figures):
    """What a target materialization carries besides the apply's own figures (defs/table_assets.py)."""
    pending_changes: int | None
    oldest_pending_age_seconds: float | None
    within_max_staleness: bool | None
    target_files: int
    target_bytes: int


def target_metadata(cfg: Config, table: TableConfig) -> TargetFigures:
    """The target's figures for Dagster's UI: what waits, its files and bytes; from the current
    version's Delta log and the pending batches' statistics only, so every materialization can
    afford them. The versions the log keeps are counted by reading every commit, a cost that grows
    with each batch: maintenance, which changes them, reports them (versions_figures)."""
    waits = freshness(cfg, table)
    files, size, _ = delta.file_stats(delta.snapshot(path(cfg.table_dir(table.name), TARGET)))
    return TargetFigures(
        pending_changes=waits.pending_changes, oldest_pending_age_seconds=waits.oldest_pending_age_seconds,
        within_max_staleness=waits.within_max_staleness, target_files=files, target_bytes=size)


def versions_figures(table_dir: str) -> dict:
    """How many target versions the log keeps and the oldest still readable (every commit read)."""
    known = versions(table_dir)
    return {"versions_kept": len(known), "oldest_readable_version": oldest_readable(known)}


@dataclasses.dataclass(frozen=True)
class TableStatus:
    """One table's status (`cdc-assets status`); `to_json()` is its `--json` object."""
    table: str
    format: str
    batches: int
    last_batch: str | None
    # The last batch each step took (0: the base snapshot); None before the first.
    ingested_through: int | None
    staged_through: int | None
    applied_through: int | None
    pending_files: int
    rows: int  # the live rows (a soft-delete table's flagged rows are soft_deleted_rows)
    target_version: int | None
    last_run: str | None
    quarantined: int
    last_ordering_key: str | None
    last_change_at: str | None  # file:line of the last change applied
    last_error: str | None  # the root cause of the last run's failure
    target_files: int
    target_bytes: int
    versions_kept: int
    oldest_readable_version: int | None
    last_apply_at: str | None
    last_apply_batch: int | None
    last_maintenance_at: str | None
    apply_policy: str
    min_changes: int | None
    max_staleness_seconds: float | None
    retention_seconds: float
    trim_changes_after_seconds: float | None
    trim_staging_after_seconds: float | None
    changes_trimmed_through: int | None
    staging_trimmed_through: int | None
    staging_unreadable: str | None  # why staging could not be read (None: it could; then no JSON field)
    pending_changes: int | None
    pending_batches: int | None
    oldest_pending_at: str | None
    oldest_pending_age_seconds: float | None
    apply_decision: str | None
    within_max_staleness: bool | None
    soft_deleted_rows: int

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        if self.staging_unreadable is None:
            del out["staging_unreadable"]
        return out


def table_status(cfg: Config, table: TableConfig, now: dt.datetime | None = None) -> TableStatus:
    """One table's status (`cdc-assets status`): `now` is when pending batches' ages are taken."""
    table_dir = cfg.table_dir(table.name)
    batches = registered(table_dir)
    applied = delta.step_version(path(table_dir, TARGET), TARGET)
    log = target_log(table_dir)
    in_quarantine = replay.figures(cfg, table).records  # what no replay took
    unreadable = None
    try:
        waits = freshness(cfg, table, now)
    except Exception as e:  # noqa: BLE001 - status reports a damaged table, it does not fail on it
        unreadable = root_cause_of_exception(e)
        waits = Freshness()  # unknown, and every object keeps the same fields
    soft_deleted = 0
    if table.soft_deletes and log["rows"]:
        # `rows` counts the live rows; the rows kept for deleted keys (rules.md#rule-12) are counted apart
        flagged = delta.query(path(table_dir, TARGET), f"SELECT count(*) AS n FROM t WHERE {DELETED}")
        soft_deleted = int(flagged.column("n")[0].as_py()) if flagged is not None else 0
    note = last_run(cfg, table)
    last_error = f"{note.get('error') or 'failed'} (run at {note.get('at')})" \
        if note is not None and not note.get("ok") else None
    last_ordering_key = last_change_at = None
    if applied >= 1:
        try:
            top = delta.query(path(table_dir, STAGING), "SELECT _cdc_order, _cdc_file, _cdc_line, _cdc_batch FROM t "
                              f"WHERE _cdc_batch_seq <= {applied} ORDER BY _cdc_order DESC LIMIT 1")
        except Exception as e:  # noqa: BLE001 - status reports a damaged table, it does not fail on it
            unreadable = root_cause_of_exception(e)
            top = None
        if top is not None and top.num_rows:
            row = top.to_pylist()[0]
            last_ordering_key = row["_cdc_order"]
            # a snapshot's delete comes from no line: the key was absent from its batch's export
            last_change_at = f"{row['_cdc_file']}:{row['_cdc_line']}" if row["_cdc_file"] is not None \
                else f"{row['_cdc_batch']}: a key absent from its export"
    return TableStatus(
        table=table.name,
        format=table.format,
        batches=len(batches),
        last_batch=batches[-1].id if batches else None,
        ingested_through=_batch_or_none(delta.step_version(path(table_dir, CHANGES), CHANGES)),
        staged_through=_batch_or_none(delta.step_version(path(table_dir, STAGING), STAGING)),
        applied_through=_batch_or_none(applied),
        pending_files=len(pending_files(cfg.landing_dir(table.name), table_dir)),
        rows=log["rows"] - soft_deleted,
        target_version=log["target_version"],
        last_run=log["last_commit_at"],
        quarantined=in_quarantine,
        last_ordering_key=last_ordering_key,
        last_change_at=last_change_at,
        last_error=last_error,
        **{k: log[k] for k in ("target_files", "target_bytes", "versions_kept", "oldest_readable_version",
                               "last_apply_at", "last_apply_batch", "last_maintenance_at")},
        **apply_policy(table),
        **maintenance_settings(table, table_dir),
        staging_unreadable=unreadable,
        **dataclasses.asdict(waits),
        soft_deleted_rows=soft_deleted,
    )
