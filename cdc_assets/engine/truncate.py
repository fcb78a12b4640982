"""A pending truncate (rules.md#rule-9) on the apply's delta-rs MERGE path, without reading the table's keys.

The incremental apply lays a truncate over the target file by file (engine/rewrite.py): a file
ranking wholly at or below it goes from its statistics, one ranking above it is not opened, and
only a file it cuts in part is read. That path takes neither a new column nor a change data feed,
which take delta-rs' MERGE. For them:

- a new column is added to the target's schema first (a metadata commit: older rows read it as
  null, rules.md#rule-6), so the batch and its truncate then take the file-by-file path in one commit;
- a change data feed is written by delta-rs, so the truncate is its own MERGE before the batch's,
  which records each row it deletes. Its source is one row, the truncate's ordering key, matched
  by every target row ranking at or below it: delta-rs streams the target through that join, and
  neither the truncate's ordering key nor any key value goes into the commit (a MERGE's condition
  is written there; this one names columns only).

Neither commit carries the apply's watermark (unless the truncate's MERGE is the apply's only
commit): a run stopped after one of them applies its batches again, and the truncate then finds
nothing more to take.
"""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from ..core import names
from ..core import target as shape
from . import delta

ORDER = "_cdc_order"
# What the commits before an apply's own are, for a reader of the target's history.
STEP_COLUMNS, STEP_TRUNCATE = "columns", "truncate"


def truncate_merge(target_path: str, dt_: DeltaTable, truncate: str, soft: bool,
                   props: delta.CommitProperties | None = None) -> tuple[DeltaTable, int]:
    """Delete every target row ranking at or below `truncate` (in a soft-delete table, flag it
    deleted, rules.md#rule-12) by a MERGE of its own, so that the change data feed records each; the table
    as it is then, and how many rows it deleted (or flagged). `props`: the apply's own commit
    properties, when this MERGE is its only commit (the batch holds nothing else to merge)."""
    source = pa.table({ORDER: pa.array([truncate], pa.string())})
    if props is None:
        props = delta.CommitProperties(custom_metadata={"cdc.step": STEP_TRUNCATE, "cdc.truncate": "true"})
    merge = dt_.merge(source, f"t.{ORDER} <= s.{ORDER}", source_alias="s", target_alias="t", streamed_exec=True,
                      commit_properties=props)
    if soft:
        flag = "t." + names.datafusion(shape.DELETED)
        result = merge.when_matched_update({names.datafusion(shape.DELETED): "true"},
                                           f"{flag} IS NULL OR NOT {flag}").execute()
        done = result.get("num_target_rows_updated", 0)
    else:
        done = merge.when_matched_delete().execute().get("num_target_rows_deleted", 0)
    return delta.load(target_path), int(done)
