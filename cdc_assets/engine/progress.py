"""A table's progress, read from its warehouse: the ledger's batches and what each step committed."""
from __future__ import annotations

from ..core.config import Config, TableConfig
from ..core.plan import Progress
from . import delta
from .landing import registered_cached
from .table_layout import BASE, STAGING, TARGET, path


def read_progress(cfg: Config, table: TableConfig) -> Progress:
    """The Delta logs of the ledger, staging, target and (with a base snapshot) base, each read only
    when it has a commit this process has not read (a sensor looks at a busy table every tick)."""
    table_dir = cfg.table_dir(table.name)
    base = bool(table.base_snapshot)
    return Progress(
        registered=tuple(b.seq for b in registered_cached(table_dir)),
        staged=delta.step_version_cached(path(table_dir, STAGING), STAGING),
        applied=delta.step_version_cached(path(table_dir, TARGET), TARGET),
        base_snapshot=base,
        base_imported=not base or delta.step_version_cached(path(table_dir, BASE), BASE) >= 0,
    )
