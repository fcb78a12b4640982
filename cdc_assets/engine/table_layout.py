"""Where each of a table's Delta tables lives, and the columns of the internal ones."""
from __future__ import annotations

import os

from ..core.changes import RECORD_FIELDS, REJECT_FIELDS

CHANGES, STAGING, BASE, TARGET, QUARANTINE = "changes", "staging", "base", "target", "quarantine"
BASE_BATCH = 0  # base rows count as batch 0; landed batches start at 1
BASE_ID = "base"  # the batch the base rows' records name
# Each deleted key's greatest ordering key (rules.md#rule-2), so an apply checks tombstones without the history.
TOMBSTONES = "tombstones"
TOMBSTONE_FIELDS = (("_cdc_key", "string"), ("_cdc_order", "string"))
# The identity of every change a trim took out of `changes`: its event id (the source's, or
# the digest of its content) and its ordering key, all ingest needs to know a re-delivery.
SEEN = "seen"
SEEN_FIELDS = (("_cdc_event_id", "string"), ("_cdc_order", "string"))
# Every version of each key, SCD type 2 (`history: true`; engine/history.py).
HISTORY = "history"
QUARANTINE_FIELDS = (("table", "string"),) + REJECT_FIELDS + (("quarantined_at", "string"),)
# What each replay of quarantined records did with each (engine/replay.py): its reason when it
# failed again, none when it was taken; `replayed_in` is the replay's batch.
REPLAYS = "quarantine_replays"
REPLAY_FIELDS = (("_cdc_batch_seq", "long"), ("_cdc_file", "string"), ("_cdc_line", "long"),
                 ("_cdc_reason", "string"), ("replayed_in", "long"))
# The steps (app transactions) of maintenance's trims: their version is the batch trimmed through.
CHANGES_TRIM, STAGING_TRIM = "changes_trim", "staging_trim"


def path(table_dir: str, name: str) -> str:
    return os.path.join(table_dir, name)


__all__ = ["CHANGES", "STAGING", "BASE", "TARGET", "QUARANTINE", "TOMBSTONES", "HISTORY", "TOMBSTONE_FIELDS", "RECORD_FIELDS",
           "SEEN", "SEEN_FIELDS",
           "QUARANTINE_FIELDS", "REPLAYS", "REPLAY_FIELDS", "CHANGES_TRIM", "STAGING_TRIM", "path"]
