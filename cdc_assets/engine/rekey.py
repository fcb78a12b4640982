"""Key identity in the warehouse: which rule built a table's stored keys, and the migration to the
exact one.

Every stored change carries its key as text (`_cdc_key`), which MERGEs, tombstones and rebuilds
compare. Keys are exact (a text key is its text; numbers of a column compare by value) in every
table this release writes, which says so with a marker file beside the table's Delta tables
(MARKER). A warehouse written before read number-like text as a number ('1.10' and '1.1' were
one key) and has no marker. Where none of its stored keys reads differently under the exact rule,
the marker is written and nothing else changes; otherwise its ingest stops with RekeyNeeded until
`cdc-assets rekey TABLE` recomputes every stored key and rebuilds the target and tombstones.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, write_deltalake

from ..core.changes import TRUNCATE, TRUNCATE_KEY
from ..core.config import Config, TableConfig
from ..core.errors import TerminalError
from ..core.values import STRING, Misfit, convert, decode_row, key_text
from . import delta, storage
from .ingest import column_types
from .records import read_records
from .table_layout import BASE, CHANGES, HISTORY, STAGING, TARGET, TOMBSTONES, path

MARKER, EXACT = "key_identity", b"exact\n"
RECORD_TABLES = (CHANGES, STAGING, BASE)


class RekeyNeeded(TerminalError, RuntimeError):
    """A table's stored keys were built by the earlier rule and some read differently now."""


@dataclass(frozen=True)
class RekeyReport:
    table: str
    keys_changed: dict[str, int] = field(default_factory=dict)  # per record table
    target_rebuilt: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"table": self.table, "keys_changed": self.keys_changed, "target_rebuilt": self.target_rebuilt,
                "seconds": self.seconds}


def is_exact(table_dir: str) -> bool:
    try:
        return storage.read_bytes(path(table_dir, MARKER)) == EXACT
    except FileNotFoundError:
        return False


def _mark(table_dir: str) -> None:
    storage.write_bytes(path(table_dir, MARKER), EXACT)


def _exact_keys(records: pa.Table, table: TableConfig, text_columns: set[str]) -> tuple[pa.Array, pa.Array]:
    """Each record's key and partition text by the exact rule, from the values it stores."""
    images = records["_cdc_row"].to_pylist()
    absent = [None] * records.num_rows
    typed = {c: records[c].to_pylist() for c in {*table.keys, *table.partition_by} if c in records.column_names}

    def value(i: int, row: dict | None, column: str):
        v = row.get(column) if row is not None else typed.get(column, absent)[i]
        if v is not None and column in text_columns and not isinstance(v, str):
            try:
                return convert(v, STRING)
            except Misfit:
                return v
        return v

    keys: list[str] = []
    partitions: list[str | None] = []
    ops = records["_cdc_op"].to_pylist()
    for i, image in enumerate(images):
        if ops[i] == TRUNCATE:  # the whole table's, whatever the key rule
            keys.append(TRUNCATE_KEY)
            partitions.append(None)
            continue
        row = decode_row(image) if image is not None else None
        keys.append(key_text([value(i, row, k) for k in table.keys]))
        partitions.append(key_text([value(i, row, c) for c in table.partition_by]) if table.partition_by else None)
    return pa.array(keys, pa.string()), pa.array(partitions, pa.string())


def _rekeyed(table_path: str, table: TableConfig, text_columns: set[str]) -> tuple[pa.Table | None, int]:
    """The record table with exact keys, and how many of its keys differ (0: nothing to write)."""
    records = read_records(table_path, "true")
    if records is None or records.num_rows == 0:
        return None, 0
    keys, partitions = _exact_keys(records, table, text_columns)
    differing = pc.sum(pc.cast(pc.not_equal(keys, records["_cdc_key"].combine_chunks()), pa.int64())).as_py() or 0
    if table.partition_by:
        stored = records["_cdc_partition"].combine_chunks()
        moved = pc.fill_null(pc.not_equal(partitions, stored), True)
        moved = pc.and_(moved, pc.invert(pc.and_(pc.is_null(partitions), pc.is_null(stored))))  # a truncate's
        differing += pc.sum(pc.cast(moved, pa.int64())).as_py() or 0
    if not differing:
        return None, 0
    records = records.set_column(records.schema.get_field_index("_cdc_key"), "_cdc_key", keys)
    records = records.set_column(records.schema.get_field_index("_cdc_partition"), "_cdc_partition", partitions)
    return records, differing


def _text_columns(table_dir: str) -> set[str]:
    return {c for c, t in column_types(table_dir, marked=False).items() if t == STRING}


def ensure_exact(cfg: Config, table: TableConfig) -> None:
    """Before a batch is ingested: mark a new table, and an earlier one whose stored keys all read
    the same under the exact rule; RekeyNeeded when some do not (their MERGEs would miss the
    target's rows)."""
    table_dir = cfg.table_dir(table.name)
    if is_exact(table_dir):
        return
    if all(delta.open_table(path(table_dir, name)) is None for name in (CHANGES, BASE)):
        _mark(table_dir)  # nothing stored yet: every key it stores is exact
        return
    text_columns = _text_columns(table_dir)
    for name in (STAGING, BASE):
        _, differing = _rekeyed(path(table_dir, name), table, text_columns)
        if differing:
            raise RekeyNeeded(
                f"table {table.name}: its stored keys were built by an earlier cdc_assets, which read number-like "
                f"text keys as numbers ('1.10' and '1.1' were one key); {differing} stored keys of {name} read "
                f"differently now. Run `cdc-assets rekey {table.name}` once: it recomputes every stored key and "
                f"rebuilds the target")
    _mark(table_dir)


def rekey(spark, cfg: Config, table: TableConfig) -> RekeyReport:
    """Recompute every stored key by the exact rule, then rebuild target and tombstones from
    staging (and the history from changes) as of the batch the target reached. Each step finds
    what is left to do, so a killed rekey goes on where it stopped; the marker comes last."""
    from . import history, target_build

    t0 = time.time()
    table_dir = cfg.table_dir(table.name)
    if is_exact(table_dir):
        return RekeyReport(table.name, seconds=round(time.time() - t0, 2))
    text_columns = _text_columns(table_dir)
    changed: dict[str, int] = {}
    for name in RECORD_TABLES:
        table_path = path(table_dir, name)
        records, differing = _rekeyed(table_path, table, text_columns)
        if records is not None:
            write_deltalake(delta.load(table_path), records, mode="overwrite", schema_mode="merge",
                            commit_properties=CommitProperties(custom_metadata={"cdc.step": "rekey"}))
        changed[name] = differing
    # Rebuilt whatever the record tables said: a rekey killed after rewriting them finds nothing
    # left to recompute there, and tombstones (keys only) cannot be checked against their values.
    target = delta.open_table(path(table_dir, TARGET))
    rebuilt = target is not None and delta.txn_version(target, TARGET) >= 0
    if target is not None and rebuilt:
        storage.remove_tree(path(table_dir, TOMBSTONES))  # rebuilt with the target from staging's deletes
        target_build.rebuild_whole(spark, cfg, table, target, delta.txn_version(target, TARGET))
    if table.history and delta.open_table(path(table_dir, HISTORY)) is not None:
        history.rebuild(spark, cfg, table)
    _mark(table_dir)
    return RekeyReport(table.name, changed, rebuilt, round(time.time() - t0, 2))
