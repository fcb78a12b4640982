"""The landing area and the batch ledger kept in the warehouse.

A file is complete once it has its final name: writers write under a name that
starts with '.' or '_' and rename. Each new set of complete files becomes one
batch, recorded in `<warehouse>/<TABLE>/batches` so that the warehouse alone says
what was taken, whichever Dagster instance or machine looks at it.

A file is taken as content, not as a name: the ledger records, with each file a batch took, its
size, its stamp (a local file's write time, an object's content hash) and a digest of the bytes
taken (their first and last DIGEST_BLOCK bytes). A listing gives size and stamp; only a file whose
size or stamp moved is read again, and only those blocks: the same digest over the bytes taken
before, with more after, is an append, of which the next batch takes only the new lines (a file
of lines that is neither compressed nor an export: `core.formats.appendable`); any other change is
a replaced file, which the next batch takes whole.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from ..core.errors import OutOfOrder
from . import delta, gcs
from .table_layout import BASE, STAGING, TARGET, path

BATCH_FIELDS = (("batch_seq", "long"), ("batch_id", "string"), ("file", "string"),
                ("bytes", "long"), ("registered_at", "string"),
                # what the batch took of the file (its bytes from `start` on, after `lines_before`
                # lines), how it was found (null: a new name; APPENDED; REPLACED), and what later
                # listings compare the file with
                ("start", "long"), ("lines_before", "long"), ("taken_as", "string"),
                ("stamp", "string"), ("digest", "string"))
APPENDED, REPLACED = "appended", "replaced"
# a replay of quarantined records names the files it reads again; it takes nothing new of them
REPLAYED = "replayed"
DIGEST_BLOCK = 8192


@dataclass(frozen=True)
class Landed:
    """A complete file as a listing sees it."""
    size: int
    stamp: str | None = None  # a local file's write time (ns), an object's content hash; None: unknown


@dataclass(frozen=True)
class Part:
    """What a batch took of one file: its bytes from `start` to `end`, which follow `lines_before`
    lines; and the file as it was then (`stamp`, `digest`)."""
    file: str
    start: int = 0
    end: int | None = None  # None: to the end of the file
    lines_before: int = 0
    taken_as: str | None = None  # None: a name no batch took before; APPENDED; REPLACED
    stamp: str | None = None
    digest: str | None = None


@dataclass(frozen=True)
class Batch:
    seq: int
    id: str
    files: tuple[str, ...]  # relative to the table's landing folder, sorted
    parts: tuple[Part, ...] = ()  # what the batch took of each file (a file not listed here: all of it)

    @staticmethod
    def id_for(seq: int) -> str:
        return f"b{seq:06d}"

    @staticmethod
    def seq_of(batch_id: str) -> int:
        return int(batch_id.lstrip("b"))

    def part(self, file: str) -> Part:
        return next((p for p in self.parts if p.file == file), Part(file))

    def taken_as(self) -> str:
        """How the batch's files were found beyond new names ('1 file appended, 1 replaced'), or ''."""
        counts = [(n, kind) for kind in (APPENDED, REPLACED) if (n := sum(p.taken_as == kind for p in self.parts))]
        said = [f"{n} {'file' if n == 1 else 'files'} {kind}" if i == 0 else f"{n} {kind}"
                for i, (n, kind) in enumerate(counts)]
        return ", ".join(said)


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


def complete_files(landing_dir: str, notes: list[str] | None = None) -> dict[str, Landed]:
    """Relative path -> size and stamp of every complete file under the table's landing folder (a
    local folder, or a gs:// one: engine/gcs.py). `notes`: gets a line for each entry that is
    no regular file (a FIFO, a socket, a device), which is skipped: reading it would block the run."""
    if gcs.is_gcs(landing_dir):
        return {o.name: Landed(o.size, o.stamp) for o in gcs.list_objects(landing_dir)}
    out: dict[str, Landed] = {}
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
            rel = escaped_name(os.path.relpath(full, landing_dir))
            # A link out of the landing area (or a broken one) is still taken as a file, so that
            # ingest quarantines it with its reason instead of it being skipped without a word.
            try:
                st = os.stat(full)
            except OSError:
                out[rel] = Landed(0)
                continue
            if stat.S_ISDIR(st.st_mode):
                out[rel] = Landed(0)  # a link to a folder: quarantined once, whatever its folder gains
            elif stat.S_ISREG(st.st_mode):
                out[rel] = Landed(st.st_size, str(st.st_mtime_ns))
            elif notes is not None:
                notes.append(f"skipped {rel}: {_kind(st.st_mode)}, not a regular file (it is never read)")
    return out


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")


def escaped_name(rel: str) -> str:
    """A landed name as the ledger and the quarantine hold it: a name whose bytes are not UTF-8
    (Python keeps them as surrogates) with those bytes as \\x escapes, so that it can be recorded
    and named; ingest finds no file by that name and quarantines it (`undecodable_name`)."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def undecodable_name(file_path: str) -> bool:
    """Whether `file_path` is the escaped form of a landed file whose name is not UTF-8."""
    import codecs

    if "\\x" not in file_path or gcs.is_gcs(file_path) or os.path.lexists(file_path):
        return False
    try:
        return os.path.lexists(codecs.escape_decode(file_path.encode("utf-8"))[0])
    except ValueError:
        return False


def inside(path: str, root: str) -> bool:
    """Whether `path`, links resolved, is within `root` (an object store has no links)."""
    if gcs.is_gcs(path):
        return path.startswith(root.rstrip("/") + "/")
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


def read_file(file_path: str, start: int = 0, end: int | None = None) -> bytes:
    """A landed file's bytes from `start` to `end` (None: its end), from a local folder or a gs://
    one (OSError when unreadable)."""
    if gcs.is_gcs(file_path):
        return gcs.read(file_path, start, end)
    with open(file_path, "rb") as fh:
        if start:
            fh.seek(start)
        return fh.read() if end is None else fh.read(max(0, end - start))


def file_size(file_path: str) -> int:
    return gcs.size(file_path) if gcs.is_gcs(file_path) else os.path.getsize(file_path)


def digest(file_path: str, size: int) -> str | None:
    """A digest of a file's first `size` bytes, from their first and last DIGEST_BLOCK bytes (two
    small reads whatever the size); None when the file cannot be read (ingest says why)."""
    if gcs.is_gcs(file_path):
        return None  # an object's stamp is its content hash
    try:
        head = read_file(file_path, 0, min(size, DIGEST_BLOCK))
        tail = read_file(file_path, max(0, size - DIGEST_BLOCK), size) if size > DIGEST_BLOCK else b""
    except OSError:
        return None
    if len(head) + len(tail) < min(size, 2 * DIGEST_BLOCK):
        return None  # the file is shorter than `size` now
    return hashlib.sha256(b"%d:" % size + head + tail).hexdigest()[:32]


def registered(table_dir: str) -> list[Batch]:
    rows = delta.read_arrow(batches_path(table_dir))
    if rows is None:
        return []
    by_seq: dict[int, list[Part]] = {}
    for r in rows.to_pylist():
        part = Part(r["file"], r.get("start") or 0, r["bytes"], r.get("lines_before") or 0, r.get("taken_as"),
                    r.get("stamp"), r.get("digest")) if r["file"] else None
        by_seq.setdefault(r["batch_seq"], [])
        if part is not None:
            by_seq[r["batch_seq"]].append(part)
    return [Batch(s, Batch.id_for(s), tuple(sorted(p.file for p in ps)), tuple(sorted(ps, key=lambda p: p.file)))
            for s, ps in sorted(by_seq.items())]


def taken_parts(batches: list[Batch]) -> dict[str, Part]:
    """Each file's latest part a batch took (a replay reads parts taken before: it takes none)."""
    return {p.file: p for b in batches for p in b.parts if p.taken_as != REPLAYED}


# What a listing found of a file a batch took whose size or stamp moved: (landing, file, as listed,
# as taken) -> the change, or None (the same bytes, written again). A file touched but unchanged
# is read once per process, not on every tick. It lives as long as the process (a sensor's daemon
# runs for months), so it keeps the VERDICTS_KEPT most recently asked and forgets the oldest.
VERDICTS_KEPT = 4096
_verdicts: OrderedDict[tuple, str | None] = OrderedDict()


def changed_files(landing_dir: str, listing: dict[str, Landed], taken: dict[str, Part],
                  appendable: Callable[[str], bool] = lambda name: False) -> dict[str, str | None]:
    """The listed files a batch is due for: file -> None (a name no batch took), APPENDED (the
    bytes taken, then more: only `appendable` files) or REPLACED (any other change). Reads only
    the files whose size or stamp moved since taken, and of those only the digest's blocks."""
    out: dict[str, str | None] = {}
    for f, now in listing.items():
        p = taken.get(f)
        if p is None:
            out[f] = None
            continue
        if now.size == p.end and (now.stamp == p.stamp or p.stamp is None or now.stamp is None):
            continue  # (a ledger of an older version recorded no stamp: the size decides)
        memo = (landing_dir, f, now, p)
        if memo in _verdicts:
            _verdicts.move_to_end(memo)
        else:
            _verdicts[memo] = _change_of(os.path.join(landing_dir, f), now, p)
            while len(_verdicts) > VERDICTS_KEPT:
                _verdicts.popitem(last=False)
        if _verdicts[memo] is not None:
            out[f] = APPENDED if _verdicts[memo] == APPENDED and appendable(f) else REPLACED
    return out


def _change_of(file_path: str, now: Landed, p: Part) -> str | None:
    """How the file changed since `p` was taken: None (the same bytes), APPENDED (those bytes,
    then more), REPLACED."""
    if gcs.is_gcs(file_path) or p.digest is None or p.end is None:
        return REPLACED  # an object is written whole; a file taken without a digest cannot be compared
    if now.size < p.end or digest(file_path, p.end) != p.digest:
        return REPLACED
    if now.size == p.end:
        return None  # written again, the same bytes
    return APPENDED


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
    listing = complete_files(landing_dir)
    state = (frozenset(listing.items()), stamps)
    seen = _settled.get(table_dir)
    if seen is not None and seen[0] == state and now - seen[1] < FULL_LOOK_SECONDS:
        return True
    _settled.pop(table_dir, None)
    batches = registered_cached(table_dir)
    staged = delta.step_version_cached(path(table_dir, STAGING), STAGING)
    reached = max(staged, 0 if base_snapshot else -1)
    quiet = (not changed_files(landing_dir, listing, taken_parts(batches))  # nothing to register
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


def pending_files(landing_dir: str, table_dir: str) -> dict[str, str | None]:
    """The complete files the next batch takes: new names, and files changed since taken
    (`changed_files`)."""
    return changed_files(landing_dir, complete_files(landing_dir), taken_parts(registered(table_dir)))


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
    found: dict[str, Landed]  # relative name -> size and stamp of what this listing saw
    full: bool  # the whole landing folder was listed
    cursor: ListingCursor
    notes: tuple[str, ...] = ()  # the entries the listing skipped, one line each (complete_files)


def scan_landing(landing_dir: str, cursor: ListingCursor, now: float, storage_client=None) -> Scan:
    """The complete files a sensor tick looks at: a local folder whole, a gs:// one from the
    cursor on (and whole at least every FULL_LISTING_SECONDS). What was taken before is in the
    batch ledger, so a listing that sees an object again never registers it twice."""
    if not gcs.is_gcs(landing_dir):
        notes: list[str] = []
        return Scan(complete_files(landing_dir, notes), True, ListingCursor(), tuple(notes))
    full = cursor.start is None or cursor.full_at is None or now - cursor.full_at >= FULL_LISTING_SECONDS
    objects = gcs.list_objects(landing_dir, None if full else cursor.start, storage_client)
    start = next_listing_start(objects) if objects else cursor.start
    return Scan({o.name: Landed(o.size, o.stamp) for o in objects}, full, ListingCursor(start, now if full else cursor.full_at))


def next_listing_start(objects: list) -> str:
    """The folder of the earliest-named object among those written within LOOKBACK_SECONDS of
    the newest write: Datastream writes a folder per minute, and files within one folder do not
    arrive in name order."""
    newest = max(o.updated for o in objects)
    recent = [o.name for o in objects if o.updated >= newest - LOOKBACK_SECONDS]
    return min(n.rsplit("/", 1)[0] + "/" if "/" in n else "" for n in recent)


def register_new_batch(landing_dir: str, table_dir: str, found: dict[str, Landed] | None = None,
                       fmt: str | None = None, notes: list[str] | None = None) -> Batch | None:
    """Record the complete files no batch has taken, and those changed since a batch took them
    (`changed_files`), as the next batch (one atomic commit); `found` is what a listing saw, else
    the whole landing folder is listed. `fmt`: the table's format (which files may be appended
    to: `core.formats.appendable`). `notes`: gets a line for each entry the listing skipped."""
    from ..core.formats import appendable

    known = registered_cached(table_dir)
    taken = taken_parts(known)
    listing = complete_files(landing_dir, notes) if found is None else found
    new = changed_files(landing_dir, listing, taken, lambda name: fmt is not None and appendable(fmt, name))
    if not listing and not known and gcs.is_gcs(landing_dir) and notes is not None:
        # an object store has no folders: a prefix without objects is a local folder that does not exist
        notes.append(f"landing folder {landing_dir} holds no objects (nothing taken)")
    if not new:
        return None
    seq = (known[-1].seq if known else 0) + 1
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    parts = []
    for f in sorted(new):
        size, full = listing[f].size, os.path.join(landing_dir, f)
        start, lines_before = appended_from(full, taken[f]) if new[f] == APPENDED else (0, 0)
        parts.append(Part(f, start, size, lines_before, new[f], listing[f].stamp, digest(full, size)))
    rows = pa.table({
        "batch_seq": pa.array([seq] * len(parts), pa.int64()),
        "batch_id": [Batch.id_for(seq)] * len(parts),
        "file": [p.file for p in parts],
        "bytes": pa.array([p.end for p in parts], pa.int64()),
        "registered_at": [now] * len(parts),
        "start": pa.array([p.start for p in parts], pa.int64()),
        "lines_before": pa.array([p.lines_before for p in parts], pa.int64()),
        "taken_as": pa.array([p.taken_as for p in parts], pa.string()),
        "stamp": pa.array([p.stamp for p in parts], pa.string()),
        "digest": pa.array([p.digest for p in parts], pa.string()),
    }, schema=delta.arrow_schema(BATCH_FIELDS))
    delta.append(batches_path(table_dir), rows, "register", seq, {"files": len(parts)})
    delta.compact_if_fragmented(batches_path(table_dir))  # one small file per batch, read by every run
    return Batch(seq, Batch.id_for(seq), tuple(p.file for p in parts), tuple(parts))


def appended_from(file_path: str, before: Part) -> tuple[int, int]:
    """Where the part appended after `before` starts, and how many lines precede it: at the end
    of the bytes taken when they end a line (with a newline, or the appended bytes start with
    one); else at the start of their last line, which was taken cut (a writer that published
    the file before it finished it) and is read again whole. Reads the bytes `before` took once."""
    assert before.end is not None
    data = read_file(file_path, before.start, before.end + 1)
    taken = data[:before.end - before.start]
    if taken.endswith(b"\n") or data[len(taken):] == b"\n" or not taken:
        start = before.end
    else:
        start = before.start + taken.rfind(b"\n") + 1
    return start, before.lines_before + data[:start - before.start].count(b"\n")
