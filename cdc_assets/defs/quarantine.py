"""A table's quarantine for its user: a replay of its records as a run of the table, and the
quarantine as an asset of the table's group."""
from __future__ import annotations

from ..core.config import Config, TableConfig
from ..engine import replay
from ..engine.landing import Batch
from ..engine.lock import table_lock
from ..engine.retry import on_conflict
from .run_loop import Build, TableOutcome, run_config


def replay_quarantined(cfg: Config, table: TableConfig, build: Build, echo=print,
                       progress=None) -> tuple[Batch | None, list[TableOutcome]]:
    """Register the batch that takes the table's quarantined records again (or the one a crash left
    not taken) and run the table, which takes it first; (None, []) when nothing is in quarantine."""
    with table_lock(cfg.table_dir(table.name)):
        batch = on_conflict(lambda: replay.register_replay(cfg, table), f"{table.name}/batches")
    if batch is None:
        return None, []
    return batch, run_config(cfg, build, [table.name], echo=echo, progress=progress)
