"""One writer per table at a time: sensor runs, UI runs and CLI runs all take this lock."""
from __future__ import annotations

import contextlib
import fcntl
import os
import time


@contextlib.contextmanager
def table_lock(table_dir: str, timeout: float = 3600.0):
    if "://" in table_dir:
        # Object stores have no file lock. There, the per-table Dagster pool keeps runs of one
        # instance apart, and delta-rs refuses a commit that lost a race (the step is then
        # re-run by engine.retry, its idempotence check making a batch another run took a no-op).
        yield
        return
    os.makedirs(table_dir, exist_ok=True)
    path = os.path.join(table_dir, "_cdc.lock")
    with open(path, "a+") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{table_dir}: another run holds the table lock") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
