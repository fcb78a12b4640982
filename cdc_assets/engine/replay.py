"""Quarantine as a user works with it: what is in it, and its records taken again once cdc.yaml is
fixed (`cdc-assets quarantine` and `quarantine replay`).

A replay is a batch of its own in the ledger: its registering commit names the quarantined records
it takes (their batch, file, the file's place in that batch, and lines; line 0: the whole file),
so it is decided once, atomically, and a crash or a second replay never takes a record twice. Its
ingest reads those files again under the configuration as it is now and keeps the named records;
each keeps the ordering key it would have had the first time (its own source order, then its
original batch, file and line as arrival), so it ranks among the table's changes as if it had
applied then: a newer change of its key still wins. The replay's batch number only places it in
the ledger. What became of each record is written to `quarantine_replays` before its changes
commit, and counts once that commit is made: taken (no reason), or quarantined again (its new
reason); the quarantine table itself only ever grows.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import time
from collections.abc import Callable

import pyarrow as pa

from ..core.config import Config, TableConfig
from ..core.errors import TerminalError
from ..core.figures import Figures
from . import delta
from .ingest import GONE, PARSED_FIELDS, batch_bytes, parse_batch, parse_export, parse_files, prepare, take_parsed
from .landing import BATCH_FIELDS, REPLAYED, Batch, Part, batches_path, digest, file_size, registered
from .settings import settings
from .spark import session_of
from .step_results import ChangesResult
from .table_layout import BASE_BATCH, BASE_ID, CHANGES, QUARANTINE, REPLAY_FIELDS, REPLAYS, path

REGISTER = "register"  # the ledger's step (engine/landing.register_new_batch)
REPLAY = "replay"  # the step mark of `quarantine_replays`, and the ledger commit's entry naming the records


class NotReplayable(TerminalError):
    """A table whose quarantined records a replay cannot take."""


@dataclasses.dataclass(frozen=True)
class Quarantined:
    """A record in quarantine now: where it came from, why it is there, and its text."""
    batch_seq: int
    file: str
    line: int  # 0: the whole file
    reason: str
    raw: str | None  # the record's text: row values, shown only when asked for

    @property
    def batch(self) -> str:
        return Batch.id_for(self.batch_seq)

    @property
    def column(self) -> str | None:
        return reason_column(self.reason)


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def reason_column(reason: str) -> str | None:
    """The column a reason names: reasons quote column names (never values), the first one first."""
    found = _QUOTED.search(reason)
    return found.group(1) if found else None


@dataclasses.dataclass(frozen=True)
class ReplayFile:
    """A file a replay reads again: its original batch, its place in it, and the lines it takes."""
    batch_seq: int
    file: str
    index: int
    lines: tuple[int, ...]  # 0 among them: every record of the file

    def to_json(self) -> list:
        return [self.batch_seq, self.file, self.index, list(self.lines)]

    @staticmethod
    def from_json(item: list) -> ReplayFile:
        return ReplayFile(int(item[0]), str(item[1]), int(item[2]), tuple(int(n) for n in item[3]))


def spec_of(table_dir: str, batch: Batch) -> tuple[ReplayFile, ...] | None:
    """The records a replay batch takes (None: the batch is landed files, not a replay). Read from
    the ledger commit that registered it."""
    commit = delta.step_commit(batches_path(table_dir), REGISTER, batch.seq)
    if not commit or REPLAY not in commit:
        return None
    return tuple(ReplayFile.from_json(item) for item in json.loads(commit[REPLAY]))


def _outcomes(table_dir: str) -> list[dict]:
    """What each committed replay did with each record it took, oldest replay first."""
    done = delta.step_version(path(table_dir, CHANGES), CHANGES)
    rows = delta.select(path(table_dir, REPLAYS), REPLAY_FIELDS, f"replayed_in <= {int(done)}")
    return sorted(rows.to_pylist(), key=lambda r: r["replayed_in"]) if rows is not None else []


def quarantined(cfg: Config, table: TableConfig, with_raw: bool = False) -> list[Quarantined]:
    """The records in the table's quarantine now, in the order they arrived: those no replay
    took, with the reason of their latest try. `with_raw`: with their text (row values)."""
    table_dir = cfg.table_dir(table.name)
    rows = delta.read_arrow(path(table_dir, QUARANTINE), columns=["_cdc_batch_seq", "_cdc_file", "_cdc_line",
                                                                  "_cdc_reason"] + (["_cdc_raw"] if with_raw else []))
    now: dict[tuple, Quarantined] = {}
    for r in rows.to_pylist() if rows is not None else []:
        where = (r["_cdc_batch_seq"], r["_cdc_file"], r["_cdc_line"])
        now[where] = Quarantined(*where, reason=r["_cdc_reason"] or "", raw=r.get("_cdc_raw"))
    for r in _outcomes(table_dir):
        where = (r["_cdc_batch_seq"], r["_cdc_file"], r["_cdc_line"])
        if r["_cdc_reason"] is None:
            now.pop(where, None)
        else:  # failed again (or a line of a whole file replayed): its newest reason
            before = now.get(where)
            now[where] = Quarantined(*where, reason=r["_cdc_reason"], raw=before.raw if before else None)
    order = {(b.seq, f): i for b in registered(table_dir) for i, f in enumerate(b.files)}
    return sorted(now.values(), key=lambda q: (q.batch_seq, order.get((q.batch_seq, q.file), -1), q.file, q.line))


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuarantineFigures(Figures):
    """The quarantine asset's figures: the records in it now, counted by reason (reasons name columns
    and kinds; the records' values stay in the table)."""
    records: int
    reasons: dict[str, int]


REASONS_SHOWN = 20


def figures(cfg: Config, table: TableConfig) -> QuarantineFigures:
    table_dir = cfg.table_dir(table.name)
    if delta.snapshot(path(table_dir, REPLAYS)) is None:  # never replayed: counted by the query engine
        counted = delta.query(path(table_dir, QUARANTINE), "SELECT _cdc_reason AS reason, count(*) AS n FROM t "
                                                           "GROUP BY _cdc_reason")
        counts = {r["reason"] or "": int(r["n"]) for r in counted.to_pylist()} if counted is not None else {}
    else:
        counts = {}
        for q in quarantined(cfg, table):
            counts[q.reason] = counts.get(q.reason, 0) + 1
    common = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:REASONS_SHOWN]
    return QuarantineFigures(records=sum(counts.values()), reasons=dict(common))


def replay_quarantined_count(table_dir: str, batch_seq: int) -> int:
    """How many of a replay batch's records failed again (they stay where they were quarantined)."""
    counted = delta.query(path(table_dir, REPLAYS), f"SELECT count(*) AS n FROM t WHERE replayed_in = {int(batch_seq)} "
                                                    "AND _cdc_reason IS NOT NULL")
    return int(counted["n"][0].as_py()) if counted is not None else 0


def first_replay_reasons(table_dir: str, batch_seq: int, n: int) -> list[dict]:
    """A replay batch's first records that failed again: file, line and reason."""
    rows = delta.query(path(table_dir, REPLAYS), f"SELECT _cdc_file, _cdc_line, _cdc_reason FROM t WHERE replayed_in = "
                                                 f"{int(batch_seq)} AND _cdc_reason IS NOT NULL "
                                                 f"ORDER BY _cdc_batch_seq, _cdc_file, _cdc_line LIMIT {int(n)}")
    return rows.to_pylist() if rows is not None else []


def register_replay(cfg: Config, table: TableConfig) -> Batch | None:
    """The batch that takes what is in quarantine now: registered in the ledger (the caller holds
    the table lock), or the replay registered before whose changes are not committed yet (a crash,
    or a failed run: it is taken before anything else is). None: nothing to replay."""
    if table.spec.whole_exports:
        raise NotReplayable(f"table {table.name}: a snapshot table's rows rank by their export: its quarantined "
                            "rows are not replayed; the next export carries them")
    table_dir = cfg.table_dir(table.name)
    batches = registered(table_dir)
    done = delta.step_version(path(table_dir, CHANGES), CHANGES)
    for b in batches:
        if b.seq > done and spec_of(table_dir, b) is not None:
            return b
    by_seq = {b.seq: b for b in batches}
    export = _export_name(table)
    lines: dict[tuple[int, str], list[int]] = {}
    for q in quarantined(cfg, table):
        if (q.batch_seq in by_seq and q.file in by_seq[q.batch_seq].files  # a landed batch's record
                or q.batch_seq == BASE_BATCH and q.file == export):  # a row of the base export
            lines.setdefault((q.batch_seq, q.file), []).append(q.line)
    if not lines:
        return None

    def index(seq: int, f: str) -> int:
        return 0 if seq == BASE_BATCH else by_seq[seq].files.index(f)

    # in arrival order: the base export first, then the landed batches
    spec = [ReplayFile(seq, f, index(seq, f), tuple(sorted(ns)))
            for (seq, f), ns in sorted(lines.items(), key=lambda item: (item[0][0], index(*item[0])))]
    seq = batches[-1].seq + 1
    names = sorted({s.file for s in spec})
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    rows = pa.table({
        "batch_seq": pa.array([seq] * len(names), pa.int64()),
        "batch_id": [Batch.id_for(seq)] * len(names),
        "file": names,
        "bytes": pa.array([_size(os.path.join(cfg.landing_dir(table.name), f)) for f in names], pa.int64()),
        "registered_at": [now] * len(names),
        "start": pa.array([0] * len(names), pa.int64()),
        "lines_before": pa.array([0] * len(names), pa.int64()),
        "taken_as": [REPLAYED] * len(names),
        "stamp": pa.array([None] * len(names), pa.string()),
        "digest": pa.array([None] * len(names), pa.string()),
    }, schema=delta.arrow_schema(BATCH_FIELDS))
    delta.append(batches_path(table_dir), rows, REGISTER, seq,
                 {"files": len(names), REPLAY: json.dumps([s.to_json() for s in spec])})
    return Batch(seq, Batch.id_for(seq), tuple(names))


def _export_name(table: TableConfig) -> str | None:
    """The name the base export's quarantined rows carry as their file (None: no base export)."""
    return os.path.basename(table.base_snapshot) if table.base_snapshot else None


def _size(file_path: str) -> int:
    try:
        return file_size(file_path)
    except OSError:
        return 0  # gone from the landing area: its records are quarantined again, saying so


def ingest_replay(cfg: Config, table: TableConfig, batch: Batch, spec: tuple[ReplayFile, ...],
                  spark=None, log=None) -> ChangesResult:
    """Commit a replay batch's changes: its records read again under the configuration as it is
    now, with their first arrival; a second call does nothing. `spark`: a session, or a function
    that starts one, for a base export too big to read again in this process."""
    t0 = time.time()
    given = prepare(cfg, table, batch)
    if given is None:
        return ChangesResult(already_committed=True)
    parts = {(b.seq, f): b.part(f) for b in registered(given.table_dir) for f in b.files}
    files = [_export_item(table, s) if s.batch_seq == BASE_BATCH
             else _work_item(given.landing, s, parts.get((s.batch_seq, s.file))) for s in spec]
    given = dataclasses.replace(given, files=files)
    landed = [f for f in files if f["batch_seq"] != BASE_BATCH]
    parsed, values = parse_batch(table, landed, root=given.landing, text_columns=given.text_columns)
    export = [f for f in files if f["batch_seq"] == BASE_BATCH]
    if export:  # a base row keeps the base's tier: it ranks below every change of its key
        parsed = pa.concat_tables([_export_records(table, export, spec, given.text_columns, spark), parsed])
    parsed = _named_records(parsed, spec)
    original = {s.file: s.batch_seq for s in spec}
    # the records keep their first arrival in their ordering keys; the replay's batch holds them
    n = parsed.num_rows
    for column, value, kind in (("_cdc_batch_seq", batch.seq, pa.int64()), ("_cdc_batch", batch.id, pa.string())):
        parsed = parsed.set_column(parsed.schema.get_field_index(column), column, pa.array([value] * n, kind))
    in_order = Batch(batch.seq, batch.id, tuple(s.file for s in spec))
    return take_parsed(given, table, in_order, parsed, values, log, t0,
                       set_aside=_outcomes_writer(table, given.table_dir, batch, spec, original, log))


def _export_item(table: TableConfig, s: ReplayFile) -> dict:
    assert table.base_snapshot is not None  # a base row is named only for a table with a base export
    return {"path": table.base_snapshot, "file": s.file, "file_index": s.index, "batch_seq": BASE_BATCH,
            "batch_id": BASE_ID}


def _export_records(table: TableConfig, files: list[dict], spec: tuple[ReplayFile, ...],
                    text_columns: tuple[str, ...], spark) -> pa.Table:
    """The base export's rows (and rejections) the replay names, read as the base import reads
    them: in this process, or by Spark's tasks for an export over `local_parse_bytes` (only the
    named rows come back)."""
    if spark is None or batch_bytes(files) <= settings().local_parse_bytes:
        return parse_export(table, files, text_columns)
    from pyspark.sql import functions as F

    named = [(s.file, n) for s in spec if s.batch_seq == BASE_BATCH for n in s.lines]
    wanted = F.lit(False)
    for f in {f for f, _ in named}:
        lines = [n for g, n in named if g == f]
        wanted = wanted | ((F.col("_cdc_file") == f) & (F.col("_cdc_line").isin(lines) | (F.col("_cdc_line") == 0)))
    frame = parse_files(session_of(spark), table, files, snapshot=True, text_columns=text_columns)
    return frame.where(wanted).toArrow().cast(delta.arrow_schema(PARSED_FIELDS))


def _work_item(landing_dir: str, s: ReplayFile, part: Part | None) -> dict:
    """What the replay reads of a file: the bytes its batch took (lines appended later are a batch
    of their own). A file whose taken bytes are no longer there (replaced since) is not read: its
    records stay in quarantine, saying why."""
    file_path = os.path.join(landing_dir, s.file)
    item = {"path": file_path, "file": s.file, "file_index": s.index, "batch_seq": s.batch_seq,
            "batch_id": Batch.id_for(s.batch_seq)}
    if part is None or part.end is None:
        return item
    item.update(start=part.start, end=part.end, lines_before=part.lines_before)
    if part.digest is not None and os.path.exists(file_path):
        if file_size(file_path) < part.end or digest(file_path, part.end) != part.digest:
            item[GONE] = (f"the file was replaced after batch {Batch.id_for(s.batch_seq)} took it: the records "
                          "quarantined then are no longer in it (its new content is a batch of its own)")
    return item


def _named_records(parsed: pa.Table, spec: tuple[ReplayFile, ...]) -> pa.Table:
    """The records (and rejections) the replay names: a whole file's, or those of its lines. A file
    that cannot be read now (gone from the landing area) fails each of its named lines with its
    reason, so each stays in quarantine and the batch's counts still add up."""
    whole = {s.file for s in spec if 0 in s.lines}
    named = {s.file: s.lines for s in spec}
    picked: list[int] = []
    lines: list[int] = []
    for i, (f, n) in enumerate(zip(parsed["_cdc_file"].to_pylist(), parsed["_cdc_line"].to_pylist())):
        if f in whole or n in named.get(f, ()):
            picked.append(i)
            lines.append(n)
        elif n == 0 and f in named:  # the file itself failed: each of its named lines with it
            picked += [i] * len(named[f])
            lines += list(named[f])
    taken = parsed.take(pa.array(picked, pa.int64()))
    return taken.set_column(taken.schema.get_field_index("_cdc_line"), "_cdc_line", pa.array(lines, pa.int64()))


def _outcomes_writer(table: TableConfig, table_dir: str, batch: Batch, spec: tuple[ReplayFile, ...],
                     original: dict[str, int], log) -> Callable[[pa.Table], int]:
    """What a replay does with its rejections: each record it took is written to
    `quarantine_replays`, with its new reason when it failed again (once, before the changes commit:
    a second try of the same replay finds them written)."""
    def set_aside(rejected: pa.Table) -> int:
        failed = {(r["_cdc_file"], r["_cdc_line"]): r["_cdc_reason"] for r in rejected.to_pylist()}
        taken = [(original[s.file], s.file, n) for s in spec for n in s.lines]
        rows = [{"_cdc_batch_seq": seq, "_cdc_file": f, "_cdc_line": n, "_cdc_reason": failed.pop((f, n), None),
                 "replayed_in": batch.seq} for seq, f, n in taken]
        # lines of a whole file replayed that fail on their own now
        rows += [{"_cdc_batch_seq": original[f], "_cdc_file": f, "_cdc_line": n, "_cdc_reason": reason,
                  "replayed_in": batch.seq} for (f, n), reason in sorted(failed.items())]
        replays = path(table_dir, REPLAYS)
        if delta.step_version(replays, REPLAY) < batch.seq:
            delta.append(replays, pa.Table.from_pylist(rows, schema=delta.arrow_schema(REPLAY_FIELDS)), REPLAY, batch.seq)
        again = [r for r in rows if r["_cdc_reason"] is not None]
        if log:
            for r in again[:100]:
                log(f"table {table.name}: replay {batch.id}: file {r['_cdc_file']} line {r['_cdc_line']}: "
                    f"{r['_cdc_reason']}")
        return len(again)
    return set_aside

