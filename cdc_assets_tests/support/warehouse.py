"""Readings of the Delta tables a run leaves in the warehouse."""
from __future__ import annotations

import os
from collections import defaultdict
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable

from cdc_assets.core.config import Config
from cdc_assets.core.partition_text import is_derived_column

from .expected import TABLE


def delta_rows(cfg: Config, table: str, name: str) -> list[dict]:
    """Every row of one of a table's Delta tables (`changes`, `staging`, `target`, ...)."""
    return DeltaTable(os.path.join(cfg.table_dir(table), name)).to_pyarrow_table().to_pylist()


def target_rows(cfg: Config, table: str, source_only: bool = True) -> list[dict]:
    """The target's rows; `source_only`: without the `_cdc_` columns. A derived partition column
    (`_cdc_part_`, engine/partition_layout.py) is the layout's, never one of the rows' columns."""
    rows = delta_rows(cfg, table, "target")
    if source_only:
        return [{k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows]
    return [{k: v for k, v in r.items() if not is_derived_column(k)} for r in rows]


def delta_version(cfg: Config, table: str, name: str) -> int:
    """The current version of one of a table's Delta tables (-1 when it does not exist yet)."""
    p = os.path.join(cfg.table_dir(table), name)
    if not os.path.isdir(os.path.join(p, "_delta_log")):
        return -1
    return DeltaTable(p).version()


def target_version(cfg: Config, table: str) -> int:
    return DeltaTable(os.path.join(cfg.table_dir(table), "target")).version()


def delta_versions(cfg: Config, table: str = TABLE) -> dict[str, int]:
    """The current version of each of a table's Delta tables that exists."""
    names = ("batches", "changes", "staging", "base", "target", "quarantine")
    return {name: v for name in names if (v := delta_version(cfg, table, name)) >= 0}


def files_by_partition(cfg: Config, table: str = TABLE, version: int | None = None) -> dict[str, set]:
    """region partition value -> data file paths of the (current) target snapshot."""
    dt = DeltaTable(os.path.join(cfg.table_dir(table), "target"), version=version)
    out = defaultdict(set)
    for a in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
        out[a.get("partition.region")].add(unquote(unquote(a["path"])))
    return dict(out)


def values(rows: list[dict], key: str, col: str) -> dict:
    """{key value: column value} of target rows."""
    return {r[key]: r[col] for r in rows}


def by_key(rows: list[dict], *keys: str) -> dict:
    return {tuple(r[k] for k in keys): r for r in rows}


def canonical(rows: list[dict]) -> list[str]:
    """Rows as comparable text, whatever their columns' order."""
    return sorted(repr(sorted(r.items())) for r in rows)
