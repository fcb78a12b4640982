"""One writer per table at a time: sensor runs, UI runs and CLI runs all take this lock."""
from __future__ import annotations

import contextlib
import os

from filelock import FileLock


@contextlib.contextmanager
def table_lock(table_dir: str, timeout: float = 3600.0):
    """The table's lock file in its folder; TimeoutError (filelock.Timeout) after `timeout` seconds."""
    if "://" in table_dir:
        # Object stores have no file lock. There, the per-table Dagster pool keeps runs of one
        # instance apart, and delta-rs refuses a commit that lost a race (the step is then
        # re-run by engine.retry, its idempotence check making a batch another run took a no-op).
        yield
        return
    os.makedirs(table_dir, exist_ok=True)
    # A new FileLock each time: one per holder, so two threads of one process exclude each other too.
    with FileLock(os.path.join(table_dir, "_cdc.lock"), timeout=timeout):
        yield
