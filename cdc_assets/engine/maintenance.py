"""Table maintenance: compaction (and optional Z-order) of the target, a trim of old batches from
`changes`, and a vacuum of the files no version within the retention needs.

What each part keeps:
- Compaction bin-packs the target's small files up to the size of the files a build writes
  (about apply.ROWS_PER_FILE rows), not Delta's 100 MB default: a MERGE rewrites every file
  that holds a touched key, so a file's size is what a small batch costs. Its commit changes
  no row (dataChange false): the batch watermark, the change feed and a BigQuery copy are
  unaffected.
- The trim deletes from `changes` the batches registered before `trim_changes_after` that the
  target already holds. `staging` keeps every batch (rebuilds and backfills start from it), and
  `tombstones` keep every deleted key's ordering key forever, so a late change older than a
  delete never brings its row back. A change re-delivered after its batch was trimmed is no
  longer recognised as a duplicate: it is staged again and, being no newer than what the target
  holds, changes nothing but the row's bookkeeping (see README).
- The vacuum removes files that no version newer than `retention` references; the versions older
  than that can no longer be read or restored.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable

from ..core.config import Config, TableConfig
from . import delta
from .apply import ROWS_PER_FILE
from .landing import batches_path
from .tables import BASE, CHANGES, HISTORY, QUARANTINE, STAGING, TARGET, TOMBSTONES, path

COMPACTION, ZORDER, VACUUM, TRIM = "compaction", "zorder", "vacuum", "trim"
MAINTENANCE_STEPS = (COMPACTION, ZORDER, VACUUM, TRIM)
MIN_FILE_BYTES = 8 * 1024 * 1024  # never aim below this, even for a table of tiny rows


@dataclasses.dataclass(frozen=True)
class Files:
    count: int
    bytes: int

    @staticmethod
    def of(dt_: DeltaTable | None) -> "Files":
        if dt_ is None:
            return Files(0, 0)
        sizes = pa.table(dt_.get_add_actions(flatten=True)).column("size_bytes")
        return Files(len(sizes), int(pc.sum(sizes).as_py() or 0))


@dataclasses.dataclass
class MaintenanceReport:
    table: str
    target_before: Files
    target_after: Files
    compacted: dict  # delta-rs' optimize figures: files added and removed, partitions optimized
    zordered_by: list[str]
    changes_trimmed_through: int | None  # the last batch whose changes the trim deleted
    changes_rows_trimmed: int
    files_vacuumed: dict[str, int]  # Delta table -> data files deleted
    retention_hours: float
    seconds: float = 0.0

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["target_before"], d["target_after"] = dataclasses.asdict(self.target_before), dataclasses.asdict(
            self.target_after)
        return d


def _props(step: str, **meta) -> CommitProperties:
    return CommitProperties(custom_metadata={"cdc.step": step, **{f"cdc.{k}": str(v) for k, v in meta.items()}})


def target_file_bytes(dt_: DeltaTable) -> int:
    """The size compaction aims at: what a build's file of ROWS_PER_FILE rows takes in this table."""
    rows = pa.table(dt_.get_add_actions(flatten=True)).column("num_records")
    files = Files.of(dt_)
    total_rows = int(pc.sum(rows).as_py() or 0)
    if not total_rows:
        return MIN_FILE_BYTES
    return max(MIN_FILE_BYTES, int(files.bytes / total_rows * ROWS_PER_FILE))


def _trim_changes(table_dir: str, applied: int, before: dt.datetime) -> tuple[int | None, int]:
    """Delete from `changes` the batches registered before `before` that the target holds."""
    ledger = delta.read_arrow(batches_path(table_dir), columns=["batch_seq", "registered_at"])
    if ledger is None:
        return None, 0
    old = [s for s, at in zip(ledger.column("batch_seq").to_pylist(), ledger.column("registered_at").to_pylist())
           if at and dt.datetime.fromisoformat(at) < before and s <= applied]
    if not old:
        return None, 0
    through = max(old)
    changes = delta.open_table(path(table_dir, CHANGES))
    if changes is None:
        return through, 0
    result = changes.delete(f"_cdc_batch_seq <= {through}", commit_properties=_props(TRIM, through_batch=through))
    return through, int(result.get("num_deleted_rows", 0))


def maintain(cfg: Config, table: TableConfig, now: dt.datetime | None = None,
             retention: float | None = None) -> MaintenanceReport:
    """One maintenance pass over `table` (the caller holds the table lock). `retention`: seconds,
    instead of the table's `maintenance.retention`."""
    t0 = dt.datetime.now(dt.timezone.utc)
    now = now or t0
    policy = table.maintenance
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    target = delta.open_table(target_path)
    before = Files.of(target)
    compacted: dict = {}
    if target is not None:
        # Compaction first, then the optional Z-order: both leave the rows and the watermark as they are.
        compacted = target.optimize.compact(target_size=target_file_bytes(target), commit_properties=_props(COMPACTION))
        if policy.zorder_by:
            target = delta.load(target_path)
            target.optimize.z_order(list(policy.zorder_by), target_size=target_file_bytes(target),
                                    commit_properties=_props(ZORDER, columns=",".join(policy.zorder_by)))
        target = delta.load(target_path)
    applied = delta.txn_version(target, TARGET)
    through, trimmed = (None, 0)
    if policy.trim_changes_after is not None and applied >= 1:
        through, trimmed = _trim_changes(table_dir, applied, now - dt.timedelta(seconds=policy.trim_changes_after))
    vacuumed = {}
    hours = (policy.retention if retention is None else retention) / 3600
    for name in (TARGET, CHANGES, STAGING, BASE, TOMBSTONES, QUARANTINE, HISTORY):
        dt_ = delta.open_table(path(table_dir, name))
        if dt_ is not None:
            vacuumed[name] = len(_vacuum(dt_, hours))
    ledger = delta.open_table(batches_path(table_dir))
    if ledger is not None:
        vacuumed["batches"] = len(_vacuum(ledger, hours))
    after = Files.of(delta.open_table(target_path))
    return MaintenanceReport(table.name, before, after, {k: v for k, v in compacted.items() if k in (
        "numFilesAdded", "numFilesRemoved", "partitionsOptimized", "totalConsideredFiles", "totalFilesSkipped")},
        list(policy.zorder_by), through, trimmed, vacuumed, round(hours, 3),
        round((dt.datetime.now(dt.timezone.utc) - t0).total_seconds(), 2))


def _vacuum(dt_: DeltaTable, hours: float) -> list[str]:
    # delta-rs takes whole hours (rounded up: never removes a file younger than asked); the
    # configuration's own floor (at least 1 h) replaces delta-rs' check against the table's
    # property, which would refuse anything below Delta's 7-day default.
    return dt_.vacuum(retention_hours=math.ceil(hours), dry_run=False, enforce_retention_duration=False,
                      commit_properties=_props(VACUUM))
