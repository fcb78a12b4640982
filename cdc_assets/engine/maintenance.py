"""Table maintenance: compaction (and optional Z-order) of the target, trims of old batches from
`changes` and `staging`, and a vacuum of the files no version within the retention needs.

What each part keeps:
- Compaction bin-packs the target's small files up to the size of the files a build writes
  (about target_typing.ROWS_PER_FILE rows), not Delta's 100 MB default: a MERGE rewrites every file
  that holds a touched key, so a file's size is what a small batch costs. Its commit changes
  no row (dataChange false): the batch watermark, the change feed and a BigQuery copy are
  unaffected.
- The trim of `changes` deletes the batches registered before `trim_changes_after` that the
  target already holds, after copying each deleted change's identity (event id and ordering
  key) to `seen`, which ingest reads beside `changes`: a change re-delivered after its batch was
  trimmed is still a duplicate. Being no newer than what the target holds is not enough to make
  it harmless: a re-delivery arrives later, and two changes of a key with one source order rank
  by arrival, so the re-delivered loser of such a tie would win over the change that beat it.
- The trim of `staging` (the clean-up change-set pipelines run on their staging table; rules.md#tables) keeps, of
  the applied batches registered before `trim_staging_after`, only each key's latest change:
  the row every rebuild, backfill, restore and publish would pick for that key from those
  batches anyway (`_trim_staging`), but for a key with a change that leaves a column out (a TOAST
  placeholder), which keeps them all, and in a soft-delete table, whose keys keep their latest
  upsert and what ranks above it (a delete keeps that upsert's row). A key's delete stays as its
  latest change, and `tombstones` keep every deleted key's ordering key forever, so a late change
  older than a delete never brings its row back.
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

from ..core.changes import UPSERT
from ..core.config import Config, TableConfig
from ..core.values import UNSET_KEY
from . import delta
from .landing import batches_path
from .table_layout import (
    BASE,
    CHANGES,
    CHANGES_TRIM,
    HISTORY,
    QUARANTINE,
    SEEN,
    SEEN_FIELDS,
    STAGING,
    STAGING_TRIM,
    TARGET,
    TOMBSTONES,
    path,
)
from .target_typing import ROWS_PER_FILE

COMPACTION, ZORDER, VACUUM = "compaction", "zorder", "vacuum"
# Staged rows a trim examines per commit: its window of batches is read (key, batch and order
# only) and its superseded rows deleted in one MERGE, so a first trim of a long history is many
# bounded steps, each committed on its own.
TRIM_WINDOW_ROWS = 1_000_000
MIN_FILE_BYTES = 8 * 1024 * 1024  # never aim below this, even for a table of tiny rows


@dataclasses.dataclass(frozen=True)
class Files:
    count: int
    bytes: int

    @staticmethod
    def of(dt_: DeltaTable | None) -> Files:
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
    staging_trimmed_through: int | None  # the last batch of which staging keeps only each key's latest
    staging_rows_trimmed: int
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


def trimmable_through(table_dir: str, applied: int, before: dt.datetime) -> int | None:
    """The last batch a trim may take: registered before `before` and held by the target (batch
    numbers follow registration, so every batch up to it qualifies too); None when none does."""
    ledger = delta.read_arrow(batches_path(table_dir), columns=["batch_seq", "registered_at"])
    if ledger is None:
        return None
    old = [s for s, at in zip(ledger.column("batch_seq").to_pylist(), ledger.column("registered_at").to_pylist())
           if at and dt.datetime.fromisoformat(at) < before and s <= applied]
    return max(old) if old else None


def _trim_changes(table_dir: str, through: int) -> int:
    """Delete from `changes` the batches up to `through`; the rows deleted. Their event ids go
    to `seen` first, a window of batches per commit, which a trim stopped midway does not repeat."""
    changes_path = path(table_dir, CHANGES)
    changes = delta.open_table(changes_path)
    if changes is None or delta.txn_version(changes, CHANGES_TRIM) >= through:
        return 0
    seen_path = path(table_dir, SEEN)
    for start, end in _windows(changes_path, delta.step_version(seen_path, SEEN), through):
        ids = delta.select(changes_path, SEEN_FIELDS, f"_cdc_batch_seq > {start} AND _cdc_batch_seq <= {end} "
                                                      "AND _cdc_event_id IS NOT NULL")
        delta.append(seen_path, ids, SEEN, end)
        delta.compact_if_fragmented(seen_path)
    result = changes.delete(f"_cdc_batch_seq <= {through}", commit_properties=delta.commit_props(
        CHANGES_TRIM, through, {"through_batch": through}))
    return int(result.get("num_deleted_rows", 0))


def _trim_staging(table_dir: str, through: int, soft: bool = False) -> int:
    """Keep, of staging's batches up to `through`, only each key's latest change; the rows deleted.

    A deleted row is one that some change of its key in a batch up to `through` outranks. Every
    reader of staging picks, per key, the latest of a range of batches: a rebuild (batches up to
    the target's), an apply after a restore (batches after the restored version's), a publish
    (batches after the last publish). A range that ends at or past `through` still holds the
    outranking change; one that starts after it is untouched; and one that holds the deleted row
    but not the change outranking it starts after that change's batch, which then was applied
    earlier with a greater ordering key, so the deleted row never decided that range's result
    either. A range that ends before `through` is a rebuild of a target restored to a version
    older than the trim: that state is gone from staging, so the rebuild builds the whole target
    as of the last staged batch instead (target_build.build), never a partition of the older state.
    Each window of batches is one commit carrying the batch it trimmed through (STAGING_TRIM), so
    a trim stopped midway goes on from there. In a soft-delete table (`soft`) a key keeps its
    latest upsert and every change ranking above it: a delete keeps the row that upsert made."""
    staging_path = path(table_dir, STAGING)
    staging = delta.open_table(staging_path)
    done = delta.txn_version(staging, STAGING_TRIM)
    if staging is None or done >= through:
        return 0
    return sum(_trim_staging_window(staging_path, start, end, soft)
               for start, end in _windows(staging_path, done, through))


def _windows(table_path: str, done: int, through: int) -> list[tuple[int, int]]:
    """The batches after `done` up to `through` as windows (after, through] of about
    TRIM_WINDOW_ROWS rows of the table each; the last ends at `through` (none when no batch
    there has a row)."""
    counts = delta.query(table_path, "SELECT _cdc_batch_seq AS b, count(*) AS n FROM t "
                                     f"WHERE _cdc_batch_seq > {done} AND _cdc_batch_seq <= {through} GROUP BY 1 ORDER BY 1")
    windows, start, rows = [], done, 0
    batches = list(zip(counts["b"].to_pylist(), counts["n"].to_pylist())) if counts is not None else []
    for i, (b, n) in enumerate(batches):
        rows += n
        if rows < TRIM_WINDOW_ROWS and i + 1 < len(batches):
            continue
        end = through if i + 1 == len(batches) else b
        windows.append((start, end))
        start, rows = end, 0
    return windows


def _trim_staging_window(staging_path: str, after: int, through: int, soft: bool = False) -> int:
    """Delete the staged rows of batches up to `through` that a later-ranked change of their key
    in those batches outranks, looking only at the keys batches after..through staged (earlier
    batches were trimmed already: they hold one row per key)."""
    older = f"_cdc_batch_seq <= {through}"
    scope = f" AND _cdc_key IN (SELECT _cdc_key FROM t WHERE _cdc_batch_seq > {after} AND {older})" if after >= 0 else ""
    # A key with a change that leaves a column out keeps every change: a later one is combined
    # with each of them column by column (engine/combine.py).
    scope += f" AND _cdc_key NOT IN (SELECT _cdc_key FROM t WHERE _cdc_row LIKE '%{UNSET_KEY}%')"
    staging = delta.load(staging_path)
    # a key's change is named by its key, batch and ordering key (a batch may stage several of a key)
    if soft:  # below the key's latest upsert (a truncate, which has none, stays)
        outranked = f"_cdc_order < max(CASE WHEN _cdc_op = '{UPSERT}' THEN _cdc_order END) OVER (PARTITION BY _cdc_key)"
    else:
        outranked = "row_number() OVER (PARTITION BY _cdc_key ORDER BY _cdc_order DESC) > 1"
    losers = delta.query(staging, (
        "SELECT _cdc_key, _cdc_batch_seq, _cdc_order FROM (SELECT _cdc_key, _cdc_batch_seq, _cdc_order, "
        f"{outranked} AS gone FROM t WHERE {older}{scope}) WHERE gone"))
    losers = losers.cast(delta.arrow_schema((("_cdc_key", "string"), ("_cdc_batch_seq", "long"),
                                             ("_cdc_order", "string"))))
    props = delta.commit_props(STAGING_TRIM, through, {"through_batch": through, "rows_trimmed": losers.num_rows})
    if losers.num_rows == 0:
        # nothing to delete: a commit of the mark alone spares the next trim these batches
        staging.create_write_transaction([], mode="append", schema=staging.schema(), commit_properties=props)
        return 0
    bounds = pc.min_max(losers["_cdc_batch_seq"]).as_py()
    result = staging.merge(losers, "t._cdc_key = s._cdc_key AND t._cdc_batch_seq = s._cdc_batch_seq AND "
                                   "t._cdc_order = s._cdc_order AND "
                                   f"t._cdc_batch_seq >= {bounds['min']} AND t._cdc_batch_seq <= {bounds['max']}",
                           source_alias="s", target_alias="t", commit_properties=props) \
        .when_matched_delete().execute()
    return int(result.get("num_target_rows_deleted", 0))


def maintain(cfg: Config, table: TableConfig, now: dt.datetime | None = None,
             retention: float | None = None) -> MaintenanceReport:
    """One maintenance pass over `table` (the caller holds the table lock). `retention`: seconds,
    instead of the table's `maintenance.retention`."""
    t0 = dt.datetime.now(dt.UTC)
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
    trims = {}
    for table_name, after, trim in ((CHANGES, policy.trim_changes_after, _trim_changes),
                                    (STAGING, policy.trim_staging_after,
                                     lambda d, t: _trim_staging(d, t, table.soft_deletes))):
        through = trimmable_through(table_dir, applied, now - dt.timedelta(seconds=after)) \
            if after is not None and applied >= 1 else None
        trims[table_name] = (through, trim(table_dir, through) if through is not None else 0)
    vacuumed = {}
    hours = (policy.retention if retention is None else retention) / 3600
    for name in (TARGET, CHANGES, SEEN, STAGING, BASE, TOMBSTONES, QUARANTINE, HISTORY):
        dt_ = delta.open_table(path(table_dir, name))
        if dt_ is not None:
            vacuumed[name] = len(_vacuum(dt_, hours))
    ledger = delta.open_table(batches_path(table_dir))
    if ledger is not None:
        vacuumed["batches"] = len(_vacuum(ledger, hours))
    target_after = Files.of(delta.open_table(target_path))
    return MaintenanceReport(table.name, before, target_after, {k: v for k, v in compacted.items() if k in (
        "numFilesAdded", "numFilesRemoved", "partitionsOptimized", "totalConsideredFiles", "totalFilesSkipped")},
        list(policy.zorder_by), *trims[CHANGES], *trims[STAGING], vacuumed, round(hours, 3),
        round((dt.datetime.now(dt.UTC) - t0).total_seconds(), 2))


def _vacuum(dt_: DeltaTable, hours: float) -> list[str]:
    # delta-rs takes whole hours (rounded up: never removes a file younger than asked); the
    # configuration's own floor (at least 1 h) replaces delta-rs' check against the table's
    # property, which would refuse anything below Delta's 7-day default. A full vacuum lists the
    # table's folder, so the files a killed write left, which no log entry names, go too.
    return dt_.vacuum(retention_hours=math.ceil(hours), dry_run=False, enforce_retention_duration=False,
                      commit_properties=_props(VACUUM), full=True)
