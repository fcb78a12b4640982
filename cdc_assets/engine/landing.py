"""The landing area and the batch ledger kept in the warehouse.

A file is complete once it has its final name: writers write under a name that
starts with '.' or '_' and rename. Each new set of complete files becomes one
batch, recorded in `<warehouse>/<TABLE>/batches` so that the warehouse alone says
what was taken, whichever Dagster instance or machine looks at it.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import time
from dataclasses import dataclass

import pyarrow as pa

from ..core.errors import OutOfOrder
from . import delta, gcs
from .table_layout import BASE, STAGING, TARGET, path

BATCH_FIELDS = (("batch_seq", "long"), ("batch_id", "string"), ("file", "string"),
                ("bytes", "long"), ("registered_at", "string"))


@dataclass(frozen=True)
class Batch:
    seq: int
    id: str
    files: tuple[str, ...]  # relative to the table's landing folder, sorted

    @staticmethod
    def id_for(seq: int) -> str:
        return f"b{seq:06d}"

    @staticmethod
    def seq_of(batch_id: str) -> int:
        return int(batch_id.lstrip("b"))


def is_done_or_next(table: str, step_path: str, step: str, batch: Batch) -> bool:
    """True when `step` already committed `batch`; raises unless `batch` is the step's next one.

    Batches commit in order: a later batch committed first would make the earlier one look
    "already committed" and its changes would be silently lost.
    """
    done = delta.step_version(step_path, step)
    if done >= batch.seq:
        return True
    if max(done, 0) < batch.seq - 1:
        raise OutOfOrder(f"table {table}: {step}: batch {batch.id} cannot go before batch "
                           f"{Batch.id_for(max(done, 0) + 1)}: materialize the batches in order")
    return False


def batches_path(table_dir: str) -> str:
    return os.path.join(table_dir, "batches")


def complete_files(landing_dir: str) -> dict[str, int]:
    """Relative path -> size of every complete file under the table's landing folder (a local
    folder, or a gs:// one: engine/gcs.py)."""
    if gcs.is_gcs(landing_dir):
        return gcs.complete_objects(landing_dir)
    out: dict[str, int] = {}
    if not os.path.isdir(landing_dir):
        return out
    for root, dirs, files in os.walk(landing_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        # os.walk does not follow a link to a folder: it is taken as a file instead, so that ingest
        # quarantines it with its reason rather than its files being skipped without a word.
        linked = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = [d for d in dirs if d not in linked]
        for f in files + linked:
            if f.startswith((".", "_")):
                continue
            full = os.path.join(root, f)
            # A link out of the landing area (or a broken one) is still taken as a file, so that
            # ingest quarantines it with its reason instead of it being skipped without a word.
            try:
                size = os.path.getsize(full)
            except OSError:
                size = 0
            out[os.path.relpath(full, landing_dir)] = size
    return out


def inside(path: str, root: str) -> bool:
    """Whether `path`, links resolved, is within `root` (an object store has no links)."""
    if gcs.is_gcs(path):
        return path.startswith(root.rstrip("/") + "/")
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


def read_file(file_path: str) -> bytes:
    """A landed file's bytes, from a local folder or a gs:// one (OSError when unreadable)."""
    if gcs.is_gcs(file_path):
        return gcs.read(file_path)
    with open(file_path, "rb") as fh:
        return fh.read()


def file_size(file_path: str) -> int:
    return gcs.size(file_path) if gcs.is_gcs(file_path) else os.path.getsize(file_path)


def registered(table_dir: str) -> list[Batch]:
    rows = delta.read_arrow(batches_path(table_dir))
    if rows is None:
        return []
    by_seq: dict[int, list] = {}
    for r in rows.to_pylist():
        by_seq.setdefault(r["batch_seq"], []).append(r["file"])
    return [Batch(s, Batch.id_for(s), tuple(sorted(f for f in fs if f))) for s, fs in sorted(by_seq.items())]


# A settled table (nothing landed that no batch took, nothing left to stage or apply) is still
# looked at in full this often: a full tick also frees what dead runs hold in the table's pool and
# adds the batch partitions a new Dagster instance lacks.
FULL_LOOK_SECONDS = 60.0
# Per table folder: the state a tick of this process last found settled, and when.
_settled: dict[str, tuple[tuple, float]] = {}


def settled(table_dir: str, landing_dir: str, base_snapshot: bool, now: float | None = None) -> bool:
    """Whether a tick may skip the table: the landing folder lists what it listed when an earlier
    tick of this process (which then looked in full) found the table settled, less than
    FULL_LOOK_SECONDS ago, and the Delta logs of the ledger, base, staging and target have no commit
    since. Costs a listing of the landing folder and a few file lookups in the logs: no Delta
    table is opened while nothing changes. Always False for an object store, whose listing is the
    cursor's (scan_landing)."""
    if gcs.is_gcs(landing_dir) or "://" in table_dir:
        return False
    now = time.time() if now is None else now
    tables = [batches_path(table_dir)] + [path(table_dir, n) for n in (BASE, STAGING, TARGET)]
    stamps = tuple(delta.log_stamp(t) for t in tables)
    state = (frozenset(complete_files(landing_dir).items()), stamps)
    seen = _settled.get(table_dir)
    if seen is not None and seen[0] == state and now - seen[1] < FULL_LOOK_SECONDS:
        return True
    _settled.pop(table_dir, None)
    batches = registered_cached(table_dir)
    taken = {f for b in batches for f in b.files}
    staged = delta.step_version_cached(path(table_dir, STAGING), STAGING)
    reached = max(staged, 0 if base_snapshot else -1)
    quiet = (all(f in taken for f, _ in state[0])  # nothing to register
             and (not batches or batches[-1].seq <= staged)  # nothing to ingest
             and (not base_snapshot or delta.step_version_cached(path(table_dir, BASE), BASE) >= 0)
             and delta.step_version_cached(path(table_dir, TARGET), TARGET) >= reached)  # nothing to apply
    if quiet:  # this tick looks in full; the next ones that find the same state skip
        _settled[table_dir] = (state, now)
    return False


_ledgers: dict[str, tuple[tuple, list[Batch]]] = {}


def registered_cached(table_dir: str) -> list[Batch]:
    """`registered`, read again only when the ledger has a commit this process has not read."""
    stamp = delta.log_stamp(batches_path(table_dir))
    seen = _ledgers.get(table_dir)
    if stamp is not None and seen is not None and seen[0] == stamp:
        return seen[1]
    batches = registered(table_dir)
    if stamp is not None and stamp == delta.log_stamp(batches_path(table_dir)):
        _ledgers[table_dir] = (stamp, batches)
    return batches


def pending_files(landing_dir: str, table_dir: str) -> dict[str, int]:
    taken = {f for b in registered(table_dir) for f in b.files}
    return {f: n for f, n in complete_files(landing_dir).items() if f not in taken}


# A sensor on an object store lists from a cursor, not the whole landing area, each tick; a full
# listing still runs this often, for an object whose name sorts before the cursor (a writer that
# is late, or names that do not follow time).
FULL_LISTING_SECONDS = 3600.0
# Objects written this long before the newest one still decide where the next listing starts, so
# a file that a writer finishes in a folder it opened a while ago is not skipped.
LOOKBACK_SECONDS = 600.0


@dataclass(frozen=True)
class ListingCursor:
    start: str | None = None  # the next incremental listing starts at this relative name
    full_at: float | None = None  # when the last full listing ran (seconds since the epoch)

    def to_json(self) -> str:
        return json.dumps({"start": self.start, "full_at": self.full_at})

    @staticmethod
    def from_json(text: str | None) -> ListingCursor:
        try:
            raw = json.loads(text) if text else {}
            return ListingCursor(raw.get("start"), raw.get("full_at"))
        except (ValueError, AttributeError):
            return ListingCursor()  # an unreadable cursor costs one full listing, nothing else


@dataclass(frozen=True)
class Scan:
    found: dict[str, int]  # relative name -> size of what this listing saw
    full: bool  # the whole landing folder was listed
    cursor: ListingCursor


def scan_landing(landing_dir: str, cursor: ListingCursor, now: float, storage_client=None) -> Scan:
    """The complete files a sensor tick looks at: a local folder whole, a gs:// one from the
    cursor on (and whole at least every FULL_LISTING_SECONDS). What was taken before is in the
    batch ledger, so a listing that sees an object again never registers it twice."""
    if not gcs.is_gcs(landing_dir):
        return Scan(complete_files(landing_dir), True, ListingCursor())
    full = cursor.start is None or cursor.full_at is None or now - cursor.full_at >= FULL_LISTING_SECONDS
    objects = gcs.list_objects(landing_dir, None if full else cursor.start, storage_client)
    start = next_listing_start(objects) if objects else cursor.start
    return Scan({o.name: o.size for o in objects}, full, ListingCursor(start, now if full else cursor.full_at))


def next_listing_start(objects: list) -> str:
    """The folder of the earliest-named object among those written within LOOKBACK_SECONDS of
    the newest write: Datastream writes a folder per minute, and files within one folder do not
    arrive in name order."""
    newest = max(o.updated for o in objects)
    recent = [o.name for o in objects if o.updated >= newest - LOOKBACK_SECONDS]
    return min(n.rsplit("/", 1)[0] + "/" if "/" in n else "" for n in recent)


def register_new_batch(landing_dir: str, table_dir: str, found: dict[str, int] | None = None) -> Batch | None:
    """Record the complete files no batch has taken as the next batch (one atomic commit);
    `found` is what a listing saw, else the whole landing folder is listed."""
    known = registered_cached(table_dir)
    taken = {f for b in known for f in b.files}
    listing = complete_files(landing_dir) if found is None else found
    new = {f: n for f, n in listing.items() if f not in taken}
    if not new:
        return None
    seq = (known[-1].seq if known else 0) + 1
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    files = sorted(new)
    rows = pa.table({
        "batch_seq": pa.array([seq] * len(files), pa.int64()),
        "batch_id": [Batch.id_for(seq)] * len(files),
        "file": files,
        "bytes": pa.array([new[f] for f in files], pa.int64()),
        "registered_at": [now] * len(files),
    }, schema=delta.arrow_schema(BATCH_FIELDS))
    delta.append(batches_path(table_dir), rows, "register", seq, {"files": len(files)})
    delta.compact_if_fragmented(batches_path(table_dir))  # one small file per batch, read by every run
    return Batch(seq, Batch.id_for(seq), tuple(files))
