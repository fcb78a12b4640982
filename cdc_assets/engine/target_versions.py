"""A target's versions, and putting a target back to one of them.

Every commit to a target is a Delta version, kept until a vacuum removes its files. Each
version says which batch the target had reached: an apply's commit records it as its Delta
transaction id (`txn`), atomically with its data, and a rebuild or a widening keeps it.

A restore is one new commit with the old version's files and that version's `txn`: the
warehouse then says the target reached the older batch, so the next apply takes every later
batch from staging again and nothing staged is lost. Staging, tombstones and the ledger stay
as they are: tombstones only ever hold a key's greatest delete, which the re-applied batches
reach again.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

import pyarrow as pa
from deltalake import CommitProperties, Transaction

from ..core.errors import TerminalError
from . import delta
from .partition_layout import RELAYOUT, is_derived_column
from .table_layout import TARGET, path

RESTORE = "restore"

# What each kind of commit is, in the words of the domain.
_KINDS = {TARGET: "apply", "rebuild": "rebuild", "widen": "widen", RESTORE: RESTORE, "compaction": "compaction",
          "zorder": "zorder", "vacuum": "vacuum", "properties": "properties",
          # an apply's own steps before its commit (engine/truncate.py)
          "truncate": "truncate", "columns": "columns",
          # a target laid out again for an empty text in a partition column (engine/partition_layout.py)
          RELAYOUT: RELAYOUT}
# The kinds of commit that applied batches, and those of maintenance: cdc_assets' own (cdc.step),
# or delta-rs' operation when another tool compacted or vacuumed the target.
APPLY_KINDS = ("first build", "build", "apply")
MAINTENANCE_KINDS = ("compaction", "zorder", "vacuum", "optimize", "vacuum start", "vacuum end")
# Commits that remove no data file; any other commit without a removed-files figure may have.
_REMOVE_NONE = ("properties", "columns", "set tblproperties", "vacuum", "vacuum start", "vacuum end")


class TargetVersionError(TerminalError, ValueError):
    """A target version, or a change feed, that is not there; the message names the table."""


class RestoreError(TargetVersionError):
    """A restore that cannot be done as asked; the message names the table and the versions there are."""


class RestoreFailed(RestoreError):
    """delta-rs refused the restore's commit (a data file vacuumed away, a run committing meanwhile)."""


@dataclasses.dataclass(frozen=True)
class TargetVersion:
    version: int
    committed_at: dt.datetime  # UTC
    kind: str  # first build, apply, rebuild, widen, restore, compaction, or delta-rs' operation name
    batch: int | None  # the last batch the target holds at this version; None before the first
    from_batch: int | None  # an apply's first batch
    rows_inserted: int | None
    rows_updated: int | None
    rows_deleted: int | None
    files_added: int | None
    files_removed: int | None
    restored_from: int | None  # a restore's source version
    retention_seconds: float | None = None  # a vacuum's retention (its VACUUM START commit's)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["committed_at"] = self.committed_at.isoformat(timespec="milliseconds")
        return d


def _int(value) -> int | None:
    return None if value in (None, "") else int(value)


def _kind(entry: dict) -> str:
    step = entry.get("cdc.step")
    if step == TARGET and entry.get("cdc.build") == "full":
        return "first build" if _int(entry.get("cdc.from_batch")) in (0, None) else "build"
    if step in _KINDS:
        return _KINDS[step]
    return str(entry.get("operation", "")).lower() or "unknown"


def _metric(metrics: dict, *names: str) -> int | None:
    for name in names:
        if name in metrics:
            return _int(metrics[name])
    return None


def _rows(metrics: dict, entry: dict, what: str) -> int | None:
    found = _metric(metrics, f"num_target_rows_{what}")
    return found if found is not None else _int(entry.get(f"cdc.rows_{what}"))


def versions(table_dir: str) -> list[TargetVersion]:
    """The target's versions, oldest first ([] without a target)."""
    dt_ = delta.open_table(path(table_dir, TARGET))
    if dt_ is None:
        return []
    out: list[TargetVersion] = []
    batch = None
    for entry in sorted(dt_.history(), key=lambda h: h["version"]):
        step = entry.get("cdc.step")
        if step in (TARGET, RESTORE):
            batch = _int(entry.get("cdc.batch_seq"))
        elif entry.get("cdc.reached") is not None:
            batch = _int(entry["cdc.reached"])
        m = entry.get("operationMetrics") or {}
        out.append(TargetVersion(
            version=int(entry["version"]),
            committed_at=dt.datetime.fromtimestamp(entry["timestamp"] / 1000, dt.UTC),
            kind=_kind(entry),
            batch=batch if batch is None or batch >= 0 else None,
            from_batch=_int(entry.get("cdc.from_batch")) if step == TARGET else None,
            # a MERGE's metrics, or the figures cdc_assets' own file rewrite records beside its step
            rows_inserted=_rows(m, entry, "inserted"),
            rows_updated=_rows(m, entry, "updated"),
            rows_deleted=_rows(m, entry, "deleted"),
            files_added=_metric(m, "num_target_files_added", "num_added_files", "numRestoredFile", "numFilesAdded"),
            files_removed=_metric(m, "num_target_files_removed", "num_removed_files", "numRemovedFile",
                                  "numFilesRemoved"),
            restored_from=_int(entry.get("cdc.restored_version")),
            retention_seconds=_retention(entry),
        ))
    return out


def _retention(entry: dict) -> float | None:
    if entry.get("operation") != "VACUUM START":
        return None
    params = entry.get("operationParameters") or {}
    millis = params.get("specifiedRetentionMillis") or params.get("defaultRetentionMillis")
    return None if millis in (None, "") else int(millis) / 1000


def oldest_readable(known: list[TargetVersion]) -> int | None:
    """The oldest of `known` versions whose files are all still there (None without a version).

    A vacuum deletes the files that commits older than its retention removed, so every version
    before the newest such commit lost files; the versions from that commit on lost none."""
    if not known:
        return None
    oldest = known[0].version
    for vacuum in known:
        if vacuum.retention_seconds is None:
            continue
        cutoff = vacuum.committed_at - dt.timedelta(seconds=vacuum.retention_seconds)
        removers = [v.version for v in known if v.version < vacuum.version and v.committed_at < cutoff
                    and (v.files_removed or (v.files_removed is None and v.kind not in _REMOVE_NONE))]
        oldest = max([oldest] + removers)
    return oldest


def version_as_of(table: str, known: list[TargetVersion], when: dt.datetime) -> int:
    """The newest version committed at or before `when`."""
    if when.tzinfo is None:
        raise RestoreError(f"table {table}: --as-of {when.isoformat()} has no time zone (add Z or +hh:mm)")
    if not known:
        raise RestoreError(f"table {table}: no target to restore (nothing applied yet)")
    earlier = [v.version for v in known if v.committed_at <= when]
    if not earlier:
        raise RestoreError(f"table {table}: no target version was committed by {when.isoformat()} "
                           f"(the first is {known[0].committed_at.isoformat()})")
    return earlier[-1]


@dataclasses.dataclass(frozen=True)
class Restored:
    table: str
    restored_from: int  # the version put back
    version: int  # the restore's own commit, the target's new version (the old one when nothing changed)
    batch: int | None  # the batch the target now holds; the next apply re-applies the later ones
    files_removed: int
    files_restored: int


def restore(table: str, table_dir: str, version: int) -> Restored:
    """Put `table`'s target back to `version`, as one new commit that records the batch it held."""
    target_path = path(table_dir, TARGET)
    current = delta.open_table(target_path)
    if current is None:
        raise RestoreError(f"table {table}: no target to restore (nothing applied yet)")
    latest = current.version()
    if not 0 <= version <= latest:
        raise RestoreError(f"table {table}: the target has no version {version} (it has 0..{latest})")
    batch = delta.txn_version(delta.load(target_path, version), TARGET)
    if version == latest:
        return Restored(table, version, latest, batch if batch >= 0 else None, 0, 0)
    meta = {"cdc.step": RESTORE, "cdc.batch_seq": str(batch), "cdc.restored_version": str(version)}
    props = CommitProperties(app_transactions=[Transaction(f"{delta.APP}.{TARGET}", batch)], custom_metadata=meta)
    try:
        # Restoring through the snapshot just read: a run committing meanwhile fails this restore
        # (a conflict) rather than have its batch silently dropped from the watermark.
        metrics = current.restore(version, commit_properties=props)
    except Exception as e:  # noqa: BLE001 - delta-rs' own text names the missing file or the conflict
        raise RestoreFailed(f"table {table}: restoring target version {version} failed: "
                           f"{str(e).strip().splitlines()[0]}") from e
    return Restored(table, version, delta.load(target_path).version(), batch if batch >= 0 else None,
                    int(metrics.get("numRemovedFile", 0)), int(metrics.get("numRestoredFile", 0)))


def changes(table: str, table_dir: str, starting_version: int, ending_version: int | None = None) -> pa.Table:
    """The target's row-level changes from `starting_version` to `ending_version` (the latest when
    None), both included, from Delta's change data feed (`change_feed: true`): each row with
    `_change_type` (insert, update_preimage, update_postimage, delete), `_commit_version` and
    `_commit_timestamp`. A first build and a rebuild record their rows as inserts and deletes
    of the files they add and remove; a relayout changes no row and records none."""
    target_path = path(table_dir, TARGET)
    dt_ = delta.open_table(target_path)
    if dt_ is None:
        raise TargetVersionError(f"table {table}: no target yet (nothing applied)")
    if (dt_.metadata().configuration or {}).get(delta.CHANGE_FEED, "false").lower() != "true":
        raise TargetVersionError(f"table {table}: the target records no change feed (set change_feed: true)")
    last = dt_.version() if ending_version is None else ending_version
    if not 0 <= starting_version <= last <= dt_.version():
        raise TargetVersionError(f"table {table}: no change feed from version {starting_version} to {last}; the "
                                 f"target's versions are 0 to {dt_.version()}")
    # delta-rs reads a feed in one schema and partitioning: the feed is read in spans between the
    # relayouts, each span in its own, and the spans' rows are put together in the newest
    relayouts = sorted(int(h["version"]) for h in dt_.history() if h.get("cdc.step") == RELAYOUT
                       and starting_version <= int(h["version"]) <= last)
    bounds = [starting_version - 1, *relayouts, last + 1]
    spans = [(lo + 1, hi - 1) for lo, hi in zip(bounds, bounds[1:]) if lo + 1 <= hi - 1]
    parts = [_feed(target_path, lo, hi) for lo, hi in spans] or \
        [_feed(target_path, relayouts[0], relayouts[0]).slice(0, 0)]
    if len(parts) == 1:
        return parts[0]
    out = pa.concat_tables(parts, promote_options="permissive")
    newest = parts[-1].column_names
    return out.select(newest + [c for c in out.column_names if c not in newest])


def _feed(target_path: str, starting_version: int, ending_version: int) -> pa.Table:
    """The feed of versions `starting_version` to `ending_version`, read in the latter's schema."""
    reader = delta.load(target_path, version=ending_version).load_cdf(starting_version=starting_version, ending_version=ending_version)
    data = pa.table(reader.read_all())
    data = data.drop_columns([c for c in data.column_names if is_derived_column(c)])
    # delta-rs hands strings over as string_view, which several pyarrow kernels (sorting) refuse
    fields = [pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type) for f in data.schema]
    return data.cast(pa.schema(fields))
