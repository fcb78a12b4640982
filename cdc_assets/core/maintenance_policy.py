"""How a table is maintained (`maintenance:` in cdc.yaml; engine/maintenance.py does it)."""
from __future__ import annotations

import dataclasses

DEFAULT_RETENTION = 7 * 86400.0  # seconds: Delta's own default for removed files
# The longest a reader holds a snapshot here is a run's apply or a fresh read (minutes): a
# retention of an hour never removes a file one of them still reads.
MIN_RETENTION = 3600.0
DEFAULT_SCHEDULE = "0 3 * * *"


@dataclasses.dataclass(frozen=True)
class MaintenancePolicy:
    retention: float = DEFAULT_RETENTION  # seconds a removed file stays readable (versions readable, restorable)
    zorder_by: tuple[str, ...] = ()  # Z-order the target by these columns (none: compaction only)
    trim_changes_after: float | None = None  # seconds: older applied batches leave `changes` (None: kept)
    # seconds: older applied batches of `staging` keep only each key's latest change (None: kept whole)
    trim_staging_after: float | None = None
    schedule: str = DEFAULT_SCHEDULE  # the maintenance schedule's cron (the schedule starts stopped)
