"""A table's current state before its merge: the target with the staged, not yet applied
changes laid over it (Gluent's delta view).

The winners are the apply's own (engine.merge_source.merge_source: each pending key's latest change,
an upsert older than its tombstone dropped, a key whose changes leave columns out combined),
and a winner replaces the key's target row only when its ordering key is greater (a REFILL's
equal one too), as the MERGE's conditions say. A fresh read therefore equals
the target the next apply commits, whenever that apply runs (apply: {min_changes, max_staleness}).

Whether a table's merge is due is decided here too, from what is pending.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ..core import target as shape
from ..core.apply_policy import Decision, decide
from ..core.changes import DELETE, REFILL
from ..core.config import Config, TableConfig
from ..core.errors import TerminalError
from . import delta
from .landing import batches_path
from .merge_source import merge_source
from .table_layout import BASE, STAGING, TARGET, path
from .target_typing import cast_typed, existing_columns, target_schema


class FreshReadError(TerminalError, RuntimeError):
    """A fresh read that cannot be made; the message names the table."""


@dataclasses.dataclass(frozen=True)
class Pending:
    applied: int  # the last batch in the target (-1: none)
    reached: int  # the last batch staged (0: only the base snapshot)
    changes: int  # staged changes of the batches after `applied`
    oldest_registered_at: dt.datetime | None  # when the oldest of those batches was registered
    target_exists: bool

    def oldest_wait(self, now: dt.datetime) -> float | None:
        return None if self.oldest_registered_at is None else (now - self.oldest_registered_at).total_seconds()


def pending(cfg: Config, table: TableConfig, target: DeltaTable | None = None) -> Pending:
    """What waits for the next merge; reads the Delta logs and the pending batches' statistics.
    `target`: the target snapshot to measure against (default: the current one)."""
    table_dir = cfg.table_dir(table.name)
    if target is None:
        target = delta.snapshot(path(table_dir, TARGET))
    applied = delta.txn_version(target, TARGET)
    staged = delta.step_version(path(table_dir, STAGING), STAGING)
    has_base = table.base_snapshot is not None and delta.step_version(path(table_dir, BASE), BASE) >= 0
    reached = max(staged, 0 if has_base else -1)
    if reached <= applied:
        return Pending(applied, reached, 0, None, target is not None)
    counted = delta.query(path(table_dir, STAGING),
                          f"SELECT count(*) AS n FROM t WHERE _cdc_batch_seq > {applied} AND _cdc_batch_seq <= {reached}")
    n = int(counted.column("n")[0].as_py()) if counted is not None and counted.num_rows else 0
    ledger = delta.read_arrow(batches_path(table_dir), columns=["batch_seq", "registered_at"],
                              filters=[("batch_seq", ">", applied), ("batch_seq", "<=", reached)])
    times = [] if ledger is None else [t for t in ledger.column("registered_at").to_pylist() if t]
    oldest = dt.datetime.fromisoformat(min(times)) if times else None
    return Pending(applied, reached, n, oldest, target is not None)


def decision(cfg: Config, table: TableConfig, now: dt.datetime | None = None) -> tuple[Decision, Pending]:
    """Whether to merge now (after `table.apply`), and what is pending."""
    p = pending(cfg, table)
    now = now or dt.datetime.now(dt.UTC)
    return decide(table.apply, p.target_exists, p.changes, p.oldest_wait(now)), p


@dataclasses.dataclass(frozen=True)
class FreshRead:
    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]  # the target's rows the pending changes leave, then the changed rows
    applied: int  # the batch the target holds
    reached: int  # the batch the fresh read holds
    pending_changes: int


def fresh_read(cfg: Config, table: TableConfig, with_metadata: bool = False) -> FreshRead:
    """The table as the next apply will leave it, streamed: the target is read file by file and
    only the pending batches' rows and keys are held in memory."""
    table_dir = cfg.table_dir(table.name)
    target_path = path(table_dir, TARGET)
    # One snapshot of the target serves every read below: an apply committing meanwhile must not
    # leave the pending changes measured against one version and laid over another.
    dt_ = delta.open_table(target_path)
    p = pending(cfg, table, dt_)
    if dt_ is None:
        raise FreshReadError(f"table {table.name}: no target yet: the first build happens at the next run "
                             f"({p.reached + 1 if p.reached >= 0 else 0} batches staged)")
    truncate = None  # a pending truncate's ordering key: the target rows at or below it go
    if p.reached > p.applied:
        m = merge_source(table_dir, table, dt_, p.applied, p.reached)
        columns, source, truncate = m.columns, m.source, m.truncate
    else:
        columns = {c: t for c, t in existing_columns(dt_).items() if c not in shape.META_COLUMNS}
        source = target_schema(columns, shape.META_COLUMNS + ("_cdc_apply",)).empty_table()
    # The keys' current ordering keys, read as the MERGE reads them: by key, files pruned by statistics.
    keys = source.column("_cdc_key").to_pylist()
    current = delta.rows_with_keys(dt_, (("_cdc_key", "string"), ("_cdc_order", "string")), keys)
    order_of = dict(zip(current.column("_cdc_key").to_pylist(), current.column("_cdc_order").to_pylist())) \
        if current is not None else {}
    wins = [k not in order_of or o > order_of[k] or (o == order_of[k] and a == REFILL)
            for k, o, a in zip(keys, source.column("_cdc_order").to_pylist(), source.column("_cdc_apply").to_pylist())]
    winning = source.filter(pa.array(wins, pa.bool_()))
    changed = pa.array(winning.column("_cdc_key").to_pylist(), pa.string())
    upserts = winning.filter(pc.not_equal(winning.column("_cdc_apply"), DELETE)).drop_columns(["_cdc_apply"])
    schema = target_schema(columns)
    keep = list(columns) + (list(shape.META_COLUMNS) if with_metadata else [])
    out_schema = pa.schema([schema.field(c) for c in keep])

    # a table switched from soft to hard deletes: its flagged rows go at the next apply
    unflag = not table.soft_deletes and shape.DELETED in dt_.schema().to_arrow().names

    def batches() -> Iterator[pa.RecordBatch]:
        for b in dt_.to_pyarrow_dataset().to_batches():
            if unflag:
                b = b.filter(pc.invert(pc.fill_null(b.column(shape.DELETED), False)))
            if not b.num_rows:
                continue
            b = cast_typed(b, columns).cast(schema)
            kept = b.filter(pc.invert(pc.is_in(b.column("_cdc_key"), value_set=changed))) if len(changed) else b
            if truncate is not None and table.soft_deletes:  # kept, flagged deleted (rules.md#rule-12)
                at_or_below = pc.less_equal(kept.column("_cdc_order"), truncate)
                flag = pc.or_(pc.fill_null(kept.column(shape.DELETED), False), at_or_below)
                kept = kept.set_column(kept.schema.get_field_index(shape.DELETED), shape.DELETED, flag)
            elif truncate is not None:
                kept = kept.filter(pc.greater(kept.column("_cdc_order"), truncate))
            if kept.num_rows:
                yield pa.RecordBatch.from_arrays([kept.column(c) for c in keep], schema=out_schema)
        if upserts.num_rows:
            yield from upserts.cast(schema).select(keep).to_batches()

    return FreshRead(out_schema, batches(), p.applied, max(p.reached, p.applied), p.changes)


def fresh_table(cfg: Config, table: TableConfig, with_metadata: bool = False) -> pa.Table:
    """The table as the next apply will leave it, as one Arrow table (its source columns, and the
    `_cdc_*` bookkeeping columns with `with_metadata`)."""
    read = fresh_read(cfg, table, with_metadata)
    return pa.Table.from_batches(list(read.batches), schema=read.schema)
