"""Batch -> `changes` (+ `quarantine`) in the run's own process: parse, drop re-deliveries, admit types."""
from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import os
import time
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..core import ordering
from ..core.changes import (
    DELETE,
    RECORD_FIELDS,
    REJECT_FIELDS,
    UPSERT,
    Change,
    Rejection,
    stored_form,
    to_record,
    to_reject,
)
from ..core.config import Config, TableConfig
from ..core.errors import TerminalError
from ..core.formats import (
    Limits,
    appendable,
    has_header,
    parquet_row_group,
    parse_file,
    parse_snapshot,
    raw_line,
)
from ..core.schema import ANY, Rules, admit, admit_columns, is_text_source, joined, plain, widened_to_text
from ..core.typed_changes import TypedFile, read_by_column, read_typed_change_file, read_typed_row_group
from ..core.values import STRING, UNSET_KEY, convert, decode_image, decode_row, encode_row, key_text
from . import delta, faults, gcs
from .landing import Batch, file_size, inside, is_done_or_next, read_file, undecodable_name
from .latest import first_of_each
from .records import stored_columns
from .settings import settings
from .step_results import ChangesResult
from .table_layout import BASE, CHANGES, QUARANTINE, QUARANTINE_FIELDS, SEEN, path

LOGGED_REJECTIONS = 100  # per batch: the log names them, the quarantine table holds them all
# `_cdc_types` (the file's or declared column types) lives only until the types are admitted.
TYPED_FIELDS = RECORD_FIELDS + (("_cdc_types", "string"),)
PARSED_FIELDS = TYPED_FIELDS + (("_cdc_reason", "string"), ("_cdc_raw", "string"))


def file_limits() -> Limits:
    """How much of one landed file a reader holds, as the settings say."""
    now = settings()
    return Limits(now.max_line_bytes, now.max_decompressed_bytes)


class UnreadableFile(TerminalError):
    """A landed file that cannot be read at all; it is quarantined as line 0."""


def read_landed(file_path: str, root: str | None, start: int = 0, end: int | None = None) -> bytes:
    _may_read(file_path, root)
    try:
        return read_file(file_path, start, end)
    except OSError as e:
        raise UnreadableFile(f"cannot read the file: {e.strerror or e}") from None


# A work-list file's entry saying why the bytes to read are no longer in the file (a replay's file
# replaced since its batch took it): the file fails as a whole with that reason.
GONE = "gone"


def landed_part(f: dict, root: str | None) -> tuple[bytes, int, bool]:
    """What the parser reads of a work-list file `f`: the bytes its batch took (from `start` to
    `end`), what to add to the parser's line numbers, and whether line 1 of those bytes is the
    file's header, borrowed for a part taken after it (and so no record of this part)."""
    if f.get(GONE):
        raise UnreadableFile(f[GONE])
    start, end, before = f.get("start") or 0, f.get("end"), f.get("lines_before") or 0
    if not start:
        return read_landed(f["path"], root, 0, end), 0, False
    body = read_landed(f["path"], root, start, end)
    if not has_header(f["file"]):
        return body, before, False
    return _first_line(f["path"], root, start) + body, before - 1, True


def _first_line(file_path: str, root: str | None, limit: int) -> bytes:
    """A file's first line, with its newline, read in growing blocks within its first `limit` bytes."""
    size = 64 * 1024
    while True:
        head = read_landed(file_path, root, 0, min(limit, size))
        cut = head.find(b"\n")
        if cut >= 0:
            return head[:cut + 1]
        if size >= limit:
            return head + b"\n"
        size *= 4


def _may_read(file_path: str, root: str | None) -> None:
    """UnreadableFile when the landed file is one the parser must not read."""
    if undecodable_name(file_path):
        raise UnreadableFile("the file's name is not valid UTF-8 (its bytes are shown as \\x escapes); it was "
                             "not read: land it again under a UTF-8 name")
    if root and os.path.islink(file_path) and os.path.isdir(file_path):
        raise UnreadableFile("a link to a folder: its files are not read (land them under their own names)")
    if root and not inside(file_path, root):
        raise UnreadableFile(f"the file links outside the landing area ({os.path.realpath(file_path)}); it was not read")


def _landed_source(file_path: str, root: str | None) -> str | io.IOBase:
    """A landed file to read in parts (a Parquet row group): a local file by its path, so that
    only the part is read; an object store's by its bytes."""
    _may_read(file_path, root)
    if gcs.is_gcs(file_path):
        return io.BytesIO(read_landed(file_path, root))
    return file_path


def _parse_partition(table: TableConfig, snapshot: bool, root: str | None, text_columns: tuple[str, ...] = (),
                     ledger: dict[str, str] | None = None, by_column: bool = False):
    """The function Spark runs on each slice of the file list: files -> records or rejections.
    `snapshot`: the files are the base export. A `format: snapshot` table's batch is read as an
    export too, its rows ranked by batch (rules.md#rule-11), its column types admitted from `ledger` (the
    table's so far). `by_column`: a change file (or row group) the column reader takes
    (`core.typed_changes`) is read by it, its records the same as read record by record."""
    schema = delta.arrow_schema(PARSED_FIELDS)
    keys, partition_by = list(table.keys), list(table.partition_by)
    batch_export = not snapshot and table.spec.whole_exports
    export = snapshot or batch_export
    tier = ordering.BASE_TIER if snapshot else ordering.CHANGE_TIER
    store = gcs.settings()  # a gs:// landing's client settings, for the workers that read it
    limits = file_limits()  # the driver's, for the workers too

    def items(f):
        if export and f["row_group"] is not None:
            return parquet_row_group(keys, f["path"], f["row_group"], table.columns, table.rename, text_columns)
        data, shift, borrowed = landed_part(f, root)
        if batch_export and not data.strip():
            return []  # an export of an empty table
        if export:
            return parse_snapshot(keys, f["file"], data, table.columns, table.rename, text_columns, limits)
        found = parse_file(table.format, table.options, keys, f["file"], data, table.columns, table.insert_only,
                           text_columns, table.rename, f["row_group"], limits)
        return _renumbered(found, shift, borrowed) if f.get("start") else found

    def run(batches):
        # An export's column types are widened here, in the task that reads the rows; each task
        # ends with one ledger record (op T) that the driver joins with the others.
        gcs.use(store)
        types: dict = dict(ledger or {})
        for files in batches:
            for f in files.to_pylist():
                typed = _typed_file(table, f, root, schema, images=True) if by_column and not export else None
                if typed is not None:
                    yield from typed.records.to_batches(max_chunksize=5000)
                    continue
                try:
                    found = items(f)
                except UnreadableFile as e:
                    found = [Rejection(0, str(e), "")]
                out = []
                for item in found:
                    if isinstance(item, Change) and export:
                        # an export row that cannot join the others' columns (a name differing
                        # only by case, a value its declared column cannot hold) is quarantined
                        why = admit(types, item.row, snapshot or is_text_source(f["file"]), item.types,
                                    type_rules(table))
                        if why is not None:
                            item = Rejection(item.line, why, encode_row(item.row), key=item.key)
                        elif batch_export:
                            item.order = ordering.u64(f["batch_seq"])  # snapshots rank by batch
                    if isinstance(item, Change):
                        rec = to_record(item, batch_seq=f["batch_seq"], batch_id=f["batch_id"], file_name=f["file"],
                                        file_index=f["file_index"], partition_by=partition_by, tier=tier)
                        rec["_cdc_reason"] = rec["_cdc_raw"] = None
                    else:
                        rec = dict.fromkeys(n for n, _ in TYPED_FIELDS)
                        rec.update(to_reject(item, batch_seq=f["batch_seq"], batch_id=f["batch_id"], file_name=f["file"]))
                        if item.key is not None:  # a quarantined export row's key stays in its export
                            rec["_cdc_key"] = key_text(item.key)
                    out.append(rec)
                    if len(out) >= 5000:
                        yield pa.RecordBatch.from_pylist(out, schema=schema)
                        out = []
                if out:
                    yield pa.RecordBatch.from_pylist(out, schema=schema)
        if export:
            yield pa.RecordBatch.from_pylist([{"_cdc_op": LEDGER, "_cdc_row": json.dumps(types)}], schema=schema)
    return run


def _renumbered(found, shift: int, borrowed: bool):
    """An appended part's records under their line numbers in the whole file; not the borrowed
    header's, nor a whole-file verdict (a part of blank lines is no empty file)."""
    for item in found:
        if item.line < 1 or (borrowed and item.line == 1):
            continue  # (the header's problems were the first part's, and quarantined with it)
        item.line += shift
        yield item


LEDGER = "T"  # a snapshot task's column types, among its records
MAX_TASKS = 256


def parse_files(spark, table: TableConfig, files: list[dict], snapshot: bool = False, root: str | None = None,
                text_columns: tuple[str, ...] = (), ledger: dict[str, str] | None = None):
    """A DataFrame of parsed records; rows with `_cdc_reason` set are rejections.
    `root`: the landing folder the files must stay inside (links out of it are not read).
    An export's Parquet files (a base snapshot, a `format: snapshot` batch) are read one row
    group per task; `ledger`: the column types a snapshot batch's rows are admitted to."""
    listing = [{"start": 0, "end": None, "lines_before": 0, **f} for f in snapshot_listing(files)]
    frame = spark.createDataFrame(listing, "path string, file string, file_index int, batch_seq long, "
                                           "batch_id string, start long, end long, lines_before long, row_group int")
    return frame.repartition(max(1, min(len(listing), MAX_TASKS))).mapInArrow(
        _parse_partition(table, snapshot, root, text_columns, ledger, by_column=True), delta.spark_schema(PARSED_FIELDS))


def snapshot_listing(files: list[dict]) -> list[dict]:
    """The parser's work list: a Parquet file's row groups one by one (a big change file, or an
    export, is then read by many tasks, each holding a row group's records)."""
    listing = []
    for f in files:
        groups = _row_groups(f["path"])
        for g in range(groups) if groups > 1 else [None]:
            listing.append({**f, "row_group": g})
    return listing


def _row_groups(file_path: str) -> int:
    if not file_path.lower().endswith(".parquet"):
        return 0
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(file_path).metadata.num_row_groups
    except Exception:  # noqa: BLE001 - an unreadable file is read (and quarantined) as a whole
        return 0


def rejected_rows(parsed) -> pa.Table:
    return parsed.where("_cdc_reason IS NOT NULL").select(*[c for c, _ in REJECT_FIELDS]).toArrow()


def quarantine(table: TableConfig, table_dir: str, rejected: pa.Table, batch_seq: int, log=None) -> int:
    """Commit a step's rejected records to `quarantine` unless an earlier attempt did."""
    n = rejected.num_rows
    if n and delta.step_version(path(table_dir, QUARANTINE), QUARANTINE) < batch_seq:
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        q = rejected.select([c for c, _ in REJECT_FIELDS])
        q = q.add_column(0, "table", pa.array([table.name] * n, pa.string()))
        q = q.append_column("quarantined_at", pa.array([now] * n, pa.string()))
        delta.append(path(table_dir, QUARANTINE), q.cast(delta.arrow_schema(QUARANTINE_FIELDS)), QUARANTINE, batch_seq)
        if log:
            for r in q.slice(0, LOGGED_REJECTIONS).to_pylist():
                log(f"table {table.name}: file {r['_cdc_file']} line {r['_cdc_line']}: {r['_cdc_reason']}")
            if n > LOGGED_REJECTIONS:
                log(f"table {table.name}: {n - LOGGED_REJECTIONS} more records quarantined in batch {batch_seq} "
                    "(all are in the quarantine table)")
    return n


def column_types(table_dir: str, marked: bool = True) -> dict[str, str]:
    """The column types of the history so far: recorded with each `changes` and `base` commit.
    `marked`: with how each was set (strict, inferred, soft: core/schema.py)."""
    newest = (delta.step_commit(path(table_dir, name), name) for name in (BASE, CHANGES))  # base's columns first
    ledger = joined(*(json.loads(c["column_types"]) for c in newest if c and "column_types" in c))
    return ledger if marked else plain(ledger)


def type_rules(table: TableConfig) -> Rules:
    """What the table says about its column types beyond their values (core/schema.Rules)."""
    return Rules(keys=tuple(table.keys), to_text=table.widen_to_text)


def admit_rows(types: dict, rows: pa.Table, text_source_of, images_of=None,
               stored_ops: tuple[str, ...] = (UPSERT,), rules: Rules = ANY) -> tuple[list[str | None], list[dict]]:
    """Admit each row (in the given order) to the column types: the reason for each misfit,
    and each row's image. `images_of`: the image of a row without `_cdc_row` (a typed file's,
    whose rows are admitted a file at a time where `schema.admit_columns` can). `stored_ops`: the
    operations whose images reach the target (a soft-delete table keeps its deletes' rows);
    `rules`: the table's (`type_rules`)."""
    reasons: list[str | None] = []
    images: list[dict] = []
    types_of: dict = {}  # a file's rows share one types text
    listed = rows.select(["_cdc_op", "_cdc_row", "_cdc_file", "_cdc_line", "_cdc_types"]).to_pylist()
    i = 0
    while i < len(listed):
        r = listed[i]
        text = r["_cdc_types"]
        if text not in types_of:
            types_of[text] = json.loads(text) if text else None
        j = i + 1
        if r["_cdc_row"] is None:
            while j < len(listed) and listed[j]["_cdc_row"] is None and listed[j]["_cdc_file"] == r["_cdc_file"]:
                j += 1
            run = [images_of(x["_cdc_file"], x["_cdc_line"]) for x in listed[i:j]]
            upserts = [image for x, image in zip(listed[i:j], run) if x["_cdc_op"] in stored_ops]
            if types_of[text] and admit_columns(types, upserts, types_of[text]):
                reasons += [None] * (j - i)
                images += run
                i = j
                continue
        else:
            run = [decode_row(r["_cdc_row"])]
        for x, image in zip(listed[i:j], run):
            images.append(image)
            reasons.append(None if x["_cdc_op"] not in stored_ops  # a (hard) delete's image never reaches the target
                           else admit(types, image, text_source_of(x["_cdc_file"]), types_of[text], rules))
        i = j
    return reasons, images


def _images_of(values: dict[str, pa.Table]):
    """The row image of line `line` of a typed file, from the values read beside its records."""
    rows: dict[str, list[dict]] = {}

    def image(file_name: str, line: int) -> dict:
        if file_name not in rows:
            rows[file_name] = values[file_name].to_pylist()
        return dict(rows[file_name][line - 1])
    return image


def in_arrival_order(records: pa.Table, batch_files: Sequence[str]) -> pa.Table:
    """The records in the order they arrived: by file (as the batch lists them), then line."""
    files = pc.fill_null(pc.index_in(records["_cdc_file"], value_set=pa.array(batch_files, pa.string())), 0)
    arrival = pc.sort_indices(pa.table({"file": files, "line": records["_cdc_line"]}),  # a stable sort
                              sort_keys=[("file", "ascending"), ("line", "ascending")])
    return records.take(arrival)


def admit_types(new: pa.Table, types: dict, batch: Batch, landing: str,
                values: dict[str, pa.Table] | None = None,
                stored_ops: tuple[str, ...] = (UPSERT,), rules: Rules = ANY) -> tuple[pa.Table, list[dict], pa.Table]:
    """Split the batch's new changes into those whose values fit the column types (which they
    widen, in arrival order), with their row images, and rejections for those that cannot
    widen them. `values`: the source columns of typed files, whose records have no `_cdc_row`."""
    in_order = in_arrival_order(new, batch.files)
    rows = in_order.select(["_cdc_row", "_cdc_file", "_cdc_line"]).to_pylist()
    keep, rejects, texts = [True] * len(rows), [], {}
    reasons, images = admit_rows(types, in_order, is_text_source, _images_of(values or {}), stored_ops, rules)
    for i, reason in enumerate(reasons):
        r = rows[i]
        if reason:
            keep[i] = False
            f = r["_cdc_file"]
            if f not in texts:
                texts[f] = read_file(os.path.join(landing, f))
            raw = raw_line(f, texts[f], r["_cdc_line"], file_limits()) or r["_cdc_row"] or encode_row(images[i])
            rejects.append(to_reject(Rejection(r["_cdc_line"], reason, raw), batch_seq=batch.seq,
                                     batch_id=batch.id, file_name=f))
    kept = in_order.filter(pa.array(keep, pa.bool_())).select([n for n, _ in RECORD_FIELDS])
    kept_images = [image for image, k in zip(images, keep) if k]
    return kept, kept_images, pa.Table.from_pylist(rejects, schema=delta.arrow_schema(REJECT_FIELDS))


def stored_changes(records: pa.Table, images: list[dict], ledger: dict, stored: dict[str, str],
                   keys: Sequence[str] = ()) -> pa.Table:
    """The batch's records as `changes` holds them: source columns typed where the column
    types allow it (`core.changes.stored_form`), row images kept where they do not; each key
    (`keys`: the key columns) as its values are stored (`text_keys`)."""
    records = text_keys(records, images, ledger, keys)
    have = records["_cdc_row"].to_pylist()
    # A change from a text file, or one that does not carry some column (its image lists it), keeps its image.
    from_text = [is_text_source(f) or (text is not None and UNSET_KEY in text and bool(decode_image(text)[1]))
                 for f, text in zip(records["_cdc_file"].to_pylist(), have)]
    columns, imaged = stored_form(images, from_text, ledger, stored)
    # A typed file's change comes without its image; it is written only if the change needs it.
    rows = pa.array([(text if text is not None else encode_row(image)) if keep else None
                     for keep, text, image in zip(imaged, have, images)], pa.string())
    records = records.set_column(records.schema.get_field_index("_cdc_row"), "_cdc_row", rows)
    for column, values in columns.items():
        records = records.append_column(column, values)
    return records


def text_keys(records: pa.Table, images: list[dict], ledger: dict, keys: Sequence[str]) -> pa.Table:
    """The records with each key read as the key columns' types after the batch hold it: in a key
    column this batch made text, a number's key is its text (`1.0` is the key "1.0", not 1), as
    it is in every later batch, whose files give that column text (`Prepared.text_columns`)."""
    text = [k for k in keys if plain(ledger).get(k) == STRING]
    if not text:
        return records
    old = records["_cdc_key"].to_pylist()
    new = [_text_key(key, image, keys, text) for key, image in zip(old, images)]
    if new == old:
        return records
    return records.set_column(records.schema.get_field_index("_cdc_key"), "_cdc_key", pa.array(new, pa.string()))


def _text_key(key: str, image: dict, keys: Sequence[str], text: list[str]) -> str:
    values = [image.get(k) for k in keys]
    if any(v is None for v in values) or all(isinstance(image[k], str) for k in text):
        return key
    return key_text([convert(v, STRING) if k in text else v for k, v in zip(keys, values)])


# A batch whose files hold at most `local_parse_bytes` is taken in this process, parsed by the
# same code Spark's tasks run: a job on Spark costs seconds even when warm, and a small batch then
# never starts Spark at all. A larger batch is taken by Spark's tasks end to end (spark_ingest.py).


def batch_bytes(files: list[dict]) -> int:
    """The bytes a batch's files hold (`local_parse_bytes` decides where they are parsed)."""
    total = 0
    for f in files:
        if f.get("end") is not None:
            total += f["end"] - (f.get("start") or 0)
            continue
        try:
            total += file_size(f["path"])
        except OSError:
            pass  # read (and quarantined) by the parser, which names the problem
    return total


def parse_batch(table: TableConfig, files: list[dict], root: str,
                text_columns: tuple[str, ...] = ()) -> tuple[pa.Table, dict[str, pa.Table]]:
    """Every record of a batch's files, parsed in this process (rejections have `_cdc_reason`);
    and the source columns of the files read column by column (`core.typed_changes`), whose
    records have no `_cdc_row`."""
    schema = delta.arrow_schema(PARSED_FIELDS)
    parts, values, by_record = [], {}, []
    for f in files:
        typed = _typed_file(table, f, root, schema)
        if typed is None:
            by_record.append({**f, "row_group": None})
        else:
            parts.append(typed.records)
            values[f["file"]] = typed.values
    if by_record:
        listing = pa.RecordBatch.from_pylist(by_record)
        parts.append(pa.Table.from_batches(list(_parse_partition(table, False, root, text_columns)([listing])),
                                           schema=schema))
    return (pa.concat_tables(parts) if parts else schema.empty_table()), values


def parse_export(table: TableConfig, files: list[dict], text_columns: tuple[str, ...] = ()) -> pa.Table:
    """Every row of a base export's files, parsed in this process as the base import reads them
    (upserts at the base's tier; rejections have `_cdc_reason`)."""
    listing = pa.RecordBatch.from_pylist([{"start": 0, "end": None, "lines_before": 0, **f}
                                          for f in snapshot_listing(files)])
    return pa.Table.from_batches(list(_parse_partition(table, True, None, text_columns)([listing])),
                                 schema=delta.arrow_schema(PARSED_FIELDS))


def _typed_file(table: TableConfig, f: dict, root: str | None, schema: pa.Schema,
                images: bool = False) -> TypedFile | None:
    """A change file, or its row group `f["row_group"]`, read column by column; None when it goes
    record by record. `images`: with each record's row image (`_cdc_row`)."""
    if (table.insert_only or table.rename or not read_by_column(table.format, f["file"]) or f.get("start")
            or f.get(GONE)):
        # the column reader does not reject updates: an insert_only table's files go record by record;
        # nor does it rename columns, nor read a part appended to a file
        return None
    common = {"declared": table.columns, "partition_by": list(table.partition_by), "batch_seq": f["batch_seq"],
              "batch_id": f["batch_id"], "file_index": f["file_index"], "schema": schema, "images": images}
    try:
        if f.get("row_group") is not None:
            return read_typed_row_group(table.format, table.options, list(table.keys), f["file"],
                                        _landed_source(f["path"], root), f["row_group"], **common)
        data = read_landed(f["path"], root, 0, f.get("end"))
    except UnreadableFile:
        return None  # read again, and quarantined, record by record
    return read_typed_change_file(table.format, table.options, list(table.keys), f["file"], data, **common)


def first_of_each_event(good: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Records with an event id, the first by ordering key of each id; and those without one."""
    has_id = pc.is_valid(good["_cdc_event_id"])
    return first_of_each(good.filter(has_id), "_cdc_event_id", "ascending"), good.filter(pc.invert(has_id))


def source_order(order: str) -> str:
    """An ordering key without its arrival part (tier and the source's own order)."""
    return order.rsplit("|", 1)[0]


def seen_event_ids(changes_path: str, seen_path: str, events: pa.Table) -> pa.Array:
    """Which of these events' ids an earlier batch already holds (in `changes`, or in `seen` once
    a trim took its batch out of `changes`).

    A re-delivered event carries its original's source order, so only earlier changes whose
    ordering key falls within this batch's range of source orders can share an id with it:
    delta-rs skips the files (and row groups) of `changes` outside that range by their
    statistics, and a CDC feed's batches follow the source's order, so the lookup reads about
    the batch's own stretch of the history, not all of it."""
    if events.num_rows == 0:
        return pa.array([], pa.string())
    sources = [source_order(o) for o in events["_cdc_order"].to_pylist()]
    # Every earlier change with source order p has an ordering key p + "|" + arrival, which
    # lies between p and p + "}" ("|" < "}", and arrival is hexadecimal).
    lo, hi = min(sources), max(p + "}" for p in sources)
    ids = pc.unique(events["_cdc_event_id"])
    where = f"_cdc_order >= {delta.sql_text(lo)} AND _cdc_order <= {delta.sql_text(hi)}"
    if len(ids) <= delta.IN_LIST_LIMIT:
        where += f" AND _cdc_event_id IN ({', '.join(delta.sql_text(i) for i in ids.to_pylist())})"
    # `seen` holds the ids of the changes a trim took out of `changes`, with their ordering keys
    found = [t["_cdc_event_id"].cast(pa.string()) for t in
             (delta.query(p, f"SELECT _cdc_event_id FROM t WHERE {where}") for p in (changes_path, seen_path))
             if t is not None and t.num_rows]
    if not found:
        return pa.array([], pa.string())
    found_ids = pa.concat_arrays([f.combine_chunks() for f in found])
    return pc.filter(ids, pc.is_in(ids, value_set=found_ids))


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What taking a batch starts from, wherever it is taken."""
    table_dir: str
    changes_path: str
    landing: str
    files: list[dict]  # the parser's work list
    types: dict[str, str]  # the table's column types so far
    text_columns: tuple[str, ...]


def prepare(cfg: Config, table: TableConfig, batch: Batch) -> Prepared | None:
    """The batch's files and the table's column types; None when its changes are committed."""
    table_dir = cfg.table_dir(table.name)
    changes_path = path(table_dir, CHANGES)
    if is_done_or_next(table.name, changes_path, CHANGES, batch):
        return None
    landing = cfg.landing_dir(table.name)
    files = [{"path": os.path.join(landing, f), "file": f, "file_index": i, "batch_seq": batch.seq,
              "batch_id": batch.id, **taken_part(batch, f, table.format, gcs.is_gcs(landing))}
             for i, f in enumerate(batch.files)]
    types = column_types(table_dir)
    # A column earlier batches made text stays text: its CSV values keep their spelling, so a
    # key reads the same in every batch.
    text_columns = tuple(c for c, t in plain(types).items() if t == STRING)
    return Prepared(table_dir, changes_path, landing, files, types, text_columns)


def taken_part(batch: Batch, file: str, fmt: str, object_store: bool = False) -> dict:
    """Which of a file's bytes the batch took, for the parser: a file of lines only up to the size
    it had when taken (what it gained since is the next batch's), from where an append started.
    An object (`object_store`) is written whole, never appended to: it is read whole."""
    part = batch.part(file)
    if not appendable(fmt, file) or object_store:
        return {"start": 0, "end": None, "lines_before": 0}
    return {"start": part.start, "end": part.end, "lines_before": part.lines_before}


def ingest_batch(cfg: Config, table: TableConfig, batch: Batch, log=None) -> ChangesResult:
    """Commit the batch's distinct changes and its rejected records, in this process; a second
    call does nothing (spark_ingest.ingest_batch sends a large batch to Spark instead)."""
    t0 = time.time()
    given = prepare(cfg, table, batch)
    if given is None:
        return ChangesResult(already_committed=True)
    return ingest_prepared(given, table, batch, log, t0)


def ingest_prepared(given: Prepared, table: TableConfig, batch: Batch, log, t0: float) -> ChangesResult:
    parsed, values = parse_batch(table, given.files, root=given.landing, text_columns=given.text_columns)
    faults.point("changes.parsed")
    return take_parsed(given, table, batch, parsed, values, log, t0)


def take_parsed(given: Prepared, table: TableConfig, batch: Batch, parsed: pa.Table, values: dict[str, pa.Table],
                log, t0: float, set_aside=None) -> ChangesResult:
    """Commit a batch's parsed records: its distinct changes whose values fit the column types to
    `changes`, the others set aside. `set_aside(rejected)`: where rejections go, returning their
    count (a replay's: engine/replay.py); by default the table's quarantine, under the batch."""
    table_dir, changes_path, landing, files, types = (given.table_dir, given.changes_path, given.landing,
                                                      given.files, given.types)
    records_read = parsed.num_rows
    rejected = pc.is_valid(parsed["_cdc_reason"])
    good = parsed.filter(pc.invert(rejected)).select([n for n, _ in TYPED_FIELDS])
    unreadable = parsed.filter(rejected).select([c for c, _ in REJECT_FIELDS])
    # At-least-once delivery: an event id seen in this batch or any earlier one counts once.
    with_id, without_id = first_of_each_event(good)
    seen = seen_event_ids(changes_path, path(table_dir, SEEN), with_id)
    if len(seen):
        with_id = with_id.filter(pc.invert(pc.is_in(with_id["_cdc_event_id"], value_set=seen)))
    distinct_rows = pa.concat_tables([with_id, without_id])
    before = dict(types)
    admitted, images, misfits = admit_types(distinct_rows, types, batch, landing, values,
                                            (UPSERT, DELETE) if table.soft_deletes else (UPSERT,), type_rules(table))
    new = stored_changes(admitted, images, types, stored_columns(changes_path), table.keys)
    rejected_all = pa.concat_tables([unreadable.cast(misfits.schema), misfits])
    n_rejected = (quarantine(table, table_dir, rejected_all, batch.seq, log) if set_aside is None
                  else set_aside(rejected_all))
    taken = ChangesResult(files=len(files), records_read=records_read, changes_new=new.num_rows,
                          duplicates_skipped=records_read - unreadable.num_rows - distinct_rows.num_rows,
                          quarantined=n_rejected, widened_to_text=widened_to_text(before, types) or None)
    version = delta.append(changes_path, new, CHANGES, batch.seq, changes_metadata(taken, types))
    return finish_changes(changes_path, taken, version, t0)


def changes_metadata(taken: ChangesResult, types: dict[str, str]) -> dict:
    """What a batch's `changes` commit records beside its step mark: its figures and the column types."""
    figures = taken.to_metadata()
    if taken.widened_to_text:
        figures["widened_to_text"] = json.dumps(list(taken.widened_to_text))
    return {**figures, "column_types": json.dumps(types)}


def finish_changes(changes_path: str, taken: ChangesResult, version: int, t0: float) -> ChangesResult:
    """A batch's result once its changes are committed (as `version`): compacted when fragmented."""
    return dataclasses.replace(taken, compacted=delta.compact_if_fragmented(changes_path), delta_version=version,
                               seconds=round(time.time() - t0, 2))
