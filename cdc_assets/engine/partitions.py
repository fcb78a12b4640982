"""Target partition keys present in a table's staged history (for Dagster's partition list)."""
from __future__ import annotations

import json

import pyarrow.compute as pc

from ..core.config import Config, TableConfig
from ..core.target import partition_key
from . import delta
from .tables import BASE, STAGING, path


def staged_partition_keys(cfg: Config, table: TableConfig) -> list[str]:
    if not table.partition_by:
        return []
    texts: set[str] = set()
    for name in (STAGING, BASE):
        data = delta.read_arrow(path(cfg.table_dir(table.name), name), columns=["_cdc_partition", "_cdc_op"])
        if data is not None and data.num_rows:
            upserts = data.filter(pc.equal(data["_cdc_op"], "U"))
            texts.update(v for v in pc.unique(upserts["_cdc_partition"]).to_pylist() if v is not None)
    return sorted(partition_key(table.partition_by, json.loads(t)) for t in texts)
