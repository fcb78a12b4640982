"""Target partition keys a table holds or is about to (for Dagster's partition list).

Read from what is small: the target's file list (its partition values), the staged
batches not yet applied, and the partition list the base import recorded; never a scan
of the whole history.
"""
from __future__ import annotations

import json
from urllib.parse import unquote

import pyarrow as pa

from ..core.config import Config, TableConfig
from ..core.target import partition_key
from . import delta, storage
from .partition_layout import PartitionLayout
from .table_layout import BASE, STAGING, TARGET, path


def staged_partition_keys(cfg: Config, table: TableConfig) -> list[str]:
    if not table.partition_by:
        return []
    table_dir = cfg.table_dir(table.name)
    target = delta.open_table(path(table_dir, TARGET))
    applied = delta.txn_version(target, TARGET)
    keys: set[str] = set()
    if target is not None:
        layout = PartitionLayout.of(target, table.partition_by)
        for a in pa.table(target.get_add_actions(flatten=False)).to_pylist():
            # get_add_actions gives paths URI-encoded once more than the files' names
            file = storage.join(path(table_dir, TARGET), unquote(a["path"]))
            keys.add(partition_key(table.partition_by, layout.values(a.get("partition") or {}, file)))
    texts: set[str] = set()
    # the partitions rows go to: upserts', and in a soft-delete table deletes' too (rules.md#rule-12)
    ops = "'U', 'D'" if table.soft_deletes else "'U'"
    pending = delta.select(path(table_dir, STAGING), (("_cdc_partition", "string"),),
                           f"_cdc_batch_seq > {applied} AND _cdc_op IN ({ops}) AND _cdc_partition IS NOT NULL")
    if pending is not None:
        texts.update(pending["_cdc_partition"].unique().to_pylist())
    if target is None:
        base = delta.step_commit(path(table_dir, BASE), BASE) or {}
        texts.update(json.loads(base.get("partitions", "[]")))
    keys.update(partition_key(table.partition_by, json.loads(t)) for t in texts)
    return sorted(keys)
