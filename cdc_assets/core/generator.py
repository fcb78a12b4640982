"""A deterministic change feed for demos and tests.

Like a JMeter load plan: N changes on one table with a mix of inserts,
updates and deletes, leaving a known final source state to reconcile against.
Then the changes as Datastream JSON events (rules.md#datastream) with each source's own log
positions, and their delivery as real feeds arrive: batches of files,
shuffled, some events delivered twice (same uuid), some delayed to a later batch.

Pure: no file I/O, and the same seed always gives the same history and events.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict, TypeVar

from .values import Row, Value

SOURCES = ("oracle", "mysql", "postgres", "sqlserver")
READ_METHODS = {
    "oracle": "oracle-cdc-logminer",
    "mysql": "mysql-cdc-binlog",
    "postgres": "postgres-cdc-wal",
    "sqlserver": "sqlserver-cdc",
}
INSERT, UPDATE, DELETE = "INSERT", "UPDATE", "DELETE"

# Column kinds and their values. `region` has few values, to partition by.
DEFAULT_COLUMNS = {"customer": "text", "amount": "amount", "status": "status", "region": "region"}
NAMES = ("ana", "bo", "chen", "dara", "eli", "fatima", "gus", "zoë", "o'neil", "lee, ann")
STATUSES = ("new", "paid", "shipped", "cancelled", None)
REGIONS = ("emea", "amer", "apac")
KINDS: dict[str, Callable[[random.Random], Value]] = {
    "text": lambda rng: rng.choice(NAMES),
    "amount": lambda rng: rng.randrange(100, 50_000) / 100,  # a decimal with two places
    "status": lambda rng: rng.choice(STATUSES),
    "region": lambda rng: rng.choice(REGIONS),
    "int": lambda rng: rng.randrange(0, 1000),
}
DEFAULT_START = dt.datetime(2026, 1, 1)
# A Datastream JSON event, and the source log position fields in its `source_metadata`.
Event = dict[str, object]
Position = dict[str, int | str]
_Delivered = TypeVar("_Delivered")


@dataclass(frozen=True)
class Operation:
    """One change made on the source, in the source's true order."""
    seq: int
    op: str  # INSERT, UPDATE or DELETE
    key: int
    row: Row  # the full row after the change; for a delete, the row as it was
    at: dt.datetime  # whole seconds: many changes share one


class Counts(TypedDict):
    inserts: int
    updates: int
    deletes: int


@dataclass
class History:
    table: str
    key: str
    columns: dict[str, str]  # column name -> kind, without the key
    operations: list[Operation]
    final: dict[int, Row]  # key -> row, the live rows at the end

    def counts(self) -> Counts:
        out = {INSERT: 0, UPDATE: 0, DELETE: 0}
        for o in self.operations:
            out[o.op] += 1
        return {"inserts": out[INSERT], "updates": out[UPDATE], "deletes": out[DELETE]}


def split_counts(changes: int, inserts: float, updates: float, deletes: float) -> tuple[int, int, int]:
    """Exact counts for the percentages (largest remainder), checking they are possible."""
    pcts = (inserts, updates, deletes)
    if changes < 0:
        raise ValueError(f"the number of changes must not be negative, not {changes}")
    if any(p < 0 for p in pcts) or abs(sum(pcts) - 100) > 1e-9:
        raise ValueError(f"inserts, updates and deletes must be percentages adding to 100, "
                         f"not {inserts:g} + {updates:g} + {deletes:g} = {sum(pcts):g}")
    exact = [changes * p / 100 for p in pcts]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(3), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: changes - sum(counts)]:
        counts[i] += 1
    n_ins, n_upd, n_del = counts
    # The table starts empty: every update and delete needs a live row when it runs.
    if n_del > n_ins or (n_del == n_ins and n_upd and n_ins):
        raise ValueError(f"{n_del} deletes need more than {n_ins} inserts: the table starts empty "
                         f"(use fewer deletes than inserts)")
    if n_upd and not n_ins:
        raise ValueError(f"{n_upd} updates need at least one insert: the table starts empty")
    return n_ins, n_upd, n_del


class _LiveKeys:
    """A set with a uniform, deterministic random choice."""

    def __init__(self) -> None:
        self.items: list[int] = []
        self.index: dict[int, int] = {}

    def add(self, k: int) -> None:
        self.index[k] = len(self.items)
        self.items.append(k)

    def remove(self, k: int) -> None:
        i = self.index.pop(k)
        last = self.items.pop()
        if last != k:
            self.items[i] = last
            self.index[last] = i

    def choice(self, rng: random.Random) -> int:
        return self.items[rng.randrange(len(self.items))]

    def __len__(self) -> int:
        return len(self.items)


def generate_history(*, table: str = "ORDERS", changes: int = 1000, inserts: float = 40, updates: float = 40,
                     deletes: float = 20, seed: int = 0, key: str = "id", columns: Mapping[str, str] | None = None,
                     start: dt.datetime = DEFAULT_START, changes_per_second: int = 50,
                     reuse_pct: float = 10) -> History:
    """The source's changes in true order and its final state.

    Updates and deletes only touch live keys; an insert reuses a deleted key with
    probability `reuse_pct`%, else takes the next new id.
    """
    columns = dict(DEFAULT_COLUMNS if columns is None else columns)
    unknown = sorted(set(columns.values()) - set(KINDS))
    if unknown or key in columns:
        raise ValueError(f"unknown column kinds {unknown} (known: {sorted(KINDS)})" if unknown
                         else f"key column {key!r} is also listed among the columns")
    if changes_per_second < 1:
        raise ValueError("changes_per_second must be at least 1")
    n_ins, n_upd, n_del = split_counts(changes, inserts, updates, deletes)
    rng = random.Random(f"history:{seed}")
    kinds = [INSERT] * n_ins + [UPDATE] * n_upd + [DELETE] * n_del
    rng.shuffle(kinds)

    state: dict[int, Row] = {}
    live, dead = _LiveKeys(), _LiveKeys()
    next_id = 1
    ops: list[Operation] = []
    for i in range(len(kinds)):
        if kinds[i] != INSERT and not live:
            # Nothing to update or delete yet: bring the next insert forward.
            j = kinds.index(INSERT, i)
            kinds[i], kinds[j] = kinds[j], kinds[i]
        kind = kinds[i]
        if kind == INSERT:
            if dead and rng.random() * 100 < reuse_pct:
                k = dead.choice(rng)
                dead.remove(k)
            else:
                k, next_id = next_id, next_id + 1
            row: Row = {key: k, **{c: KINDS[kind_](rng) for c, kind_ in columns.items()}}
            live.add(k)
            state[k] = row
        elif kind == UPDATE:
            k = live.choice(rng)
            row = _updated(state[k], columns, rng)
            state[k] = row
        else:
            k = live.choice(rng)
            row = state.pop(k)
            live.remove(k)
            dead.add(k)
        at = start + dt.timedelta(seconds=i // changes_per_second)
        ops.append(Operation(i + 1, kind, k, row, at))
    return History(table, key, columns, ops, state)


def _updated(row: Row, columns: Mapping[str, str], rng: random.Random) -> Row:
    """A new image changing some columns; `region` moves rarely (a partition move)."""
    new = dict(row)
    names = list(columns)
    changing = [c for c in names if rng.random() < (0.15 if columns[c] == "region" else 0.5)]
    if not changing and names:
        changing = [rng.choice(names)]
    for c in changing:
        while new[c] == row[c]:  # every kind has several values: an update changes the row
            new[c] = KINDS[columns[c]](rng)
    return new


def replay(operations: Iterable[Operation]) -> dict[int, Row]:
    """The state the operations leave, applied in the given order."""
    state: dict[int, Row] = {}
    for o in operations:
        if o.op == DELETE:
            state.pop(o.key, None)
        else:
            state[o.key] = o.row
    return state


# ---- Datastream events ------------------------------------------------------

def _oracle_positions(rng: random.Random) -> Iterator[Position]:
    scn = rng.randrange(10**12, 2 * 10**13)
    seq, block, byte, ssn = rng.randrange(0x1000, 0xFFFFF), rng.randrange(1, 0xFFFFF), 0x10, 0
    while True:
        yield {"scn": scn, "rs_id": f"0x{seq:06x}.{block:08x}.{byte:04x}", "ssn": ssn}
        r = rng.random()
        if r < 0.2:  # the next row of the same redo record
            ssn += 1
            continue
        if r >= 0.4:  # else: a later redo record at the same scn
            scn += rng.randint(1, 5000)
        byte, ssn = byte + rng.randint(0x10, 0x200), 0
        if byte > 0xFFFF or rng.random() < 0.01:
            block, byte = block + 1, 0x10
        if rng.random() < 0.005:  # a log switch
            seq, block = seq + 1, 1


def _mysql_positions(rng: random.Random, first_binlog: int) -> Iterator[Position]:
    number, pos, left = first_binlog, 4 + rng.randint(120, 400), rng.randint(200, 400)
    while True:
        # `%06d` grows a seventh digit after mysql-bin.999999, as MySQL does.
        yield {"log_file": f"mysql-bin.{number:06d}", "log_position": pos}
        left -= 1
        if left == 0:  # rotate: the next file starts just after its header
            number, pos, left = number + 1, 4 + rng.randint(120, 200), rng.randint(200, 400)
        else:
            pos += rng.randint(150, 1500)


def _postgres_positions(rng: random.Random) -> Iterator[Position]:
    # Start near a 4 GiB boundary, so that the high part soon grows and the low
    # part restarts with fewer hex digits: only numbers compare these right.
    hi, lo = rng.randrange(0, 0x40), 0x100000000 - rng.randrange(0x8000, 0x40000)
    while True:
        yield {"lsn": f"{hi:X}/{lo:X}"}
        lo += rng.randint(0x28, 0x400)
        if lo > 0xFFFFFFFF:
            hi, lo = hi + 1, lo - 0x100000000


def _sqlserver_positions(rng: random.Random) -> Iterator[Position]:
    vlf, block, slot = rng.randrange(0x20, 0x4000), rng.randrange(0x10, 0xFFFF0000), 1
    while True:
        yield {"lsn": f"{vlf:08X}:{block:08X}:{slot:04X}"}
        if rng.random() < 0.3:
            slot += 1
            continue
        block, slot = block + rng.randint(0x8, 0x200), 1
        if block > 0xFFFFFFFF or rng.random() < 0.01:
            vlf, block = vlf + 1, 0x10


def datastream_events(history: History, source: str, *, seed: int = 0, database: str = "demo",
                      first_binlog: int = 1) -> list[Event]:
    """The history as Datastream JSON events, one per operation, in true order.

    `first_binlog` is the first MySQL binlog file number (999999 to see rotation
    past mysql-bin.999999).
    """
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r} (expected one of {', '.join(SOURCES)})")
    rng = random.Random(f"events:{source}:{seed}")
    positions: Iterator[Position] = {
        "oracle": lambda: _oracle_positions(rng),
        "mysql": lambda: _mysql_positions(rng, first_binlog),
        "postgres": lambda: _postgres_positions(rng),
        "sqlserver": lambda: _sqlserver_positions(rng),
    }[source]()
    table = history.table
    names = [history.key, *history.columns]
    schema_key = hashlib.sha1(",".join(names).encode("utf-8")).hexdigest()[:10]
    split_update = source in ("oracle", "mysql")  # they report UPDATE-INSERT; the others UPDATE
    events: list[Event] = []
    for op, pos in zip(history.operations, positions):
        change_type = "UPDATE-INSERT" if op.op == UPDATE and split_update else op.op
        read_at = op.at + dt.timedelta(milliseconds=rng.randrange(500, 90_000))
        meta = _source_metadata(source, database, table, history.key, op, change_type, pos)
        events.append({
            "stream_name": f"projects/demo/locations/us-central1/streams/{source}-to-gcs",
            "read_method": READ_METHODS[source],
            "object": f"{database}_{table}",
            "schema_key": schema_key,
            "uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "read_timestamp": read_at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "source_timestamp": op.at.strftime("%Y-%m-%dT%H:%M:%S"),
            "source_metadata": meta,
            "payload": dict(op.row),
        })
    return events


def _source_metadata(source: str, database: str, table: str, key: str, op: Operation, change_type: str,
                     pos: Position) -> Event:
    common = {"table": table, "is_deleted": op.op == DELETE, "change_type": change_type}
    tx = f"{op.seq // 7}"
    if source == "oracle":
        return {**common, "database": database.upper(), "schema": database.upper(), "tx_id": f"1.{tx}.0", **pos}
    if source == "mysql":
        return {**common, "database": database, "primary_keys": [key], **pos}
    if source == "postgres":
        return {**common, "schema": "public", "tx_id": int(tx) + 1000, "primary_keys": [key], **pos}
    return {**common, "database": database, "schema": "dbo", "tx_id": tx, "replication_index": [key], **pos}


# ---- Debezium events, with what sources leave out of an update --------------

UNAVAILABLE = "__debezium_unavailable_value"  # Debezium's placeholder for an unchanged TOASTed value


def debezium_events(history: History, *, seed: int = 0, toast_columns: Iterable[str] = (),
                    partial: bool = False) -> list[Event]:
    """The history as Debezium PostgreSQL change events (the bare envelope), one per operation, in
    true order. An update leaves out what a source leaves out of one: a `toast_columns` column
    whose value did not change is the TOAST placeholder (written as its text, or as a one-element
    array of it), and with `partial` every other column that did not change is null or absent (a
    source that sends only what changed). Inserts and deletes carry their whole row."""
    rng = random.Random(f"debezium:{seed}")
    toast = set(toast_columns)
    lsn = rng.randrange(10**6, 10**9)
    before: dict[int, Row] = {}
    events: list[Event] = []
    for o in history.operations:
        lsn += rng.randint(40, 4000)
        ts_ms = int(o.at.replace(tzinfo=dt.UTC).timestamp() * 1000)
        image: dict[str, object] = dict(o.row)
        if o.op == UPDATE:
            old = before.get(o.key, {})
            for c in history.columns:
                if c not in old or old[c] != o.row[c]:
                    continue
                if c in toast:
                    image[c] = UNAVAILABLE if rng.random() < 0.7 else [UNAVAILABLE]
                elif partial and rng.random() < 0.5:
                    image[c] = None
                elif partial:
                    del image[c]
        if o.op == DELETE:
            before.pop(o.key, None)
        else:
            before[o.key] = o.row
        op = {INSERT: "c", UPDATE: "u", DELETE: "d"}[o.op]
        source = {"connector": "postgresql", "name": "demo", "ts_ms": ts_ms, "db": "demo", "schema": "public",
                  "table": history.table, "lsn": lsn}
        events.append({"before": image if o.op == DELETE else None, "after": None if o.op == DELETE else image,
                       "op": op, "source": source, "ts_ms": ts_ms + rng.randrange(5, 900)})
    return events


# ---- delivery ---------------------------------------------------------------

def deliver(events: Sequence[_Delivered], batches: int = 3, files_per_batch: int = 3, duplicate_pct: float = 3,
            delay_pct: float = 5, seed: int = 0) -> list[list[list[_Delivered]]]:
    """Events as they land: batches (in time) of files of events, shuffled.

    Batch b takes the b-th slice of the true order; `delay_pct`% of the events
    move to a later batch, `duplicate_pct`% are delivered once more (same uuid)
    in their batch or a later one. Empty files and batches are left out.
    """
    if batches < 1 or files_per_batch < 1:
        raise ValueError("batches and files per batch must be at least 1")
    if not (0 <= duplicate_pct <= 100 and 0 <= delay_pct <= 100):
        raise ValueError("duplicate and delay percentages must be between 0 and 100")
    rng = random.Random(f"deliver:{seed}")
    n = len(events)
    batch_of = [i * batches // n for i in range(n)] if n else []
    early = [i for i in range(n) if batch_of[i] < batches - 1]
    for i in rng.sample(early, min(len(early), round(n * delay_pct / 100))):
        batch_of[i] = rng.randint(batch_of[i] + 1, batches - 1)
    deliveries = list(range(n))
    deliveries += rng.sample(range(n), min(n, round(n * duplicate_pct / 100)))
    landed: list[list[_Delivered]] = [[] for _ in range(batches)]
    for j, i in enumerate(deliveries):
        b = batch_of[i] if j < n else rng.randint(batch_of[i], batches - 1)
        landed[b].append(events[i])
    out: list[list[list[_Delivered]]] = []
    for batch in landed:
        rng.shuffle(batch)
        files = [batch[f * len(batch) // files_per_batch:(f + 1) * len(batch) // files_per_batch]
                 for f in range(files_per_batch)]
        files = [f for f in files if f]
        if files:
            out.append(files)
    return out


# ---- snapshot exports --------------------------------------------------------

def snapshot_exports(history: History, batches: int = 3, files_per_batch: int = 2,
                     seed: int = 0) -> list[list[list[Row]]]:
    """A `format: snapshot` source's deliveries: the source's whole state after each of `batches`
    cuts of its history (the last one after every change), each export's rows shuffled and split
    into at most `files_per_batch` files (an export of an empty table is one empty file)."""
    if batches < 1 or files_per_batch < 1:
        raise ValueError("batches and files per batch must be at least 1")
    rng = random.Random(f"snapshots:{seed}")
    n = len(history.operations)
    out: list[list[list[Row]]] = []
    for b in range(1, batches + 1):
        rows = [dict(r) for r in replay(history.operations[: b * n // batches]).values()]
        rng.shuffle(rows)
        files = [rows[f * len(rows) // files_per_batch:(f + 1) * len(rows) // files_per_batch]
                 for f in range(files_per_batch)]
        out.append([f for f in files if f] or [[]])
    return out
