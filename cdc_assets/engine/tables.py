"""Where each of a table's Delta tables lives, and the columns of the internal ones."""
from __future__ import annotations

import os

from ..core.changes import RECORD_FIELDS, REJECT_FIELDS

CHANGES, STAGING, BASE, TARGET, QUARANTINE = "changes", "staging", "base", "target", "quarantine"
QUARANTINE_FIELDS = (("table", "string"),) + REJECT_FIELDS + (("quarantined_at", "string"),)


def path(table_dir: str, name: str) -> str:
    return os.path.join(table_dir, name)


__all__ = ["CHANGES", "STAGING", "BASE", "TARGET", "QUARANTINE", "RECORD_FIELDS", "QUARANTINE_FIELDS", "path"]
